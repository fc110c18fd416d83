#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs the GPU check for the device machine, which has CUDA, NCCL (as the pip package
# nvidia-nccl-cu13), CMake and nvcc but no Open MPI and no Catch2, and nothing can be installed
# there. Built here, run there:
#   scripts/gpu_bundle.sh [BUILD_DIR]      # here: builds (if needed) and writes .gpu-bundle/
#   bash .gpu-bundle/run.sh                # there (device tool: carry [".gpu-bundle"])
#   scripts/gpu_bundle.sh --selftest       # here: runs the bundle with the system's Open MPI,
#                                          # CUDA runtime and NCCL hidden (mount namespace)
# The bundle holds the [gpu] tests, the device routing test, hvd_gpu_bench and the host
# hvd_bench (for the host side's share of the 1024 x 256 case), stripped, libhvd_core/libhvd_ops
# with the GPU module libhvd_nccl.so next to them (loaded as on a user's host), the
# CUDA runtime they were linked against, and a relocatable Open MPI runtime (orterun, orted,
# libraries, the MCA components whose libraries are carried, help texts, PMIx); NCCL is taken
# from the device machine (libnccl.so.2: ldconfig, /usr/local/cuda, or the pip package).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.gpu-bundle
ARCH_LIB=/usr/lib/x86_64-linux-gnu

selftest() {
  [[ -x $OUT/run.sh ]] || { echo "gpu_bundle: no $OUT/run.sh: run scripts/gpu_bundle.sh first"; exit 1; }
  # Exit 77 (skipped, never passed: run-tests.sh lists it) where it cannot run: not root, so no
  # mount namespace. As root it must run: a failing unshare fails it.
  if [[ $(id -u) -ne 0 ]]; then
    echo "gpu_bundle selftest: skipped: needs root (a private mount namespace hides Open MPI)"
    exit 77
  fi
  local err
  if ! err=$(unshare -m true 2>&1); then
    echo "gpu_bundle selftest: FAILED: root, but unshare -m cannot create a mount namespace: $err"
    return 1
  fi
  # A machine without Open MPI, PMIx or this CUDA toolkit: empty directories and /dev/null
  # over them, in a private mount namespace. NCCL stays reachable only through NCCL_LIB_DIR
  # (the device machine brings its own).
  local nccl_so
  nccl_so=$(ldd "$OUT/hvd/hvd_gpu_bench" | awk '/libnccl\.so/ && !f {print $3; f = 1}')
  [[ -n $nccl_so ]] || { echo "gpu_bundle selftest: this machine has no libnccl.so.2"; return 1; }
  nccl_so=$(readlink -f "$nccl_so")
  # The inner script takes its inputs from the environment (no quoting games).
  NCCL_SO=$nccl_so ARCH_LIB=$ARCH_LIB BUNDLE=$OUT unshare -m bash -c '
    set -e
    empty=$(mktemp -d) keep=$(mktemp -d)
    touch "$keep/libnccl.so.2"
    mount --bind "$NCCL_SO" "$keep/libnccl.so.2"
    for d in "$ARCH_LIB/openmpi" "$ARCH_LIB/pmix2" /usr/share/openmpi /etc/openmpi /usr/local/cuda; do
      if [[ -d $d ]]; then mount --bind "$empty" "$(readlink -f "$d")"; fi
    done
    # Open MPI and PMIx libraries, and any NCCL the dynamic loader could find by itself.
    for f in /usr/bin/orterun /usr/bin/orted /usr/bin/mpiexec /usr/bin/mpirun \
             "$ARCH_LIB/libmpi.so.40" "$ARCH_LIB/libopen-rte.so.40" "$ARCH_LIB/libopen-pal.so.40" \
             "$ARCH_LIB/libpmix.so.2" "$ARCH_LIB/libhwloc.so.15" "$NCCL_SO" \
             $(ldconfig -p | awk "/libnccl\\.so/ {print \$NF}"); do
      f=$(readlink -f "$f" 2>/dev/null || true)
      if [[ -n $f && -e $f ]]; then mount --bind /dev/null "$f"; fi
    done
    if command -v orted >/dev/null && orted --version >/dev/null 2>&1; then
      echo "selftest: the system orted is still usable"; exit 1
    fi
    NCCL_LIB_DIR=$keep OUT=$(mktemp -d) bash "$BUNDLE/run.sh"
  ' && rc=0 || rc=$?
  # 2: every step passed but without a GPU (this machine's case); 0: with one.
  if [[ $rc -eq 2 || $rc -eq 0 ]]; then
    echo "gpu_bundle selftest: passed (the bundle runs with no Open MPI, PMIx or CUDA toolkit installed)"
    return 0
  fi
  echo "gpu_bundle selftest: FAILED (run.sh status $rc)"
  return 1
}

if [[ ${1:-} == --selftest ]]; then
  selftest
  exit $?
fi

BUILD=${1:-build}
TARGETS=(hvd_gpu_tests hvd_device_select_test hvd_nccl_init_test hvd_nccl_adasum_test hvd_gpu_bench
  hvd_bench)
MODULE=libhvd_nccl.so  # the GPU module (target hvd_nccl), loaded at run time
if [[ ! -f $BUILD/CMakeCache.txt ]]; then
  cmake -S . -B "$BUILD" --preset release >/dev/null
fi
grep -rqs '#define HVD_HAVE_NCCL 1' "$BUILD" --include=config.h ||
  { echo "gpu_bundle: $BUILD has no NCCL (configure with -DHVD_WITH_NCCL=ON)"; exit 1; }
cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" hvd_nccl >/dev/null

rm -rf "$OUT"
mkdir -p "$OUT"/hvd "$OUT"/ompi/{bin,lib/openmpi3,share,etc} "$OUT"/ompi/pmix/{lib/pmix,share}
for t in "${TARGETS[@]}"; do
  f=$(find "$BUILD" -type f -name "$t" -perm -u+x -print -quit)
  [[ -n $f ]] || { echo "gpu_bundle: $t not built"; exit 1; }
  strip -o "$OUT/hvd/$t" "$f"
done

# Libraries carried: everything the binaries and orted need except the C/C++ runtime (the device
# machine's is newer), the CUDA driver and NCCL (the device machine's own).
skip='^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux-x86-64|linux-vdso|libcuda|libnccl)\.'
carry_deps() {  # copies the non-skipped libraries `$@` need into ompi/lib
  ldd "$@" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
      [[ $name =~ $skip ]] && continue
      [[ -e $OUT/ompi/lib/$name ]] || cp -L "$path" "$OUT/ompi/lib/$name"
    done
}
cp -L /usr/bin/orterun /usr/bin/orted "$OUT/ompi/bin/"
ln -s orterun "$OUT/ompi/bin/mpiexec"
# The Python binding, when the build has it: the package (links resolved), the extension
# stripped, and the CUDA check script; run.sh uses it where the machine's python3 has torch+CUDA.
if compgen -G "$BUILD/python/hvd/_core*.so" >/dev/null; then
  mkdir -p "$OUT/python"
  cp -rL "$BUILD/python/hvd" "$OUT/python/"
  find "$OUT/python" -name __pycache__ -prune -exec rm -rf {} +
  for so in "$OUT"/python/hvd/_core*.so; do strip "$so"; done
  cp test/python/gpu_check.py "$OUT/python/"
fi
carry_deps "$OUT"/hvd/* "$OUT"/ompi/bin/orterun "$OUT"/ompi/bin/orted
# The GPU module goes where hvd loads it from, next to libhvd_ops.so (carried just above), as
# on a user's host; nothing in the bundle links it.
[[ -e $OUT/ompi/lib/libhvd_ops.so ]] || { echo "gpu_bundle: libhvd_ops.so not carried"; exit 1; }
strip -o "$OUT/ompi/lib/$MODULE" "$BUILD/ops/$MODULE"
carry_deps "$OUT/ompi/lib/$MODULE"
if [[ -d $OUT/python ]]; then carry_deps "$OUT"/python/hvd/_core*.so; fi
# MCA components whose own libraries are all carried (or basic system ones); the others
# (InfiniBand, UCX, OFI, PSM) are left out: the device machine is one host.
optional='^(libucp|libuct|libucs|libucm|libfabric|libibverbs|librdmacm|libpsm|libinfinipath|libefa|libnl-|libmca_common_(ucx|ofi|verbs))'
for c in "$ARCH_LIB"/openmpi/lib/openmpi3/*.so; do
  if ldd "$c" | awk '/=>/ {print $1}' | grep -qE "$optional"; then continue; fi
  cp "$c" "$OUT/ompi/lib/openmpi3/"
done
carry_deps "$OUT"/ompi/lib/openmpi3/*.so
cp -L "$ARCH_LIB"/pmix2/lib/pmix/*.so "$OUT/ompi/pmix/lib/pmix/" 2>/dev/null || true
carry_deps "$OUT"/ompi/pmix/lib/pmix/*.so 2>/dev/null || true
cp -rL /usr/share/openmpi "$OUT/ompi/share/"
cp -rL "$ARCH_LIB"/pmix2/share/. "$OUT/ompi/pmix/share/"
# Debian's PMIx names its component folder by absolute path; the bundle's replaces it.
sed -i 's|^mca_base_component_path *=.*|# (set by run.sh: PMIX_MCA_mca_base_component_path)|' \
  "$OUT/ompi/pmix/share/pmix-mca-params.conf"
cp -L /etc/openmpi/* "$OUT/ompi/etc/"

cat >"$OUT/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs the GPU check from this bundle (made by scripts/gpu_bundle.sh): nvidia-smi, the [gpu]
# tests, the device routing test, hvd_gpu_bench. Outputs go to stdout and to $OUT (the device
# tool's folder) or ./gpu-check-out. Exit status: 0 only if every step passed and ran on a GPU.
# The step timeouts add up to 570 s: run it with the device tool's timeout_s=590.
set -uo pipefail
B=$(cd "$(dirname "$0")" && pwd)
R=${OUT:-$PWD/gpu-check-out}
mkdir -p "$R"
export OPAL_PREFIX=$B/ompi OPAL_EXEC_PREFIX=$B/ompi OPAL_BINDIR=$B/ompi/bin OPAL_LIBDIR=$B/ompi/lib \
  OPAL_PKGLIBDIR=$B/ompi/lib/openmpi3 OPAL_DATADIR=$B/ompi/share OPAL_PKGDATADIR=$B/ompi/share/openmpi \
  OPAL_SYSCONFDIR=$B/ompi/etc
export PMIX_PREFIX=$B/ompi/pmix PMIX_EXEC_PREFIX=$B/ompi/pmix PMIX_LIBDIR=$B/ompi/pmix/lib \
  PMIX_PKGLIBDIR=$B/ompi/pmix/lib/pmix PMIX_DATADIR=$B/ompi/pmix/share PMIX_PKGDATADIR=$B/ompi/pmix/share/pmix \
  PMIX_SYSCONFDIR=$B/ompi/pmix/share PMIX_MCA_mca_base_component_path=$B/ompi/pmix/lib/pmix
export PATH=$B/ompi/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_mca_base_component_show_load_errors=0
# NCCL: the machine's own (hvd was built against NCCL 2.28's API; any 2.x >= 2.10 serves):
# $NCCL_LIB_DIR, ldconfig, /usr/local/cuda, the pip package nvidia-nccl-cu13, a search.
nccl=${NCCL_LIB_DIR:-}
if [[ -z $nccl ]]; then
  for cand in "$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')" \
              /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/lib/libnccl.so.2 \
              "$(python3 -c 'import nvidia.nccl as n, os; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)"; do
    if [[ -n $cand && -e $cand ]]; then nccl=$(dirname "$cand"); break; fi
  done
fi
[[ -n $nccl ]] || nccl=$(find /usr /opt -name libnccl.so.2 2>/dev/null | head -1 | xargs -r dirname)
if [[ -z $nccl ]]; then
  echo "run.sh: libnccl.so.2 not found on this machine (set NCCL_LIB_DIR)" | tee "$R/summary.txt"
  exit 1
fi
export LD_LIBRARY_PATH=$B/ompi/lib:$nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step "device"
{ date -u; nvidia-smi -L 2>&1 || echo "nvidia-smi failed"; echo "NCCL from: $nccl"; ldd --version | head -1; } | tee "$R/device.txt"
for t in "$B"/hvd/*; do ldd "$t" | grep "not found" && status=1; done

step "[gpu] tests (np = 1)"
# 77: every case that needs a device skipped (no device), nothing failed; reported below.
timeout 150 mpiexec -np 1 --bind-to none "$B/hvd/hvd_gpu_tests" -d yes 2>&1 | tee "$R/gpu_tests.txt"
rc=${PIPESTATUS[0]}
[[ $rc -eq 0 || $rc -eq 77 ]] || status=1
step "[gpu] tests, hierarchical allreduce (np = 1)"
HVD_HIERARCHICAL_ALLREDUCE=1 timeout 100 mpiexec -np 1 --bind-to none "$B/hvd/hvd_gpu_tests" 2>&1 |
  tee "$R/gpu_tests_hier.txt"
rc=${PIPESTATUS[0]}
[[ $rc -eq 0 || $rc -eq 77 ]] || status=1
step "device routing (np = 1)"
timeout 40 mpiexec -np 1 --bind-to none "$B/hvd/hvd_device_select_test" 2>&1 | tee "$R/device_select.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
step "NCCL communicator creation, agreed (np = 1, 2)"
# np 1: created, an allreduce sums. np 2 (one GPU serves: no rank of a failing case creates a
# communicator): rank 1 fails before CUDA and every rank fails naming it; rank 1 never starts
# its init and every rank gives up at the 3 s deadline. A case without its device prints
# "skipped:".
{
  timeout 40 mpiexec -np 1 --bind-to none "$B/hvd/hvd_nccl_init_test" "[device]" &&
    HVD_TEST_FAULT=nccl_init:rank=1 timeout 60 mpiexec -np 2 --bind-to none -x HVD_TEST_FAULT \
      "$B/hvd/hvd_nccl_init_test"
} 2>&1 | tee "$R/nccl_init.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
step "Adasum on GPU tensors: the [adasum] case; across nodes on host shards (np = 4)"
# The [gpu] run above holds the Adasum case (flat and through the host step, at np = 1: NCCL
# refuses two ranks on one GPU); its name in the log shows it ran. The step across nodes needs
# no GPU: nodes made of rank groups, against the test's own reference.
{
  if ! grep -q "gpu Adasum of one rank" "$R/gpu_tests.txt"; then
    echo "FAILED: the [adasum] case is missing from the [gpu] tests' log"
    false
  elif grep -q "skipped: no CUDA device" "$R/gpu_tests.txt"; then
    echo "the [adasum] case skipped with the other [gpu] cases: no CUDA device"
  else
    echo "the [adasum] case ran in the [gpu] tests"
  fi &&
    timeout 30 mpiexec -np 4 --oversubscribe --bind-to none "$B/hvd/hvd_nccl_adasum_test"
} 2>&1 | tee "$R/adasum.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
if grep -q "skipped: no CUDA device" "$R/gpu_tests.txt"; then
  echo "WARNING: the [gpu] tests skipped: no CUDA device"
  [[ $status -eq 0 ]] && status=2
fi

step "benchmark: hvd_gpu_bench --device cuda (np = 1)"
timeout 180 mpiexec -np 1 --bind-to none "$B/hvd/hvd_gpu_bench" --device cuda 2>&1 | tee "$R/bench.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

step "host side of the 1024 x 256 case: hvd_bench (host tensors, np = 1, same runtime)"
timeout 40 mpiexec -np 1 --bind-to none "$B/hvd/hvd_bench" --case 1024x256 --iters 200 2>&1 |
  tee "$R/host_bench.txt"

step "Python binding on CUDA tensors (np = 1), where python3 has torch with CUDA"
py=python3  # the first interpreter that has torch
for cand in python3 /usr/bin/python3 /usr/local/bin/python3; do
  if "$cand" -c "import torch" 2>/dev/null; then py=$cand; break; fi
done
if [[ -d $B/python ]]; then
  PYTHONPATH=$B/python timeout 60 mpiexec -np 1 --bind-to none -x PYTHONPATH "$py" \
    "$B/python/gpu_check.py" 2>&1 | tee "$R/python.txt"
  case ${PIPESTATUS[0]} in
    0) ;;
    3) echo "(not counted: no torch with CUDA here)" ;;
    *) status=1 ;;
  esac
else
  echo "skipped: this bundle was built without the Python binding" | tee "$R/python.txt"
fi

step "done: status $status (0 = all passed on a GPU, 2 = passed without a GPU)"
echo "status $status" >"$R/summary.txt"
exit $status
EOF
chmod +x "$OUT/run.sh"
echo "gpu_bundle: $OUT ($(du -sh "$OUT" | cut -f1)); run there: bash $OUT/run.sh"
