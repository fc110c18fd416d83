# SPDX-License-Identifier: Apache-2.0
"""hvd.torch.elastic: horovod.torch.elastic's API (0.28) on hvd's MPI runtime.

``@hvd.elastic.run`` with a ``TorchState`` (model, optimizer, sampler and any picklable fields)
runs under ``hvdrun --min-np N ...``: a failure ends the generation and the next one resumes
from the last ``commit()`` (hvd.common.elastic explains how; docs/elastic.md for users).
"""
from hvd.common.elastic import (  # noqa: F401
    FATAL_EXIT_CODE, RESTART_EXIT_CODE, HostUpdateResult, report_progress, run_fn)
from hvd.common.elastic import ObjectState as _CommonObjectState
from hvd.common.elastic import State  # noqa: F401
from hvd.common.exceptions import (  # noqa: F401
    ElasticStateError, HorovodInternalError, HostsUpdatedInterrupt)
from hvd.torch.elastic.sampler import ElasticSampler  # noqa: F401
from hvd.torch.elastic.state import (  # noqa: F401
    ModelStateHandler, OptimizerStateHandler, SamplerStateHandler, StateHandler, TorchState,
    get_handler_registry, set_handler_registry)
from hvd.torch.functions import allgather_object, broadcast_object
from hvd.common import basics


class ObjectState(_CommonObjectState):
    """Picklable fields as keyword arguments: ``hvd.elastic.ObjectState(epoch=0, batch=0)``."""

    def __init__(self, **kwargs):
        super().__init__(broadcast_object, basics.rank, allgather_object, **kwargs)


def run(func):
    """Decorator: ``func(state, ...)`` resumes from the newest commit in every generation."""
    return run_fn(func)


__all__ = ["ElasticSampler", "ElasticStateError", "FATAL_EXIT_CODE", "HorovodInternalError",
           "HostsUpdatedInterrupt", "ModelStateHandler", "ObjectState", "OptimizerStateHandler",
           "RESTART_EXIT_CODE", "SamplerStateHandler", "State", "StateHandler", "TorchState",
           "get_handler_registry", "report_progress", "run", "set_handler_registry"]
