#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [python] `cmake --install` puts the package where the interpreter finds it: installs the build
# into a fresh prefix, imports hvd.torch from there (and not from the build tree) and runs a
# one-rank allreduce; then checks that the default prefix's folder is on the interpreter's path.
#   install_test.sh BUILD PYTHON
set -euo pipefail
build=$1 py=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
rel=$(sed -n 's/^HVD_PYTHON_INSTALL_DIR:STRING=//p' "$build/CMakeCache.txt")
pkg="$prefix/$rel/hvd"
ls "$pkg"/_core*.so "$pkg/torch/__init__.py" "$pkg/numpy/__init__.py" >/dev/null
env -u PYTHONPATH PYTHONPATH="$prefix/$rel" "$py" - "$prefix" <<'PY'
import sys
import torch
import hvd.torch as hvd
assert hvd.__file__.startswith(sys.argv[1]), hvd.__file__
hvd.init()
t = torch.arange(4, dtype=torch.float32)
assert torch.equal(hvd.allreduce(t, op=hvd.Sum), t * hvd.size())
hvd.shutdown()
print("installed package works:", hvd.__file__)
PY
# The default prefix (/usr/local) resolves to a folder the interpreter searches.
default=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
"$py" -c "import sys; d = sys.argv[1]; assert d in sys.path, (d, sys.path); print('on sys.path:', d)" \
  "$default/$rel"
