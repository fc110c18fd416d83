# SPDX-License-Identifier: Apache-2.0
"""hvd.numpy: hvd's collectives on numpy arrays, for plain numpy and for frameworks hvd has no
module for (through their numpy interop).

The names, arguments and results follow hvd.torch (Horovod's) without compression. Arrays cross
into hvd's C++ runtime as (data pointer, dtype code, shape): numpy's bool, int8-64, uint8,
float16, float32 and float64 in native byte order (numpy has no bfloat16). Outputs whose size
negotiation decides (allgather, alltoall, reducescatter) are hvd's memory viewed by numpy,
without a copy. Non-contiguous inputs are copied; in-place forms write the result back into
them on synchronize().

    import hvd.numpy as hvd
    hvd.init()
    total = hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum)
"""

import numpy as np

from hvd import _core
from hvd.common.basics import (  # noqa: F401
    Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, ccl_built, cross_rank,
    cross_size, cuda_built, ddl_built, get_process_set_ids_and_ranks, gloo_built, gloo_enabled,
    global_process_set, gpu_support, init, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
    mpi_enabled, mpi_threads_supported, nccl_built, rank, remove_process_set, rocm_built,
    shutdown, size, start_timeline, stop_timeline, _set_id)
from hvd.common.handles import (  # noqa: F401
    Finish, barrier, join, poll, reduce_op, reducescatter_op, split_counts, synchronize)
from hvd.common.exceptions import HorovodInternalError, HvdInternalError  # noqa: F401
from hvd.common.refusal import refusing

_CODES = {np.dtype(t): c for t, c in (
    (np.uint8, 0), (np.int8, 1), (np.int16, 2), (np.int32, 3), (np.int64, 4), (np.float16, 5),
    (np.float32, 7), (np.float64, 8), (np.bool_, 9))}


def _code(arr):
    code = _CODES.get(arr.dtype)
    if code is None:
        raise ValueError(f"hvd.numpy: arrays of dtype {arr.dtype} are not supported; use one of "
                         + ", ".join(str(d) for d in _CODES) + " (native byte order)")
    return code


def _desc(a):
    """The core's description of a C-contiguous host array."""
    return (a.ctypes.data, _code(a), a.shape, -1, 0)


def _contiguous(arr):
    """`arr` (anything np.asarray takes) as a C-contiguous array; copies only when needed."""
    a = np.asarray(arr)
    return a if a.flags.c_contiguous else np.array(a, order="C")


def _inplace(arr, fn):
    """(buffer the collective writes, array to copy it back into, or None)."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{fn}: needs a numpy array to write into, not {type(arr).__name__}")
    if not arr.flags.writeable:
        raise ValueError(f"{fn}: the array is read-only")
    if arr.flags.c_contiguous:
        return arr, None
    return np.array(arr, order="C"), arr


# Shared with hvd.numpy / hvd.torch (hvd.common.handles).
_op = reduce_op
_Finish = Finish


def _write_back(h, buf, target):
    """In-place forms: the handle's result is `target` (copied from `buf` when they differ)."""
    if target is None:
        h.ctx = buf
    else:
        h.hold(target)
        h.ctx = _Finish(lambda _h: _copy_back(target, buf))
    return h


def _copy_back(target, buf):
    np.copyto(target, buf)
    return target


# ---- allreduce ---------------------------------------------------------------------------

@refusing("allreduce")
def allreduce_async(array, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Asynchronous allreduce into a new array; synchronize(handle) returns it."""
    op = _op(average, op, "allreduce_async")
    src = _contiguous(array)
    out = np.empty_like(src, order="C")
    d = _desc(src)
    h = _core.allreduce_async((src, out), d[0], d[1], d[2], d[3], d[4], out.ctypes.data,
                              name or "", op, prescale_factor, postscale_factor,
                              _set_id(process_set))
    h.ctx = out
    return h


@refusing("allreduce")
def allreduce(array, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduction (Average by default) of `array` over the ranks, as a new array."""
    return synchronize(allreduce_async(array, average, name, op, prescale_factor,
                                       postscale_factor, process_set))


@refusing("allreduce")
def allreduce_async_(array, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """In-place asynchronous allreduce; synchronize(handle) returns `array`."""
    op = _op(average, op, "allreduce_async_")
    buf, target = _inplace(array, "allreduce_async_")
    d = _desc(buf)
    h = _core.allreduce_async(buf, d[0], d[1], d[2], d[3], d[4], 0, name or "", op,
                              prescale_factor, postscale_factor, _set_id(process_set))
    return _write_back(h, buf, target)


@refusing("allreduce")
def allreduce_(array, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce; returns `array`."""
    return synchronize(allreduce_async_(array, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grouped(bufs, name, op, pre, post, process_set):
    return _core.grouped_allreduce_async(tuple(bufs), [_desc(b) for b in bufs], name or "", op,
                                         pre, post, _set_id(process_set))


@refusing("allreduce", grouped=True, items="arrays")
def grouped_allreduce_async(arrays, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Allreduces negotiated together, into new arrays; synchronize(handle) returns the list."""
    op = _op(average, op, "grouped_allreduce_async")
    outs = [np.array(a, order="C") for a in arrays]  # copies: reduced in place
    h = _grouped(outs, name, op, prescale_factor, postscale_factor, process_set)
    h.ctx = outs
    return h


@refusing("allreduce", grouped=True, items="arrays")
def grouped_allreduce(arrays, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Allreduces negotiated together; returns the list of new arrays."""
    return synchronize(grouped_allreduce_async(arrays, average, name, op, prescale_factor,
                                               postscale_factor, process_set))


@refusing("allreduce", grouped=True, items="arrays")
def grouped_allreduce_async_(arrays, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped allreduce; synchronize(handle) returns the list of `arrays`."""
    op = _op(average, op, "grouped_allreduce_async_")
    arrays = list(arrays)
    pairs = [_inplace(a, "grouped_allreduce_async_") for a in arrays]
    bufs = [p[0] for p in pairs]
    h = _grouped(bufs, name, op, prescale_factor, postscale_factor, process_set)
    if all(t is None for _, t in pairs):
        h.ctx = arrays
        return h
    h.hold(arrays)

    def finish(_h):
        for buf, target in pairs:
            if target is not None:
                np.copyto(target, buf)
        return arrays
    h.ctx = _Finish(finish)
    return h


@refusing("allreduce", grouped=True, items="arrays")
def grouped_allreduce_(arrays, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped allreduce; returns the list of `arrays`."""
    return synchronize(grouped_allreduce_async_(arrays, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ---- allgather, broadcast, alltoall, reducescatter ---------------------------------------

def _output(h, dtype):
    """The handle's hvd-owned output as a numpy array (no copy)."""
    return h.output_numpy(dtype)


def _sized(h, src):
    dtype = src.dtype
    h.ctx = _Finish(lambda hh: _output(hh, dtype))
    return h


def _group_handle(hs, srcs):
    """One handle for a grouped size-deciding op: the last part carries the result."""
    if not hs:
        raise ValueError("grouped op on an empty list of arrays")
    last, others = hs[-1], hs[:-1]
    last.hold(others)
    dtypes = [s.dtype for s in srcs]

    def finish(h):  # h is `last`: the closure holds only the others (no reference cycle)
        for o in others:
            o.wait()
        return [_output(o, d) for o, d in zip(others + [h], dtypes)]
    last.ctx = _Finish(finish)
    return last


@refusing("allgather")
def allgather_async(array, name=None, process_set=global_process_set):
    """Asynchronous allgather along dim 0 (sizes may differ per rank)."""
    src = _contiguous(array)
    return _sized(_core.allgather_async(src, _desc(src), name or "", _set_id(process_set)), src)


@refusing("allgather")
def allgather(array, name=None, process_set=global_process_set):
    """Every rank's array concatenated along dim 0, in rank order (hvd's memory, no copy)."""
    return synchronize(allgather_async(array, name, process_set))


@refusing("allgather", grouped=True, items="arrays")
def grouped_allgather_async(arrays, name=None, process_set=global_process_set):
    """Allgathers negotiated together; synchronize(handle) returns the list of outputs."""
    srcs = [_contiguous(a) for a in arrays]
    hs = _core.grouped_allgather_async(tuple(srcs), [_desc(s) for s in srcs], name or "",
                                       _set_id(process_set))
    return _group_handle(hs, srcs)


@refusing("allgather", grouped=True, items="arrays")
def grouped_allgather(arrays, name=None, process_set=global_process_set):
    """Allgathers negotiated together; returns the list of outputs."""
    return synchronize(grouped_allgather_async(arrays, name, process_set))


@refusing("broadcast")
def broadcast_async_(array, root_rank, name=None, process_set=global_process_set):
    """In-place asynchronous broadcast from `root_rank` (a global rank, a member of the set)."""
    buf, target = _inplace(array, "broadcast_async_")
    h = _core.broadcast_async(buf, _desc(buf), root_rank, name or "", _set_id(process_set))
    return _write_back(h, buf, target)


@refusing("broadcast")
def broadcast_(array, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns `array`."""
    return synchronize(broadcast_async_(array, root_rank, name, process_set))


@refusing("broadcast")
def broadcast_async(array, root_rank, name=None, process_set=global_process_set):
    """Asynchronous broadcast into a new array."""
    out = np.array(array, order="C")
    h = _core.broadcast_async(out, _desc(out), root_rank, name or "", _set_id(process_set))
    h.ctx = out
    return h


@refusing("broadcast")
def broadcast(array, root_rank, name=None, process_set=global_process_set):
    """`root_rank`'s array, as a new array on every rank."""
    return synchronize(broadcast_async(array, root_rank, name, process_set))


@refusing("alltoall")
def alltoall_async(array, splits=None, name=None, process_set=global_process_set):
    """Asynchronous alltoall: splits[j] rows go to rank j (equal split when None).
    synchronize(handle) returns (output, received_splits)."""
    src = _contiguous(array)
    counts = split_counts(None if splits is None else np.asarray(splits), "alltoall")
    h = _core.alltoall_async(src, _desc(src), counts, name or "", _set_id(process_set))
    dtype = src.dtype

    def finish(hh):
        return _output(hh, dtype), np.array(hh.received_splits, dtype=np.int32)
    h.ctx = _Finish(finish)
    return h


@refusing("alltoall")
def alltoall(array, splits=None, name=None, process_set=global_process_set):
    """Alltoall. Returns the output, and also the received splits when `splits` was given
    (as Horovod)."""
    out, received = synchronize(alltoall_async(array, splits, name, process_set))
    return out if splits is None else (out, received)


@refusing("reducescatter")
def reducescatter_async(array, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Asynchronous reducescatter along dim 0; this rank gets its slice."""
    op = reducescatter_op(op)
    src = _contiguous(array)
    return _sized(_core.reducescatter_async(src, _desc(src), name or "", op, prescale_factor,
                                            postscale_factor, _set_id(process_set)), src)


@refusing("reducescatter")
def reducescatter(array, name=None, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """This rank's slice (dim 0) of the reduction over the ranks."""
    return synchronize(reducescatter_async(array, name, op, process_set, prescale_factor,
                                           postscale_factor))


@refusing("reducescatter", grouped=True, items="arrays")
def grouped_reducescatter_async(arrays, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters negotiated together; synchronize(handle) returns the list of slices."""
    op = reducescatter_op(op)
    srcs = [_contiguous(a) for a in arrays]
    hs = _core.grouped_reducescatter_async(tuple(srcs), [_desc(s) for s in srcs], name or "",
                                           op, prescale_factor, postscale_factor,
                                           _set_id(process_set))
    return _group_handle(hs, srcs)


@refusing("reducescatter", grouped=True, items="arrays")
def grouped_reducescatter(arrays, name=None, op=Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters negotiated together; returns the list of slices."""
    return synchronize(grouped_reducescatter_async(arrays, name, op, process_set,
                                                   prescale_factor, postscale_factor))


__all__ = [
    "Adasum", "Average", "HorovodInternalError", "HvdInternalError", "Max", "Min", "Product",
    "ProcessSet", "Sum", "add_process_set", "allgather", "allgather_async", "allreduce",
    "allreduce_", "allreduce_async", "allreduce_async_", "alltoall", "alltoall_async", "barrier",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "ccl_built", "cross_rank",
    "cross_size", "cuda_built", "ddl_built", "get_process_set_ids_and_ranks", "gloo_built",
    "gloo_enabled", "global_process_set", "gpu_support", "grouped_allgather", "grouped_allgather_async",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "grouped_reducescatter", "grouped_reducescatter_async", "init",
    "is_homogeneous", "is_initialized", "join", "local_rank", "local_size", "mpi_built",
    "mpi_enabled", "mpi_threads_supported", "nccl_built", "poll", "rank", "reducescatter",
    "reducescatter_async", "remove_process_set", "rocm_built", "shutdown", "size",
    "start_timeline", "stop_timeline", "synchronize",
]
