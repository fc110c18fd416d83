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


__all__ = ["HorovodInternalError", "HvdInternalError", "HostsUpdatedInterrupt"]
