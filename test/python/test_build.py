# SPDX-License-Identifier: Apache-2.0
"""[python] The binding's build contract and run-time timeline."""
import json
import os
import subprocess
import sys
import tempfile

import torch

import hvd
import hvd.torch as hvd_torch
from hvd import _core


def test_extension_links_no_torch_library():
    """One build for every torch version: the extension depends on no libtorch/c10 library
    and its symbols name no torch namespace."""
    libs = subprocess.run(["ldd", _core.__file__], capture_output=True, text=True,
                          check=True).stdout
    assert "libtorch" not in libs and "libc10" not in libs, libs
    syms = subprocess.run(["nm", "-D", "--undefined-only", _core.__file__], capture_output=True,
                          text=True, check=True).stdout
    assert "c10" not in syms and "at::" not in syms and "torch" not in syms.lower()


def test_extension_imports_without_torch():
    """The extension and hvd.common load in an interpreter that never imported torch."""
    code = ("import sys, hvd._core, hvd.common.basics; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("OMPI_", "PMIX_")):
            del env[k]  # a fresh singleton, not a rank of this job
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_package_version():
    assert hvd.__version__


def test_timeline_written_at_run_time():
    """start_timeline/stop_timeline: rank 0 writes a Chrome trace naming the collectives run
    in between; the file is valid JSON once stopped."""
    path = os.path.join(tempfile.gettempdir(), f"hvd_py_timeline_{os.getppid()}.json")
    hvd_torch.start_timeline(path)
    x = torch.ones(8)
    hvd_torch.allreduce_(x, name="timeline.probe", op=hvd_torch.Sum)
    hvd_torch.stop_timeline()
    hvd_torch.allreduce_(x, name="timeline.after_stop", op=hvd_torch.Sum)
    assert torch.equal(x, torch.full((8,), float(hvd_torch.size() ** 2)))
    if hvd_torch.rank() == 0:
        with open(path) as f:
            events = json.load(f)
        # One row (thread) per tensor, named by a thread_name metadata event.
        rows = {e["args"]["name"]: e["tid"] for e in events
                if e["ph"] == "M" and e["name"] == "thread_name"}
        assert "timeline.probe" in rows, rows
        assert "timeline.after_stop" not in rows, rows
        probe = [e for e in events if e["ph"] != "M" and e["tid"] == rows["timeline.probe"]]
        coll = [e for e in probe if e.get("cat") == "collective"]
        done = [e for e in probe if e["name"] == "done"]
        assert len(coll) == 1 and coll[0]["args"]["bytes"] == 32, probe
        assert len(done) == 1 and done[0]["args"]["ok"] is True, probe
        assert not [e for e in events if e.get("cat") == "cycle"]  # not asked for
        os.remove(path)
    hvd_torch.barrier()


def test_timeline_mark_cycles():
    """start_timeline(path, mark_cycles=True): every negotiation round starts with a "cycle"
    marker (Horovod's mark_cycles)."""
    path = os.path.join(tempfile.gettempdir(), f"hvd_py_cycles_{os.getppid()}.json")
    hvd_torch.start_timeline(path, mark_cycles=True)
    x = torch.ones(4)
    for i in range(3):
        hvd_torch.allreduce_(x, name=f"cycles.{i}", op=hvd_torch.Sum)
    hvd_torch.stop_timeline()
    # One more collective: the background thread has let go of the file (closed) after it.
    hvd_torch.allreduce_(x, name="cycles.after_stop", op=hvd_torch.Sum)
    if hvd_torch.rank() == 0:
        with open(path) as f:
            events = json.load(f)
        cycles = [e for e in events if e.get("cat") == "cycle"]
        rounds = [e for e in events if e.get("cat") == "negotiation"]
        assert len(rounds) >= 3 and len(cycles) == len(rounds), (len(cycles), len(rounds))
        assert all(c["ph"] == "i" and c["tid"] == 0 for c in cycles), cycles[:2]
        assert sorted(c["ts"] for c in cycles) == sorted(r["ts"] for r in rounds)
        os.remove(path)
    hvd_torch.barrier()


def test_runtime_stats_count_rounds_and_responses():
    """_core.runtime_stats(): the global set's counters grow with the collectives run."""
    before = _core.runtime_stats()
    x = torch.ones(4)
    for i in range(3):
        hvd_torch.allreduce_(x, name=f"stats.{i}", op=hvd_torch.Sum)
    after = _core.runtime_stats()
    assert set(after) == {"rounds", "full_rounds", "responses", "fused_batches"}
    assert after["responses"] >= before["responses"] + 3
    assert after["rounds"] > before["rounds"]
    assert torch.equal(x, torch.full((4,), float(hvd_torch.size() ** 3)))
