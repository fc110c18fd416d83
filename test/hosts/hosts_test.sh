#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [hosts] hvdrun on fake hosts (network namespaces with their own sshd, see testhosts.sh):
# placement over ssh, preflight failures (sshd down, unknown host key, missing program,
# unreachable host) and a rank killed on one host ending the job everywhere with no orphans.
# Usage: hosts_test.sh HVDRUN PROBE     exit 0 pass, 1 fail, 77 skipped (no root/namespaces)
set -uo pipefail
HVDRUN=${1:?usage: hosts_test.sh HVDRUN PROBE}
PROBE=${2:?usage: hosts_test.sh HVDRUN PROBE}
HERE=$(cd "$(dirname "$0")" && pwd)
RIG="$HERE/testhosts.sh"
export HVD_TESTHOSTS_PREFIX=${HVD_TESTHOSTS_PREFIX:-hvdrt}
export HVD_TESTHOSTS_SUBNET=${HVD_TESTHOSTS_SUBNET:-10.201.5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
P=$HVD_TESTHOSTS_PREFIX
A=${P}1
B=${P}2
WORK=$(mktemp -d /tmp/hvd-hosts-test.XXXXXX)
FAILS=0

"$RIG" check || exit 77
cleanup() { "$RIG" down >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT

ms() { echo $(( $(date +%s%N) / 1000000 )); }
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
expect() { # description, haystack-file, needle
    if grep -qF -- "$3" "$2"; then pass "$1"; else fail "$1 (no '$3' in output:)"; sed 's/^/    | /' "$2"; fi
}
# Processes other than sshd left in a fake host's network namespace.
leftovers() {
    local p out=""
    for p in $(ip netns pids "$1" 2>/dev/null); do
        [ "/proc/$p/exe" -ef /usr/sbin/sshd ] && continue
        out+="$p:$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-60) "
    done
    echo "$out"
}

t=$(ms); "$RIG" up 2 || { echo "FAIL: testhosts.sh up 2"; exit 1; }
echo "rig up in $(( $(ms) - t )) ms"

# 1. 4 ranks, 2 per fake host, over ssh; each rank reports its host and network namespace.
t=$(ms)
"$HVDRUN" --verbose -np 4 -H "$A:2,$B:2" --start-timeout 20 "$PROBE" --expect-hosts 2 \
    >"$WORK/run.out" 2>&1
rc=$?; took=$(( $(ms) - t ))
[ $rc = 0 ] && pass "hvdrun -np 4 -H $A:2,$B:2 exits 0 (${took} ms)" || fail "run rc=$rc"
expect "the probe agrees (same host <=> same netns)" "$WORK/run.out" "PROBE OK: 4 ranks on 2 hosts"
for r in 0 1; do expect "rank $r on $A" "$WORK/run.out" "[$r]<stdout>: PROBE rank=$r size=4 host=$A "; done
for r in 2 3; do expect "rank $r on $B" "$WORK/run.out" "[$r]<stdout>: PROBE rank=$r size=4 host=$B "; done
ns_a=$(readlink "/proc/$(cat "/run/${P}-testhosts/$A/sshd.pid")/ns/net")
ns_b=$(readlink "/proc/$(cat "/run/${P}-testhosts/$B/sshd.pid")/ns/net")
expect "rank 0 runs in $A's network namespace" "$WORK/run.out" "rank=0 size=4 host=$A netns=$ns_a"
expect "rank 3 runs in $B's network namespace" "$WORK/run.out" "rank=3 size=4 host=$B netns=$ns_b"
expect "MPI traffic is kept on the rig's subnet" "$WORK/run.out" "btl_tcp_if_include ${HVD_TESTHOSTS_SUBNET}.0/24"
# Open MPI 4's runtime reads oob_tcp_if_include, Open MPI 5's (PRRTE) prte_if_include.
if grep -qE -- "(oob_tcp|prte)_if_include ${HVD_TESTHOSTS_SUBNET}.0/24" "$WORK/run.out"; then
    pass "... and Open MPI's runtime traffic too"
else
    fail "no oob_tcp_if_include/prte_if_include ${HVD_TESTHOSTS_SUBNET}.0/24 in the mpirun command"
fi
grep -o "preflight passed for 2 host(s) in [0-9.]* s" "$WORK/run.out" | sed 's/^/measured: /'

# 2. Preflight: unknown host key on A and sshd down on B, reported together, nothing started.
"$RIG" forget-hostkey "$A"
"$RIG" sshd-stop "$B" 2>/dev/null
t=$(ms)
"$HVDRUN" -np 4 -H "$A:2,$B:2" --start-timeout 10 "$PROBE" >"$WORK/pre1.out" 2>&1
rc=$?; took=$(( $(ms) - t ))
[ $rc = 4 ] && pass "preflight failure exits 4 (${took} ms)" || fail "preflight rc=$rc (want 4)"
expect "unknown host key names the fix" "$WORK/pre1.out" \
    "$A: the host key of $A is not in known_hosts"
expect "... with the ssh-keyscan line" "$WORK/pre1.out" "ssh-keyscan -p 22 $A >> ~/.ssh/known_hosts"
expect "sshd down is reported" "$WORK/pre1.out" "$B: cannot connect to $B port 22 (connection refused: is sshd running there?"
[ $took -lt 10000 ] && pass "within the start timeout" || fail "took ${took} ms"
"$RIG" learn-hostkeys
"$RIG" sshd-start "$B" 2>/dev/null

# 3. Preflight: a program that exists only on the master.
LOCAL_ONLY="$("$RIG" master-only-dir)/probe"
cp "$PROBE" "$LOCAL_ONLY"
"$HVDRUN" -np 4 -H "$A:2,$B:2" --start-timeout 10 "$LOCAL_ONLY" >"$WORK/pre2.out" 2>&1
rc=$?
[ $rc = 4 ] && pass "missing program exits 4" || fail "missing program rc=$rc (want 4)"
expect "missing program on $A" "$WORK/pre2.out" "$A: program '$LOCAL_ONLY' not found on $A"
expect "missing program on $B" "$WORK/pre2.out" "$B: program '$LOCAL_ONLY' not found on $B"

# 4. Preflight: an unreachable host is bounded by --start-timeout.
ip link set "${P}v2" down
t=$(ms)
"$HVDRUN" -np 4 -H "$A:2,$B:2" --start-timeout 2 "$PROBE" >"$WORK/pre3.out" 2>&1
rc=$?; took=$(( $(ms) - t ))
ip link set "${P}v2" up
[ $rc = 4 ] && pass "unreachable host exits 4" || fail "unreachable rc=$rc (want 4)"
expect "unreachable host times out" "$WORK/pre3.out" "$B: no answer from $B within --start-timeout 2 s"
[ $took -lt 3500 ] && pass "bounded by the timeout (${took} ms)" || fail "took ${took} ms"

# 5. Kill one rank's process on B: the job ends everywhere, hvdrun names it, no orphans.
MARK="hvdhoststest$$"
"$HVDRUN" -np 4 -H "$A:2,$B:2" --grace-period 3 "$PROBE" --sleep 60 --marker "$MARK" \
    >"$WORK/kill.out" 2>&1 &
HPID=$!
for _ in $(seq 150); do [ "$(grep -c 'PROBE ready' "$WORK/kill.out")" -ge 4 ] && break; sleep 0.2; done
victim=""
for p in $(ip netns pids "$B"); do
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "^$PROBE .*$MARK" && { victim=$p; break; }
done
if [ -z "$victim" ]; then
    fail "no rank process of the job found on $B"; sed 's/^/    | /' "$WORK/kill.out"; kill -INT $HPID
else
    t=$(ms); kill -KILL "$victim"
fi
wait $HPID; rc=$?; took=$(( $(ms) - ${t:-$(ms)} ))
[ $rc = 137 ] && pass "hvdrun exits with the killed rank's code 137 (${took} ms after the kill)" \
    || fail "kill rc=$rc (want 137)"
expect "the failed rank and host are named" "$WORK/kill.out" "failed first (killed by signal 9 (SIGKILL)"
grep -q "hvdrun: job failed: rank [23] on host $B" "$WORK/kill.out" && pass "... on $B" \
    || fail "failure not attributed to $B"
echo "measured: teardown after the kill: ${took} ms"
left=$(pgrep -f -- "$MARK" | grep -v "^$$\$" || true)
[ -z "$left" ] && pass "no process of the job left anywhere" || fail "left: $(ps -o pid,args -p $left)"
sleep 0.3
for h in "$A" "$B"; do
    l=$(leftovers "$h"); [ -z "$l" ] && pass "nothing but sshd left on $h" || fail "left on $h: $l"
done

t=$(ms); "$RIG" down; echo "rig down in $(( $(ms) - t )) ms"
trap - EXIT; rm -rf "$WORK"
if [ -n "$(ip netns list | grep -E "^${P}[0-9]+ " || true)" ]; then fail "namespaces left after down"; fi
[ $FAILS = 0 ] && { echo "hosts test: all passed"; exit 0; }
echo "hosts test: $FAILS failure(s)"; exit 1
