#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [elastic] Another user plants the elastic job's state directory. A second, unprivileged user
# is created (useradd; the test exits 77, skipped, when that is impossible). An elastic job of
# elastic_store_job runs at np 2 with --elastic-state-dir BASE (a fresh mode-1777 directory).
# Once it made a commit, the test freezes the ranks, learns the state directory's name by
# listing BASE (not a secret), removes the directory (the host's memory wiped between
# generations) and, as the second user, plants the same name:
#   dir:  a 0777 directory of that user holding a `snapshot` whose payload, a pickle, would
#         create a marker file if unpickled and would run code if executed;
#   link: a symbolic link to a directory of the job's user.
# Then it kills a rank, so hvdrun starts generation 1, whose wrappers find the planted name.
# Expected: every wrapper refuses it before the program starts, naming the directory and the
# problem; hvdrun ends the job (no generation 2, no restart loop); the marker does not exist;
# the link's target is untouched.
# Usage: elastic_planted_dir_test.sh HVDRUN ELASTIC_STORE_JOB dir|link
set -uo pipefail
HVDRUN=${1:?usage: elastic_planted_dir_test.sh HVDRUN ELASTIC_STORE_JOB dir|link}
JOB=${2:?usage: elastic_planted_dir_test.sh HVDRUN ELASTIC_STORE_JOB dir|link}
MODE=${3:?usage: elastic_planted_dir_test.sh HVDRUN ELASTIC_STORE_JOB dir|link}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck source=../common/check.sh
source "$(dirname "$0")/../common/check.sh"  # check WHAT COMMAND..., check_exit

if [[ $(id -u) -ne 0 ]] || ! command -v useradd >/dev/null || ! command -v runuser >/dev/null; then
  echo "SKIP: elastic_planted_dir_test needs root with useradd and runuser (a second user)"
  exit 77
fi
other=hvdplant$$
if ! useradd --no-create-home --shell /bin/sh "$other" 2>/dev/null; then
  echo "SKIP: elastic_planted_dir_test: useradd $other failed (no second user possible here)"
  exit 77
fi
work=$(mktemp -d /tmp/hvd-planted-XXXXXX)
chmod 0755 "$work"
hvdrun_pid=
cleanup() {
  [[ -n $hvdrun_pid ]] && kill -KILL "$hvdrun_pid" 2>/dev/null
  rm -rf "$work"
  userdel "$other" 2>/dev/null
}
trap cleanup EXIT
start=$SECONDS
as_other() { runuser -u "$other" -- "$@"; }
lacks() { ! grep -q -- "$1" "$2"; }  # file $2 has no line matching $1

base=$work/base
mkdir "$base" && chmod 1777 "$base"
marker=$work/marker  # created only if the planted payload ever runs
victim=$work/victim  # the job user's directory the link points to
mkdir -m 0700 "$victim"
echo "the job user's own file" >"$victim/keep"
victim_before=$(cd "$victim" && stat -c "%A %U %s %.9Y %.9Z %h" . && ls -lA --time-style=+%s && sha256sum keep)

# The ranks: the processes under hvdrun whose command line starts with the program.
ranks() {
  ps -eo pid=,ppid=,args= | awk -v root="$hvdrun_pid" -v job="$JOB" '
    { parent[$1] = $2; args[$1] = substr($0, index($0, $3)) }
    END { for (p in parent) { q = p; while (q in parent && q != root && q > 1) q = parent[q];
                              if (q == root && index(args[p], job " ") == 1) print p } }'
}

"$HVDRUN" -np 2 --min-np 2 --reset-limit 3 --elastic-state-dir "$base" "$JOB" --steps 400 \
  --step-ms 100 >"$work/out" 2>"$work/err" &
hvdrun_pid=$!
state_dir=
for _ in $(seq 150); do
  state_dir=$(find "$base" -mindepth 1 -maxdepth 1 -name 'hvd-elastic-*' | head -1)
  [[ -n $state_dir && -f $state_dir/snapshot && $(ranks | wc -l) -eq 2 ]] && break
  sleep 0.1
done
check "generation 0 runs and made a commit in $base (${state_dir:-nothing there})" \
  test -n "$state_dir" -a -f "$state_dir/snapshot"
pids=$(ranks)
# shellcheck disable=SC2086
kill -STOP $pids  # no commit from now on
rm -rf "$state_dir"  # the host's memory wiped between generations
if [[ $MODE == dir ]]; then
  as_other mkdir -m 0777 "$state_dir"
  as_other chmod 0777 "$state_dir"
  # A protocol-0 pickle of os.system('touch MARKER'), also a shell script that makes it.
  payload="cos"$'\n'"system"$'\n'"(S'touch $marker'"$'\n'"tR."
  as_other sh -c "printf '%s\n' \"\$1\" >\"\$2/snapshot\"; printf '#!/bin/sh\ntouch %s\n' \"\$3\" \
    >\"\$2/run.sh\"; chmod 0777 \"\$2/snapshot\" \"\$2/run.sh\"" _ "$payload" "$state_dir" "$marker"
  check "the second user planted $state_dir" test "$(stat -c %U "$state_dir")" = "$other"
else
  as_other ln -s "$victim" "$state_dir"
  check "the second user planted a link $state_dir -> $victim" test -L "$state_dir"
fi
kill -KILL "$(head -1 <<<"$pids")"  # a rank dies: hvdrun starts generation 1

timeout 60 tail --pid="$hvdrun_pid" -f /dev/null
wait "$hvdrun_pid"
rc=$?
hvdrun_pid=
log=$(cat "$work/err")
if [[ $MODE == dir ]]; then
  problem="'$state_dir' belongs to uid $(id -u "$other"), not to this job's uid 0"
else
  problem="'$state_dir' is a symbolic link, not a directory"
fi
check "hvdrun ends the job with an error (exit $rc)" test "$rc" -ne 0 -a "$rc" -ne 124
check "hvdrun started generation 1 after the kill" \
  grep -q "elastic: generation 1: 2 rank(s)" <<<"$log"
check "a rank's wrapper refuses the directory, naming it and the problem" \
  grep -qF "the elastic state directory is not this job's own: $problem; not starting $JOB" \
  <<<"$log"
check "no restart loop: no generation 2" lacks "elastic: generation 2" "$work/err"
check "no rank of generation 1 ran the program to its end" \
  lacks "ELASTIC_STORE_JOB gen=1" "$work/out"
check "the planted payload never ran (no $marker)" test ! -e "$marker"
if [[ $MODE == dir ]]; then
  check "the planted directory is left as the second user made it" \
    test "$(stat -c %U "$state_dir/snapshot")" = "$other"
else
  victim_after=$(cd "$victim" && stat -c "%A %U %s %.9Y %.9Z %h" . && ls -lA --time-style=+%s && sha256sum keep)
  check "the link's target is untouched" test "$victim_after" = "$victim_before"
  [[ $victim_after == "$victim_before" ]] ||
    printf -- '---- the target before\n%s\n---- after\n%s\n' "$victim_before" "$victim_after"
fi
check_exit "elastic_planted_dir_test $MODE" "$(cat "$work/out")" "$log"
