#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [elastic] A snapshot the job did not write is refused, and the job ends instead of restarting:
# hvdrun --min-np 2 -np 2 of elastic_store_job, whose generation 0 writes its commit of step 6
# under another key than the job's (--forge-step 6: what a planted or altered file looks like)
# and then loses rank 1 (SIGKILL after step 7). Generation 1 must refuse that snapshot on the
# ranks that read it (the error names the file and says the HMAC does not verify), no rank
# resumes or hangs in the resume broadcast, the ranks exit 76 and hvdrun ends the job (exit 1)
# without a generation 2.
# Usage: elastic_store_forged_test.sh HVDRUN ELASTIC_STORE_JOB
set -uo pipefail
HVDRUN=${1:?usage: elastic_store_forged_test.sh HVDRUN ELASTIC_STORE_JOB}
JOB=${2:?usage: elastic_store_forged_test.sh HVDRUN ELASTIC_STORE_JOB}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck source=../common/check.sh
source "$(dirname "$0")/../common/check.sh"  # check WHAT COMMAND..., check_exit

err=$(mktemp)
trap 'rm -f "$err"' EXIT
start=$SECONDS
out=$(timeout 90 "$HVDRUN" -np 2 --min-np 2 --reset-limit 3 "$JOB" --steps 12 --fail-step 7 \
  --fail-rank 1 --forge-step 6 2>"$err")
rc=$?
log=$(cat "$err")
check "the job ends with exit 1, not a timeout or a success (exit $rc)" test "$rc" -eq 1
check "generation 0 forged its last commit" grep -q "forged the snapshot of step 6" <<<"$log"
check "hvdrun starts generation 1 after rank 1's SIGKILL" \
  grep -q "starting generation 1 from the last commit" <<<"$log"
# One host: both ranks read its snapshot and refuse it; the first to exit ends the job (hvdrun
# may stop the other before it prints).
refused="rank ([01]): (hvd::Error: )?rank \\1 \\(host [^)]*\\): hvd.elastic: refusing the snapshot"
refused+=" '/[^']*/snapshot': its HMAC-SHA256 does not verify.*\\(exit 76\\)"
check "a rank refuses the file by name (its HMAC does not verify) and exits 76" \
  grep -Eq "$refused" <<<"$log"
check "hvdrun does not restart an elastic state error" grep -q "not restarting" <<<"$log"
check "no generation 2" bash -c '! grep -q "starting generation 2" <<<"$1"' _ "$log"
check "no rank resumed or finished" bash -c '! grep -q "ELASTIC_STORE_JOB" <<<"$1"' _ "$out"
check_exit elastic_store_forged_test "$out" "$log"
