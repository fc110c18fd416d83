# SPDX-License-Identifier: Apache-2.0
"""Progress reports for hvdrun's step watchdog (runner/include/hvd/runner/elastic_watchdog.h).

Under hvdrun's elastic mode the rank wrapper names a file in ``HVD_ELASTIC_PROGRESS_FILE``,
polls it twice a second and tells hvdrun each time its content changed. A rank reports
progress, i.e. rewrites the file with a growing sequence number:

- when ``@hvd.elastic.run`` starts (this arms the watchdog for the generation),
- at every ``commit()``,
- whenever a collective completed since the last look: a daemon thread compares the runtime's
  count of executed collectives every ``POLL_S`` seconds.

A rank that is stopped (SIGSTOP), cut off (a network partition) or deadlocked completes no
collective, and neither do its peers, which wait for it in theirs: their files stop changing and
hvdrun stops the generation after ``--elastic-step-timeout`` seconds. A long step counts as
progress as long as its collectives complete (every gradient's allreduce does); computing for
longer than the timeout without any collective or commit does not.
"""
import os
import threading

from hvd import _core

POLL_S = 0.5


class _Reporter:
    def __init__(self, path):
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        self._lock = threading.Lock()
        self._seq = 0
        self._responses = -1
        self._thread = threading.Thread(target=self._poll, name="hvd.elastic.progress",
                                        daemon=True)
        self._thread.start()

    def report(self):
        with self._lock:
            self._seq += 1
            os.pwrite(self._fd, b"%020d\n" % self._seq, 0)  # fixed width: no truncation

    def _poll(self):
        stop = threading.Event()
        while not stop.wait(POLL_S):
            try:
                n = _core.runtime_stats()["responses"]
            except Exception:  # not initialized or shut down: nothing completes
                continue
            if n != self._responses:
                self._responses = n
                self.report()


_reporter = None


def report_progress():
    """Tells hvdrun's step watchdog that this rank made progress (no-op outside elastic mode);
    starts the collective-watching thread at the first call."""
    global _reporter
    if _reporter is None:
        path = os.environ.get("HVD_ELASTIC_PROGRESS_FILE")
        if not path:
            return
        _reporter = _Reporter(path)
    _reporter.report()
