# SPDX-License-Identifier: Apache-2.0
"""The body of bench/elastic_bench.sh: elastic resume after a failure, commit cost, robustness.

Workload: test/elastic/train_elastic.py --model cnn (a small CNN on synthetic 1x28x28 images,
32 per rank per batch, 1024 samples an epoch, 2 epochs, a commit every --commit-every steps and
at each epoch's end) under `hvdrun -v -np NP --min-np NP`, one fresh job per kill.

Resume (the default): KILLS jobs, each with rank 1 SIGKILLed after backward() queued its
allreduces, at a step drawn at random. hvdrun's stderr lines are timestamped as they arrive,
the ranks log their own times. Per kill and as medians:
  detection  the kill -> hvdrun reports the failed rank
  teardown   -> hvdrun starts the next generation (every rank and mpirun gone)
  launch     -> the last rank's Python runs its first line (mpirun or ssh, wrapper, interpreter)
  init       -> the last rank imported torch and hvd and finished hvd.init() (import: the
                import part of it)
  restore    -> the snapshot agreed on, broadcast and restored (reset callbacks ran); 0 when
                the kill came before the first commit (generation 1 starts afresh)
  step       -> the first training step after the restore completed
  total      the kill -> that first step
  lost       steps completed before the kill that were redone (since the commit resumed from)
--hosts: on fake hosts (test/hosts/testhosts.sh: network namespaces with their own sshd and a
private /dev/shm), NP + 1 of them with one slot each: the failed rank's host is blacklisted and
generation 1 runs on the other NP.
--random: each kill has a random rank (0 included), step and point (kill: at the start of the
step; kill-allreduce: after backward(); kill-commit: half-way through writing the commit's
snapshot, at a commit step, on a rank that writes one: local rank 0) and a --deadline (default
60 s): a job not done by then is a hang (killed; its log, hvdrun's output and its processes at
the deadline kept under --keep); every job must end with exit 0, all its steps and each epoch
covering every sample exactly once.
--commit-cost: no kill; rank 0's step times (without the commit) and commit times at one
commit per step, per 10 steps and never (only at the epoch's end), one epoch of 4096 samples,
5 jobs each (interleaved), plain steps (train_elastic.py --no-coverage: no allgather of the
sample indices, no index list in the state). A commit's share of a step = its median / K / the
median step of the same job (so both see the same load), in elapsed and in CPU time of rank 0's
main thread (load-proof: waiting for the CPU is not counted); also the wall time per step
(rank 0's loop, commits included) against the jobs without commits.
--cpp (with --commit-cost): the same with the libtorch program test/torch/elastic_train.cc
--model cnn (hvd::elastic::TorchState, the same CNN, sampler and optimizer) instead of the
Python script; --program PATH (repeatable) names its binaries (default: BUILD's
hvd_elastic_train): several are run interleaved, job by job, e.g. two builds before and after
a change.

usage: elastic_bench.py HVDRUN PYTHON [--np N] [--kills K] [--hosts] [--random] [--deadline S]
                        [--commit-every K] [--keep DIR] [--seed S] [--commit-cost]
                        [--cpp [--program PATH]...]"""
import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "test", "elastic", "train_elastic.py")
RIG = os.path.join(HERE, "..", "..", "test", "hosts", "testhosts.sh")
PREFIX = "hvdbe"  # the fake hosts of this bench (the tests use other prefixes and subnets)

a = argparse.ArgumentParser()
a.add_argument("hvdrun")
a.add_argument("python")
a.add_argument("--np", type=int, default=2)
a.add_argument("--kills", type=int, default=5)
a.add_argument("--hosts", action="store_true", help="on NP + 1 fake hosts (testhosts.sh)")
a.add_argument("--random", action="store_true", help="random rank, step and kill point")
a.add_argument("--deadline", type=float, default=60.0, help="seconds per job (--random)")
a.add_argument("--commit-every", type=int, default=5)
a.add_argument("--samples", type=int, default=1024)
a.add_argument("--keep", default="/var/tmp/hvd-elastic-bench", help="logs of failed jobs")
a.add_argument("--seed", type=int, default=1)
a.add_argument("--commit-cost", action="store_true")
a.add_argument("--cpp", action="store_true", help="--commit-cost of the libtorch program")
a.add_argument("--program", action="append", help="--cpp: its binary (repeatable: interleaved)")
args = a.parse_args()
if args.cpp and not args.commit_cost:
    a.error("--cpp measures --commit-cost only")
if not args.program:
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.hvdrun)))
    args.program = [os.path.join(build, "test", "torch", "hvd_elastic_train")]
NP, K = args.np, args.commit_every
EPOCHS = 2
PER_EPOCH = args.samples // (32 * NP)
STEPS = EPOCHS * PER_EPOCH
PHASES = ["detection", "teardown", "launch", "init", "restore", "step", "total", "(import)",
          "lost"]
HOSTS = [f"{PREFIX}{i}" for i in range(1, NP + 2)]


def train_cmd(out, extra=(), every=K, samples=args.samples, epochs=EPOCHS, program=None):
    """The job's command: train_elastic.py, or the libtorch program when given (its flags take
    values: --time-steps 1; it keeps no coverage bookkeeping)."""
    where = ["-H", ",".join(h + ":1" for h in HOSTS)] if args.hosts else []
    run = [program] if program else [args.python, SCRIPT]
    return [args.hvdrun, "--verbose", "-np", str(NP), "--min-np", str(NP), *where, *run, "--out",
            out, "--model", "cnn", "--samples", str(samples), "--epochs", str(epochs),
            "--commit-every", str(every), *extra]


def job_processes(marker):
    """`ps` lines (pid, state, wchan, command) of the processes whose command holds marker."""
    ps = subprocess.run(["ps", "-eo", "pid,stat,wchan:24,etimes,args"], capture_output=True,
                        text=True).stdout.splitlines()
    return [line for line in ps if marker in line and "ps -eo" not in line]


def run_job(tmp, i, extra):
    """Runs one job; returns (returncode or None on a hang, [(time, stderr line)], out path)."""
    out = os.path.join(tmp, f"run{i}")
    p = subprocess.Popen(train_cmd(out, extra=extra), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines = []

    def read():
        for line in p.stderr:
            lines.append((time.time(), line))

    t = threading.Thread(target=read)
    t.start()
    try:
        rc = p.wait(timeout=args.deadline if args.random else 300)
    except subprocess.TimeoutExpired:
        rc = None
        with open(out + ".ps", "w") as f:
            f.write("\n".join(job_processes(out)) + "\n")
        os.killpg(p.pid, signal.SIGKILL)  # hvdrun and mpirun; the wrappers then end the ranks
        p.wait()
    t.join()
    with open(out + ".stderr", "w") as f:
        f.write("".join(f"{ts:.6f} {line}" for ts, line in lines))
    return rc, lines, out


def read_events(out):
    """[(time, generation, rank, text)] of the job's log."""
    try:
        text = open(out + ".log").read()
    except FileNotFoundError:
        return []
    ev = []
    for line in text.splitlines():
        t, g, r, rest = line.split(" ", 3)
        ev.append((float(t), int(g[3:]), int(r[4:]), rest))
    return sorted(ev)


def phases(ev, lines):
    """The resume's phases (PHASES) from the job's events and hvdrun's timestamped stderr."""
    fail = [(t, x) for t, g, r, x in ev if x.startswith("failing")]
    kill = fail[0][0]
    killed_at = int(fail[0][1].rsplit(" ", 1)[1])  # steps completed when the rank died
    detect = min(t for t, line in lines if "failed (" in line or "lost contact" in line)
    launch = min(t for t, line in lines if line.startswith("hvdrun: elastic: generation 1:"))
    timing = [x.split() for _, g, _, x in ev if g == 1 and x.startswith("timing")]
    started = max(float(x[2]) for x in timing)
    imported = max(float(x[4]) for x in timing)
    initialized = max(float(x[6]) for x in timing)
    resets = [(t, x) for t, g, _, x in ev if g == 1 and x.startswith("reset at")]
    # Killed before the first commit: generation 1 starts afresh (no restore, no reset).
    reset = max(t for t, _ in resets) if resets else initialized
    resumed_at = int(resets[0][1].rsplit(" ", 1)[1]) if resets else 0
    first = max(t for t, g, _, x in ev if g == 1 and x.startswith("first step done"))
    marks = [kill, detect, launch, started, initialized, reset, first]
    return [b - a for a, b in zip(marks, marks[1:])] + [first - kill, imported - started,
                                                        killed_at - resumed_at]


def verdict(rc, out, ev):
    """'' when the job did what it should, else why not."""
    if rc is None:
        return f"HANG: not done after {args.deadline:.0f} s"
    if rc != 0:
        return f"exit {rc}"
    result = open(out).read() if os.path.exists(out) else ""
    if not result.startswith(f"steps {STEPS}\n"):
        return f"not {STEPS} steps: {result[:40]!r}"
    if f"epochs covered exactly once: {EPOCHS} of {EPOCHS}" not in result:
        return "an epoch did not cover every sample exactly once"
    if not any(x.startswith("failing") for *_, x in ev):
        return "no rank was killed"
    if sorted({g for _, g, _, _ in ev}) != [0, 1]:
        return f"generations {sorted({g for _, g, _, _ in ev})}, not [0, 1]"
    return ""


def describe_hang(out, ev, lines):
    """What each rank was doing last, and which processes were alive at the deadline."""
    last = {}
    for t, g, r, x in ev:
        last[(g, r)] = (t, x)
    said = [f"  gen{g} rank{r}: last event '{x}' at +{t - ev[0][0]:.1f} s"
            for (g, r), (t, x) in sorted(last.items())]
    said.append("  hvdrun's last lines: " + " | ".join(line.strip() for _, line in lines[-4:]))
    said.append("  alive at the deadline:\n    " +
                open(out + ".ps").read().strip().replace("\n", "\n    "))
    return "\n".join(said)


def resume_bench(tmp):
    rng = random.Random(args.seed)
    rows, bad = [], []
    for i in range(args.kills):
        if args.random:
            point = rng.choice(["kill", "kill-allreduce", "kill-commit"])
            rank = rng.randrange(NP)
            if point == "kill-commit":  # a commit step (every K steps) before the last one
                step = K * rng.randrange(1, (STEPS - 1) // K + 1)
                rank = rank if args.hosts else 0  # a snapshot writer (local rank 0)
            else:
                step = rng.randrange(0, STEPS - 1)
        else:
            point, rank, step = "kill-allreduce", 1, rng.randrange(K, STEPS - 1)
        rc, lines, out = run_job(tmp, i, ["--fail", point, "--fail-rank", str(rank),
                                          "--fail-step", str(step)])
        ev = read_events(out)
        why = verdict(rc, out, ev)
        what = f"kill {i + 1}/{args.kills} ({point}, rank {rank}, step {step})"
        if why:
            os.makedirs(args.keep, exist_ok=True)
            for suffix in ("", ".log", ".stderr", ".ps"):
                if os.path.exists(out + suffix):
                    shutil.copy(out + suffix, os.path.join(args.keep, f"kill{i + 1}{suffix}"))
            detail = describe_hang(out, ev, lines) if rc is None else "".join(
                line for _, line in lines[-15:])
            bad.append((what, why))
            print(f"{what}: FAILED: {why} (kept in {args.keep}/kill{i + 1}.*)\n{detail}",
                  flush=True)
            continue
        row = phases(ev, lines)
        rows.append(row)
        print(f"{what}: " + "  ".join(f"{n} {v:.2f}" for n, v in zip(PHASES, row[:-1])) +
              f"  lost {row[-1]}", flush=True)
    where = f"{NP + 1} fake hosts" if args.hosts else "this machine"
    if rows:
        med = [statistics.median(c) for c in zip(*rows)]
        print(f"elastic resume, np {NP} on {where}, CNN, commit every {K}: median of {len(rows)} "
              "kills (s): " + "  ".join(f"{n} {v:.2f}" for n, v in zip(PHASES, med[:-1])) +
              f"  lost {med[-1]:g} steps (max {max(r[-1] for r in rows)})")
    if args.random:
        hangs = sum(why.startswith("HANG") for _, why in bad)
        print(f"hangs: {hangs}/{args.kills}; other failures: {len(bad) - hangs}/{args.kills}" +
              "".join(f"\n  {what}: {why}" for what, why in bad))
    return 1 if bad else 0


def commit_cost(tmp):
    samples, reps, never = 4096, 5, 10**9  # 64 steps at np 2
    programs = args.program if args.cpp else [None]
    runs = {}
    for rep in range(reps):  # the runs of each K (and program) interleaved: alike under a load
        for n, program in enumerate(programs):
            for every in (never, 1, 10):
                out = os.path.join(tmp, f"cost{n}-{every}-{rep}")
                flags = ["--time-steps", "1"] if program else ["--time-steps", "--no-coverage"]
                p = subprocess.run(train_cmd(out, flags, every, samples, 1, program),
                                   capture_output=True, text=True, timeout=300)
                if p.returncode != 0:
                    sys.exit(f"commit-cost job failed ({p.returncode}):\n{p.stderr[-3000:]}")
                ev = [(t, x) for t, g, r, x in read_events(out) if r == 0]
                # "step S took MS ms cpu MS ms", "commit C at step S took MS ms cpu MS ms"
                steps = [(t, x.split()) for t, x in ev if x.startswith("step ")][3:]
                commits = [x.split() for _, x in ev if x.startswith("commit ")]
                step = statistics.median(float(w[3]) for _, w in steps)
                step_cpu = statistics.median(float(w[6]) for _, w in steps)
                commit = statistics.median(float(w[6]) for w in commits) if commits else 0.0
                commit_cpu = statistics.median(float(w[9]) for w in commits) if commits else 0.0
                wall = 1e3 * (steps[-1][0] - steps[0][0]) / (len(steps) - 1)
                runs.setdefault((program, every), []).append(
                    (step, commit, wall, commit / every / step, step_cpu, commit_cpu,
                     commit_cpu / every / step_cpu))
                print(f"job {rep + 1}/{reps}, " + (f"{program}, " if program else "") +
                      ("no commits" if every == never else f"a commit per {every} step(s)") +
                      f": step median {step:.2f} ms (cpu {step_cpu:.2f}), commit median "
                      f"{commit:.2f} ms (cpu {commit_cpu:.2f}), wall time per step {wall:.2f} ms",
                      flush=True)

    for program in programs:
        def med(every, i):
            return statistics.median(r[i] for r in runs[(program, every)])

        what = f"libtorch program {program}" if program else "Python, train_elastic.py"
        print(f"commit cost, np {NP}, CNN, {what}, medians of {reps} jobs each: step without "
              f"commits {med(never, 0):.2f} ms, cpu {med(never, 4):.2f} ms (rank 0's main "
              f"thread, the commit excluded; wall time per step {med(never, 2):.2f} ms)")
        for every in (1, 10):
            print(f"  one commit per {every} step(s): commit {med(every, 1):.2f} ms = "
                  f"{100 * med(every, 3):.1f}% of a step (commit / {every} / the same job's step "
                  f"median); cpu: commit {med(every, 5):.2f} ms = {100 * med(every, 6):.1f}% of "
                  f"a step's; step {med(every, 0):.2f} ms (cpu {med(every, 4):.2f}); wall time "
                  f"per step {med(every, 2):.2f} ms = "
                  f"{100 * (med(every, 2) / med(never, 2) - 1):+.1f}% vs no commits")
    return 0


def main():
    tmp = tempfile.mkdtemp(prefix="hvd-elastic-bench-", dir="/var/tmp")
    print("load average at the start: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    try:
        if args.hosts:
            env = dict(HVD_TESTHOSTS_PREFIX=PREFIX, HVD_TESTHOSTS_SUBNET="10.201.29",
                       HVD_TESTHOSTS_PRIVATE_TMP="shm")
            os.environ.update(env)
            if subprocess.run([RIG, "up", str(NP + 1)]).returncode != 0:
                sys.exit("testhosts.sh up failed (root and network namespaces needed)")
        return commit_cost(tmp) if args.commit_cost else resume_bench(tmp)
    finally:
        if args.hosts:
            subprocess.run([RIG, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)
        print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())


sys.exit(main())
