#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [install] the .deb(s) on a really clean Debian: a `debootstrap --variant=minbase SUITE` root
# (SUITE: $HVD_CLEAN_HOST_SUITE, default this host's release; from the mirror this machine's apt
# uses), the packages built by `cpack -G DEB` (or the ones in $HVD_CLEAN_HOST_DEBS: the
# [debian13] tier packs on Debian 13 and tests here) installed there with apt (which fetches every declared dependency from Debian's archive), then, inside
# the root (chroot, with /proc, /dev and a tmpfs /dev/shm):
#   1. `hvdrun --check-build`: the Python binding imports; no GPU module on this CPU host;
#   2. a 2-rank Python job through hvdrun (clean_host_job.py: an allreduce and three
#      DistributedOptimizer steps matching the one-process reference);
#   3. the out-of-tree C++ consumer (test/consumer: find_package(hvd), hvd::hvd and hvd::torch)
#      configured, built and run at np 2 with build-essential and cmake from the archive;
#   4. with hvd-cuda (when built) installed too: the module is found and its reason for not
#      loading names the missing CUDA runtime, and CPU jobs still run.
# The bootstrapped root with build-essential and cmake (a week) and apt's downloaded .deb files
# are cached in $HVD_TEST_CACHE (default /var/cache/hvd-test), per suite.
# Exit 77 (skip) only when Debian's archive cannot be reached.
#   clean_host_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
cache=${HVD_TEST_CACHE:-/var/cache/hvd-test}
t0=$(date +%s)
step() { printf '\n== [%3ds] %s\n' $(($(date +%s) - t0)) "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || { echo "skipped: needs root (debootstrap, chroot, mount)"; exit 77; }
command -v debootstrap >/dev/null || fail "debootstrap is not installed (scripts/install-deps.sh)"
# shellcheck source=test/install/debian_root.sh
source "$src/test/install/debian_root.sh"
suite=${HVD_CLEAN_HOST_SUITE:-$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)}
mirror=$DEBIAN_MIRROR
if ! debian_reachable "$suite"; then
  echo "skipped: Debian's archive ($mirror) cannot be reached from here"
  exit 77
fi

work=$(mktemp -d /var/tmp/hvd-clean-host.XXXXXX)
root=$work/root
cleanup() {
  debian_root_unmount "$root"
  # Only once nothing is mounted below it.
  if ! grep -q " $work/" /proc/mounts; then rm -rf "$work"; else echo "left $work (still mounted)" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n ${HVD_CLEAN_HOST_DEBS:-} ]]; then
  step "packages: $HVD_CLEAN_HOST_DEBS"
  mkdir -p "$work/pkg" && cp "$HVD_CLEAN_HOST_DEBS"/*.deb "$work/pkg/"
else
  step "packages: cpack -G DEB"
  (cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/pkg" >"$work/cpack.log" 2>&1) ||
    { tail -30 "$work/cpack.log"; fail "cpack"; }
fi
deb=$(ls "$work"/pkg/hvd_*.deb)
cuda_deb=$(ls "$work"/pkg/hvd-cuda_*.deb 2>/dev/null || true)
for d in $deb $cuda_deb; do
  echo "$(basename "$d"): $(du -k "$d" | cut -f1) KiB; Depends: $(dpkg-deb -f "$d" Depends)"
done
# Nothing the CPU package holds links CUDA or NCCL.
dpkg-deb -x "$deb" "$work/cpu"
if find "$work/cpu" -type f \( -name '*.so*' -o -perm -u+x \) -exec sh -c 'readelf -d "$1" 2>/dev/null | grep -E "NEEDED.*(libcudart|libnccl|libcuda\.)" && echo "  in $1"' _ {} \; | grep -q .; then
  fail "the hvd package links CUDA or NCCL"
fi
rm -rf "$work/cpu"

# Cached between runs: the minbase root with build-essential and cmake (a tarball), and apt's
# archive of downloaded .deb files (bind-mounted into every root: apt still resolves and
# installs hvd's dependencies below, but downloads each file once).
mkdir -p "$cache/archives-$suite/partial"
base=$cache/$suite-minbase-build.tar
fresh=0
# The root lives in memory (~3 GiB once hvd's dependencies are in): dpkg runs faster and the
# cleanup is one umount.
mkdir -p "$root"
mount -t tmpfs -o size=8g,mode=755 tmpfs "$root"
if [[ -f $base ]] && [[ -n $(find "$base" -mtime -7) ]]; then
  step "clean root: cached $(basename "$base") ($(du -m "$base" | cut -f1) MiB)"
  tar -C "$root" -xf "$base"
else
  step "clean root: debootstrap --variant=minbase $suite $mirror"
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; fail "debootstrap"; }
  fresh=1
fi

debian_root_mount "$root"
mkdir -p "$root/var/cache/apt/archives"
mount --bind "$cache/archives-$suite" "$root/var/cache/apt/archives"
in_root() { debian_root_run "$root" "$@"; }
# Keep downloaded files (Debian's docker-style configs may delete them; minbase does not).
apt_in() { in_root apt-get -q -o Dpkg::Use-Pty=0 -o APT::Keep-Downloaded-Packages=true "$@"; }

if [[ $fresh == 1 ]]; then
  step "clean root: apt-get install build-essential cmake (then cached)"
  apt_in update >"$work/apt.log" 2>&1 || { tail -20 "$work/apt.log"; fail "apt-get update in the root"; }
  apt_in install -y --no-install-recommends build-essential cmake >>"$work/apt.log" 2>&1 ||
    { tail -20 "$work/apt.log"; fail "apt-get install build-essential cmake"; }
  tar -C "$root" --one-file-system --exclude=./var/cache/apt/archives --exclude=./tmp/* \
    -cf "$base.part" . && mv "$base.part" "$base"
  echo "cached: $base ($(du -m "$base" | cut -f1) MiB)"
fi

step "apt-get install ./$(basename "$deb") python3-torch in the clean root"
mkdir -p "$root/tmp/debs" && cp $deb $cuda_deb "$root/tmp/debs/"
apt_in update >>"$work/apt.log" 2>&1 || true  # the cached lists serve when the net is slow
apt_in install -y --no-install-recommends "/tmp/debs/$(basename "$deb")" python3-torch \
  >"$work/install.log" 2>&1 || { tail -30 "$work/install.log"; fail "apt cannot install $(basename "$deb") on a clean Debian ($suite)"; }
echo "installed: $(grep -c '^Setting up' "$work/install.log") packages set up"
in_root ls /usr/lib/libhvd_ops.so /usr/lib/libhvd_core.so /usr/bin/hvdrun >/dev/null
[[ ! -e $root/usr/lib/libhvd_nccl.so ]] || fail "the hvd package carries the GPU module"

step "hvdrun --check-build"
out=$(in_root hvdrun --check-build 2>&1) || { echo "$out"; fail "hvdrun --check-build"; }
echo "$out"
grep -q 'Python import: .*importable, torch' <<<"$out" || fail "the Python binding does not import"
# A build with NCCL packs the module into hvd-cuda (not installed yet); one without (no CUDA
# toolkit, as on Debian 13 here) says that it has none.
why='not installed'
[[ -n $cuda_deb ]] || why='this build of hvd has no GPU support'
grep -q "GPU module: not loaded: .*$why" <<<"$out" ||
  fail "check-build does not say why there is no GPU module ($why)"

step "2-rank Python job through hvdrun (allreduce, 3 DistributedOptimizer steps vs the reference)"
cp "$src/test/install/clean_host_job.py" "$root/tmp/job.py"
out=$(in_root timeout 300 hvdrun -np 2 python3 /tmp/job.py 2>&1) || { echo "$out"; fail "the Python job"; }
echo "$out"
[[ $(grep -c 'OK rank' <<<"$out") == 2 ]] || fail "the Python job: not every rank reported OK"

step "out-of-tree C++ consumer: find_package(hvd), hvd::hvd and hvd::torch"
cp -r "$src/test/consumer" "$root/tmp/consumer"
in_root cmake -S /tmp/consumer -B /tmp/consumer-build >"$work/consumer.log" 2>&1 ||
  { cat "$work/consumer.log"; fail "the consumer does not configure (no toolkit here: hvd::hvd must not need one)"; }
grep 'consumer: hvd' "$work/consumer.log"
in_root cmake --build /tmp/consumer-build -j "$(nproc)" >>"$work/consumer.log" 2>&1 ||
  { tail -40 "$work/consumer.log"; fail "the consumer does not build"; }
for p in train_cpp train_torch; do
  [[ -x $root/tmp/consumer-build/$p ]] || fail "the consumer built no $p (hvd::torch missing?)"
  out=$(in_root timeout 300 mpirun -np 2 --bind-to none /tmp/consumer-build/$p 2>&1) ||
    { echo "$out"; fail "$p under mpirun"; }
  [[ $(grep -c '^OK rank' <<<"$out") == 2 ]] || { echo "$out"; fail "$p under mpirun"; }
  echo "$out" | grep '^OK rank'
done
out=$(in_root timeout 300 hvdrun -np 2 /tmp/consumer-build/train_torch 2>&1) || { echo "$out"; fail "hvdrun train_torch"; }
[[ $(grep -c 'OK rank' <<<"$out") == 2 ]] || { echo "$out"; fail "hvdrun train_torch"; }
echo "hvdrun -np 2 train_torch: OK on both ranks"

if [[ -n $cuda_deb ]]; then
  step "hvd-cuda on a host without the CUDA runtime: the module is found and says why it did not load"
  apt_in install -y --no-install-recommends "/tmp/debs/$(basename "$cuda_deb")" >>"$work/install.log" 2>&1 ||
    { tail -20 "$work/install.log"; fail "apt cannot install $(basename "$cuda_deb")"; }
  [[ -e $root/usr/lib/libhvd_nccl.so ]] || fail "hvd-cuda does not install /usr/lib/libhvd_nccl.so"
  out=$(in_root hvdrun --check-build 2>&1) || { echo "$out"; fail "hvdrun --check-build"; }
  grep 'GPU module' <<<"$out"
  grep -qE 'GPU module: not loaded: .*libhvd_nccl.so did not load: .*lib(cudart|nccl)' <<<"$out" ||
    fail "check-build does not name the missing CUDA runtime"
  out=$(in_root timeout 300 hvdrun -np 2 python3 /tmp/job.py 2>&1) || { echo "$out"; fail "the Python job with hvd-cuda"; }
  [[ $(grep -c 'OK rank' <<<"$out") == 2 ]] || { echo "$out"; fail "the Python job with hvd-cuda"; }
  echo "Python job with hvd-cuda installed (no CUDA runtime): OK on both ranks"
fi
step "clean_host_test: passed"
