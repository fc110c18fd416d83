# SPDX-License-Identifier: Apache-2.0
"""A small elastic job for elastic_fatal_test.py: hvd.common.elastic's ObjectState and run_fn on
hvd.numpy (no torch, so a generation starts in about a second). The state is a step count,
committed every 2 steps; each step is one allreduce. At --fail-step (every generation):
  value     rank --fail-rank raises ValueError
  type      rank --fail-rank raises TypeError
  mismatch  every rank allreduces rank + 1 values (the ranks disagree: MismatchError)
  invalid   rank --fail-rank broadcasts from a root rank that does not exist
  runtime   rank --fail-rank raises RuntimeError (not fatal: hvdrun restarts it)
Prints "FATAL_JOB gen=G rank=R done steps=N" at the end.

usage: fatal_job.py --steps N --fail-step S --fail-how HOW [--fail-rank R]"""
import argparse
import os
import pickle

import numpy as np

import hvd.numpy as hvdnp
from hvd.common import basics, elastic


def bcast_object(obj, root_rank, name=None):
    """`obj` of rank `root_rank` on every rank (pickled; its size first)."""
    name = name or "fatal_job.bcast"
    mine = basics.rank() == root_rank
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if mine else np.zeros(0, np.uint8)
    n = hvdnp.broadcast(np.array([data.size], dtype=np.int64), root_rank, name=name + ".n")
    buf = data.copy() if mine else np.zeros(int(n[0]), np.uint8)
    return pickle.loads(hvdnp.broadcast(buf, root_rank, name=name + ".data").tobytes())


def fail(how, step, rank, size):
    if how == "value":
        raise ValueError(f"fatal_job: step {step} cannot run (simulated bug)")
    if how == "type":
        raise TypeError(f"fatal_job: step {step} got a str (simulated bug)")
    if how == "runtime":
        raise RuntimeError(f"fatal_job: step {step} failed (simulated)")
    if how == "mismatch":
        hvdnp.allreduce(np.ones(rank + 1), name="fatal_job.mismatch")
    if how == "invalid":
        hvdnp.broadcast(np.zeros(1), root_rank=size + 3, name="fatal_job.invalid")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--fail-step", type=int, default=-1)
    p.add_argument("--fail-rank", type=int, default=1)
    p.add_argument("--fail-how", default="value")
    a = p.parse_args()
    gen = os.environ.get("HVD_ELASTIC_GENERATION", "0")
    basics.init()
    state = elastic.ObjectState(bcast_object, basics.rank, step=0)

    @elastic.run_fn
    def train(state):
        while state.step < a.steps:
            rank = basics.rank()
            if state.step == a.fail_step and (a.fail_how == "mismatch" or rank == a.fail_rank):
                fail(a.fail_how, state.step, rank, basics.size())
            hvdnp.allreduce(np.ones(3), name="fatal_job.step")
            state.step += 1
            if state.step % 2 == 0:
                state.commit()

    train(state)
    print(f"FATAL_JOB gen={gen} rank={basics.rank()} done steps={state.step}", flush=True)


if __name__ == "__main__":
    main()
