#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [install] hvd used the way a user's own project uses it:
#  1. `cmake --install` into a fresh prefix; test/consumer (find_package(hvd), hvd::hvd and
#     hvd::torch) builds against it and its programs pass at np 2, under mpirun and under the
#     installed hvdrun, without LD_LIBRARY_PATH: hvd's libraries find each other ($ORIGIN), also
#     for a consumer linked with --as-needed (whose own RUNPATH then covers libhvd_ops.so only);
#  2. `cpack -G DEB` packs the build; the .deb declares its dependencies (apt resolves them from
#     Debian's archive for a machine with nothing installed), and the consumer builds and passes
#     against the unpacked package too (the CMake package is relocatable).
#   consumer_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
work=$(mktemp -d /tmp/hvd-consumer.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
step() { printf '\n== %s\n' "$*"; }

# build_and_run PREFIX LABEL: the consumer against PREFIX; every program must print "OK" on
# both ranks.
build_and_run() {
  local prefix=$1 label=$2 b="$work/consumer-$2"
  shift 2
  cmake -S "$src/test/consumer" -B "$b" -DCMAKE_PREFIX_PATH="$prefix" "$@" >"$b.log" 2>&1 ||
    { cat "$b.log"; echo "FAIL ($label): the consumer does not configure" >&2; exit 1; }
  grep 'consumer: hvd' "$b.log"
  grep -q "from $prefix" "$b.log" || { echo "FAIL ($label): hvd not found under $prefix" >&2; exit 1; }
  cmake --build "$b" -j "$(nproc)" >>"$b.log" 2>&1 ||
    { tail -40 "$b.log"; echo "FAIL ($label): the consumer does not build" >&2; exit 1; }
  local progs=("$b/train_cpp")
  [[ -x "$b/train_torch" ]] && progs+=("$b/train_torch")
  for p in "${progs[@]}"; do
    out=$(mpirun -np 2 --bind-to none "$p" 2>&1) || { echo "$out"; echo "FAIL ($label): $p" >&2; exit 1; }
    [[ $(grep -c '^OK rank' <<<"$out") == 2 ]] || { echo "$out"; echo "FAIL ($label): $p" >&2; exit 1; }
    echo "$out"
  done
  out=$("$prefix/bin/hvdrun" -np 2 "${progs[-1]}" 2>&1) || { echo "$out"; echo "FAIL ($label): hvdrun" >&2; exit 1; }
  [[ $(grep -c 'OK rank' <<<"$out") == 2 ]] || { echo "$out"; echo "FAIL ($label): hvdrun" >&2; exit 1; }
  echo "$out"
}

unset LD_LIBRARY_PATH
step "cmake --install into a fresh prefix"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in bin/hvdrun include/hvd/hvd.h include/hvd/mpi.h include/hvd/config.h \
         lib/cmake/hvd/hvdConfig.cmake lib/cmake/hvd/hvdConfigVersion.cmake lib/libhvd_ops.so \
         lib/libhvd_core.so; do
  [[ -e "$work/prefix/$f" ]] || { echo "FAIL: $f is not installed" >&2; exit 1; }
done
runpath=$(readelf -d "$work/prefix/lib/libhvd_ops.so" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
echo "libhvd_ops.so RUNPATH: ${runpath:-none}"
[[ $runpath == '$ORIGIN' ]] || { echo "FAIL: libhvd_ops.so does not find libhvd_core.so beside it" >&2; exit 1; }
build_and_run "$work/prefix" install
step "the same prefix, the consumer linked with --as-needed"
build_and_run "$work/prefix" as-needed -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed
readelf -d "$work/consumer-as-needed/train_cpp" | grep -q 'NEEDED.*libhvd_core' &&
  echo "note: train_cpp names libhvd_core.so itself (the case below is not reached)"

step "cpack -G DEB"
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/pkg" >"$work/cpack.log" 2>&1) ||
  { tail -30 "$work/cpack.log"; echo "FAIL: cpack" >&2; exit 1; }
deb=$(ls "$work"/pkg/hvd_*.deb)
depends=$(dpkg-deb -f "$deb" Depends)
echo "$(basename "$deb"): Depends: $depends"
# Open MPI's run-time library is libopenmpi3 on Debian 12 and libopenmpi40 on Debian 13: the
# one dpkg-shlibdeps found must be declared whatever its number.
need=(libopenmpi-dev openmpi-bin openssh-client "libopenmpi[0-9][0-9]*" libstdc++6)
grep -q '#define HVD_HAVE_TORCH 1' "$build/core/generated/hvd/config.h" && need+=(libtorch-dev)
declared=" $(sed -E 's/ \([^)]*\)//g; s/,//g' <<<"$depends") "
for p in "${need[@]}"; do
  [[ $(tr ' ' '\n' <<<"$declared" | grep -cx "$p") -ge 1 ]] ||
    { echo "FAIL: the .deb does not declare $p" >&2; exit 1; }
done
# A machine with nothing installed: apt must find every declared dependency in Debian's archive.
if compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
  : >"$work/empty-status"
  apt-get -s --no-install-recommends -o Dir::State::status="$work/empty-status" install "$deb" \
    >"$work/apt.log" 2>&1 || { tail -20 "$work/apt.log"; echo "FAIL: apt cannot install $deb on an empty system" >&2; exit 1; }
  grep -q '^Inst hvd ' "$work/apt.log" || { tail -20 "$work/apt.log"; echo "FAIL: apt would not install hvd" >&2; exit 1; }
  echo "apt on an empty Debian system: $(grep -c '^Inst ' "$work/apt.log") packages to install, hvd among them"
else
  echo "note: no apt package lists here (run apt-get update): dependency resolution not simulated"
fi
dpkg-deb -x "$deb" "$work/root"
build_and_run "$work/root/usr" deb
core=$(find "$work/root" -name '_core*.so' -path '*/hvd/*' | head -1)
if [[ -n "$core" ]]; then  # the Python package inside the .deb imports and runs
  PYTHONPATH=$(dirname "$(dirname "$core")") /usr/bin/python3 -c '
import numpy as np, hvd.numpy as hvd
hvd.init(); x = hvd.allreduce(np.arange(3.0), op=hvd.Sum)
assert (x == np.arange(3.0)).all(), x; print("python from the .deb:", hvd.__file__); hvd.shutdown()'
fi
echo "consumer_test: passed"
