# SPDX-License-Identifier: Apache-2.0
"""[python] tier: every rank runs the same tests in the same order under mpiexec.

hvd is initialised once per run. Each test gets a deadline (HVD_TEST_DEADLINE seconds, default
120): a test whose ranks fell out of step fails with its name instead of hanging the run.
"""
import faulthandler
import os
import signal
import sys

import pytest

import hvd.torch as hvd

DEADLINE = int(os.environ.get("HVD_TEST_DEADLINE", "120"))


def pytest_configure(config):
    hvd.init()
    config.addinivalue_line("markers", "python: [python] tier (pytest under mpiexec)")


def pytest_unconfigure(config):
    hvd.shutdown()


@pytest.fixture(autouse=True)
def _deadline(request):
    def expired(signum, frame):
        sys.stderr.write(f"[rank {hvd.rank()}] test {request.node.nodeid} exceeded its "
                         f"{DEADLINE} s deadline (ranks out of step?)\n")
        faulthandler.dump_traceback()
        os._exit(3)
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(DEADLINE)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.python)
