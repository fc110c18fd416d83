# SPDX-License-Identifier: Apache-2.0
"""Collectives on torch tensors: horovod.torch.mpi_ops' names, arguments and results.

A tensor crosses into hvd's C++ runtime as (data pointer, dtype code, shape, device, stream):
no torch C++ ABI is involved, so one build serves every torch version. Handles keep their
tensors alive until the collective finished; `synchronize(handle)` returns the result.
Outputs whose size negotiation decides (allgather, alltoall, reducescatter) are hvd's memory,
handed to torch through DLPack without a copy.
"""

import torch
from torch.utils.dlpack import from_dlpack

from hvd import _core
from hvd.common import basics
from hvd.common.basics import (Adasum, Average, Max, Min, Product, Sum, global_process_set,
                               _set_id)
from hvd.common.handles import (  # noqa: F401
    Finish, barrier, join, poll, reduce_op, reducescatter_op, split_counts, synchronize)
from hvd.common.exceptions import HorovodInternalError
from hvd.common.refusal import MISTAKES, refuse, refusing
from hvd.torch.compression import Compression

_DTYPES = {
    torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
    torch.float16: 5, torch.bfloat16: 6, torch.float32: 7, torch.float64: 8, torch.bool: 9,
}


def _code(tensor):
    code = _DTYPES.get(tensor.dtype)
    if code is None:
        raise ValueError(f"hvd: tensors of dtype {tensor.dtype} are not supported; use one of "
                         + ", ".join(str(d) for d in _DTYPES))
    return code


def _desc(t):
    """The core's description of a contiguous tensor."""
    if t.device.type == "cpu":
        return (t.data_ptr(), _code(t), t.shape, -1, 0)
    if t.device.type != "cuda":
        raise ValueError(f"hvd: tensors on {t.device} are not supported (cpu or cuda)")
    stream = torch.cuda.current_stream(t.device).cuda_stream
    return (t.data_ptr(), _code(t), t.shape, t.device.index, stream)


def _tensor(t, fn):
    """`t` when hvd can send it; a clear error for what it cannot (before any attribute of a
    non-tensor or a sparse tensor is touched)."""
    if not isinstance(t, torch.Tensor):
        hint = f" (for a {type(t).__name__} of tensors use grouped_{fn})" \
            if isinstance(t, (list, tuple)) else ""
        raise TypeError(f"hvd {fn}: expected a torch.Tensor, got {type(t).__name__}{hint}")
    if t.layout != torch.strided:
        raise ValueError(f"hvd {fn}: {t.layout} tensors are not supported here (dense, strided "
                         "tensors only); use sparse_allreduce_async for sparse gradients or "
                         "convert with .to_dense()")
    return t


# Shared with hvd.numpy / hvd.torch (hvd.common.handles).
_op = reduce_op
_Finish = Finish


def _contiguous_inplace(tensor):
    """(buffer to reduce, copy-back) for in-place forms on non-contiguous tensors."""
    if tensor.is_contiguous():
        return tensor, None
    return tensor.contiguous(), tensor


# ---- allreduce ---------------------------------------------------------------------------

_PLAIN_OPS = frozenset((Sum, Average, Min, Max, Product))
_allreduce_host = _core.allreduce_host


@refusing("allreduce")
def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """In-place asynchronous allreduce; synchronize(handle) returns `tensor`."""
    _tensor(tensor, "allreduce_async_")
    if average is not None or op not in _PLAIN_OPS:
        op = _op(average, op, "allreduce_async_")
    ps = 0 if process_set is global_process_set else _set_id(process_set)
    if tensor.is_cpu and tensor.is_contiguous():
        # A host tensor on a process set: one raw C call; the handle's ctx (the result) is
        # `keep`, i.e. the tensor itself.
        code = _DTYPES.get(tensor.dtype)
        if code is not None:
            return _allreduce_host(tensor, tensor.data_ptr(), code, tensor.shape, name, op,
                                   prescale_factor, postscale_factor, ps)
    buf, back = _contiguous_inplace(tensor)
    d = _desc(buf)
    h = _core.allreduce_async(buf, d[0], d[1], d[2], d[3], d[4], 0, name or "", op,
                              prescale_factor, postscale_factor, ps)
    if back is not None:
        h.hold(tensor)
        h.ctx = _Finish(lambda _h: tensor.copy_(buf))
    return h


# The call made once per gradient: its common case (a contiguous CPU tensor, a plain op, the
# global process set, no `average`) runs in C; every other call goes to the function above.
_allreduce_async_py = allreduce_async_
allreduce_async_ = _core.fast_allreduce_(_allreduce_async_py, _DTYPES, global_process_set,
                                         (torch.Tensor, torch.nn.Parameter))


@refusing("allreduce")
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Asynchronous allreduce into a new tensor; synchronize(handle) returns it."""
    op = _op(average, op, "allreduce_async")
    src = _tensor(tensor, "allreduce_async").contiguous()
    out = torch.empty_like(src, memory_format=torch.contiguous_format)
    d = _desc(src)
    h = _core.allreduce_async((src, out), d[0], d[1], d[2], d[3], d[4], out.data_ptr(),
                              name or "", op, prescale_factor, postscale_factor,
                              _set_id(process_set))
    h.ctx = out
    return h


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.args = (op, prescale, postscale, process_set)
        return synchronize(allreduce_async(tensor, None, name, op, prescale, postscale,
                                           process_set))

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, ps = ctx.args
        return allreduce(grad, op=op, prescale_factor=pre, postscale_factor=post,
                         process_set=ps), None, None, None, None, None


@refusing("allreduce")
def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduce into a new tensor (differentiable: the gradient is allreduced the same way)."""
    op = _op(average, op, "allreduce")
    wire, cctx = compression.compress(_tensor(tensor, "allreduce"))
    out = _Allreduce.apply(wire, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, cctx)


@refusing("allreduce")
def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grouped_allreduce(tensors, outs, name, op, pre, post, process_set):
    descs = [_desc(t) for t in tensors]
    if outs is None:
        return _core.grouped_allreduce_async(tuple(tensors), descs, name or "", op, pre, post,
                                             _set_id(process_set))
    return _core.grouped_allreduce_async(tuple(tensors) + tuple(outs), descs, name or "", op,
                                         pre, post, _set_id(process_set))


@refusing("allreduce", grouped=True)
def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped allreduce: all tensors negotiated and reduced together."""
    op = _op(average, op, "grouped_allreduce_async_")
    tensors = [_tensor(t, "grouped_allreduce_async_") for t in tensors]
    bufs = [t if t.is_contiguous() else t.contiguous() for t in tensors]
    h = _grouped_allreduce(bufs, None, name, op, prescale_factor, postscale_factor, process_set)
    if all(b is t for b, t in zip(bufs, tensors)):
        h.ctx = tensors
    else:
        h.hold(tensors)

        def finish(_h):
            for b, t in zip(bufs, tensors):
                if b is not t:
                    t.copy_(b)
            return tensors
        h.ctx = _Finish(finish)
    return h


@refusing("allreduce", grouped=True)
def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Grouped allreduce into new tensors; synchronize(handle) returns the list."""
    op = _op(average, op, "grouped_allreduce_async")
    outs = [_tensor(t, "grouped_allreduce_async").clone(memory_format=torch.contiguous_format) for t in tensors]
    h = _grouped_allreduce(outs, None, name, op, prescale_factor, postscale_factor, process_set)
    h.ctx = outs
    return h


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        return tuple(synchronize(grouped_allreduce_async(list(tensors), None, name, op,
                                                         prescale, postscale, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, ps = ctx.args
        red = grouped_allreduce(list(grads), op=op, prescale_factor=pre, postscale_factor=post,
                                process_set=ps)
        return (None, None, None, None, None) + tuple(red)


@refusing("allreduce", grouped=True)
def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Grouped allreduce into new tensors (differentiable); returns the list."""
    op = _op(average, op, "grouped_allreduce")
    pairs = [compression.compress(_tensor(t, "grouped_allreduce")) for t in tensors]
    outs = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                   *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


@refusing("allreduce", grouped=True)
def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped allreduce; returns the list."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


class _SparseHandle:
    """The handle of sparse_allreduce_async: callable, as Horovod's (``handle()`` returns the
    result), and usable with poll() and synchronize() like every other handle."""
    __slots__ = ("_indices", "_values", "ctx")

    def __init__(self, indices, values, finish):
        self._indices, self._values, self.ctx = indices, values, _Finish(finish)

    def poll(self):
        return self._indices.poll() and self._values.poll()

    def wait(self):
        self._values.wait()
        self._indices.wait()

    def result(self):
        self.wait()
        return self.ctx

    def __call__(self):
        return synchronize(self)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Allreduce of a sparse COO tensor as Horovod does it: the indices and values of every
    rank are allgathered and summed (divided by the set size for Average) on coalescing.
    Returns a handle; ``synchronize(handle)`` or ``handle()`` gives the sparse result."""
    try:
        op = basics.check_op(op)
        if op not in (Sum, Average):
            raise ValueError("sparse_allreduce_async supports op=Sum or Average")
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.sparse_coo:
            raise ValueError("sparse_allreduce_async takes a sparse COO tensor, got "
                             + (f"a {tensor.layout} {tensor.dtype}{list(tensor.shape)} tensor"
                                if isinstance(tensor, torch.Tensor) else type(tensor).__name__)
                             + " (use allreduce for dense tensors)")
    except MISTAKES as e:
        # Both allgathers this call makes are refused, so that every rank's call fails with
        # this rank's mistake and the automatic names stay in step.
        for part in ("indices", "values"):
            refuse("allgather", "" if name is None else f"{name}.{part}", 0,
                   f"sparse_allreduce_async: {type(e).__name__}: {e}", process_set)
        raise
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = t._indices().t().contiguous()  # [nnz, ndim]: rows are gathered
    values = t._values().contiguous()
    # Unnamed: automatic names, so several unnamed calls may be in flight at once.
    hi = allgather_async(indices, name=None if name is None else f"{name}.indices",
                         process_set=process_set)
    hv = allgather_async(values, name=None if name is None else f"{name}.values",
                         process_set=process_set)
    size = tensor.size()
    n = _set_size(process_set)

    def finish(h):
        idx = synchronize(h._indices).t()
        val = synchronize(h._values)
        if op == Average:
            val = val / n
        return torch.sparse_coo_tensor(idx, val, size)
    return _SparseHandle(hi, hv, finish)


def _set_size(process_set):
    return _core.size() if _set_id(process_set) == 0 else process_set.size()


def _set_rank(process_set):
    return _core.rank() if _set_id(process_set) == 0 else process_set.rank()


# ---- allgather, broadcast, alltoall, reducescatter ----------------------------------------

def _from_output(h, like):
    """The handle's hvd-owned output as a tensor of `like`'s dtype (no copy)."""
    out = from_dlpack(h.output_dlpack())
    if out.dtype != like.dtype:
        out = out.view(like.dtype)  # bool travels as uint8
    return out


def _sized(h, like):
    h.ctx = _Finish(lambda hh: _from_output(hh, like))
    return h


@refusing("allgather")
def allgather_async(tensor, name=None, process_set=global_process_set):
    """Asynchronous allgather along dim 0 (sizes may differ per rank)."""
    src = _tensor(tensor, "allgather_async").contiguous()
    return _sized(_core.allgather_async(src, _desc(src), name or "", _set_id(process_set)), src)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        # Horovod's convention (since 0.22): the gradients of the ranks are averaged.
        ps = ctx.process_set
        reduced = allreduce(grad, op=Average, process_set=ps)
        rows = synchronize(allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                                           process_set=ps))
        r = _set_rank(ps)
        offset = int(rows[:r].sum()) if r > 0 else 0
        return reduced.narrow(0, offset, ctx.rows), None, None


def _rows(tensors):
    return [t.shape[0] if t.dim() else 1 for t in tensors]


@refusing("allgather")
def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation of every rank's tensor along dim 0, in rank order (differentiable)."""
    return _Allgather.apply(_tensor(tensor, "allgather"), name, process_set)


@refusing("allgather", grouped=True)
def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Allgathers negotiated together; synchronize(handle) returns the list of outputs."""
    srcs = [_tensor(t, "grouped_allgather_async").contiguous() for t in tensors]
    hs = _core.grouped_allgather_async(tuple(srcs), [_desc(t) for t in srcs], name or "",
                                       _set_id(process_set))
    return _group_handle(hs, srcs)


def _group_handle(hs, likes):
    """One handle for a grouped size-deciding op: the last part carries the result."""
    if not hs:
        raise ValueError("grouped op on an empty list of tensors")
    last, others = hs[-1], hs[:-1]
    last.hold(others)

    def finish(h):  # h is `last`: the closure holds only the others (no reference cycle)
        for o in others:
            o.wait()
        return [_from_output(o, t) for o, t in zip(others + [h], likes)]
    last.ctx = _Finish(finish)
    return last


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = _rows(tensors)
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        ps = ctx.process_set
        reduced = grouped_allreduce([g.contiguous() for g in grads], op=Average, process_set=ps)
        rows = synchronize(allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                                           process_set=ps))
        r = _set_rank(ps)
        offsets = rows[:r].sum(0).tolist() if r > 0 else [0] * len(ctx.rows)
        return (None, None) + tuple(g.narrow(0, int(o), n)
                                    for g, o, n in zip(reduced, offsets, ctx.rows))


@refusing("allgather", grouped=True)
def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers negotiated together (differentiable); returns the list of outputs."""
    if not tensors:  # refused on every rank, as the async form does
        return synchronize(grouped_allgather_async(tensors, name, process_set))
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


@refusing("broadcast")
def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place asynchronous broadcast from `root_rank` (a global rank, a member of the set)."""
    buf, back = _contiguous_inplace(_tensor(tensor, "broadcast_async_"))
    h = _core.broadcast_async(buf, _desc(buf), root_rank, name or "", _set_id(process_set))
    if back is None:
        h.ctx = tensor
    else:
        h.hold(tensor)
        h.ctx = _Finish(lambda _h: tensor.copy_(buf))
    return h


@refusing("broadcast")
def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Asynchronous broadcast into a new tensor."""
    out = _tensor(tensor, "broadcast_async").clone(memory_format=torch.contiguous_format)
    h = _core.broadcast_async(out, _desc(out), root_rank, name or "", _set_id(process_set))
    h.ctx = out
    return h


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad, op=Average, process_set=ctx.process_set)
        if _core.rank() != ctx.root:  # root_rank is a global rank
            reduced = reduced * 0
        return reduced, None, None, None


@refusing("broadcast")
def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Broadcast into a new tensor (differentiable)."""
    return _Broadcast.apply(_tensor(tensor, "broadcast"), root_rank, name, process_set)


@refusing("broadcast")
def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns `tensor`."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


@refusing("alltoall")
def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Asynchronous alltoall: splits[j] rows go to rank j (equal split when None).
    synchronize(handle) returns (output, received_splits)."""
    src = _tensor(tensor, "alltoall_async").contiguous()
    h = _core.alltoall_async(src, _desc(src), split_counts(splits, "alltoall"), name or "",
                             _set_id(process_set))

    # Horovod: received splits have the dtype of `splits` when it is a tensor, else int32.
    rdtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32

    def finish(hh):
        return _from_output(hh, src), torch.tensor(hh.received_splits, dtype=rdtype)
    h.ctx = _Finish(finish)
    return h


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set = process_set
        out, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _unused):
        back, _ = synchronize(alltoall_async(grad.contiguous(), ctx.received,
                                             process_set=ctx.process_set))
        return back, None, None, None


@refusing("alltoall")
def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Alltoall (differentiable). Returns the output, and also the received splits when
    `splits` was given (as Horovod)."""
    out, received = _Alltoall.apply(_tensor(tensor, "alltoall"), splits, name, process_set)
    if splits is None:
        return out
    return out, received


@refusing("reducescatter")
def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Asynchronous reducescatter along dim 0; this rank gets its slice."""
    op = reducescatter_op(op)
    src = _tensor(tensor, "reducescatter_async").contiguous()
    return _sized(_core.reducescatter_async(src, _desc(src), name or "", op, prescale_factor,
                                            postscale_factor, _set_id(process_set)), src)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, pre, post):
        ctx.args = (op, process_set, pre, post)
        return synchronize(reducescatter_async(tensor, name, op, process_set, pre, post))

    @staticmethod
    def backward(ctx, grad):
        op, ps, pre, post = ctx.args
        full = synchronize(allgather_async(grad, process_set=ps))
        return full * _rs_grad_scale(op, ps, pre, post), None, None, None, None, None


def _rs_grad_scale(op, process_set, pre, post):
    """Horovod's convention for the gradient of reducescatter: the allgathered gradient,
    times the set size for Sum (as if the ranks' losses were averaged), times the scales."""
    return (_set_size(process_set) if op == Sum else 1) * pre * post


@refusing("reducescatter")
def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatter (differentiable); returns this rank's slice of the reduction."""
    op = reducescatter_op(op)
    wire, cctx = compression.compress(_tensor(tensor, "reducescatter"))
    out = _Reducescatter.apply(wire, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, cctx)


@refusing("reducescatter", grouped=True)
def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    op = reducescatter_op(op)
    srcs = [_tensor(t, "grouped_reducescatter_async").contiguous() for t in tensors]
    hs = _core.grouped_reducescatter_async(tuple(srcs), [_desc(t) for t in srcs], name or "",
                                           op, prescale_factor, postscale_factor,
                                           _set_id(process_set))
    return _group_handle(hs, srcs)


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, pre, post, *tensors):
        ctx.args = (op, process_set, pre, post)
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op,
                                                             process_set, pre, post)))

    @staticmethod
    def backward(ctx, *grads):
        op, ps, pre, post = ctx.args
        full = synchronize(grouped_allgather_async(list(grads), process_set=ps))
        scale = _rs_grad_scale(op, ps, pre, post)
        return (None, None, None, None, None) + tuple(f * scale for f in full)


@refusing("reducescatter", grouped=True)
def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reducescatters negotiated together (differentiable); returns the list of slices."""
    op = reducescatter_op(op)
    if not tensors:  # refused on every rank, as the async form does
        return synchronize(grouped_reducescatter_async(tensors, name, op, process_set))
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                       *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


__all__ = [
    "Adasum", "Average", "Max", "Min", "Product", "Sum", "HorovodInternalError",
    "allgather", "allgather_async", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "alltoall", "alltoall_async", "barrier", "broadcast", "broadcast_",
    "broadcast_async", "broadcast_async_", "grouped_allgather", "grouped_allgather_async",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "grouped_reducescatter", "grouped_reducescatter_async", "join",
    "poll", "reducescatter", "reducescatter_async", "sparse_allreduce_async", "synchronize",
]
