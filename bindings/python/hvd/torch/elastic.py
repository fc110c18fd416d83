# SPDX-License-Identifier: Apache-2.0
"""horovod.torch.elastic's entry points, present so that imports work; hvd has no elastic mode.

Calling any of them raises NotImplementedError: run a fixed set of ranks with ``hvdrun`` (or
``mpirun``) and restart from a checkpoint when the set of hosts changes.
"""

_MESSAGE = ("hvd has no elastic mode ({what}): run a fixed set of ranks with hvdrun or mpirun, "
            "and restart from a checkpoint when hosts change")


def _unsupported(what):
    return NotImplementedError(_MESSAGE.format(what=what))


def run(func):
    """horovod.torch.elastic.run: raises NotImplementedError (when used as a decorator)."""
    raise _unsupported("hvd.elastic.run")


class _Unsupported:
    def __init__(self, *args, **kwargs):
        raise _unsupported(f"hvd.elastic.{type(self).__name__}")


class State(_Unsupported):
    """horovod's elastic State: raises NotImplementedError when constructed."""


class ObjectState(_Unsupported):
    """horovod's elastic ObjectState: raises NotImplementedError when constructed."""


class TorchState(_Unsupported):
    """horovod.torch.elastic.TorchState: raises NotImplementedError when constructed."""


class ElasticSampler(_Unsupported):
    """horovod.torch.elastic.ElasticSampler: raises NotImplementedError when constructed."""


__all__ = ["ElasticSampler", "ObjectState", "State", "TorchState", "run"]
