# SPDX-License-Identifier: Apache-2.0
"""[python] tier: every rank runs the same tests in the same order under mpiexec.

hvd is initialised once per run. Each test gets a deadline (PYTEST_HVD_DEADLINE seconds, default
120): a test whose ranks fell out of step ends the run with every thread's traceback (the test
function among them) instead of hanging it.

``@pytest.mark.ranks(n, reason)``: the test needs at least n ranks (a mismatch between ranks, a
process set leaving a rank out, a shard that is not the whole batch) and is skipped, saying
why, in a smaller run (the tier also runs at np 1).
"""
import faulthandler
import os

import pytest

import hvd.torch as hvd

DEADLINE = int(os.environ.get("PYTEST_HVD_DEADLINE", "120"))


def pytest_configure(config):
    hvd.init()
    config.addinivalue_line("markers", "python: [python] tier (pytest under mpiexec)")
    config.addinivalue_line("markers", "ranks(n, reason): needs at least n ranks (reason: why)")


def pytest_unconfigure(config):
    hvd.shutdown()


@pytest.fixture(autouse=True)
def _deadline():
    # A watchdog thread, not SIGALRM: a rank blocked inside hvd (waiting without the GIL for
    # peers that never come) runs no Python signal handler, but the watchdog still fires.
    faulthandler.dump_traceback_later(DEADLINE, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.python)
        needs = item.get_closest_marker("ranks")
        if needs is not None and hvd.size() < needs.args[0]:
            item.add_marker(pytest.mark.skip(
                reason=f"needs at least {needs.args[0]} ranks ({needs.args[1]}); this run has "
                       f"{hvd.size()}"))
