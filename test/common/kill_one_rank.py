#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Runs an elastic job (hvdrun --min-np ...) unchanged and SIGKILLs one of its ranks from the
outside, once the job's output has printed a line matching PATTERN: how make test runs the
elastic examples under a failure without a line of test code in them.

usage: kill_one_rank.py PATTERN RANK PROGRAM_SUBSTRING -- hvdrun ... args
Exits 0 when the job succeeded after the kill and hvdrun started generation 1; 1 otherwise."""
import os
import re
import signal
import subprocess
import sys


def processes():
    """{pid: (ppid, cmdline, environ)} of the processes we may read."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except (OSError, ValueError, IndexError):
            continue
        out[int(name)] = (ppid, cmd, env)
    return out


def find_rank(root, rank, program):
    """The pid of `program` running as `rank` among root's descendants (None when not found)."""
    procs = processes()
    children = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    stack, found = [root], None
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            _, cmd, env = procs[child]
            if (program in cmd and "--rank-wrapper" not in cmd
                    and env.get(b"OMPI_COMM_WORLD_RANK") == str(rank).encode()):
                found = child
            stack.append(child)
    return found


def main():
    pattern, rank, program = re.compile(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed, restarted = False, False
    for line in p.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        restarted |= "starting generation 1" in line
        if not killed and pattern.search(line):
            pid = find_rank(p.pid, rank, program)
            if pid is None:
                print(f"kill_one_rank: rank {rank} of '{program}' not found", flush=True)
                break
            os.kill(pid, signal.SIGKILL)
            killed = True
            print(f"kill_one_rank: SIGKILLed rank {rank} (pid {pid})", flush=True)
    rc = p.wait()
    ok = killed and restarted and rc == 0
    print(f"kill_one_rank: killed {killed}, generation 1 started {restarted}, exit {rc}: "
          f"{'ok' if ok else 'FAILED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
