#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""[elastic] A libtorch program on hvd::elastic::run under hvdrun --min-np (elastic_train.cc): a
rank SIGKILLed mid-training, and a rank SIGSTOPped after a long step (hvdrun's step watchdog
must stop the generation: the C++ program reports progress, and its long step's collectives
must not trip the watchdog), must resume from the last commit and end with exactly the
parameters of the run without failure (same np: the same batches in the same order); a
std::invalid_argument out of the run ends the job (exit 1) without a restart.

usage: elastic_cpp_test.py HVDRUN PROGRAM NP"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "elastic"))
from elastic_log import check, events, failures  # noqa: E402 (test/elastic/elastic_log.py)

HVDRUN, PROGRAM, NP = sys.argv[1], sys.argv[2], int(sys.argv[3])


def run(tmp, name, *extra, hvdrun_args=(), timeout=120):
    out = os.path.join(tmp, name)
    cmd = [HVDRUN, "-np", str(NP), "--min-np", str(NP), *hvdrun_args, PROGRAM, "--out", out,
           *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    log = open(out + ".log").read() if os.path.exists(out + ".log") else ""
    result = open(out).read() if os.path.exists(out) else None
    return p, result, log


with tempfile.TemporaryDirectory() as tmp:
    base, ref, _ = run(tmp, "base")
    steps = 2 * 64 // (4 * NP)
    check(base.returncode == 0 and ref is not None and ref.startswith(f"steps {steps}\n"),
          f"the failure-free run succeeds with {steps} steps", base)

    per_epoch = 64 // (4 * NP)
    fail_step = steps - 3  # in the second epoch, between two commits
    commits = [s for s in range(1, fail_step + 1) for c in (s % 3 == 0, s % per_epoch == 0) if c]
    resume = f"reset at commit {len(commits)} step {commits[-1]}"
    p, got, log = run(tmp, "kill", "--fail", "kill", "--fail-step", str(fail_step))
    check(p.returncode == 0, "after a SIGKILL of rank 1 the job succeeds", p, log)
    check("starting generation 1 from the last commit" in p.stderr,
          "hvdrun starts generation 1", p, log)
    resets = [e for e in events(log, "reset at commit")]
    check(len(resets) == NP and all(resume == e[2] for e in resets),
          f"every rank of generation 1 resumed from the last commit ({resume}; killed at step "
          f"{fail_step})", p, log)
    check(got == ref, "the parameters equal the failure-free run's, bit for bit", p, log)
    kill = events(log, "failing")
    first = [e for e in events(log, "first step done") if e[1].startswith("gen1")]
    took = sorted(float(e[2].split("took ")[1].split()[0]) for e in events(log, "took")
                  if e[1].endswith("rank0"))
    if kill and first and took:
        print(f"resume: {first[0][0] - kill[0][0]:.2f} s from the SIGKILL to the first step "
              f"after restore; steps lost: {fail_step - commits[-1]}; commit: median "
              f"{took[len(took) // 2]:.3f} ms (rank 0)")

    # SIGSTOP: nothing dies; the watchdog (3 s) must stop the generation. Before it, a step of
    # 5 s with collectives but no commit must not.
    p, got, log = run(tmp, "stop", "--fail", "stop", "--fail-step", str(fail_step), "--long-step",
                      "5", hvdrun_args=("--elastic-step-timeout", "3"), timeout=60)
    check(p.returncode == 0, "after a SIGSTOP of rank 1 the job succeeds", p, log)
    check("made no progress for" in p.stderr and "--elastic-step-timeout 3" in p.stderr,
          "hvdrun's step watchdog stopped the generation", p, log)
    check(events(log, "long step of") and events(log, "failing (stop)"),
          "the long step ran in generation 0 and the SIGSTOP came after it", p, log)
    resets = events(log, "reset at commit")
    check(len(resets) == NP and all(resume == e[2] for e in resets),
          f"after the SIGSTOP every rank resumed from the last commit ({resume})", p, log)
    check(p.stderr.count("starting generation") == 1, "exactly one restart", p, log)
    check(got == ref, "after the SIGSTOP the parameters equal the failure-free run's", p, log)
    stop = events(log, "failing (stop)")
    first = [e for e in events(log, "first step done") if e[1].startswith("gen1")]
    if stop and first:
        print(f"SIGSTOP: {first[0][0] - stop[0][0]:.2f} s from the SIGSTOP to the first step "
              "after restore (watchdog 3 s)")

    # An error a restart cannot fix (std::invalid_argument out of hvd::elastic::run): rank 1
    # prints it and exits 76, hvdrun ends the job with exit 1 after that one generation.
    p, _, log = run(tmp, "invalid", "--fail", "invalid", "--fail-step", "2", timeout=60)
    check(p.returncode == 1, f"a std::invalid_argument ends the job with exit 1 (got "
          f"{p.returncode})", p, log)
    check("hvd.elastic: rank 1: std::logic_error: elastic_train: step 2 got an invalid batch "
          "(simulated bug); a restart cannot fix this error: ending the job (exit 76)" in p.stderr,
          "rank 1 prints the error and exits 76", p, log)
    check("ended with an error a restart cannot fix" in p.stderr
          and "starting generation" not in p.stderr, "hvdrun does not restart it", p, log)

sys.exit(1 if failures else 0)
