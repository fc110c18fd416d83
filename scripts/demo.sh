#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The demo job: 2 ranks on this machine, launched through hvdrun. With libtorch it trains the
# shared-encoder autoencoder (three optimizers sharing parameters); otherwise the plain-C++
# linear regression.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
prog="$BUILD/examples/autoencoder_shared"
[[ -x "$prog" ]] || prog="$BUILD/examples/allreduce_demo"
echo "demo: $BUILD/runner/hvdrun -np 2 $prog"
exec "$BUILD/runner/hvdrun" -np 2 "$prog"
