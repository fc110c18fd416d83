#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [elastic] The background preflight of a spare host, end to end on fake hosts
# (test/hosts/testhosts.sh): hvdrun --min-np 2 --max-np 2 -H A:1,B:1,C:1 runs generation 0 on A
# and B while C, the spare, is preflighted in the background; rank 1 on B SIGKILLs itself after
# step 7 of 12 (steps of 100 ms: generation 0 outlasts C's check; step 7's allreduce needs A's
# rank, which commits step 6 before it, so A holds commit 2 whatever the load; at step 6 the
# kill raced A's commit and hvdrun's TERM could stop A before it); B is blacklisted and
# generation 1 launches on A and C without preflighting C again (nor A), resumes from commit 2
# (step 6) and ends with the closed-form state. The libtorch-free elastic_store_job keeps the
# test at a few seconds.
# Usage: elastic_spare_test.sh HVDRUN ELASTIC_STORE_JOB      exit 0 pass, 1 fail, 77 skipped
set -uo pipefail
HVDRUN=${1:?usage: elastic_spare_test.sh HVDRUN ELASTIC_STORE_JOB}
JOB=${2:?usage: elastic_spare_test.sh HVDRUN ELASTIC_STORE_JOB}
RIG="$(cd "$(dirname "$0")/../hosts" && pwd)/testhosts.sh"
export HVD_TESTHOSTS_PREFIX=hvdsp HVD_TESTHOSTS_SUBNET=10.201.37 HVD_TESTHOSTS_PRIVATE_TMP=shm
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
A=hvdsp1 B=hvdsp2 C=hvdsp3
"$RIG" check || exit 77
# shellcheck source=../common/check.sh
source "$(dirname "$0")/../common/check.sh"  # check WHAT COMMAND..., check_exit
err=$(mktemp)
trap '"$RIG" down >/dev/null 2>&1; rm -f "$err"' EXIT
start=$SECONDS
"$RIG" up 3 >/dev/null || { echo "FAIL: testhosts.sh up 3"; exit 1; }
out=$(timeout 90 "$HVDRUN" --verbose --min-np 2 --max-np 2 -H "$A:1,$B:1,$C:1" --reset-limit 1 \
  "$JOB" --steps 12 --fail-step 7 --fail-rank 1 --step-ms 100 2>"$err")
rc=$?
log=$(grep -v '^hvdrun: mpirun ' "$err")
gen1=$(sed -n '/^hvdrun: elastic: a rank failed/,$p' <<<"$log")
check "the job succeeds after rank 1's SIGKILL (exit $rc)" test "$rc" -eq 0
check "generation 0 runs on $A and $B after their preflight" \
  grep -q "preflight passed for 2 host(s).*generation 0: 2 rank(s) on $A:1,$B:1" \
  <<<"$(tr '\n' ' ' <<<"$log")"
check "the spare $C passed its preflight in the background during generation 0" \
  grep -q "spare host $C passed its preflight in the background" \
  <<<"$(sed -n '/generation 0: /,/^hvdrun: elastic: a rank failed/p' <<<"$log")"
check "$B is blacklisted" grep -q "host $B blacklisted (its rank 1 failed)" <<<"$log"
check "generation 1 runs on $A and $C" grep -q "generation 1: 2 rank(s) on $A:1,$C:1" <<<"$log"
check "generation 1 skips $C's preflight" \
  grep -q "preflight skipped for host $C (checked in the background)" <<<"$gen1"
check "no preflight of $C runs in the foreground" \
  test "$(grep -c "^hvdrun: preflight $C:" <<<"$log")" -eq 0
check "generation 1 checks no host again" \
  grep -q "preflight passed for 0 host(s) .*; 2 host(s) passed it before" <<<"$gen1"
for r in 0 1; do
  check "rank $r of generation 1 resumed from commit 2 (step 6) and ends with the closed form" \
    grep -q "ELASTIC_STORE_JOB gen=1 rank=$r resumed_step=6 commit=2 steps=12 w=ok" <<<"$out"
done
check_exit elastic_spare_test "$out" "$log"
