#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# [fault] under hvdrun: the last of 3 ranks is SIGKILLed in the middle of fused allreduces. The
# job must end (non-zero), hvdrun must name the killed rank, and no process of the job may be
# left. Usage: hvdrun_fault_test.sh HVDRUN FAULT_TEST STAMP
set -u
hvdrun=$1 prog=$2 stamp=$3
out=$(mktemp)
start=$(date +%s.%N)
timeout 60 "$hvdrun" -np 3 "$prog" fused "$stamp" >"$out" 2>&1
rc=$?
end=$(date +%s.%N)
cat "$out"
fail() { echo "HVDRUN-FAULT-TEST FAIL: $*"; rm -f "$out"; exit 1; }
[ "$rc" -ne 124 ] || fail "hvdrun did not end within 60 s"
[ "$rc" -ne 0 ] || fail "hvdrun exited 0 although rank 2 was killed"
grep -Eiq "rank 2\b.*(signal 9|SIGKILL|killed)|(signal 9|SIGKILL|killed).*rank 2\b" "$out" ||
  fail "hvdrun's output does not name rank 2 as killed"
sleep 0.5
left=$(pgrep -f -- "$prog fused $stamp" || true)
[ -z "$left" ] || fail "processes left: $left"
echo "HVDRUN-FAULT-TEST PASS: exit code $rc after $(echo "$end - $start" | bc) s, no process left"
rm -f "$out"
