#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [slurm] tier: a one-node Slurm cluster started in a temp dir (its own munged, slurmctld and
# slurmd on free ports; proctrack/linuxproc, task/none, no cgroups; 8 CPUs configured so that
# jobs oversubscribe small machines) runs hvd jobs
#   - directly through `srun --mpi=pmix -n N` (no hvdrun, no mpirun), checking rank, size,
#     local and cross rank/size against Slurm's own SLURM_PROCID/SLURM_LOCALID, an allreduce,
#     and exit-code propagation;
#   - through `salloc -n 2 hvdrun ...` with no -np/-H, and `sbatch` + hvdrun;
#   - hvdrun's check of -np/-H against the allocation (error, exit 2);
#   - autoencoder_shared (when built with libtorch) through srun and through salloc + hvdrun:
#     both train 2 epochs on 2 ranks with identical losses.
# Every daemon and job is torn down on exit. Where the daemons cannot start it exits 77 naming
# why. Usage (as root): slurm_test.sh HVDRUN PROBE [AUTOENCODER_SHARED]
set -euo pipefail

HVDRUN=${1:?usage: slurm_test.sh HVDRUN PROBE [AUTOENCODER_SHARED]}
PROBE=${2:?usage: slurm_test.sh HVDRUN PROBE [AUTOENCODER_SHARED]}
AUTOENC=${3:-}
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
for f in "$HVDRUN" "$PROBE" ${AUTOENC:+"$AUTOENC"}; do
  [[ -x "$f" ]] || fail "$f is not built (cmake --build <build> first)"
done

WORK=$(mktemp -d /tmp/hvd-slurm.XXXXXX)
chmod 755 "$WORK"
PIDS=()
# Processes started by our slurmd (slurmstepd, the job's ranks) carry SLURM_CONF pointing into
# $WORK in their environment: that is how teardown finds them, and nothing else.
ours() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$WORK/slurm.conf" &&
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

NODE=$(hostname -s)
mkdir -p "$WORK"/{state,spool,log,munge}
chmod 755 "$WORK/munge"
head -c 1024 /dev/urandom >"$WORK/munge/munge.key"
chmod 400 "$WORK/munge/munge.key"
cat >"$WORK/slurm.conf" <<EOF
ClusterName=hvdtest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$WORK/munge/sock
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
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
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=hvd Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
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
slurmd -D -N "$NODE" -L "$WORK/log/slurmd.log" >"$WORK/log/slurmd.out" 2>&1 &
PIDS+=($!)
state=""
for _ in $(seq 100); do
  state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.2
done
if [[ $state != idle ]]; then
  why=$(cat "$WORK"/log/slurm*.out "$WORK"/log/slurm*.log 2>/dev/null | grep -iE 'error|fatal' |
    tail -3 | tr '\n' ' ')
  skip "the one-node Slurm cluster did not come up (node state '${state:-none}'): ${why:-no error logged}"
fi
echo "slurm: one-node cluster '$NODE' up in $((SECONDS - started)) s (ports $CTLD_PORT/$SLURMD_PORT)"

# check_probe OUTPUT N LAUNCHER: N probe lines, ranks 0..N-1, hvd's view equal to the launch.
check_probe() {
  local out=$1 n=$2 how=$3 lines r
  lines=$(grep -c '^\(\[[0-9]*\]<stdout>: \)\?SLURM_PROBE ' <<<"$out" || true)
  [[ $lines -eq $n ]] || fail "$how: $lines probe lines, want $n. Output: $out"
  for ((r = 0; r < n; r++)); do
    local line
    line=$(grep "SLURM_PROBE rank=$r " <<<"$out") || fail "$how: no line from rank $r. Output: $out"
    local want="rank=$r size=$n local_rank=$r local_size=$n cross_rank=0 cross_size=1"
    [[ $line == *"$want "* ]] || fail "$how: rank $r says '${line#*SLURM_PROBE }', want '$want'"
    [[ $line == *"allreduce=ok"* ]] || fail "$how: rank $r allreduce wrong: $line"
    if [[ $how == srun* ]]; then
      [[ $line == *"slurm_procid=$r slurm_localid=$r "* ]] ||
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

run 0 "srun --mpi=pmix -n 2" srun --mpi=pmix -n 2 "$PROBE"
check_probe "$OUT" 2 "srun --mpi=pmix -n 2"
run 0 "srun --mpi=pmix -n 4" srun --mpi=pmix -n 4 "$PROBE"
check_probe "$OUT" 4 "srun --mpi=pmix -n 4"
run 3 "srun, rank 1 exits 3" srun --mpi=pmix -n 2 "$PROBE" fail-rank 1
grep -q "task 1: Exited with exit code 3" <<<"$OUT" ||
  fail "srun did not report rank 1's exit code 3: $OUT"
echo "ok: srun: rank 1's exit code 3 is reported and is srun's"

run 0 "salloc -n 2 hvdrun" salloc -n 2 "$HVDRUN" "$PROBE"
check_probe "$OUT" 2 "salloc -n 2 hvdrun (no -np/-H)"
run 3 "salloc -n 2 hvdrun, rank 0 exits 3" salloc -n 2 "$HVDRUN" "$PROBE" fail-rank 0
echo "ok: salloc + hvdrun: rank 0's exit code 3 is hvdrun's"
run 2 "salloc -n 2 hvdrun -np 3" salloc -n 2 "$HVDRUN" -np 3 "$PROBE"
grep -q "hvdrun: error: -np 3 asks for more ranks than the Slurm allocation (job [0-9]*, 2 tasks on $NODE:2) has" <<<"$OUT" ||
  fail "hvdrun -np 3 in a 2-task allocation: wrong message: $OUT"
run 2 "salloc -n 2 hvdrun -H $NODE:3" salloc -n 2 "$HVDRUN" -H "$NODE:3" "$PROBE"
grep -q "host '$NODE' asks for 3 slots but the Slurm allocation" <<<"$OUT" ||
  fail "hvdrun -H $NODE:3 in a 2-task allocation: wrong message: $OUT"
echo "ok: hvdrun -np 3 / -H $NODE:3 in a 2-task allocation: exit 2, naming what was asked and had"

cat >"$WORK/job.sh" <<EOF
#!/bin/bash
exec "$HVDRUN" "$PROBE"
EOF
run 0 "sbatch -n 3 hvdrun" sbatch --wait -n 3 -o "$WORK/job.out" "$WORK/job.sh"
check_probe "$(cat "$WORK/job.out")" 3 "sbatch -n 3 + hvdrun"

if [[ -n $AUTOENC ]]; then
  run 0 "autoencoder_shared via srun" srun --mpi=pmix -n 2 "$AUTOENC" 2
  srun_losses=$(grep -o 'epoch [0-9].*' <<<"$OUT" || true)
  run 0 "autoencoder_shared via salloc + hvdrun" salloc -n 2 "$HVDRUN" "$AUTOENC" 2
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
echo "slurm: all checks passed in $((SECONDS - started)) s"
