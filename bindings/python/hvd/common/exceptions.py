# SPDX-License-Identifier: Apache-2.0
"""Exceptions raised by hvd's Python API."""
from hvd._core import HorovodInternalError

#: hvd's own name for the same class.
HvdInternalError = HorovodInternalError


class HostsUpdatedInterrupt(RuntimeError):
    """Elastic training: the hosts changed; raised by State.commit()/check_host_updates()."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


class ElasticStateError(RuntimeError):
    """Elastic training: the job's committed state cannot be trusted or kept: its state directory
    is not the job's private directory, a snapshot in it is not authentic (changed, truncated,
    an older format, or written without the job's key), or a commit could not be written (the
    message names the directory and its free space). Not a HorovodInternalError: a restart cannot
    fix it, so the job ends with it."""


__all__ = ["ElasticStateError", "HorovodInternalError", "HvdInternalError",
           "HostsUpdatedInterrupt"]
