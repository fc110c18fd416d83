#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""[local] hvdrun -np 2 of the probe program while an attacker on this machine finds hvdrun's
listener (its sockets in /proc/<pid>/fd, their ports in /proc/net/tcp), sends it 100 MiB without
a newline on one connection and opens 1,000 silent connections. The job must complete (exit 0,
both ranks ran), hvdrun's peak memory (VmHWM) must stay within 20 MiB of its size before the
attack, the 100 MiB sender must be cut off after a few MiB at most (the kernel's socket buffers)
and hvdrun's listener must not be on 0.0.0.0 (ss and /proc/net/tcp). Before issue 36, hvdrun
listened on 0.0.0.0 and buffered the whole line.

usage: control_server_attack_test.py HVDRUN PROBE     exit 0 pass, 1 fail"""
import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_listeners import listeners  # noqa: E402

HVDRUN, PROBE = sys.argv[1], sys.argv[2]
GROWTH_LIMIT_KIB = 20 * 1024
os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
failed = False


def check(what, ok):
    global failed
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    failed = failed or not ok


def status_kib(pid, key):
    """A field of /proc/<pid>/status in KiB (None once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


start = time.monotonic()
job = subprocess.Popen([HVDRUN, "-np", "2", PROBE, "--sleep", "5"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
found = []
while not found and job.poll() is None and time.monotonic() - start < 15:
    found = listeners(job.pid)
    time.sleep(0.01)
check(f"hvdrun listens ({found})", bool(found))
if not found:
    job.kill()
    print(job.communicate()[1])
    sys.exit(1)
port = next(iter(found))[1]
addresses = sorted({a for a, p in found if p == port})
check(f"hvdrun listens on 127.0.0.1 only (/proc/net/tcp: {addresses})", addresses == ["127.0.0.1"])
if shutil.which("ss"):
    ss = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    local = [line.split()[3] for line in ss.splitlines() if f"pid={job.pid}," in line]
    check(f"ss: hvdrun's listener is not on 0.0.0.0 or * ({local})",
          bool(local) and all(not a.startswith(("0.0.0.0:", "*:", "[::]:")) for a in local))
rss0 = status_kib(job.pid, "VmRSS")

# The attack: one connection with 100 MiB and no newline, 1,000 that say nothing.
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
big = {}


def send_100_mib():
    t0 = time.monotonic()
    sent, error = 0, "none"
    chunk = b"x" * (1 << 16)
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            while sent < 100 << 20:
                sent += s.send(chunk)
    except OSError as e:
        error = e.__class__.__name__
    big.update(sent=sent, error=error, seconds=time.monotonic() - t0)


sender = threading.Thread(target=send_100_mib)
sender.start()
silent, refused = [], 0
t0 = time.monotonic()
for _ in range(1000):
    try:
        silent.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    except OSError:
        refused += 1
flood_s = time.monotonic() - t0
time.sleep(0.5)
closed = 0  # by hvdrun, while it runs
for s in silent:
    s.setblocking(False)
    try:
        closed += s.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
alive_after_flood = job.poll() is None
sender.join(30)
peak = rss0
while job.poll() is None and time.monotonic() - start < 60:
    peak = max(peak, status_kib(job.pid, "VmHWM") or 0)
    time.sleep(0.05)
for s in silent:
    s.close()
try:
    out, err = job.communicate(timeout=max(1, 60 - (time.monotonic() - start)))
except subprocess.TimeoutExpired:
    job.kill()
    out, err = job.communicate()
print(f"100 MiB sender: {big.get('sent', 0)} bytes taken, then {big.get('error')} after "
      f"{big.get('seconds', 0):.3f} s; 1,000 silent connections opened in {flood_s:.2f} s "
      f"({refused} refused), {closed} closed by hvdrun before the job ended; hvdrun VmRSS "
      f"{rss0} KiB before the attack, VmHWM {peak} KiB at most")
check(f"the job completes (exit {job.returncode})", job.returncode == 0)
check("both ranks ran", all(f"PROBE ready rank={r}" in out for r in (0, 1)))
check("the 100 MiB sender is cut off", big.get("sent", 100 << 20) < 100 << 20
      and big.get("error") in ("ConnectionResetError", "BrokenPipeError"))
check(f"hvdrun's peak memory stays within {GROWTH_LIMIT_KIB} KiB of its size before",
      peak - rss0 < GROWTH_LIMIT_KIB)
check("the silent connections beyond 256 were closed at once (hvdrun still running then)",
      alive_after_flood and closed >= 1000 - 256 - refused)
print(f"control_server_attack_test: {time.monotonic() - start:.1f} s")
if failed:
    print("---- stdout\n" + out + "\n---- stderr\n" + err)
sys.exit(1 if failed else 0)
