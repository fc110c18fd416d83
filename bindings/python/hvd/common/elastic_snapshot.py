# SPDX-License-Identifier: Apache-2.0
"""The committed-state file that outlives a generation of an elastic job (no torch).

The file format, its authentication and the resume protocol live once, in C++
(optimizer/include/hvd/optim/elastic_store.h), shared with libtorch programs (hvd::elastic); this
module calls them through the extension. Each host keeps the last committed snapshot of the job's
state in one file, ``<HVD_ELASTIC_STATE_DIR>/snapshot`` (hvdrun makes the directory private to
the job, in /dev/shm by default): commit id, world size at commit, payload length, an
HMAC-SHA256 under the job's key (HVD_ELASTIC_KEY, which only the job's ranks hold), the payload,
written to a temporary and renamed over the live file, so that a process killed in the middle of
a commit leaves either the previous snapshot or the new one, never a mix. A directory that is not
the job's own or a snapshot whose HMAC does not verify raises ElasticStateError naming it, and
nothing of it is returned: a payload is unpickled only when this job wrote it.
"""
import collections

from hvd import _core

FILE_NAME = "snapshot"

Snapshot = collections.namedtuple("Snapshot", "commit_id world_size payload")


def snapshot_path(directory):
    return _core.elastic_snapshot_path(directory)


def write_snapshot(directory, commit_id, world_size, payload):
    """Replaces the host's snapshot with (commit_id, world_size, payload), atomically.
    Raises ElasticStateError naming the directory (and its free space when a write failed)."""
    _core.elastic_write_snapshot(directory, commit_id, world_size, bytes(payload))


def read_snapshot(directory):
    """The host's snapshot, or None when there is none. Raises ElasticStateError when the
    directory is not private or the file is not an authentic snapshot of this job."""
    got = _core.elastic_read_snapshot(directory)
    return None if got is None else Snapshot(*got)


def remove_stale_temporaries(directory):
    """Deletes temporaries left by writers killed mid-commit (the live file is untouched)."""
    _core.elastic_remove_stale_temporaries(directory)


def resume_from_newest(directory):
    """Collective: the newest snapshot among every rank's host (the lowest rank holding it
    broadcasts it), or None when no rank has one. When any rank refuses its host's directory or
    snapshot, every rank raises ElasticStateError (that rank's names the file)."""
    got = _core.elastic_resume(directory)
    return None if got is None else Snapshot(*got)
