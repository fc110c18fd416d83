#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [debian13] the tree built and tested on Debian 13 (GCC 14, Open MPI 5, Catch2 3, Python 3.13,
# torch and libtorch 2.6) from a Debian 12 machine: a `debootstrap --variant=minbase trixie`
# root with hvd's dependencies installed by scripts/install-deps.sh (so the script itself is
# tested there), the source tree (tracked and untracked files) copied in, configured with the
# release preset (-Werror: GCC 14 must see no warning; the benchmarks too, so that they build
# against libtorch 2.6) and built, then the unit, local, mpi
# (the libtorch and hvdrun tests among them), python, elastic and one-node Slurm tests run inside
# the root with ctest; a TorchState commit crosses libtorch 1.13 (the host's build,
# $HVD_HOST_BUILD) and 2.6 both ways. Last, the .deb it packs (cpack) goes to the clean-host
# test on a clean Debian 13 root.
#
# Cached in $HVD_TEST_CACHE (default /var/cache/hvd-test): the root with its packages
# (trixie-root/, made anew once a week) and the compiler cache (trixie-ccache/: the tree is
# rebuilt from scratch each run, unchanged sources come from the cache).
# HVD_DEBIAN13_PREPARE_ONLY=1 makes or refreshes the cached root and its packages only, and exits
# (make test runs it in the background while the sanitizer builds compile: on a fresh machine the
# root's downloads and unpacking then overlap the compiler instead of following it).
# On a Debian 13 host the tiers already ran on Debian 13: exit 77 (skipped), saying so.
# Exit 77 too when Debian's archive cannot be reached and no root is cached.
#   debian13_tier.sh SOURCE_DIR [CTEST_ARGS...]   (default: the tiers above)
set -euo pipefail
src=$(cd "$1" && pwd)
shift
cache=${HVD_TEST_CACHE:-/var/cache/hvd-test}
suite=trixie
t0=$(date +%s)
step() { printf '\n== [%3ds] %s\n' $(($(date +%s) - t0)) "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || { echo "skipped: needs root (debootstrap, chroot, mount)"; exit 77; }
if grep -qx "VERSION_CODENAME=$suite" /etc/os-release 2>/dev/null; then
  echo "skipped: this host is Debian 13 ($suite): the tiers above ran on it"
  exit 77
fi
command -v debootstrap >/dev/null || fail "debootstrap is not installed (scripts/install-deps.sh)"
# shellcheck source=test/install/debian_root.sh
source "$src/test/install/debian_root.sh"

mkdir -p "$cache"
exec 9>"$cache/$suite.lock"
flock 9  # one user of the cached root at a time
root=$cache/$suite-root
stamp=$cache/$suite-root.ready
if [[ -f $stamp ]] && [[ -z $(find "$stamp" -mtime -7) ]]; then
  step "the cached root is a week old: made anew"
  rm -f "$stamp"
fi
if [[ ! -f $stamp ]]; then
  debian_reachable "$suite" || { echo "skipped: Debian's archive ($DEBIAN_MIRROR) cannot be reached"; exit 77; }
  step "root: debootstrap --variant=minbase $suite $DEBIAN_MIRROR"
  debian_root_unmount "$root"
  rm -rf --one-file-system "$root"
  debootstrap --variant=minbase "$suite" "$root" "$DEBIAN_MIRROR" >"$cache/$suite-debootstrap.log" 2>&1 ||
    { tail -20 "$cache/$suite-debootstrap.log"; fail "debootstrap $suite"; }
fi

work=$root/tmp
trap 'debian_root_unmount "$root"' EXIT
trap 'exit 130' INT TERM
debian_root_mount "$root"
# The build and the tests in memory; the compiler cache on disk.
mount -t tmpfs -o size=12g,mode=1777 tmpfs "$work"
mkdir -p "$cache/$suite-ccache" "$root/var/cache/ccache"
mount --bind "$cache/$suite-ccache" "$root/var/cache/ccache"
in13() { debian_root_run "$root" CCACHE_DIR=/var/cache/ccache CCACHE_MAXSIZE=3G "$@"; }

step "source tree copied in (tracked and untracked files)"
mkdir -p "$work/hvd"
git -C "$src" ls-files -z -co --exclude-standard | (cd "$src" && tar --null -T - -cf -) |
  tar -C "$work/hvd" -xf -

if [[ ! -f $stamp ]] || ! in13 /tmp/hvd/scripts/install-deps.sh --check >/dev/null 2>&1; then
  step "scripts/install-deps.sh in the root (and ccache)"
  in13 apt-get -q update >"$cache/$suite-apt.log" 2>&1 || { tail -20 "$cache/$suite-apt.log"; fail "apt-get update"; }
  in13 /tmp/hvd/scripts/install-deps.sh >>"$cache/$suite-apt.log" 2>&1 ||
    { tail -30 "$cache/$suite-apt.log"; fail "scripts/install-deps.sh on Debian 13"; }
  in13 apt-get install -y -q --no-install-recommends ccache >>"$cache/$suite-apt.log" 2>&1 ||
    { tail -20 "$cache/$suite-apt.log"; fail "apt-get install ccache"; }
  in13 apt-get clean
  touch "$stamp"
fi
if [[ ${HVD_DEBIAN13_PREPARE_ONLY:-0} == 1 ]]; then
  step "root ready (HVD_DEBIAN13_PREPARE_ONLY=1: nothing built or tested)"
  exit 0
fi
echo "Debian $(cat "$root/etc/debian_version"); $(in13 gcc --version | head -1);" \
  "$(in13 mpirun --version 2>&1 | head -1);" \
  "$(in13 python3 -c 'import sys, torch; print("Python", sys.version.split()[0], "torch", torch.__version__)')"

step "configure (release preset) and build"
in13 ccache -z >/dev/null
in13 bash -c 'cd /tmp/hvd && cmake --preset release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache >/tmp/configure.log 2>&1' ||
  { cat "$work/configure.log"; fail "configure on Debian 13"; }
grep -E 'hvd: ' "$work/configure.log" || true
in13 bash -c "cd /tmp/hvd && cmake --build build -j $(nproc) >/tmp/build.log 2>&1" ||
  { grep -E -B2 -A12 'error|warning' "$work/build.log" | head -80; fail "build on Debian 13"; }
in13 ccache -s | grep -Ei 'hits|misses' | head -3 || true

step "tests on Debian 13"
args=("$@")
# By default the tiers whose code differs between the releases (Catch2, GCC, Open MPI 5 under
# hvdrun and mpirun, torch and libtorch 2.6), each configuration once: the MPI tier's fusion and
# cache variants, the fake-host rigs (network namespaces need a mount namespace of their own,
# not a chroot), the fault and fuzz tiers ran on Debian 12 already; the Python suite at np 2 only
# (np 1 and 4 change the ranks, not the release: 90 s of CI time).
[[ ${#args[@]} -gt 0 ]] || args=(-L 'unit|local|mpi|python|elastic|slurm'
  -E '^install\.|^fuzz\.|^fault\.|hosts|two_hosts|\.(nofusion|nocache|tinycache)$|elastic\.np4|hvdrun_stopped|^python\.np[14]$')
rc=0
in13 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  ctest --test-dir /tmp/hvd/build --output-on-failure "${args[@]}" || rc=$?
[[ $rc -eq 0 ]] || fail "ctest on Debian 13 (exit $rc)"

# A TorchState commit saved under libtorch 1.13 (this host's build, $HVD_HOST_BUILD) restores bit
# for bit under 2.6, and back.
host_saved=${HVD_HOST_BUILD:-}/test/torch/hvd_saved_format
if [[ -n ${HVD_HOST_BUILD:-} && -x $host_saved && -x $work/hvd/build/test/torch/hvd_saved_format ]]; then
  step "a commit saved by libtorch 1.13 restored under 2.6, and one saved by 2.6 under 1.13"
  bash "$src/test/torch/saved_format_cross_test.sh" "$host_saved" "$root" \
    /tmp/hvd/build/test/torch/hvd_saved_format || fail "a commit does not cross libtorch releases"
else
  echo "SKIPPED: the cross-release commit test (no libtorch build of this host in HVD_HOST_BUILD)"
fi

if [[ -z ${HVD_DEBIAN13_NO_DEB:-} ]]; then
  step "the .deb built on Debian 13, on a clean Debian 13 root"
  in13 bash -c 'cd /tmp && cpack -G DEB --config /tmp/hvd/build/CPackConfig.cmake -B /tmp/pkg \
      >/tmp/cpack.log 2>&1' || { tail -30 "$work/cpack.log"; fail "cpack on Debian 13"; }
  mkdir -p "$cache/$suite-debs"
  rm -f "$cache/$suite-debs"/*.deb
  cp "$work"/pkg/*.deb "$cache/$suite-debs/"
  HVD_CLEAN_HOST_SUITE=$suite HVD_CLEAN_HOST_DEBS=$cache/$suite-debs \
    bash "$src/test/install/clean_host_test.sh" "$work/hvd/build" "$work/hvd" ||
    fail "the .deb built on Debian 13 on a clean Debian 13 root"
fi
step "debian13 tier: passed"
