# SPDX-License-Identifier: Apache-2.0
"""[python][fault] A collective aborted while the executor is inside it keeps its tensors.

Run by ctest as `mpiexec -np 2 --enable-recovery python3 abort_buffers.py` (python.abort_buffers).
Rank 1 submits an in-place Sum allreduce of a tensor whose memory it cannot read (PROT_NONE):
the collective is negotiated on both ranks, rank 1's executor faults on the first read and the
process dies inside it, while rank 0's executor waits in MPI_Allreduce for data that never comes.
Rank 0's hvd notices the death (its peer monitor) and aborts: the handle finishes at once with
an error naming rank 1, but `released` stays False, since the executor is still inside the call
that writes into the tensor (finished is not released). Dropping the handle and the tensor must
not free it: hvd parks it (the graveyard) for as long as the executor holds it, here for good.
Prints one "FAULT-TEST PASS|FAIL" line per rank that lives."""
import ctypes
import gc
import mmap
import os
import sys
import time
import weakref

import torch

import hvd.torch as hvd
from hvd import _core

N_FLOATS = 1 << 14  # 64 KiB: four pages
RANK = [-1]  # this process's rank, still known after hvd.shutdown()


def unreadable_tensor():
    """A float32 tensor whose pages have no access: the first read kills the process."""
    mm = mmap.mmap(-1, N_FLOATS * 4)
    t = torch.frombuffer(mm, dtype=torch.float32)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(t.data_ptr(), N_FLOATS * 4, 0) != 0:
        raise OSError(ctypes.get_errno(), "mprotect(PROT_NONE) failed")
    return t, mm


def done(ok, what):
    print(f"FAULT-TEST {'PASS' if ok else 'FAIL'} (rank {RANK[0]}, abort_buffers): {what}",
          flush=True)
    os._exit(0 if ok else 1)  # the background thread stays stuck in MPI: no finalize


def victim():
    t, _mm = unreadable_tensor()
    print("abort_buffers: rank 1 submits a tensor it cannot read; it dies in the executor",
          flush=True)
    hvd.allreduce_async_(t, name="abort.buffers", op=hvd.Sum)
    time.sleep(30)
    done(False, "rank 1 is still alive 30 s after submitting an unreadable tensor")


def survivor():
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    t = torch.full((N_FLOATS,), 1.0)
    watch = weakref.ref(t)
    t0 = time.monotonic()
    h = hvd.allreduce_async_(t, name="abort.buffers", op=hvd.Sum)
    error = ""
    try:
        hvd.synchronize(h)
    except hvd.HorovodInternalError as e:
        error = str(e)
    failed_s = time.monotonic() - t0
    finished, released = h.poll(), h.released
    check(error != "", "synchronize returned although rank 1 died inside the collective")
    check("rank 1" in error, f"the error does not name rank 1: {error!r}")
    check(failed_s < 5.0, f"the failure took {failed_s:.2f} s (bound 5 s)")
    # Finished (the abort), not released (the executor is still inside MPI_Allreduce, which
    # may write into `t`): `released` is not `finished`.
    check(finished, "poll() is False after synchronize raised")
    check(not released, "released is True while the executor is still inside the collective")
    parked_before = _core.graveyard_size()
    del t, h
    gc.collect()
    check(watch() is not None, "the tensor was freed while the executor may still write it")
    check(_core.graveyard_size() == parked_before + 1,
          f"the dropped handle was not parked (graveyard {_core.graveyard_size()}, "
          f"was {parked_before})")
    time.sleep(0.5)  # the dead peer never answers: the executor never returns, nothing is freed
    check(watch() is not None, "the tensor was freed 0.5 s later, the executor still inside")
    t1 = time.monotonic()
    hvd.shutdown()
    shutdown_s = time.monotonic() - t1
    check(shutdown_s < 2.0, f"shutdown took {shutdown_s:.2f} s (bound 2 s)")
    check(watch() is not None and _core.graveyard_size() >= 1,
          "shutdown freed the tensor the stuck executor holds")
    done(not failures, f"failed {failed_s * 1000:.0f} ms after submitting, shutdown "
         f"{shutdown_s * 1000:.0f} ms; " + ("; ".join(failures) or f"error: {error[:200]}"))


def main():
    hvd.init()
    RANK[0] = hvd.rank()
    if hvd.size() != 2:
        done(False, f"needs exactly 2 ranks, got {hvd.size()}")
    # Every rank connected (the peer monitor too) before anything dies.
    out = hvd.allreduce(torch.ones(2), name="abort.warmup", op=hvd.Sum)
    if out.tolist() != [2.0, 2.0]:
        done(False, f"warm-up allreduce gave {out.tolist()}")
    if hvd.rank() == 1:
        victim()
    else:
        survivor()


if __name__ == "__main__":
    sys.exit(main())
