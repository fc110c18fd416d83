#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [elastic] No secret where another user of the host can read it. While an elastic job of
# elastic_store_job runs at np 2 (hvdrun --min-np 2 --verbose, default state base), the test
# reads the job token and the snapshot key from mpirun's environment (/proc/PID/environ: only
# the job's user and root can) and greps every process's command line (`ps -eww -o args` and
# /proc/*/cmdline), the listings of /dev/shm, /var/tmp and /tmp, and hvdrun's own output for
# them: no hit. The state directory's name is random but not the token; the program's
# environment has the key but no longer the token; `hvdrun --dry-run` names no secret.
# Then --elastic-state-dir: a world-writable base that is not sticky and a missing one are
# refused with the reason; a private sticky one holds the job's state directory while the job
# runs, and nothing is left in it at the end.
# Usage: elastic_secrets_test.sh HVDRUN ELASTIC_STORE_JOB
set -uo pipefail
HVDRUN=${1:?usage: elastic_secrets_test.sh HVDRUN ELASTIC_STORE_JOB}
JOB=${2:?usage: elastic_secrets_test.sh HVDRUN ELASTIC_STORE_JOB}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck source=../common/check.sh
source "$(dirname "$0")/../common/check.sh"  # check WHAT COMMAND..., check_exit

work=$(mktemp -d /tmp/hvd-secrets-XXXXXX)
hvdrun_pid=
cleanup() {
  [[ -n $hvdrun_pid ]] && kill -KILL "$hvdrun_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
start=$SECONDS

# The processes under PID (children, grandchildren, ...).
descendants() {
  ps -eo pid=,ppid= | awk -v root="$1" '
    { parent[$1] = $2 }
    END { for (p in parent) { q = p; while (q in parent && q != root && q > 1) q = parent[q];
                              if (q == root && p != root) print p } }'
}
# True when file $2 does not contain the string $1.
not_found() { ! grep -qF -- "$1" "$2"; }
# True when stdin has no match for the extended regular expression $1.
not_found_re() { ! grep -Eq -- "$1"; }
# True when none of the files after $1 and $2 contains either string.
not_found_either() {
  local a=$1 b=$2
  shift 2
  ! grep -qF -e "$a" -e "$b" -- "$@"
}
# The value of variable $2 in process $1's environment ("" when it has none).
env_of() {
  tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n "s/^$2=//p" | head -1
}

"$HVDRUN" --verbose -np 2 --min-np 2 "$JOB" --steps 60 --step-ms 100 >"$work/out" 2>"$work/err" &
hvdrun_pid=$!
mpirun_pid='' program_pid='' state_dir=''
for _ in $(seq 150); do
  # Open MPI 4's mpirun; Open MPI 5's mpirun runs as prterun.
  mpirun_pid=$(pgrep -P "$hvdrun_pid" -x 'mpirun|prterun' | head -1)
  if [[ -n $mpirun_pid ]]; then
    for p in $(descendants "$mpirun_pid"); do
      if [[ $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) == "$JOB "* ]]; then
        program_pid=$p
        state_dir=$(env_of "$p" HVD_ELASTIC_STATE_DIR)
      fi
    done
  fi
  [[ -n $state_dir && -f $state_dir/snapshot ]] && break  # running, and it made a commit
  sleep 0.1
done
token=$(env_of "$mpirun_pid" HVD_JOB_TOKEN)
key=$(env_of "$mpirun_pid" HVD_ELASTIC_KEY)
check "the job runs and made a commit in its state directory ($state_dir)" \
  test -n "$program_pid" -a -f "$state_dir/snapshot"
check "mpirun's environment holds the job token (32 hex digits: '${token:0:4}...')" \
  grep -Eqx '[0-9a-f]{32}' <<<"$token"
check "mpirun's environment holds the snapshot key (64 hex digits: '${key:0:4}...')" \
  grep -Eqx '[0-9a-f]{64}' <<<"$key"
[[ -n $token ]] || token=no-token-found
[[ -n $key ]] || key=no-key-found

ps -eww -o args >"$work/ps"
for f in /proc/[0-9]*/cmdline; do { tr '\0' ' ' <"$f"; } 2>/dev/null; echo; done >"$work/cmdlines"
ls -la /dev/shm /var/tmp /tmp "$(dirname "$state_dir")" >"$work/listing" 2>&1
for what in token key; do
  secret=${!what}
  check "no command line in ps shows the $what" not_found "$secret" "$work/ps"
  check "no /proc/*/cmdline holds the $what" not_found "$secret" "$work/cmdlines"
  check "no name in /dev/shm, /var/tmp or /tmp holds the $what" not_found "$secret" "$work/listing"
done
check "the state directory's name is random of its own, not the token ($state_dir)" \
  grep -Eq '/hvd-elastic-[0-9a-f]{32}$' <<<"$state_dir"
check "the program's environment has no token (the wrapper removed it)" \
  test -z "$(env_of "$program_pid" HVD_JOB_TOKEN)"
check "the program's environment has the key for its snapshots" \
  test "$(env_of "$program_pid" HVD_ELASTIC_KEY)" = "$key"
check "mpirun's command line names HVD_JOB_TOKEN and HVD_ELASTIC_KEY (-x NAME)" \
  grep -q -- "-x HVD_JOB_TOKEN -x HVD_ELASTIC_KEY" <<<"$(tr '\0' ' ' <"/proc/$mpirun_pid/cmdline")"

wait "$hvdrun_pid"
rc=$?
hvdrun_pid=
check "the job succeeds (exit $rc)" test "$rc" -eq 0
check "hvdrun's output (--verbose: the mpirun command) shows neither secret" \
  not_found_either "$token" "$key" "$work/out" "$work/err"
check "--verbose says where the state is and why" \
  grep -q "hvdrun: elastic: state in $state_dir (" "$work/err"
check "the state directory is removed at the end" test ! -e "$state_dir"

dry=$("$HVDRUN" --dry-run -np 2 "$JOB" 2>&1)
check "hvdrun --dry-run names the token's variable" grep -qF -- "-x HVD_JOB_TOKEN " <<<"$dry"
check "hvdrun --dry-run shows no 32-hex secret" not_found_re '[0-9a-f]{32}' <<<"$dry"

# --elastic-state-dir.
mkdir -m 0777 "$work/open" && chmod 0777 "$work/open"
"$HVDRUN" -np 2 --min-np 2 --elastic-state-dir "$work/open" "$JOB" >/dev/null 2>"$work/err2"
rc=$?
check "a world-writable base that is not sticky is refused (exit $rc)" \
  grep -q "elastic-state-dir: '$work/open' (mode 0777) lets other users write to it but is not sticky" \
  "$work/err2"
check "... as a usage error (exit 2)" test "$rc" -eq 2
"$HVDRUN" -np 2 --min-np 2 --elastic-state-dir "$work/missing" "$JOB" >/dev/null 2>"$work/err2"
check "a missing base is refused" \
  grep -q "elastic-state-dir: '$work/missing' cannot be used: No such file or directory" "$work/err2"
base=$work/base
mkdir "$base" && chmod 1777 "$base"
"$HVDRUN" -np 2 --min-np 2 --elastic-state-dir "$base" "$JOB" --steps 30 --step-ms 50 \
  >"$work/out3" 2>"$work/err3" &
hvdrun_pid=$!
used=
for _ in $(seq 100); do
  used=$(find "$base" -mindepth 2 -maxdepth 2 -name snapshot -path "$base/hvd-elastic-*" | head -1)
  [[ -n $used ]] && break
  sleep 0.1
done
wait "$hvdrun_pid"
rc=$?
hvdrun_pid=
check "a sticky base given with --elastic-state-dir holds the job's state (${used:-none})" \
  test -n "$used"
check "that job succeeds (exit $rc)" test "$rc" -eq 0
check "nothing is left in the base at the end" test -z "$(ls -A "$base")"
check_exit elastic_secrets_test "$(cat "$work/out" 2>/dev/null)" "$(cat "$work/err" 2>/dev/null)"
