#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Elastic training under failures (bench/python/elastic_bench.py says what each mode measures):
# resume time after a SIGKILL split into phases and the steps lost (default), the cost of
# commit() (--commit-cost; --cpp: of the libtorch program, hvd::elastic::TorchState) and hangs
# in randomized kills (--random). Small CNN, fresh job a kill.
#   Usage: bench/elastic_bench.sh [BUILD] [--np N] [--kills K] [--hosts] [--random]
#                                 [--deadline S] [--commit-every K] [--commit-cost]
#                                 [--cpp [--program PATH]...]
#   e.g.   bench/elastic_bench.sh build --np 4 --hosts        (defaults: build, np 2, 5 kills)
#          bench/elastic_bench.sh build --kills 50 --random
#          bench/elastic_bench.sh build --commit-cost --cpp
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then BUILD=$1; shift; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
exec "${HVD_PYTHON:-/usr/bin/python3}" bench/python/elastic_bench.py "$PWD/$BUILD/runner/hvdrun" \
  "${HVD_PYTHON:-/usr/bin/python3}" "$@"
