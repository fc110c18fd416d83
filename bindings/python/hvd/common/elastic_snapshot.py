# SPDX-License-Identifier: Apache-2.0
"""The committed-state file that outlives a generation of an elastic job (no hvd, no torch).

Each host keeps the last committed snapshot of the job's state in one file,
``<HVD_ELASTIC_STATE_DIR>/snapshot`` (hvdrun puts the directory in /dev/shm, i.e. host memory).
The lowest local rank of the host writes it at every ``commit()``; every rank reads it when a
generation starts. A writer never touches the live file: it writes ``snapshot.tmp.<pid>`` and
renames it over ``snapshot`` (atomic on one file system), so a process killed in the middle of a
commit leaves either the previous snapshot or the new one, never a mix.

File layout (little endian): ``b"HVDSNAP1"``, commit id (u64), world size at commit (u64),
payload length (u64), CRC-32 of the payload (u32), then the payload. The CRC catches a file
damaged by other means (a full /dev/shm, a copy by hand); a damaged file reads as no snapshot.
"""
import collections
import os
import struct
import zlib

MAGIC = b"HVDSNAP1"
_HEADER = struct.Struct("<8sQQQI")
FILE_NAME = "snapshot"

Snapshot = collections.namedtuple("Snapshot", "commit_id world_size payload")


def snapshot_path(directory):
    return os.path.join(directory, FILE_NAME)


def write_snapshot(directory, commit_id, world_size, payload):
    """Replaces the host's snapshot with (commit_id, world_size, payload), atomically."""
    os.makedirs(directory, exist_ok=True)
    final = snapshot_path(directory)
    tmp = f"{final}.tmp.{os.getpid()}"
    header = _HEADER.pack(MAGIC, commit_id, world_size, len(payload), zlib.crc32(payload))
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(payload)
    os.replace(tmp, final)


def read_snapshot(directory):
    """The host's snapshot, or None when there is none or the file is not a whole snapshot."""
    try:
        with open(snapshot_path(directory), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    if len(data) < _HEADER.size:
        return None
    magic, commit_id, world_size, length, crc = _HEADER.unpack_from(data)
    payload = data[_HEADER.size:]
    if magic != MAGIC or len(payload) != length or zlib.crc32(payload) != crc:
        return None
    return Snapshot(commit_id, world_size, payload)


def remove_stale_temporaries(directory):
    """Deletes temporaries left by writers killed mid-commit (the live file is untouched)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(FILE_NAME + ".tmp."):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass
