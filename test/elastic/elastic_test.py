#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""[elastic] hvdrun --min-np on this machine, under failures: a rank SIGKILLed mid-allreduce, an
exception raised in one rank, a rank exiting 0 early, a rank SIGSTOPped (the step watchdog;
after a long step whose collectives must not trip it), a kill during a commit (no torn
snapshot), a kill during the restore broadcast, the (fake) host holding the newest snapshot
lost, failures past --reset-limit, and hvdrun itself SIGKILLed (no rank may outlive it).
With a fourth argument `hvdrun-stopped` (its own ctest) it runs only that case: hvdrun
SIGSTOPped, its sockets open, so only the wrappers' heartbeat timeout can end its ranks.

After each failure the job must resume from the right commit and end with exactly the
parameters of a run without failure (same np: the same batches in the same order, so replaying
from any commit gives the same bits), and each epoch's committed steps must cover every sample
exactly once (train_elastic.py checks; the result file says so).

At np 4 (twice the ranks of this 2-core machine, so every generation starts slowly) only the
cases whose mechanics depend on the number of ranks run: the exception, the early exit 0 and
--reset-limit are launcher-side and run at np 2 only.

usage: elastic_test.py HVDRUN PYTHON NP [hvdrun-stopped]"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from elastic_log import check, events, failures

HVDRUN, PYTHON, NP = sys.argv[1], sys.argv[2], int(sys.argv[3])
ONLY = sys.argv[4] if len(sys.argv) > 4 else ""
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_elastic.py")


MY_DIRS = set()  # the state directories of this test's jobs (hvdrun --verbose names them)


def command(out, extra, hvdrun_args):
    return [HVDRUN, "--verbose", "-np", str(NP), "--min-np", str(NP), *hvdrun_args, PYTHON,
            SCRIPT, "--out", out, *extra]


def run(tmp, name, *extra, hvdrun_args=()):
    out = os.path.join(tmp, name)
    t = time.time()
    p = subprocess.run(command(out, extra, hvdrun_args), capture_output=True, text=True,
                       timeout=180)
    print(f"{name}: {time.time() - t:.1f} s, exit {p.returncode}", flush=True)
    MY_DIRS.update(re.findall(r"HVD_ELASTIC_STATE_DIR=(\S+)", p.stderr))
    log = open(out + ".log").read() if os.path.exists(out + ".log") else ""
    result = open(out).read() if os.path.exists(out) else None
    return p, result, log


def generations(log):
    return sorted({int(line.split(" ")[1][3:]) for line in log.splitlines() if line})


# The commit schedule of train_elastic.py: every 3 steps, and at each epoch's end.
PER_EPOCH = 64 // (4 * NP)
STEPS = 2 * PER_EPOCH
FAIL_STEP = STEPS - 3


def resume_point(last_step):
    """The reset message of a resume from the commits made up to step `last_step`."""
    commits = [s for s in range(1, last_step + 1) for c in (s % 3 == 0, s % PER_EPOCH == 0) if c]
    return f"reset at commit {len(commits)} step {commits[-1]}"


def expect_restart(name, p, got, log, ref, resume, gens=2):
    check(p.returncode == 0, f"{name}: the job succeeds", p, log)
    check(got == ref, f"{name}: the parameters equal the failure-free run's, bit for bit", p, log)
    resets = events(log, "reset at commit")
    check(resets and resume in resets[0][2], f"{name}: generation 1 resumed with '{resume}'",
          p, log)
    check(generations(log) == list(range(gens)), f"{name}: exactly {gens} generations ran",
          p, log)


def rank_processes(marker, skip=()):
    """Pids of processes (other than us and `skip`) whose command line holds `marker`."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid() or int(pid) in skip:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def start_and_train(out, hvdrun_args=(), step_s=0.5):
    """Starts a slow job; returns hvdrun's Popen once every rank has made its first step and
    the pids of the job's processes then (the wrappers' state directories noted)."""
    proc = subprocess.Popen(command(out, ["--step-sleep", str(step_s)], hvdrun_args),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        log = open(out + ".log").read() if os.path.exists(out + ".log") else ""
        if len(events(log, "first step done")) == NP:
            break
        time.sleep(0.2)
    check(proc.poll() is None, "the job is still running when hvdrun is killed")
    before = rank_processes(out)
    for pid in before:  # the ranks' environment names the state directory (not secret)
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        for entry in env:
            if entry.startswith(b"HVD_ELASTIC_STATE_DIR="):
                MY_DIRS.add(entry.split(b"=", 1)[1].decode())
    return proc, before


def hvdrun_killed(tmp):
    """SIGKILL hvdrun once every rank trains; no rank, wrapper or mpirun may stay."""
    out = os.path.join(tmp, "orphans")
    proc, before = start_and_train(out)
    killed = time.time()
    proc.kill()
    proc.wait()
    left = rank_processes(out)
    while left and time.time() - killed < 15:
        time.sleep(0.1)
        left = rank_processes(out)
    gone = time.time() - killed
    print(f"orphans: {len(before)} processes of the job when hvdrun was SIGKILLed; "
          f"{len(left)} left after {gone:.1f} s")
    check(len(before) >= 2 * NP, f"the ranks and their wrappers ran ({len(before)} processes)")
    check(not left and gone < 10, f"no process of the job outlives hvdrun by 10 s ({left})")


def hvdrun_stopped(tmp):
    """SIGSTOP hvdrun (a frozen master: its connections stay open) once every rank trains with
    --heartbeat-timeout 2: every rank and wrapper must be gone within the timeout plus the
    wrapper's TERM (the rank dies on it), and the wrappers remove the state directory."""
    out = os.path.join(tmp, "stopped")
    timeout = 2
    # 2 s steps: the job would run 30 s more; its ranks can only end by the heartbeat timeout.
    proc, before = start_and_train(out, ("--heartbeat-timeout", str(timeout)), step_s=2)
    log = open(out + ".log").read() if os.path.exists(out + ".log") else ""
    # The start-up took longer than the timeout: the pings kept the wrappers from stopping it.
    check(proc.poll() is None and generations(log) == [0],
          f"hvdrun's pings keep a job alive past --heartbeat-timeout {timeout} ({log[-500:]})")
    stopped = time.time()
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        left = rank_processes(out, skip=(proc.pid,))
        while left and time.time() - stopped < 15:
            time.sleep(0.1)
            left = rank_processes(out, skip=(proc.pid,))
        gone = time.time() - stopped
    finally:
        proc.kill()
        proc.wait()
    print(f"hvdrun stopped: {len(before)} processes of the job when hvdrun was SIGSTOPped; "
          f"{len(left)} left after {gone:.1f} s (--heartbeat-timeout {timeout})")
    check(len(before) >= 2 * NP, f"the ranks and their wrappers ran ({len(before)} processes)")
    # Not before: the last PING came at most 1 s before the SIGSTOP.
    check(gone > timeout - 1.2, f"the ranks lived until the heartbeat timeout ({gone:.1f} s)")
    check(not left and gone < timeout + 4,
          f"no rank or wrapper outlives a frozen hvdrun by --heartbeat-timeout {timeout} + 4 s "
          f"({left} after {gone:.1f} s)")
    time.sleep(0.5)
    leftovers = [d for d in MY_DIRS if os.path.exists(d)]
    check(MY_DIRS and not leftovers,
          f"the wrappers removed the frozen hvdrun's state directory ({MY_DIRS}, {leftovers})")


if ONLY == "hvdrun-stopped":
    with tempfile.TemporaryDirectory() as tmp:
        hvdrun_stopped(tmp)
    print("elastic_test hvdrun-stopped: " +
          ("FAILED: " + "; ".join(failures) if failures else "all passed"))
    sys.exit(1 if failures else 0)


with tempfile.TemporaryDirectory() as tmp:
    base, ref, _ = run(tmp, "base")
    check(base.returncode == 0 and ref is not None, "the failure-free run succeeds", base)
    check(ref is not None and ref.startswith(f"steps {STEPS}\n"), f"it makes {STEPS} steps",
          base)
    check(ref is not None and "epochs covered exactly once: 2 of 2" in ref,
          "every epoch covers every sample exactly once", base)

    p, got, log = run(tmp, "kill-allreduce", "--fail", "kill-allreduce", "--fail-step",
                      str(FAIL_STEP))
    expect_restart("SIGKILL mid-allreduce", p, got, log, ref, resume_point(FAIL_STEP))
    check("starting generation 1 from the last commit" in p.stderr,
          "hvdrun says it starts generation 1", p, log)
    kill = events(log, "failing")
    first = [e for e in events(log, "first step done") if e[1].startswith("gen1")]
    took = [float(e[2].split("took ")[1].split()[0]) for e in events(log, "took")
            if e[1].endswith("rank0")]
    if kill and first:
        print(f"resume: {first[0][0] - kill[0][0]:.2f} s from the SIGKILL to the "
              f"first step after restore; steps lost: {FAIL_STEP - int(resume_point(FAIL_STEP).split()[-1])}; "
              f"commit: median {sorted(took)[len(took) // 2]:.2f} ms (rank 0)")

    if NP == 2:
        p, got, log = run(tmp, "raise", "--fail", "raise", "--fail-step", str(FAIL_STEP))
        expect_restart("an exception in rank 1", p, got, log, ref, resume_point(FAIL_STEP))
        check("fails on purpose" in p.stderr, "the exception's traceback reaches the user", p,
              log)

        p, got, log = run(tmp, "exit0", "--fail", "exit0", "--fail-step", str(FAIL_STEP))
        check("exited 0 without returning from @hvd.elastic.run" in p.stderr,
              "a rank exiting 0 early is reported as a failure", p, log)
        expect_restart("an early exit 0", p, got, log, ref, resume_point(FAIL_STEP))

    if NP == 2:  # the watchdog does not depend on the rank count: np 2 only (15 s of CI time)
        # SIGSTOP: nothing dies; the watchdog (4 s) must stop the generation. Before it, a step
        # of 8 s with collectives but no commit must not trip it.
        p, got, log = run(tmp, "stop", "--fail", "stop", "--fail-step", str(FAIL_STEP),
                          "--long-step", "8", hvdrun_args=("--elastic-step-timeout", "4"))
        expect_restart("SIGSTOP", p, got, log, ref, resume_point(FAIL_STEP))
        check("made no progress for" in p.stderr and "--elastic-step-timeout 4" in p.stderr,
              "hvdrun names the stalled rank and the timeout", p, log)
        check(events(log, "long step of") and events(log, "failing (stop)"),
              "an 8 s step with collectives but no commit did not trip the 4 s watchdog", p,
              log)

    commit_step = 3 * ((STEPS - 2) // 3)
    p, got, log = run(tmp, "kill-commit", "--fail", "kill-commit", "--fail-rank", "0",
                      "--fail-step", str(commit_step))
    expect_restart("SIGKILL inside a commit", p, got, log, ref, resume_point(commit_step - 1))
    check(events(log, "failing (kill-commit)"), "the snapshot writer died mid-write", p, log)

    p, got, log = run(tmp, "kill-restore", "--fail", "kill-restore", "--fail-step",
                      str(FAIL_STEP))
    expect_restart("SIGKILL during the restore broadcast", p, got, log, ref,
                   resume_point(FAIL_STEP), gens=3)
    check(events(log, "failing (kill-restore) in the snapshot broadcast"),
          "generation 1 died in the snapshot broadcast", p, log)

    p, got, log = run(tmp, "lost-host", "--fail", "kill", "--fail-step", str(FAIL_STEP),
                      "--fake-hosts", "2", "--lose-host", "0")
    expect_restart("fake host 0 lost with its snapshot", p, got, log, ref,
                   resume_point(FAIL_STEP))
    check(events(log, "lost my host's snapshot"), "host 0's snapshot was gone", p, log)

    if NP == 2:
        p, got, log = run(tmp, "limit", "--fail", "always", "--fail-step", str(FAIL_STEP),
                          hvdrun_args=("--reset-limit", "1"))
        check(p.returncode == 137, "failing every generation ends the job with the rank's code",
              p, log)
        check("already restarted 1 time(s) (--reset-limit 1); giving up" in p.stderr,
              "--reset-limit ends the job with a clear message", p, log)
        check(got is None and len(events(log, "failing")) == 2,
              "exactly two generations ran, neither finished", p, log)

    hvdrun_killed(tmp)

    time.sleep(1)
    leftovers = [d for d in MY_DIRS if os.path.exists(d)]
    check(len(MY_DIRS) >= (9 if NP == 2 else 6),
          f"the jobs' state directories are known ({len(MY_DIRS)})")
    check(not leftovers, f"hvdrun (or, when it was killed, its wrappers) removes its state "
          f"directories ({leftovers})")

print("elastic_test: " + ("FAILED: " + "; ".join(failures) if failures else "all passed"))
sys.exit(1 if failures else 0)
