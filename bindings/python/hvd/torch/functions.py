# SPDX-License-Identifier: Apache-2.0
"""Broadcasting model and optimizer state, and Python objects (horovod.torch.functions, 0.28).

Every function here is collective over the ranks of `process_set`: all of them must call it,
in the same order, with the same `root_rank` (a global rank, a member of the set, as in Horovod) and `name`.
"""
import io
import pickle

import torch

from hvd.common.basics import Max, global_process_set
from hvd.common.refusal import refuse
from hvd.torch import mpi_ops

try:  # cloudpickle handles lambdas and local classes; plain pickle is the fallback
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - depends on the environment
    _pickler = pickle


def _pairs(params):
    if isinstance(params, dict):
        return sorted(params.items(), key=lambda kv: str(kv[0]))
    if isinstance(params, torch.Tensor):
        raise ValueError("broadcast_parameters: pass model.state_dict(), "
                         "model.named_parameters() or a list of tensors, not one tensor")
    try:
        items = list(params)
    except TypeError:
        raise ValueError(f"broadcast_parameters: invalid params of type {type(params).__name__}")
    return [p if isinstance(p, tuple) else (None, p) for p in items]


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every tensor of `params` with root_rank's, in place. `params`: a state_dict
    (dict name -> tensor, broadcast in sorted name order), or an iterable of (name, tensor)
    pairs such as model.named_parameters(), or of tensors (unnamed: automatic names). A tensor
    that shares its memory with one already listed (tied weights) is sent once."""
    handles, seen = [], set()
    with torch.no_grad():
        for name, p in _pairs(params):
            if not isinstance(p, torch.Tensor):
                raise ValueError(f"broadcast_parameters: '{name}' is a {type(p).__name__}, "
                                 "not a tensor")
            view = (p.data_ptr(), p.dtype, tuple(p.shape), p.stride())
            if p.numel() and view in seen:
                continue  # the same memory under another name (tied weights)
            seen.add(view)
            handles.append(mpi_ops.broadcast_async_(p, root_rank, name=name,
                                                    process_set=process_set))
        for h in handles:
            mpi_ops.synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` on every rank (pickled, sent as bytes; other ranks' `obj` is
    ignored). `name` distinguishes concurrent calls; the default is the same on every rank."""
    name = name or "broadcast_object"
    me = mpi_ops._core.rank()  # root_rank is a global rank, also on a process set
    if me == root_rank:
        try:
            data = _dumps(obj)
        except Exception as e:  # noqa: BLE001 - whatever pickling raises, the others must hear
            # The refusal takes the size broadcast's place: every rank's call fails with it.
            refuse("broadcast", name + ".sz", 0,
                   f"rank {me} (the root) could not pickle the object: {type(e).__name__}: {e}",
                   process_set)
            raise
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        size = torch.zeros(1, dtype=torch.int64)
    mpi_ops.broadcast_(size, root_rank, name=name + ".sz", process_set=process_set)
    if me != root_rank:
        payload = torch.empty(int(size[0]), dtype=torch.uint8)
    mpi_ops.broadcast_(payload, root_rank, name=name + ".t", process_set=process_set)
    if me == root_rank:
        return obj
    return _loads(payload)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj`, in rank order within the set."""
    name = name or "allgather_object"
    payload = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
    sizes = mpi_ops.allgather(torch.tensor([payload.numel()], dtype=torch.int64),
                              name=name + ".sz", process_set=process_set)
    data = mpi_ops.allgather(payload, name=name + ".t", process_set=process_set)
    out, start = [], 0
    for n in sizes.tolist():
        out.append(_loads(data[start:start + n]))
        start += n
    return out


def _dumps(obj):
    buf = io.BytesIO()
    _pickler.dump(obj, buf)
    return buf.getvalue()


def _loads(t):
    return pickle.loads(t.numpy().tobytes())


# ---- optimizer state ------------------------------------------------------------------------

def _describe_state(optimizer, params):
    """Root's view: per parameter index, None (no state) or {key: ("tensor", shape, dtype,
    on_param_device) or ("value", v)} (torch 2.x leaves an empty one for a parameter SGD without
    momentum has stepped); and each param group's options."""
    state = []
    for p in params:
        if p not in optimizer.state:
            state.append(None)
            continue
        entry = {}
        for key, v in optimizer.state[p].items():
            if isinstance(v, torch.Tensor) and not v.is_sparse:
                entry[key] = ("tensor", tuple(v.shape), v.dtype, v.device == p.device)
            else:
                entry[key] = ("value", v if not isinstance(v, torch.Tensor) else v.cpu())
        state.append(entry)
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    shapes = [tuple(p.shape) for p in params]
    return {"state": state, "groups": groups, "shapes": shapes}


def _zero_missing_grads(params, sparse):
    """Zero .grad where it is None (sparse in the first dimension, as nn.Embedding's, for an
    optimizer taking sparse gradients only: a later backward pass accumulates into it)."""
    with torch.no_grad():
        for p in params:
            if p.requires_grad and p.grad is None:
                g = torch.zeros_like(p)
                p.grad = g.to_sparse(min(1, g.dim())) if sparse else g


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Makes every rank's optimizer state and param-group options (lr, momentum, betas, ...)
    equal to root_rank's: tensors (momentum buffers, exp_avg, Adam's 'step' tensor, ...) are
    broadcast into place (allocated where this rank has none yet), non-tensor values are sent
    pickled, and state root_rank does not have is removed, so a rank that has stepped and one
    that has not end alike (when root_rank has not stepped, every rank ends with no state:
    the next step is everyone's first, as in a single process). Works for every torch.optim
    optimizer and for DistributedOptimizer. Raises ValueError on every rank when the ranks'
    optimizers do not hold the same number and shapes of parameters or param groups. As
    Horovod, on a rank whose optimizer has no state yet, the parameters that require grad and
    have no gradient get zero gradients (sparse ones for SparseAdam), so that ``.grad`` can be
    read or broadcast right after."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if not any(p in optimizer.state for p in params):
        _zero_missing_grads(params, isinstance(optimizer, torch.optim.SparseAdam))
    me = mpi_ops._core.rank()  # root_rank is a global rank, also on a process set
    desc = broadcast_object(_describe_state(optimizer, params) if me == root_rank else None,
                            root_rank, name="optimizer_state.desc", process_set=process_set)
    problem = None
    if len(desc["shapes"]) != len(params) or len(desc["groups"]) != len(optimizer.param_groups):
        problem = (f"rank {root_rank} has {len(desc['shapes'])} parameters in "
                   f"{len(desc['groups'])} param groups, this rank {len(params)} in "
                   f"{len(optimizer.param_groups)}")
    else:
        for i, (shape, p) in enumerate(zip(desc["shapes"], params)):
            if tuple(p.shape) != shape:
                problem = (f"parameter {i} has shape {list(shape)} on rank {root_rank} but "
                           f"{list(p.shape)} on this rank")
                break
    failed = mpi_ops.allreduce(torch.tensor([0 if problem is None else 1], dtype=torch.int32),
                               name="optimizer_state.check", op=Max, process_set=process_set)
    if int(failed[0]):
        raise ValueError("broadcast_optimizer_state: the optimizers differ across ranks: "
                         + (problem or "see the message on the other ranks"))
    if me != root_rank:
        for group, options in zip(optimizer.param_groups, desc["groups"]):
            group.update(options)
    handles = []
    with torch.no_grad():
        for i, (p, entry) in enumerate(zip(params, desc["state"])):
            if entry is None:
                optimizer.state.pop(p, None)
                continue
            st = optimizer.state.setdefault(p, {})
            for key in [k for k in st if k not in entry]:
                del st[key]
            for key in sorted(entry, key=str):
                kind = entry[key]
                if kind[0] == "value":
                    if me != root_rank:
                        st[key] = kind[1]
                    continue
                _, shape, dtype, on_param_device = kind
                device = p.device if on_param_device else torch.device("cpu")
                t = st.get(key)
                if not (isinstance(t, torch.Tensor) and tuple(t.shape) == shape
                        and t.dtype == dtype and t.device == device):
                    t = torch.zeros(shape, dtype=dtype, device=device)
                    st[key] = t
                handles.append(mpi_ops.broadcast_async_(t, root_rank,
                                                        name=f"optimizer_state.{i}.{key}",
                                                        process_set=process_set))
        for h in handles:
            mpi_ops.synchronize(h)


__all__ = ["allgather_object", "broadcast_object", "broadcast_optimizer_state",
           "broadcast_parameters"]
