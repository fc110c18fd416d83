#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [slurm] tier: a Slurm cluster started in a temp dir (its own munged, slurmctld and slurmd on
# free ports; proctrack/linuxproc, task/none, no cgroups) runs hvd jobs. Two shapes:
#   one node (default): this machine, 8 CPUs configured so that jobs oversubscribe it;
#   --two-hosts: two fake hosts of test/hosts/testhosts.sh (network namespaces with their own
#     hostname and sshd), each with its own slurmd, 2 CPUs each; slurmctld on the master.
# Checked:
#   - `srun --mpi=pmix` (no hvdrun, no mpirun): rank, size, local and cross rank/size against
#     Slurm's own SLURM_PROCID/SLURM_LOCALID and the node layout, an allreduce, exit codes;
#   - `salloc ... hvdrun PROBE` with no -np/-H, and `sbatch` + hvdrun (one node);
#   - hvdrun's check of -np/-H against the allocation (error, exit 2; one node);
#   - autoencoder_shared (when built with libtorch) through srun and through salloc + hvdrun:
#     2 epochs on 2 ranks, identical losses;
#   - an elastic job (two hosts, when built with libtorch): `salloc -N 2 -n 4 hvdrun --min-np 2`
#     of test/torch/elastic_train.cc, 2 ranks on each host, a rank on the first host SIGKILLed
#     mid-epoch: that host is blacklisted, generation 1 runs 2 ranks on the other host of the
#     allocation from the last commit (its own /dev/shm snapshot), and the final parameters equal
#     the failure-free replay of the committed steps (test/elastic/replay.py).
# Every daemon and job (and the fake hosts) is torn down on exit. Where the daemons cannot
# start it exits 77 naming why.
# Usage (as root): slurm_test.sh [--two-hosts] HVDRUN PROBE [AUTOENCODER_SHARED ELASTIC_TRAIN PYTHON]
set -euo pipefail

TWO_HOSTS=0
if [[ ${1:-} == --two-hosts ]]; then
  TWO_HOSTS=1
  shift
fi
HVDRUN=${1:?usage: slurm_test.sh [--two-hosts] HVDRUN PROBE [AUTOENCODER_SHARED]}
PROBE=${2:?usage: slurm_test.sh [--two-hosts] HVDRUN PROBE [AUTOENCODER_SHARED]}
AUTOENC=${3:-}
ELASTIC=${4:-}
PYTHON=${5:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

skip() {
  echo "SKIP [slurm]: $*" >&2
  exit 77
}
fail() {
  echo "FAIL [slurm]: $*" >&2
  exit 1
}

[[ $(id -u) -eq 0 ]] || skip "needs root to start munged, slurmctld and slurmd"
for c in munged munge slurmctld slurmd srun salloc sbatch sinfo scancel; do
  command -v "$c" >/dev/null ||
    skip "'$c' is not installed (scripts/install-deps.sh installs Debian's slurm-wlm and munge)"
done
for f in "$HVDRUN" "$PROBE" ${AUTOENC:+"$AUTOENC"} ${ELASTIC:+"$ELASTIC"}; do
  [[ -x "$f" ]] || fail "$f is not built (cmake --build <build> first)"
done
RIG="$(cd "$(dirname "$0")/../hosts" && pwd)/testhosts.sh"
# Each fake host gets its own /tmp (Slurm's PMIx plugin keeps per-step files in /tmp named by
# job and step only: two nodes sharing one /tmp collide), so the test's files live in /var/tmp.
export HVD_TESTHOSTS_PREFIX=hvdsl HVD_TESTHOSTS_SUBNET=10.201.9 HVD_TESTHOSTS_PRIVATE_TMP=1
if [[ $TWO_HOSTS == 1 ]]; then
  why=$("$RIG" check) || skip "${why#testhosts: SKIP: }"
fi

WORK=$(mktemp -d /var/tmp/hvd-slurm.XXXXXX)
chmod 755 "$WORK"
if [[ $TWO_HOSTS == 1 ]]; then
  # A build under /tmp (a CI clone) is hidden by the fake hosts' private /tmp: run copies of the
  # programs from $WORK, which every host sees, with copies of hvd's shared libraries (and the
  # GPU module beside them, when built) found through LD_LIBRARY_PATH, which srun passes on.
  mkdir -p "$WORK/bin"
  cp "$HVDRUN" "$PROBE" ${AUTOENC:+"$AUTOENC"} ${ELASTIC:+"$ELASTIC"} "$WORK/bin/"
  for lib in $(ldd "$PROBE" ${AUTOENC:+"$AUTOENC"} ${ELASTIC:+"$ELASTIC"} | awk '$1 ~ /^libhvd_/ && $3 ~ /^\// {print $3}' |
               sort -u); do
    cp "$lib" "$WORK/bin/"
    if [[ -e $(dirname "$lib")/libhvd_nccl.so ]]; then
      cp "$(dirname "$lib")/libhvd_nccl.so" "$WORK/bin/"
    fi
  done
  export LD_LIBRARY_PATH="$WORK/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  HVDRUN="$WORK/bin/$(basename "$HVDRUN")" PROBE="$WORK/bin/$(basename "$PROBE")"
  [[ -n "$AUTOENC" ]] && AUTOENC="$WORK/bin/$(basename "$AUTOENC")"
  [[ -n "$ELASTIC" ]] && ELASTIC="$WORK/bin/$(basename "$ELASTIC")"
  cd "$WORK"
fi
PIDS=()
# Processes started by our slurmd (slurmstepd, the job's ranks) carry SLURM_CONF pointing into
# $WORK in their environment: that is how teardown finds them, and nothing else.
ours() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "SLURM_CONF=$WORK/slurm.conf" &&
      echo "${p#/proc/}"
  done
  return 0
}
teardown() {
  local rc=$?
  set +e
  scancel --quiet --user=root >/dev/null 2>&1
  unset SLURM_CONF  # so that ours() finds only what our daemons started, not its own tr/grep
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null; done
  sleep 0.5
  for p in $(ours); do kill -9 "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  [[ $TWO_HOSTS == 1 ]] && "$RIG" down >/dev/null 2>&1
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    for f in "$WORK"/log/*; do
      echo "---- $(basename "$f") (last 15 lines)" >&2
      tail -15 "$f" >&2
    done
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# Two free TCP ports (slurmctld, slurmd): any system Slurm keeps its own.
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  skip "no free TCP port found for the Slurm daemons"
}
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
[[ $CTLD_PORT != "$SLURMD_PORT" ]] || SLURMD_PORT=$((CTLD_PORT + 1))

MASTER=$(hostname -s)
if [[ $TWO_HOSTS == 1 ]]; then
  t=$SECONDS
  "$RIG" up 2 >"$WORK/rig.log" 2>&1 || skip "testhosts.sh up 2 failed: $(tail -2 "$WORK/rig.log")"
  echo "slurm: fake hosts ${HVD_TESTHOSTS_PREFIX}1, ${HVD_TESTHOSTS_PREFIX}2 up in $((SECONDS - t)) s"
  NODES=("${HVD_TESTHOSTS_PREFIX}1" "${HVD_TESTHOSTS_PREFIX}2")
  CTLD_ADDR=$HVD_TESTHOSTS_SUBNET.1
  NODE_LINES="NodeName=${NODES[0]} NodeAddr=$HVD_TESTHOSTS_SUBNET.11 CPUs=2 State=UNKNOWN
NodeName=${NODES[1]} NodeAddr=$HVD_TESTHOSTS_SUBNET.12 CPUs=2 State=UNKNOWN"
else
  NODES=("$MASTER")
  CTLD_ADDR=127.0.0.1
  NODE_LINES="NodeName=$MASTER NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN"
fi
mkdir -p "$WORK"/{state,spool,log,munge}
chmod 755 "$WORK/munge"
head -c 1024 /dev/urandom >"$WORK/munge/munge.key"
chmod 400 "$WORK/munge/munge.key"
cat >"$WORK/slurm.conf" <<EOF
ClusterName=hvdtest
SlurmctldHost=$MASTER($CTLD_ADDR)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$WORK/munge/sock
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool/%n
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.%n.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
KillWait=5
SlurmdParameters=config_overrides
$NODE_LINES
PartitionName=hvd Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
# Slurm 22.05's slurmd loads a cgroup plugin whatever the proctrack/task plugins are. Under
# cgroup v2 it would ask systemd (over D-Bus) for a scope; the test's daemons are not systemd
# services, so it makes its cgroup directories itself. Slurm 24 (Debian 13) can go without:
# CgroupPlugin=disabled, which also lets it run where /sys/fs/cgroup is not mounted (a chroot).
slurm_major=$(slurmd -V | awk '{split($2, v, "."); print v[1] + 0}')
if [[ $slurm_major -ge 24 ]]; then
  echo "CgroupPlugin=disabled" >"$WORK/cgroup.conf"
else
  printf 'CgroupPlugin=autodetect\nIgnoreSystemd=yes\n' >"$WORK/cgroup.conf"
fi
export SLURM_CONF=$WORK/slurm.conf

started=$SECONDS
munged -F -f --key-file="$WORK/munge/munge.key" --socket="$WORK/munge/sock" \
  --pid-file="$WORK/munge/munged.pid" --seed-file="$WORK/munge/seed" \
  --log-file="$WORK/log/munged.log" >"$WORK/log/munged.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [[ -S $WORK/munge/sock ]] && break; sleep 0.1; done
munge -S "$WORK/munge/sock" -n </dev/null >/dev/null 2>&1 ||
  skip "munged did not start: $(tail -3 "$WORK/log/munged.out" | tr '\n' ' ')"

slurmctld -D -i -L "$WORK/log/slurmctld.log" >"$WORK/log/slurmctld.out" 2>&1 &
PIDS+=($!)
for n in "${NODES[@]}"; do
  mkdir -p "$WORK/spool/$n"
  if [[ $TWO_HOSTS == 1 ]]; then
    # A fake host's /sys is its own sysfs, with nothing on /sys/fs/cgroup; slurmd's cgroup
    # plugin wants the file systems there even with proctrack/linuxproc and task/none: this
    # machine's cgroup mounts are repeated in that host's own mount namespace.
    awk '$2 ~ "^/sys/fs/cgroup" {print $3, $2, $4}' /proc/self/mounts >"$WORK/cgroup-mounts"
    # shellcheck disable=SC2016 # expanded by the inner sh
    "$RIG" exec "$n" sh -c 'while read -r type dir opts; do
        mountpoint -q "$dir" || { mkdir -p "$dir" && mount -t "$type" -o "$opts" "$type" "$dir"; }
      done <"$0"; exec slurmd "$@"' "$WORK/cgroup-mounts" -D -N "$n" \
      -L "$WORK/log/slurmd.$n.log" >"$WORK/log/slurmd.$n.out" 2>&1 &
  else
    slurmd -D -N "$n" -L "$WORK/log/slurmd.$n.log" >"$WORK/log/slurmd.$n.out" 2>&1 &
  fi
  PIDS+=($!)
done
state=""
for _ in $(seq 100); do
  state=$(sinfo -h -o %T 2>/dev/null | sort -u | tr '\n' ' ' || true)
  [[ $state == "idle " ]] && break
  sleep 0.2
done
if [[ $state != "idle " ]]; then
  why=$(cat "$WORK"/log/slurm*.out "$WORK"/log/slurm*.log 2>/dev/null | grep -iE 'error|fatal' |
    tail -3 | tr '\n' ' ')
  skip "the Slurm cluster did not come up (node states '${state:-none}'): ${why:-no error logged}"
fi
echo "slurm: cluster of ${NODES[*]} up in $((SECONDS - started)) s (ports $CTLD_PORT/$SLURMD_PORT)"

# check_probe OUTPUT N PER_NODE LAUNCHER: N probe lines, ranks 0..N-1 placed PER_NODE to a node
# in order (Slurm's block distribution, hvdrun's slot-major order); hvd's view equal to that.
check_probe() {
  local out=$1 n=$2 per=$3 how=$4 lines r
  lines=$(grep -c '^\(\[[0-9]*\]<stdout>: \)\?SLURM_PROBE ' <<<"$out" || true)
  [[ $lines -eq $n ]] || fail "$how: $lines probe lines, want $n. Output: $out"
  for ((r = 0; r < n; r++)); do
    local line
    line=$(grep "SLURM_PROBE rank=$r " <<<"$out") || fail "$how: no line from rank $r. Output: $out"
    local want="rank=$r size=$n local_rank=$((r % per)) local_size=$per"
    want+=" cross_rank=$((r / per)) cross_size=$((n / per))"
    [[ $line == *"$want "* ]] || fail "$how: rank $r says '${line#*SLURM_PROBE }', want '$want'"
    [[ $line == *"allreduce=ok"* ]] || fail "$how: rank $r allreduce wrong: $line"
    if [[ $TWO_HOSTS == 1 ]]; then
      [[ $line == *" host=${NODES[r / per]} "* ]] || fail "$how: rank $r not on ${NODES[r / per]}: $line"
    fi
    if [[ $how == srun* ]]; then
      [[ $line == *"slurm_procid=$r slurm_localid=$((r % per)) "* ]] ||
        fail "$how: rank $r disagrees with Slurm's SLURM_PROCID/SLURM_LOCALID: $line"
    fi
  done
  echo "ok: $how: $n ranks, rank/size/local/cross as launched, allreduce correct"
}

# run WANT_RC LABEL CMD...: runs CMD with a time limit, output in $OUT, exit code checked.
run() {
  local want=$1 label=$2 rc=0
  shift 2
  OUT=$(timeout 90 "$@" 2>&1) || rc=$?
  [[ $rc -eq $want ]] || fail "$label: exit code $rc, want $want. Output: $OUT"
}

# The job shapes: one node: N ranks there; two hosts: -N 2 with N/2 ranks on each.
if [[ $TWO_HOSTS == 1 ]]; then
  SHAPE=(-N 2)
  PER_NODE_DIV=2
else
  SHAPE=()
  PER_NODE_DIV=1
fi
S="${SHAPE[*]}"
S=${S:+$S }  # for messages

for n in 2 4; do
  run 0 "srun --mpi=pmix ${S}-n $n" srun --mpi=pmix "${SHAPE[@]}" -n "$n" "$PROBE"
  check_probe "$OUT" "$n" $((n / PER_NODE_DIV)) "srun --mpi=pmix ${S}-n $n"
done
run 3 "srun, rank 1 exits 3" srun --mpi=pmix "${SHAPE[@]}" -n 2 "$PROBE" fail-rank 1
grep -q "task 1: Exited with exit code 3" <<<"$OUT" ||
  fail "srun did not report rank 1's exit code 3: $OUT"
echo "ok: srun: rank 1's exit code 3 is reported and is srun's"

run 0 "salloc ${S}-n 4 hvdrun" salloc "${SHAPE[@]}" -n 4 "$HVDRUN" "$PROBE"
check_probe "$OUT" 4 $((4 / PER_NODE_DIV)) "salloc ${S}-n 4 hvdrun (no -np/-H)"
run 3 "salloc -n 2 hvdrun, rank 0 exits 3" salloc "${SHAPE[@]}" -n 2 "$HVDRUN" "$PROBE" fail-rank 0
echo "ok: salloc + hvdrun: rank 0's exit code 3 is hvdrun's"

if [[ $TWO_HOSTS == 0 ]]; then
  run 2 "salloc -n 2 hvdrun -np 3" salloc -n 2 "$HVDRUN" -np 3 "$PROBE"
  grep -q "hvdrun: error: -np 3 asks for more ranks than the Slurm allocation (job [0-9]*, 2 tasks on $MASTER:2) has" <<<"$OUT" ||
    fail "hvdrun -np 3 in a 2-task allocation: wrong message: $OUT"
  run 2 "salloc -n 2 hvdrun -H $MASTER:3" salloc -n 2 "$HVDRUN" -H "$MASTER:3" "$PROBE"
  grep -q "host '$MASTER' asks for 3 slots but the Slurm allocation" <<<"$OUT" ||
    fail "hvdrun -H $MASTER:3 in a 2-task allocation: wrong message: $OUT"
  echo "ok: hvdrun -np 3 / -H $MASTER:3 in a 2-task allocation: exit 2, naming what was asked and had"
  run 0 "salloc -n 2 hvdrun --min-np 1 --dry-run" salloc -n 2 "$HVDRUN" --min-np 1 --dry-run "$PROBE"
  grep -q "hvdrun: elastic: hosts $MASTER:2, --min-np 1, --max-np 2 " <<<"$OUT" ||
    fail "elastic hvdrun in a 2-task allocation: the allocation is not the host source: $OUT"
  echo "ok: elastic hvdrun inside an allocation takes its nodes and tasks as the host source"

  cat >"$WORK/job.sh" <<EOF
#!/bin/bash
exec "$HVDRUN" "$PROBE"
EOF
  run 0 "sbatch -n 3 hvdrun" sbatch --wait -n 3 -o "$WORK/job.out" "$WORK/job.sh"
  check_probe "$(cat "$WORK/job.out")" 3 3 "sbatch -n 3 + hvdrun"
fi

if [[ -n $AUTOENC ]]; then
  run 0 "autoencoder_shared via srun" srun --mpi=pmix "${SHAPE[@]}" -n 2 "$AUTOENC" 2
  srun_losses=$(grep -o 'epoch [0-9].*' <<<"$OUT" || true)
  run 0 "autoencoder_shared via salloc + hvdrun" salloc "${SHAPE[@]}" -n 2 "$HVDRUN" "$AUTOENC" 2
  hvdrun_losses=$(grep -o 'epoch [0-9].*' <<<"$OUT" || true)
  [[ $(grep -c '(2 ranks)' <<<"$srun_losses") -eq 2 ]] ||
    fail "autoencoder_shared via srun: want 2 epochs on 2 ranks, got: $srun_losses"
  [[ $srun_losses == "$hvdrun_losses" ]] ||
    fail "autoencoder_shared: srun and hvdrun runs differ: '$srun_losses' vs '$hvdrun_losses'"
  echo "ok: autoencoder_shared trains 2 epochs on 2 ranks, identical under srun and hvdrun:"
  echo "$srun_losses"
else
  echo "note: autoencoder_shared not given (built without libtorch): its runs are not part of this pass"
fi
if [[ $TWO_HOSTS == 1 && -n $ELASTIC ]]; then
  # Generation 0: 4 ranks, 2 per host (4 steps of 4 samples a rank per epoch);
  # commits at steps 3, 4 (epoch end) and 6; rank 1 (first host) SIGKILLs itself after step 7.
  # Generation 1: the other host's 2 ranks resume from commit 3 (step 6, half of epoch 1 done)
  # and share the epoch's 32 samples left: steps 7-10.
  t=$SECONDS
  run 0 "elastic: salloc -N 2 -n 4 hvdrun --min-np 2, rank 1 killed" salloc -N 2 -n 4 \
    "$HVDRUN" --min-np 2 "$ELASTIC" --out "$WORK/elastic" --log-batches 1 --fail kill \
    --fail-step 7 --fail-rank 1
  log=$(cat "$WORK/elastic.log" 2>/dev/null || true)
  for want in "generation 0: 4 rank(s) on ${NODES[0]}:2,${NODES[1]}:2" \
    "host ${NODES[0]} blacklisted (its rank 1 failed)" \
    "generation 1: 2 rank(s) on ${NODES[1]}:2"; do
    grep -qF "$want" <<<"$OUT" || fail "elastic job under Slurm: no '$want' from hvdrun: $OUT $log"
  done
  for want in "gen0 rank0 started on ${NODES[0]}" "gen0 rank1 started on ${NODES[0]}" \
    "gen0 rank2 started on ${NODES[1]}" "gen0 rank3 started on ${NODES[1]}" \
    "gen0 rank1 failing (kill) at step 7" "gen1 rank0 started on ${NODES[1]}" \
    "gen1 rank1 started on ${NODES[1]}" "gen1 rank0 reset at commit 3 step 6" \
    "gen1 rank1 reset at commit 3 step 6"; do
    grep -qF " $want" <<<"$log" || fail "elastic job under Slurm: no '$want' in its log: $OUT $log"
  done
  ! grep -q "gen2 " <<<"$log" || fail "elastic job under Slurm: a third generation ran: $log"
  "$PYTHON" "$(dirname "$RIG")/../elastic/replay.py" "$WORK/elastic" 4 --model-seed 100 ||
    fail "elastic job under Slurm: the final state is not the replay's. Log: $log"
  for n in "${NODES[@]}"; do
    ! "$RIG" exec "$n" ls /dev/shm | grep -q hvd-elastic- ||
      fail "elastic job under Slurm: its state directory is left in $n's /dev/shm"
  done
  grep '^hvdrun: ' <<<"$OUT" | sed 's/^/    /'
  echo "ok: elastic hvdrun in an allocation of ${NODES[*]}: a rank on ${NODES[0]} killed, the"
  echo "    job resumed on ${NODES[1]} from the last commit, final parameters = replay ($((SECONDS - t)) s)"
elif [[ $TWO_HOSTS == 1 ]]; then
  echo "note: elastic_train not given (built without libtorch): the elastic job is not part of this pass"
fi
echo "slurm: all checks passed in $((SECONDS - started)) s"
