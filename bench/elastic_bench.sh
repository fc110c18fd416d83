#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Elastic resume time: SIGKILLs one rank mid-allreduce KILLS times (a fresh job each time) and
# prints the median time from the kill to the first step after restore, split into detection,
# teardown, launch, Python + torch import, hvd.init and restore.
#   Usage: bench/elastic_bench.sh [BUILD] [NP] [KILLS]     (defaults: build 2 5)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
exec "${HVD_PYTHON:-/usr/bin/python3}" bench/python/elastic_bench.py "$BUILD/runner/hvdrun" \
  "${HVD_PYTHON:-/usr/bin/python3}" "${2:-2}" "${3:-5}"
