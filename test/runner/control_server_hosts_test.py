#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""[hosts] What hvdrun's listener is bound to with remote hosts (fake hosts of
test/hosts/testhosts.sh: network namespaces with their own sshd). hvdrun -np 2 -H A:1,B:1 of the
probe program: during the preflight hvdrun listens on this machine's IPv4 addresses and
127.0.0.1; once the ranks run, only on the rig's master address (the network the preflight chose;
no rank falls back to loopback); never on 0.0.0.0 (sampled from /proc/net/tcp every 10 ms). Meanwhile a process on
fake host A (another machine of the job's network) sends the master's address 100 MiB without a
newline: it is cut off, and the job completes.

usage: control_server_hosts_test.py HVDRUN PROBE     exit 0 pass, 1 fail, 77 skipped"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_listeners import listeners  # noqa: E402

HVDRUN, PROBE = sys.argv[1], sys.argv[2]
RIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hosts", "testhosts.sh")
SUBNET = "10.201.41"
MASTER = SUBNET + ".1"
A, B = "hvdcl1", "hvdcl2"
os.environ.update(HVD_TESTHOSTS_PREFIX="hvdcl", HVD_TESTHOSTS_SUBNET=SUBNET,
                  OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
failed = False

# Run on fake host A: connect to the master's PORT, send 100 MiB without a newline, print
# "<bytes taken> <error>".
SENDER = """
import socket, sys
sent, error = 0, "none"
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as s:
        while sent < 100 << 20:
            sent += s.send(b"x" * 65536)
except OSError as e:
    error = e.__class__.__name__
print(sent, error)
"""


def check(what, ok):
    global failed
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    failed = failed or not ok


def local_addresses():
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    return {line.split()[3].split("/")[0] for line in out.splitlines()} - {"127.0.0.1"}


if subprocess.run([RIG, "check"]).returncode != 0:
    sys.exit(77)
start = time.monotonic()
try:
    if subprocess.run([RIG, "up", "2"], stdout=subprocess.DEVNULL).returncode != 0:
        print("FAIL: testhosts.sh up 2")
        sys.exit(1)
    job = subprocess.Popen([HVDRUN, "--verbose", "-np", "2", "-H", f"{A}:1,{B}:1",
                            "--start-timeout", "20", PROBE, "--sleep", "3"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []  # each distinct set of listening addresses, in order
    port = None
    sender = None
    while job.poll() is None and time.monotonic() - start < 60:
        found = listeners(job.pid)
        addrs = sorted(a for a, _ in found)
        if found and (not seen or seen[-1] != addrs):
            seen.append(addrs)
        port = port or (min(p for _, p in found) if found else None)
        # Once the ranks' address is all that listens, attack from fake host A.
        if sender is None and addrs == [MASTER]:
            sender = subprocess.Popen([RIG, "exec", A, "python3", "-c", SENDER, MASTER,
                                       str(port)], stdout=subprocess.PIPE, text=True)
        time.sleep(0.01)
    out = job.communicate(timeout=30)[0]
    sent = sender.communicate(timeout=30)[0].split() if sender else []
finally:
    subprocess.run([RIG, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

others = local_addresses() - {MASTER}
print(f"listening, in order: {seen}; from {A}, 100 MiB sender: {sent}")
check(f"the job completes (exit {job.returncode})", job.returncode == 0)
check("never on 0.0.0.0", all("0.0.0.0" not in s for s in seen))
check(f"during the preflight on this machine's addresses ({sorted(others | {MASTER})}) and "
      "127.0.0.1", bool(seen) and set(seen[0]) == others | {MASTER, "127.0.0.1"})
# Not 127.0.0.1: no rank falls back to loopback when ranks run on other hosts.
check(f"while the ranks run on {MASTER} only", [MASTER] in seen[1:])
check("--verbose says so", "for the preflight" in out
      and f"listening on {MASTER}:{port} for the ranks" in out)
check("the sender on another host is cut off", len(sent) == 2 and int(sent[0]) < 100 << 20
      and sent[1] in ("ConnectionResetError", "BrokenPipeError"))
print(f"control_server_hosts_test: {time.monotonic() - start:.1f} s")
if failed:
    print("---- hvdrun's output\n" + out)
sys.exit(1 if failed else 0)
