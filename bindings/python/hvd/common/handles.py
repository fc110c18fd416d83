# SPDX-License-Identifier: Apache-2.0
"""What hvd.torch and hvd.numpy share about reductions and handles."""
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
    """reducescatter's op: Sum or Average (None means Average)."""
    op = basics.check_op(Average if op is None else op)
    if op not in (Sum, Average):
        raise ValueError("reducescatter supports op=Sum or Average")
    return op


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
