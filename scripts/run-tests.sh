#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every test tier of the release build (the clean-host install test in the background while the
# sanitizer builds compile), then core + MPI tests, hvdrun's unit tests and a short elastic job
# under ASan+UBSan, the [local] tier under TSan, the [debian13] tier (the tree built and tested
# on Debian 13 in a cached root, from a Debian 12 machine; HVD_SKIP_DEBIAN13=1 leaves it out) and
# the lint checks. Called by `make test`. Its last line names everything not run: tests that
# exited 77, tiers the configuration left out, a GPU bundle self-test that could not run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
JOBS=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Oversubscription for every mpirun the tests start: Open MPI 4's name, then Open MPI 5's
# (PRRTE maps the processes there).
export OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
fail=0

step() { printf '\n==== %s ====\n' "$*"; }

# The names of the tests a ctest log lists as skipped (exit status 77, SKIP_RETURN_CODE: the GPU
# cases without a device): neither passed nor failed, the summary at the end names them.
skipped_in() { sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$1" | tr '\n' ' '; }
# Adds "name(reason) " to the skipped list; parentheses in the reason become brackets, so that
# the summary counts one entry per name.
skip() {
  local why=${2//(/[}
  why=${why//)/]}
  skipped+="$1($why) "
}

step "all tiers (release build), but the clean-host install test"
set +e
ctest --test-dir "$BUILD" --output-on-failure -E '^install\.clean_host$' 2>&1 |
  tee "$BUILD/ctest-all-tiers.log"
rc=${PIPESTATUS[0]}
set -e
[[ $rc -eq 0 ]] || fail=1
skipped=$(skipped_in "$BUILD/ctest-all-tiers.log")

# The tiers the configuration left out (test/CMakeLists.txt writes one "tier: reason" a line):
# skipped, named with the reason. In CI (CI set), where install-deps installs libtorch and
# Python, a missing torch or python tier is a defect: it fails, unless HVD_ALLOW_MISSING_TIERS=1
# (or HVD_DEPS_MINIMAL=1, which installs neither) says it is meant. NCCL needs the CUDA toolkit,
# which install-deps does not install: a missing gpu tier is a skip everywhere.
[[ -f $BUILD/missing-tiers.txt ]] || { echo "$BUILD/missing-tiers.txt missing: reconfigure" >&2; fail=1; }
while IFS= read -r line; do
  [[ -n $line ]] || continue
  tier=${line%%:*}
  echo "tier not built: $line"
  skip "$tier.tier" "${line#*: }"
  if [[ $tier != gpu && -n ${CI:-} && ${CI:-} != false && ${HVD_ALLOW_MISSING_TIERS:-0} != 1 &&
        ${HVD_DEPS_MINIMAL:-0} != 1 ]]; then
    echo "make test: the $tier tier is missing in CI (install-deps installs it):" \
      "HVD_ALLOW_MISSING_TIERS=1 if meant" >&2
    fail=1
  fi
done < <(cat "$BUILD/missing-tiers.txt" 2>/dev/null || true)

# The clean-host test (a debootstrapped Debian root: mostly downloads and package unpacking on a
# fresh machine) runs while the sanitizer builds compile; its output is printed once it ends.
step "install.clean_host: started in the background ($BUILD/ctest-clean-host.log)"
setsid ctest --test-dir "$BUILD" --output-on-failure -R '^install\.clean_host$' \
  >"$BUILD/ctest-clean-host.log" 2>&1 &
clean_host_pid=$!
clean_host_done=0
# A failed build below ends this script (set -e): the test's process group goes with it.
trap '[[ $clean_host_done -eq 1 ]] || kill -- -"$clean_host_pid" 2>/dev/null || true' EXIT
finish_clean_host() {
  [[ $clean_host_done -eq 0 ]] || return 0
  clean_host_done=1
  local crc=0
  wait "$clean_host_pid" || crc=$?
  step "install.clean_host (release build)"
  cat "$BUILD/ctest-clean-host.log"
  [[ $crc -eq 0 ]] || fail=1
  skipped+=$(skipped_in "$BUILD/ctest-clean-host.log")
}

# The [debian13] tier's root (debootstrap and the packages install-deps.sh installs there: downloads
# and unpacking on a fresh machine, cached afterwards) is made now too, so that it overlaps the
# compiler; the tier itself runs after the sanitizer passes.
prep13_pid=
if [[ "${HVD_SKIP_DEBIAN13:-0}" != 1 ]]; then
  step "[debian13] root: prepared in the background ($BUILD/debian13-prepare.log)"
  HVD_DEBIAN13_PREPARE_ONLY=1 setsid bash test/debian13/debian13_tier.sh "$PWD" \
    >"$BUILD/debian13-prepare.log" 2>&1 &
  prep13_pid=$!
  trap '[[ $clean_host_done -eq 1 ]] || kill -- -"$clean_host_pid" 2>/dev/null || true
        [[ -z $prep13_pid ]] || kill -- -"$prep13_pid" 2>/dev/null || true' EXIT
fi

if [[ "${HVD_SKIP_SANITIZERS:-0}" != 1 ]]; then
  step "ASan+UBSan and TSan builds"
  cmake --preset asan >/dev/null
  cmake --build build-asan -j "$JOBS" --target hvd_unit_tests hvd_local_tests hvd_mpi_tests \
    hvd_shutdown_race_test \
    hvd_lifecycle_test hvd_dead_rank_test hvd_device_select_test hvd_stall_test \
    hvd_stall_shutdown_test hvd_fault_test hvd_soak_test hvd_timeline_probe hvd_timeline_signal_test \
    hvdrun hvd_runner_unit_tests hvd_elastic_store_job
  # hvdrun's [local] control-server test (runner.local) is not built under TSan: hvdrun is
  # single-threaded; its tests run in the release and ASan passes.
  cmake --preset tsan >/dev/null
  cmake --build build-tsan -j "$JOBS" --target hvd_local_tests hvd_soak_test hvd_timeline_signal_test
  # The timed sanitizer tests run alone on the machine.
  finish_clean_host

  step "ASan+UBSan: unit, local, mpi"
  # Open MPI itself leaks at exit: leak checking is off; memory errors and UB still abort. The
  # soak runs at its small size here (label soak_small); libtorch is not built. hvdrun is, for
  # hvdrun's [unit] tests (runner.unit: parsing, planning, the elastic host and watchdog logic)
  # and one libtorch-free elastic job with a rank SIGKILLed (elastic.store_job.np2: hvdrun's
  # elastic supervisor and rank wrappers, the snapshot store and resume protocol).
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  # The MPI tier's configuration variants (no fusion, no cache, a tiny cache) run in the release
  # pass; here each rank count runs once (CI time: they took 83 s under ASan).
  ctest --test-dir build-asan --output-on-failure -L 'unit|local|mpi|soak_small' \
    -E 'runner\.mpi|fault.broadcast_parameters|fault.hvdrun|^mpi\.np[124]\.(nofusion|nocache|tinycache)$' ||
    fail=1
  ctest --test-dir build-asan --output-on-failure -R '^elastic\.store_job\.np2$' || fail=1
  unset ASAN_OPTIONS UBSAN_OPTIONS

  step "TSan: local, and the soak at its small size"
  # Open MPI is not built with TSan: test/tsan/openmpi.supp hides what happens inside it.
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/test/tsan/openmpi.supp \
    ctest --test-dir build-tsan --output-on-failure -L 'local|soak_small' -E '^runner\.' || fail=1
fi

finish_clean_host

if grep -rqs '#define HVD_HAVE_NCCL 1' "$BUILD" --include=config.h; then
  step "GPU check bundle: built, then run with Open MPI, PMIx and the CUDA toolkit hidden"
  # The self-test exits 77 when this machine cannot run it (not root: no mount namespace): a
  # skip, named with its reason.
  rc=0
  scripts/gpu_bundle.sh "$BUILD" || rc=1
  if [[ $rc -eq 0 ]]; then
    set +e
    scripts/gpu_bundle.sh --selftest 2>&1 | tee "$BUILD/gpu-bundle-selftest.log"
    rc=${PIPESTATUS[0]}
    set -e
  fi
  if [[ $rc -eq 77 ]]; then
    skip gpu_bundle.selftest "$(sed -n 's/^gpu_bundle selftest: skipped: //p' \
      "$BUILD/gpu-bundle-selftest.log" | head -1)"
  elif [[ $rc -ne 0 ]]; then
    fail=1
  fi
fi

if [[ "${HVD_SKIP_DEBIAN13:-0}" != 1 ]]; then
  # The tree built and tested again on Debian 13 (a cached debootstrap root, chroot): GCC 14,
  # Open MPI 5, Catch2 3, Python 3.13, torch 2.6; then its .deb on a clean Debian 13 root.
  # What the background preparation printed (a failure there shows again below, in the tier).
  if [[ -n $prep13_pid ]]; then
    wait "$prep13_pid" || true
    prep13_pid=
    step "[debian13] root preparation (background)"
    cat "$BUILD/debian13-prepare.log"
  fi
  step "[debian13] tier: build and test on Debian 13 (test/debian13/debian13_tier.sh)"
  t13=$(date +%s)
  set +e
  HVD_HOST_BUILD=$PWD/$BUILD bash test/debian13/debian13_tier.sh "$PWD" 2>&1 |
    tee "$BUILD/debian13-tier.log"
  rc=${PIPESTATUS[0]}
  set -e
  echo "[debian13] tier: exit $rc after $(($(date +%s) - t13)) s"
  if [[ $rc -eq 77 ]]; then
    skip debian13.tier "$(grep -m1 '^skipped:' "$BUILD/debian13-tier.log" | cut -c10-)"
  elif [[ $rc -ne 0 ]]; then
    fail=1
  fi
fi

step "lint"
scripts/lint.sh "$BUILD" || fail=1

skip_note="no test skipped"
if [[ -n $skipped ]]; then
  skip_note="SKIPPED $(sed 's/([^)]*)//g' <<<"$skipped" | wc -w) test(s): $skipped(not run, not passed)"
fi
if [[ $fail -ne 0 ]]; then
  echo "make test: FAILED; $skip_note" >&2
  exit 1
fi
echo "make test: all tiers passed; $skip_note"
