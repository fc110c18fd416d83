# SPDX-License-Identifier: Apache-2.0
"""The TCP listeners of a process, read from /proc (no ss, no root needed for one's own)."""
import os
import socket


def listeners(pid):
    """The (dotted IPv4 address, port) pairs process `pid` listens on: its socket inodes from
    /proc/<pid>/fd matched against /proc/net/tcp's LISTEN (0A) rows; empty when it is gone."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    found = set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            w = line.split()
            if w[3] == "0A" and w[9] in inodes:
                address, port = w[1].split(":")
                found.add((socket.inet_ntoa(bytes.fromhex(address)[::-1]), int(port, 16)))
    return found
