#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""[elastic] Python errors that a restart cannot fix end an elastic job; the others restart, but
not forever. hvdrun -np 2 --min-np 2 of fatal_job.py (hvd.common.elastic's ObjectState and
run_fn on hvd.numpy: no torch, about a second a generation):
- a ValueError in rank 1 (a bug in the script): rank 1 prints the traceback as Python would and
  exits 76; hvdrun ends the job after that one generation with exit code 1 (what the uncaught
  ValueError gives without elastic mode);
- a TypeError in rank 0: the same;
- ranks that disagree about an allreduce's shape (MismatchError, a HorovodInternalError, on
  every rank; the first rank to report it ends the job): the same, no restart;
- a RuntimeError at step 3 in every generation (not fatal: restarted): commit() told hvdrun of
  commit 1 (step 2) in generation 0, so generation 1 is the first without a new commit; with
  --max-restarts-without-progress 1 hvdrun gives up after generation 2, naming commit 1 and
  the RuntimeError line, with exit code 1;
- hvd.torch.elastic exports report_progress and FATAL_EXIT_CODE (when torch imports).

usage: elastic_fatal_test.py HVDRUN PYTHON"""
import os
import subprocess
import sys
import time

from elastic_log import check, failures

HVDRUN, PYTHON = sys.argv[1], sys.argv[2]
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fatal_job.py")


def run(name, *args, hvdrun_args=()):
    t = time.time()
    p = subprocess.run([HVDRUN, "-np", "2", "--min-np", "2", *hvdrun_args, PYTHON, SCRIPT,
                        *args], capture_output=True, text=True, timeout=120)
    print(f"{name}: {time.time() - t:.1f} s, exit {p.returncode}", flush=True)
    return p


def generations(p):
    return p.stderr.count("hvdrun: elastic: generation ")


def expect_fatal(name, p, ranks, error_line):
    check(p.returncode == 1, f"{name}: the job ends with exit code 1 (got {p.returncode})", p)
    check(generations(p) == 1 and "starting generation" not in p.stderr,
          f"{name}: one generation, no restart", p)
    check("Traceback (most recent call last):" in p.stderr and error_line in p.stderr,
          f"{name}: the rank printed the traceback, ending with '{error_line}'", p)
    check(any(f"hvd.elastic: rank {r}: " in p.stderr for r in ranks) and "a restart cannot fix "
          "this error; ending the job (exit 76)" in p.stderr,
          f"{name}: rank {' or '.join(map(str, ranks))} ends with exit 76", p)
    check("ended with an error a restart cannot fix" in p.stderr
          and "not restarting, exit code 1" in p.stderr,
          f"{name}: hvdrun says a restart cannot fix it", p)
    check("FATAL_JOB" not in p.stdout, f"{name}: no rank finished", p)


p = run("value", "--fail-step", "3", "--fail-how", "value")
expect_fatal("ValueError", p, (1,), "ValueError: fatal_job: step 3 cannot run (simulated bug)")

p = run("type", "--fail-step", "1", "--fail-how", "type", "--fail-rank", "0")
expect_fatal("TypeError", p, (0,), "TypeError: fatal_job: step 1 got a str (simulated bug)")

p = run("mismatch", "--fail-step", "3", "--fail-how", "mismatch")
# Every rank gets the MismatchError; the first to exit ends the job, and the other may be stopped
# (or see that peer's exit, on Open MPI 5 as seen in CI) before it prints its own: either rank.
expect_fatal("mismatch", p, (0, 1), "MismatchError: ")

p = run("runtime", "--fail-step", "3", "--fail-how", "runtime",
        hvdrun_args=("--max-restarts-without-progress", "1"))
check(p.returncode == 1, f"RuntimeError: the job ends with exit code 1 (got {p.returncode})", p)
check(generations(p) == 3 and "starting generation 3" not in p.stderr,
      "RuntimeError: generations 0 (commit 1), 1 and 2 (none) ran, then no more", p)
check("2 generations in a row failed before any new commit (the last commit is 1: every one "
      "resumed from it" in p.stderr, "RuntimeError: hvdrun saw Python's commit 1", p)
check("exit code 1: RuntimeError: fatal_job: step 3 failed (simulated)" in p.stderr,
      "RuntimeError: the give-up quotes the rank's last error line", p)
check("(--max-restarts-without-progress 1)" in p.stderr, "RuntimeError: and the option", p)

torch = subprocess.run([PYTHON, "-c", "import hvd.torch.elastic as e; "
                        "print(e.report_progress.__name__, e.FATAL_EXIT_CODE, "
                        "'report_progress' in e.__all__)"],
                       capture_output=True, text=True, timeout=120)
if "No module named 'torch'" in torch.stderr:
    print("skip: torch does not import here: hvd.torch.elastic's exports not checked")
else:
    check(torch.stdout.split() == ["elastic_report_progress", "76", "True"],
          "hvd.torch.elastic exports report_progress and FATAL_EXIT_CODE", torch)

sys.exit(1 if failures else 0)
