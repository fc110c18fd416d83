#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [elastic] hvdrun --min-np 2 -np 2 of elastic_store_job (libtorch-free, so it also runs in the
# ASan+UBSan build: scripts/run-tests.sh): rank 1 SIGKILLs itself after step 7 of 12 in
# generation 0; hvdrun must start generation 1, whose ranks resume from commit 2 (step 6, the
# last commit before the kill) and end with the closed-form state, and the job must succeed.
# Usage: elastic_store_job_test.sh HVDRUN ELASTIC_STORE_JOB
set -uo pipefail
HVDRUN=${1:?usage: elastic_store_job_test.sh HVDRUN ELASTIC_STORE_JOB}
JOB=${2:?usage: elastic_store_job_test.sh HVDRUN ELASTIC_STORE_JOB}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck source=../common/check.sh
source "$(dirname "$0")/../common/check.sh"  # check WHAT COMMAND..., check_exit

err=$(mktemp)
trap 'rm -f "$err"' EXIT
start=$SECONDS
out=$(timeout 90 "$HVDRUN" -np 2 --min-np 2 --reset-limit 1 "$JOB" --steps 12 --fail-step 7 \
  --fail-rank 1 2>"$err")
rc=$?
log=$(cat "$err")
check "the job succeeds after rank 1's SIGKILL (exit $rc)" test "$rc" -eq 0
check "hvdrun reports rank 1's SIGKILL" grep -q "rank 1 on host .* failed (killed by signal 9" \
  <<<"$log"
check "hvdrun starts generation 1 from the last commit" \
  grep -q "starting generation 1 from the last commit" <<<"$log"
for r in 0 1; do
  check "rank $r of generation 1 resumed from commit 2 (step 6) and ends with the closed form" \
    grep -q "ELASTIC_STORE_JOB gen=1 rank=$r resumed_step=6 commit=2 steps=12 w=ok" <<<"$out"
done
gen0=$(grep -c "ELASTIC_STORE_JOB gen=0" <<<"$out")
check "no rank of generation 0 finished ($gen0 did)" test "$gen0" -eq 0
check_exit elastic_store_job_test "$out" "$log"
