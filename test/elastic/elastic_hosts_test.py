#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""[elastic] multi-host elastic hvdrun on fake hosts (test/hosts/testhosts.sh: network
namespaces with their own sshd and a private /dev/shm each, like separate machines).

Scenarios (one per run):
  add       a host added through --host-discovery-script mid-epoch: the ranks stop at their next
            commit and generation 1 runs on 3 hosts from that commit
  remove    a host removed through the script mid-epoch: generation 1 runs on the other 2
  hostlist  -H with 3 hosts: a rank killed on the second, which is blacklisted; generation 1
            runs 2 ranks on the other two
  timeout   a host failing the preflight and then a rank's host are blacklisted; the slots
            left are below --min-np, the script prints a bad line (ignored) and nothing
            returns: hvdrun gives up after --elastic-timeout with a clear message
  cooldown  a flapping host (its rank killed in generations 0 and 1) is blacklisted, below
            --min-np the job waits, and the host returns after each cooldown (range 2 4: a
            random 2-4 s, then 4 s)
  cpp       the libtorch program test/torch/elastic_train.cc (hvd::elastic::run) instead of
            train_elastic.py: a host added through the script mid-epoch 0 (generation 1 on 3
            hosts), then the second host removed as generation 1 begins (generation 2 on the
            other 2)
After each, the final parameters must equal a failure-free replay of the committed steps (the
batches every rank trained on, the world size changing between generations) and every epoch
must have covered every sample.

usage: elastic_hosts_test.py HVDRUN PYTHON SCENARIO [PROGRAM]
  PROGRAM: hvd_elastic_train, for the cpp scenario.      exit 0 pass, 1 fail, 77 skipped"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from elastic_log import parse as events  # noqa: I100 (this directory)
from replay import check_replay  # noqa: I100

HVDRUN, PYTHON, SCENARIO = sys.argv[1], sys.argv[2], sys.argv[3]
HERE = os.path.dirname(os.path.abspath(__file__))
# The training program and its flag for rank 0's batch log: Python's train_elastic.py, or the
# libtorch elastic_train (the same events; its model starts from rank 0's seed, 100).
CPP = sys.argv[4] if len(sys.argv) > 4 else None
PROGRAM = [CPP] if CPP else [PYTHON, os.path.join(HERE, "train_elastic.py")]
LOG_BATCHES = ["--log-batches", "1"] if CPP else ["--log-batches"]
RIG = os.path.join(HERE, "..", "hosts", "testhosts.sh")
PREFIX = "hvdel"
os.environ.update(HVD_TESTHOSTS_PREFIX=PREFIX, HVD_TESTHOSTS_SUBNET="10.201.23",
                  HVD_TESTHOSTS_PRIVATE_TMP="shm", OMPI_ALLOW_RUN_AS_ROOT="1",
                  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
H1, H2, H3 = (f"{PREFIX}{i}" for i in (1, 2, 3))
failures = []


def check(cond, what, detail=""):
    print(("PASS: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)
        if detail:
            print(detail[-6000:])


def check_result(out, p, max_np):
    check(p.returncode == 0, f"the job succeeds (exit {p.returncode})", p.stdout + p.stderr)
    return check_replay(out, max_np, check, model_seed=100 if CPP else None,
                        detail=p.stdout + p.stderr)


def hvdrun(out, *flags, args=(), wait_for=None, then=None, timeout=110, actions=()):
    """Runs the job; when rank 0's log shows `wait_for`, calls then() (once); likewise for each
    (pattern, action) of `actions`, in order. Returns the process and when the first acted."""
    cmd = [HVDRUN, *flags, "--start-timeout", "20", *PROGRAM, "--out", out, *LOG_BATCHES, *args]
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    todo = ([(wait_for, then)] if wait_for else []) + list(actions)
    acted = None
    while todo and proc.poll() is None and time.time() - t0 < timeout:
        log = open(out + ".log").read() if os.path.exists(out + ".log") else ""
        if re.search(todo[0][0], log):
            acted = acted or time.time()
            todo.pop(0)[1]()
            continue
        time.sleep(0.05)
    try:
        stdout, stderr = proc.communicate(timeout=max(1, timeout - (time.time() - t0)))
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        stderr += "\n(test: hvdrun timed out)"
    proc.stdout, proc.stderr = stdout, stderr
    print(f"hvdrun ran {time.time() - t0:.1f} s")
    return proc, acted


def first_after(evs, gen, text, rank=0):
    return next((t for t, g, r, x in evs if g == gen and r == rank and text in x), None)


def cpp_add_then_remove(out, set_hosts, discover, slow):
    """The cpp scenario: H3 added at step 2 (epoch 0: 8 steps at np 2), H2 removed as generation
    1 (np 3) begins; each change stops the ranks at a commit (every 3 steps and at each epoch's
    end) 1-2 s later, and every generation trains."""
    set_hosts(f"{H1}:1", f"{H2}:1")
    p, _ = hvdrun(out, "--min-np", "2", "--host-discovery-script", discover, args=slow,
                  actions=[(r"gen0 rank0 batch step 2 ",
                            lambda: set_hosts(f"{H1}:1", f"{H2}:1", f"{H3}:1")),
                           (r"gen1 rank0 batch step ", lambda: set_hosts(f"{H1}:1", f"{H3}:1"))])
    evs, _ = check_result(out, p, 3)
    for word in ("hosts added", "hosts removed"):
        check(f"hvdrun: elastic: {word}" in p.stderr, f"hvdrun reports '{word}'", p.stderr)
    check(p.stderr.count("stopped for the host change; starting generation") == 2,
          "generations 1 and 2 start for the host changes", p.stderr)
    gens = {g: {r for _, gg, r, _ in evs if gg == g} for g in (0, 1, 2)}
    check([len(gens[g]) for g in (0, 1, 2)] == [2, 3, 2],
          f"generations 0, 1, 2 ran 2, 3 and 2 ranks ({gens})")
    check(f"generation 2: 2 rank(s) on {H1}:1,{H3}:1" in p.stderr,
          "generation 2 runs on the hosts left", p.stderr)
    check(not any("failing" in x for *_, x in evs), "no rank failed")
    trained = [sum(1 for _, gg, r, x in evs if gg == g and r == 0 and x.startswith("batch"))
               for g in (0, 1, 2)]
    check(all(trained), f"every generation trained (steps per generation: {trained})")
    for g in (1, 2):  # no rollback: each resumes from the commit where the ranks stopped
        last = [x for _, gg, r, x in evs if gg == g - 1 and r == 0 and x.startswith("batch")]
        step = last[-1].split()[2] if last else None
        reset = [x for _, gg, r, x in evs if gg == g and r == 0 and x.startswith("reset")]
        check(reset and reset[0].endswith(f" step {step}"),
              f"generation {g} resumed from the commit where the ranks stopped, step {step} "
              f"(no rollback: {reset})")
        began = [t for t, gg, r, x in evs if gg == g - 1 and r == 0 and x.startswith("batch")]
        first = first_after(evs, g, "first step done")
        if began and first:
            print(f"measured: generation {g}'s first step {first - began[-1]:.2f} s after the "
                  f"last step of generation {g - 1} began (0.25 s long)")
    return p


def main():
    if subprocess.run([RIG, "check"]).returncode != 0:
        return 77
    work = tempfile.mkdtemp(prefix="hvd-elastic-hosts-", dir="/var/tmp")  # not /tmp: private
    try:
        t = time.time()
        if subprocess.run([RIG, "up", "3"]).returncode != 0:
            print("FAIL: testhosts.sh up 3")
            return 1
        print(f"rig up in {time.time() - t:.1f} s")
        hostfile = os.path.join(work, "hosts")
        discover = f"cat {hostfile}"

        def set_hosts(*hosts):
            with open(hostfile + ".new", "w") as f:
                f.write("".join(h + "\n" for h in hosts))
            os.rename(hostfile + ".new", hostfile)

        out = os.path.join(work, "out")
        slow = ("--step-sleep", "0.25")
        if SCENARIO in ("add", "remove"):
            adding = SCENARIO == "add"
            set_hosts(f"{H1}:1", f"{H2}:1", *([] if adding else [f"{H3}:1"]))
            after = (f"{H1}:1", f"{H2}:1", f"{H3}:1") if adding else (f"{H1}:1", f"{H2}:1")
            # Step 5 of 16 (np 2) or 11 (np 3): mid-epoch 0.
            p, acted = hvdrun(out, "--min-np", "2", "--host-discovery-script", discover,
                              args=slow, wait_for=r"gen0 rank0 batch step 5 ",
                              then=lambda: set_hosts(*after))
            evs, log = check_result(out, p, 3)
            word = "hosts added" if adding else "hosts removed"
            check(f"hvdrun: elastic: {word}" in p.stderr, f"hvdrun reports '{word}'", p.stderr)
            check("stopped for the host change; starting generation 1" in p.stderr,
                  "generation 1 starts for the host change", p.stderr)
            gens = {g: {r for _, gg, r, _ in evs if gg == g} for g in (0, 1)}
            want = (2, 3) if adding else (3, 2)
            check(len(gens[0]) == want[0] and len(gens[1]) == want[1],
                  f"generation 0 ran {want[0]} ranks and generation 1 {want[1]} ({gens})")
            check(not any("failing" in x for *_, x in evs), "no rank failed")
            # The ranks stop at the commit after the step that was last begun in generation 0.
            last0 = [(t, x) for t, g, r, x in evs if g == 0 and r == 0 and x.startswith("batch")]
            step0 = last0[-1][1].split()[2] if last0 else None
            reset1 = [x for _, g, r, x in evs if g == 1 and r == 0 and x.startswith("reset")]
            check(reset1 and reset1[0].endswith(f" step {step0}"),
                  f"generation 1 resumed from the commit where the ranks stopped, step {step0} "
                  f"(no rollback: {reset1})")
            first1 = first_after(evs, 1, "first step done")
            if acted and last0 and first1:
                print(f"measured: the discovery file changed; {last0[-1][0] - acted:.2f} s later "
                      f"the ranks began their last step (0.25 s long) before the commit that "
                      f"stopped them; first step of generation 1 {first1 - last0[-1][0]:.2f} s "
                      "after that step began")
        elif SCENARIO == "hostlist":
            p, _ = hvdrun(out, "--min-np", "2", "-H", f"{H1}:1,{H2}:1,{H3}:1",
                          args=(*slow, "--fail", "kill", "--fail-step", "4"))
            evs, _ = check_result(out, p, 3)
            kill = first_after(evs, 0, "failing", rank=1)
            first1 = first_after(evs, 1, "first step done")
            if kill and first1:
                print(f"measured: {first1 - kill:.2f} s from the SIGKILL on {H2} to the first "
                      f"step of generation 1 on {H1},{H3}")
            check(f"host {H2} blacklisted (its rank 1 failed) for the rest of the job" in p.stderr,
                  "the failed rank's host is blacklisted for good", p.stderr)
            check(f"generation 1: 2 rank(s) on {H1}:1,{H3}:1" in p.stderr,
                  "generation 1 runs on the other hosts of -H, with 2 ranks", p.stderr)
        elif SCENARIO == "timeout":
            # H3's sshd is down: its preflight fails and it is blacklisted before generation 0.
            subprocess.run([RIG, "sshd-stop", H3], check=True)
            set_hosts(f"{H1}:1", f"{H2}:1", f"{H3}:1")
            p, _ = hvdrun(out, "--min-np", "2", "--host-discovery-script", discover,
                          "--elastic-timeout", "3", args=(*slow, "--fail", "kill"),
                          wait_for=r"failing", then=lambda: set_hosts(f"{H1}:1", f"{H2}:x"))
            check(f"host {H3} blacklisted (it failed the preflight)" in p.stderr,
                  "a host failing the preflight is blacklisted", p.stderr)
            check(f"generation 0: 2 rank(s) on {H1}:1,{H2}:1" in p.stderr,
                  "generation 0 runs on the other hosts", p.stderr)
            check(p.returncode == 137, f"the job ends with the failed rank's code ({p.returncode})",
                  p.stderr)
            check(f"host {H2} blacklisted (its rank 1 failed) for the rest of the job" in p.stderr,
                  "the failed rank's host is blacklisted for good", p.stderr)
            check(f"printed a bad line 2 '{H2}:x': slots must be a whole number" in p.stderr,
                  "a bad line of the discovery script is reported", p.stderr)
            check(f"waiting for --min-np 2 slots: 1 slot(s) available ({H1}:1), blacklisted: "
                  f"{H2},{H3}" in p.stderr,
                  "hvdrun waits for --min-np slots on the hosts it had (the bad output ignored)",
                  p.stderr)
            check(re.search(r"giving up after waiting 3\.\d s \(--elastic-timeout 3\.0\)",
                            p.stderr) is not None, "it gives up after --elastic-timeout", p.stderr)
        elif SCENARIO == "cooldown":
            set_hosts(f"{H1}:1", f"{H2}:1")
            p, _ = hvdrun(out, "--min-np", "2", "--host-discovery-script", discover,
                          "--blacklist-cooldown-range", "2", "4",
                          args=(*slow, "--fail", "kill", "--fail-gens", "2", "--fail-step", "5"))
            evs, log = check_result(out, p, 2)
            c1 = re.search(rf"host {H2} blacklisted \(its rank 1 failed\) for (\d+\.\d) s "
                           r"\(failure 1", p.stderr)
            check(c1 is not None and 2.0 <= float(c1[1]) <= 4.0,
                  "the first failure blacklists the host for a random 2-4 s (MIN..2 MIN)",
                  p.stderr)
            check(f"host {H2} blacklisted (its rank 1 failed) for 4.0 s (failure 2" in p.stderr,
                  "the second backs off to MAX (from 2 MIN, capped)", p.stderr)
            check(p.stderr.count("waiting for --min-np 2 slots") == 2,
                  "below --min-np the job waited both times", p.stderr)
            check("generation 2: 2 rank(s)" in p.stderr, "the host is back in generation 2",
                  p.stderr)
        elif SCENARIO == "cpp":
            cpp_add_then_remove(out, set_hosts, discover, slow)
        else:
            print(f"unknown scenario {SCENARIO}")
            return 2
        left = [h for h in (H1, H2, H3) if "hvd-elastic-" in subprocess.run(
            [RIG, "exec", h, "ls", "/dev/shm"], capture_output=True, text=True).stdout]
        check(not left, f"hvdrun removed its state directory on every host ({left})")
    finally:
        subprocess.run([RIG, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
    print(f"elastic_hosts_test {SCENARIO}: " +
          ("FAILED: " + "; ".join(failures) if failures else "all passed"))
    return 1 if failures else 0


sys.exit(main())
