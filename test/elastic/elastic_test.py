#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""[elastic] hvdrun --min-np on this machine: a rank SIGKILLed mid-training, a rank exiting 0
early, failures past --reset-limit. After a failure the job must resume from the last commit
and end with exactly the parameters of a run without failure (same np: the same batches in the
same order), and the epoch's samples each once (the sampler's record travels in the snapshot).

usage: elastic_test.py HVDRUN PYTHON NP"""
import os
import subprocess
import sys
import tempfile

HVDRUN, PYTHON, NP = sys.argv[1], sys.argv[2], int(sys.argv[3])
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_elastic.py")
failures = []


def run(tmp, name, *extra, hvdrun_args=()):
    out = os.path.join(tmp, name)
    cmd = [HVDRUN, "-np", str(NP), "--min-np", str(NP), *hvdrun_args, PYTHON, SCRIPT,
           "--out", out, *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    log = open(out + ".log").read() if os.path.exists(out + ".log") else ""
    result = open(out).read() if os.path.exists(out) else None
    return p, result, log


def check(cond, what, p=None, log=""):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")
        if p is not None:
            print(p.stdout[-3000:], p.stderr[-3000:], log, sep="\n")


def events(log, word):
    """[(time, "genG rankR", text)] of the lines holding `word`, in time order."""
    out = []
    for line in log.splitlines():
        if word in line:
            t, g, r, text = line.split(" ", 3)
            out.append((float(t), g + " " + r, text))
    return sorted(out)


with tempfile.TemporaryDirectory() as tmp:
    base, ref, _ = run(tmp, "base")
    check(base.returncode == 0 and ref is not None, "the failure-free run succeeds", base)
    steps = 2 * 64 // (4 * NP)
    check(ref is not None and ref.startswith(f"steps {steps}\n"), f"it makes {steps} steps",
          base)

    # The commit schedule of train_elastic.py: every 3 steps, and at each epoch's end.
    per_epoch = 64 // (4 * NP)
    fail_step = steps - 3
    commits = [s for s in range(1, fail_step + 1) for c in (s % 3 == 0, s % per_epoch == 0) if c]
    resume = f"commit {len(commits)} step {commits[-1]}"
    p, got, log = run(tmp, "kill", "--fail", "kill", "--fail-step", str(fail_step))
    check(p.returncode == 0, "after a SIGKILL of rank 1 the job succeeds", p, log)
    check("starting generation 1 from the last commit" in p.stderr,
          "hvdrun says it starts generation 1", p, log)
    check(got == ref, "the parameters equal the failure-free run's, bit for bit", p, log)
    resets = events(log, "reset at commit")
    check(resets and resume in resets[0][2],
          f"generation 1 resumed from the last commit ({resume}; killed at step {fail_step})",
          p, log)
    kill = events(log, "failing")
    first = [e for e in events(log, "first step done") if e[1].startswith("gen1")]
    took = [float(e[2].split("took ")[1].split()[0]) for e in events(log, "took")
            if e[1].endswith("rank0")]
    if kill and first:
        print(f"resume: {first[0][0] - kill[0][0]:.2f} s from the SIGKILL to the "
              f"first step after restore; steps lost: {fail_step - commits[-1]}; commit: median "
              f"{sorted(took)[len(took) // 2]:.2f} ms (rank 0)")

    p, got, log = run(tmp, "exit0", "--fail", "exit0", "--fail-step", str(fail_step))
    check("exited 0 without returning from @hvd.elastic.run" in p.stderr,
          "a rank exiting 0 early is reported as a failure", p, log)
    check(p.returncode == 0 and got == ref,
          "after an early exit 0 the job restarts and ends with the failure-free parameters",
          p, log)

    p, got, log = run(tmp, "limit", "--fail", "always", "--fail-step", str(fail_step),
                      hvdrun_args=("--reset-limit", "1"))
    check(p.returncode == 137, "failing every generation ends the job with the rank's code",
          p, log)
    check("already restarted 1 time(s) (--reset-limit 1); giving up" in p.stderr,
          "--reset-limit ends the job with a clear message", p, log)
    check(got is None and len(events(log, "failing")) == 2,
          "exactly two generations ran, neither finished", p, log)

    leftovers = [d for d in os.listdir("/dev/shm")
                 if d.startswith("hvd-elastic-") and not d.startswith("hvd-elastic-test-")]
    check(not leftovers, f"hvdrun removes its state directories ({leftovers})")

print("elastic_test: " + ("FAILED: " + "; ".join(failures) if failures else "all passed"))
sys.exit(1 if failures else 0)
