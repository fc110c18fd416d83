#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""[elastic] hvdrun SIGKILLed while its ranks train on two fake hosts (test/hosts/testhosts.sh:
network namespaces with their own sshd): no rank, rank wrapper, mpirun or Open MPI daemon (orted;
Open MPI 5: prted) may outlive it by more than a few seconds on any host, and the wrappers remove
the job's state directory.

usage: elastic_orphans_test.py HVDRUN PYTHON     exit 0 pass, 1 fail, 77 skipped"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HVDRUN, PYTHON = sys.argv[1], sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
RIG = os.path.join(HERE, "..", "hosts", "testhosts.sh")
SUBNET = "10.201.29"
os.environ.update(HVD_TESTHOSTS_PREFIX="hvdeo", HVD_TESTHOSTS_SUBNET=SUBNET,
                  OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def processes(*markers):
    """(pid, argv0) of the processes whose command line holds every marker."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if all(m.encode() in cmdline for m in markers):
            found.append((int(pid), cmdline.split(b"\0")[0].decode(errors="replace")))
    return found


def daemons():
    """Open MPI's daemons on the fake hosts (Open MPI 4: orted, 5: prted; their command lines
    hold the master's address on the rig's subnet)."""
    return processes("orted", SUBNET) + processes("prted", SUBNET)


if subprocess.run([RIG, "check"]).returncode != 0:
    sys.exit(77)
if subprocess.run([RIG, "up", "2"]).returncode != 0:
    print("FAIL: testhosts.sh up 2")
    sys.exit(1)
work = tempfile.mkdtemp(prefix="hvd-orphans-", dir="/var/tmp")
failures = []
try:
    out = os.path.join(work, "run")
    cmd = [HVDRUN, "--verbose", "-np", "2", "--min-np", "2", "-H", "hvdeo1:1,hvdeo2:1",
           "--start-timeout", "20", "-x", "PYTHONPATH", PYTHON,
           os.path.join(HERE, "train_elastic.py"), "--out", out, "--step-sleep", "0.5"]
    with open(os.path.join(work, "stderr"), "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.time() + 90
    while time.time() < deadline and proc.poll() is None:
        log = open(out + ".log").read() if os.path.exists(out + ".log") else ""
        if log.count("first step done") == 2:
            break
        time.sleep(0.2)
    before = processes(out)
    orted = daemons()
    stderr = open(os.path.join(work, "stderr")).read()
    dirs = set(re.findall(r"HVD_ELASTIC_STATE_DIR=(\S+)", stderr))
    print(f"{len(before)} processes of the job and {len(orted)} Open MPI daemons when hvdrun is killed")
    if proc.poll() is not None or len(before) < 4 or not orted:
        failures.append("the job runs on both fake hosts when hvdrun is killed")
        print(stderr[-3000:])
    killed = time.time()
    proc.kill()
    proc.wait()
    left = processes(out) + daemons()
    while left and time.time() - killed < 15:
        time.sleep(0.1)
        left = processes(out) + daemons()
    print(f"{len(left)} left {time.time() - killed:.1f} s after hvdrun's SIGKILL: {left}")
    if left or time.time() - killed > 10:
        failures.append(f"no process of the job outlives hvdrun by 10 s ({left})")
    time.sleep(1)
    kept = [d for d in dirs if os.path.exists(d)]
    if not dirs or kept:
        failures.append(f"the wrappers remove the job's state directory ({dirs}, kept {kept})")
finally:
    subprocess.run([RIG, "down"])
    shutil.rmtree(work, ignore_errors=True)
print("elastic_orphans_test: " + ("FAILED: " + "; ".join(failures) if failures else "passed"))
sys.exit(1 if failures else 0)
