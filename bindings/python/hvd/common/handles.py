# SPDX-License-Identifier: Apache-2.0
"""What hvd.torch and hvd.numpy share about reductions and handles."""
import numbers
import operator
import warnings

from hvd import _core
from hvd.common import basics
from hvd.common.basics import Average, Sum


def reduce_op(average, op, fn):
    """Horovod's rule: `average` (deprecated) and `op` are exclusive; default Average."""
    if op is not None and average is not None:
        raise ValueError(f"{fn}: the op parameter supersedes average; pass only one")
    if op is None:
        if average is not None:
            warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                          DeprecationWarning, stacklevel=3)
        op = Average if average is None or average else Sum
    return basics.check_op(op)


def reducescatter_op(op):
    """reducescatter's op: Sum or Average (None means Average); Adasum raises
    NotImplementedError, as Horovod's."""
    op = basics.check_op(Average if op is None else op)
    if op == basics.Adasum:
        raise NotImplementedError("reducescatter does not support Adasum; use op=hvd.Sum or "
                                  "hvd.Average (Adasum is for allreduce)")
    if op not in (Sum, Average):
        raise ValueError("reducescatter supports op=Sum or Average")
    return op


def split_counts(splits, fn="alltoall"):
    """alltoall's `splits` (None, a sequence of integers, or an integer tensor or array) as a
    list of ints. Floating-point, complex or bool splits raise ValueError (as Horovod's
    alltoall), also when their values are whole numbers; other non-integers raise TypeError."""
    if splits is None:
        return []
    what = "splits must hold integers (the rows sent to each rank)"
    dtype = getattr(splits, "dtype", None)
    if _numeric_non_integer(splits):
        raise ValueError(f"{fn}: {what}, got a {type(splits).__name__} of dtype {dtype}; "
                         "convert it to an integer dtype")
    if hasattr(splits, "reshape") and hasattr(splits, "tolist"):
        splits = splits.reshape(-1).tolist()
    if not hasattr(splits, "__iter__"):
        raise TypeError(f"{fn}: {what}: pass one per rank as a list or an integer tensor, got "
                        f"{type(splits).__name__}")
    out = []
    for i, s in enumerate(splits):
        if _numeric_non_integer(s):
            raise ValueError(f"{fn}: {what}, got splits[{i}] = {s!r}")
        try:
            out.append(operator.index(s))
        except TypeError:
            raise TypeError(f"{fn}: {what}, got splits[{i}] of type "
                            f"{type(s).__name__}") from None
    return out


def _numeric_non_integer(x):
    """True for a float, complex or bool number, or a tensor or array of such a dtype."""
    if isinstance(x, bool):
        return True
    if isinstance(x, numbers.Number):
        return not isinstance(x, numbers.Integral)
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return False
    if hasattr(dtype, "is_floating_point"):  # torch.dtype
        return dtype.is_floating_point or dtype.is_complex or str(dtype) == "torch.bool"
    return getattr(dtype, "kind", "O") in ("f", "c", "b")  # numpy: 'O' is checked per item


class Finish:
    """Turns a finished handle into its result (held in the handle's ctx)."""
    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


def poll(handle):
    """True once the collective of `handle` finished. Never blocks."""
    return handle.poll()


# synchronize(handle): waits for `handle` and returns its output (handle.result(), or
# result.fn(handle) when the result is a Finish); raises HorovodInternalError on failure. In C:
# it runs once per collective.
synchronize = _core.fast_synchronize(Finish)


def barrier(process_set=basics.global_process_set):
    """Returns once every rank of the set called barrier()."""
    _core.barrier(basics._set_id(process_set))


def join(device=-1):
    """This rank has no more work: takes part (with zeros / no rows) in the others'
    collectives until every rank joined. Returns the last rank to join. (`device` is accepted
    for Horovod compatibility: joined ranks contribute on the device of each collective.)"""
    return _core.join(0)
