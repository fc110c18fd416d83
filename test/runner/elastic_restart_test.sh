#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [elastic] hvdrun restarts only what a restart can fix (runner/include/hvd/runner/elastic.h),
# and long rank-local work that reports progress is not a stall; hvdrun --min-np 2 -np 2 of
# elastic_store_job (libtorch-free), one scenario per call:
#   no-progress  rank 1 exits 1 at step 7 in every generation; generation 0 commits steps 3 and
#                6 (commit 2), every later one resumes from commit 2 and fails before commit 3.
#                With the default --max-restarts-without-progress 3, hvdrun restarts 1 + 3
#                times and gives up after generation 4, naming commit 2 and rank 1's last
#                error line, with rank 1's exit code (5 if its wrapper was killed before it
#                reported one).
#   invalid      rank 1 broadcasts from a root rank that does not exist at step 4 (an invalid
#                argument): it exits 76, rank 0 loses its peer; hvdrun ends the job after that
#                one generation with exit 1.
#   mismatch     every rank allreduces a different number of values at step 4 (a negotiated
#                mismatch, on every rank; the first to exit prints it): one generation, exit 1.
#   local-work   --elastic-step-timeout 2; in generation 0 rank 0 works alone for 4 s at step 5
#                (rank 1 waits in its allreduce), calling hvd::elastic::report_progress() every
#                0.5 s: no stall, one generation, success.
#   silent-work  the same without the calls: the watchdog stops generation 0, naming
#                report_progress() in its message, and generation 1 succeeds.
# Usage: elastic_restart_test.sh SCENARIO HVDRUN ELASTIC_STORE_JOB
set -uo pipefail
SCENARIO=${1:?usage: elastic_restart_test.sh SCENARIO HVDRUN ELASTIC_STORE_JOB}
HVDRUN=${2:?usage: elastic_restart_test.sh SCENARIO HVDRUN ELASTIC_STORE_JOB}
JOB=${3:?usage: elastic_restart_test.sh SCENARIO HVDRUN ELASTIC_STORE_JOB}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck source=../common/check.sh
source "$(dirname "$0")/../common/check.sh"  # check WHAT COMMAND..., check_exit

err=$(mktemp)
trap 'rm -f "$err"' EXIT
start=$SECONDS
# run HVDRUN_ARGS... -- JOB_ARGS...: the job's stdout in $out, stderr in $log, exit code in $rc.
run() {
  local hvdrun_args=()
  while [[ $1 != -- ]]; do hvdrun_args+=("$1"); shift; done
  shift
  out=$(timeout 60 "$HVDRUN" -np 2 --min-np 2 "${hvdrun_args[@]}" "$JOB" --steps 12 "$@" \
    2>"$err")
  rc=$?
  log=$(cat "$err")
}
generations() { grep -c "hvdrun: elastic: generation [0-9]*:" <<<"$log"; }
lacks() { ! grep -q "$1" <<<"$2"; }

case $SCENARIO in
  no-progress)
    run -- --fail-step 7 --fail-how exit
    # Rank 1's exit code 1; or 5 (kExitLaunch) when mpirun's abort, set off by rank 0's restart
    # request, killed rank 1's wrapper before it reported (seen under load): then the give-up
    # says so. Never 75 (the survivor's request) and never a timeout.
    check "the job ends with rank 1's exit code 1 (or 5: its wrapper killed first), not 75 or a timeout (exit $rc)" \
      test "$rc" -eq 1 -o "$rc" -eq 5
    if [[ $rc -eq 5 ]]; then
      check "the give-up says rank 1's wrapper ended before reporting" \
        grep -q "the last failure: rank 1 on host [^:]*: its wrapper ended before it reported an exit code: elastic_store_job: rank 1: simulated failure at step 7" \
        <<<"$log"
    fi
    check "5 generations ran: 0 with commits, then 1-4 without a new one ($(generations))" \
      test "$(generations)" -eq 5
    check "hvdrun gives up: 4 generations in a row without a new commit, all from commit 2" \
      grep -q "hvdrun: elastic: 4 generations in a row failed before any new commit (the last commit is 2: every one resumed from it and failed before the next)" \
      <<<"$log"
    check "the give-up quotes rank 1's last error line" \
      grep -q "the last failure: rank 1 on host [^:]*: [^:]*: elastic_store_job: rank 1: simulated failure at step 7" \
      <<<"$log"
    check "the give-up names --max-restarts-without-progress 3" \
      grep -q "not restarting after 3 restarts without progress (--max-restarts-without-progress 3)" \
      <<<"$log"
    check "no generation 5" lacks "starting generation 5" "$log"
    ;;
  invalid | mismatch)
    run -- --fail-step 4 --fail-how "$SCENARIO"
    check "the job ends with exit 1, as the error would without elastic mode (exit $rc)" \
      test "$rc" -eq 1
    check "exactly one generation ($(generations))" test "$(generations)" -eq 1
    check "no restart" lacks "starting generation" "$log"
    # invalid: only rank 1 errs. mismatch: every rank gets the error, and the first to exit
    # ends the job: hvdrun's TERM may stop the other before it prints (or it sees its peer gone).
    who=1
    [[ $SCENARIO == mismatch ]] && who='[01]'
    check "the rank prints the error and exits 76" \
      grep -q "hvd.elastic: rank $who: hvd::Error: .*a restart cannot fix this error: ending the job (exit 76)" \
      <<<"$log"
    check "hvdrun says a restart cannot fix it" \
      grep -q "hvdrun: elastic: rank [01] on host .* ended with an error a restart cannot fix .*not restarting, exit code 1" \
      <<<"$log"
    if [[ $SCENARIO == invalid ]]; then
      check "the error is rank 1's invalid root" grep -qi "root" <<<"$log"
    else
      check "the error is the ranks' disagreement" grep -qi "mismatch\|shape" <<<"$log"
    fi
    ;;
  local-work)
    run --elastic-step-timeout 2 -- --local-work-step 5 --local-work-ms 4000 \
      --report-every-ms 500
    check "the job succeeds (exit $rc)" test "$rc" -eq 0
    check "rank 0 did its 4 s of rank-local work" grep -q "4000 ms of rank-local work" <<<"$log"
    check "no stall: the watchdog stayed quiet" lacks "made no progress" "$log"
    check "exactly one generation ($(generations))" test "$(generations)" -eq 1
    for r in 0 1; do
      check "rank $r ends with the closed form" \
        grep -q "ELASTIC_STORE_JOB gen=0 rank=$r resumed_step=-1 commit=-1 steps=12 w=ok" <<<"$out"
    done
    ;;
  silent-work)
    run --elastic-step-timeout 2 -- --local-work-step 5 --local-work-ms 4000
    check "the job succeeds in generation 1 (exit $rc)" test "$rc" -eq 0
    check "the watchdog stopped generation 0" \
      grep -q "hvdrun: elastic: ranks 0 (.*), 1 (.*) made no progress for .* (--elastic-step-timeout 2" \
      <<<"$log"
    check "its message names hvd.elastic.report_progress() and the C++ call" \
      grep -q "hvd.elastic.report_progress() (C++: hvd::elastic::report_progress()), which long rank-local work" \
      <<<"$log"
    check "generation 1 resumed from commit 1 (step 3) and finished" \
      grep -q "ELASTIC_STORE_JOB gen=1 rank=0 resumed_step=3 commit=1 steps=12 w=ok" <<<"$out"
    ;;
  *)
    echo "unknown scenario '$SCENARIO'"
    exit 2
    ;;
esac
check_exit "elastic_restart_test $SCENARIO" "$out" "$log"
