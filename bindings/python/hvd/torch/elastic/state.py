# SPDX-License-Identifier: Apache-2.0
"""TorchState and the handler registry (horovod.torch.elastic.state, 0.28).

A TorchState's keyword arguments whose type has a handler in the registry (torch modules,
optimizers, ElasticSampler by default) are saved, restored and synced by their handler; the rest
are plain picklable fields (ObjectState). ``set_handler_registry`` adds handlers for other types:
a list of (type, handler class), first match wins.
"""
import torch

from hvd.common import basics
from hvd.common.elastic import ObjectState
from hvd.torch.elastic.sampler import ElasticSampler
from hvd.torch.elastic.saved import copy_into, dumps, loads
from hvd.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                 broadcast_parameters)


class StateHandler:
    """Saves, restores and syncs one value of a TorchState. ``saved`` is what ``save()`` kept;
    it must survive torch.save/torch.load (it travels in the committed snapshot)."""

    def __init__(self, value):
        self.value = value
        self.saved = None

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def set_value(self, value):
        self.value = value
        self.save()


class _StateDictHandler(StateHandler):
    """A value with state_dict()/load_state_dict(): saved as a deep copy of its state dict,
    whose tensors are reused at the next save (hvd.torch.elastic.saved.copy_into)."""

    def __init__(self, value):
        super().__init__(value)
        self.save()

    def save(self):
        self.saved = copy_into(self.value.state_dict(), self.saved)

    def restore(self):
        # A copy: load_state_dict may keep the tensors it is given (an optimizer's state does
        # in newer torch), and the next save() writes into the saved ones.
        self.value.load_state_dict(copy_into(self.saved))


class ModelStateHandler(_StateDictHandler):
    def restore(self):
        self.value.load_state_dict(self.saved)  # copies into the module's own tensors

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(_StateDictHandler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(StateHandler):
    def __init__(self, sampler):
        super().__init__(sampler)
        self.save()

    def save(self):
        self.saved = copy_into(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(copy_into(self.saved))

    def sync(self):
        # Every rank's processed indices, then rank 0's epoch: all ranks re-partition alike.
        state = self.value.state_dict()
        union = set()
        for indices in allgather_object(state["processed_indices"],
                                        name="hvd.elastic.sampler_indices"):
            union |= set(indices)
        state["processed_indices"] = union
        self.value.load_state_dict(broadcast_object(state, root_rank=0,
                                                    name="hvd.elastic.sampler_state"))


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _handler_for(value):
    for value_type, handler_type in _handler_registry:
        if isinstance(value, value_type):
            return handler_type(value)
    return None


class TorchState(ObjectState):
    """State of a PyTorch job: ``TorchState(model, optimizer, epoch=0, batch=0, ...)``."""

    _copy_field = staticmethod(copy_into)

    def __init__(self, model=None, optimizer=None, **kwargs):
        if model is not None:
            kwargs["model"] = model
        if optimizer is not None:
            kwargs["optimizer"] = optimizer
        handlers, fields = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                fields[name] = value
            else:
                handlers[name] = handler
        self._handlers = handlers
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(broadcast_object, basics.rank, allgather_object, **fields)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers and name in handlers:
            handlers[name].set_value(value)
        object.__setattr__(self, name, value)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def _dumps(self):
        return dumps({"handlers": {k: h.saved for k, h in self._handlers.items()},
                      "fields": self._saved_state})

    def _loads(self, payload):
        data = loads(payload)
        missing = sorted(set(self._handlers) - set(data["handlers"]))
        if missing:
            raise ValueError(f"hvd.elastic: the committed snapshot has no state for {missing}; "
                             "construct TorchState with the same fields in every generation")
        for name, handler in self._handlers.items():
            handler.saved = data["handlers"][name]
        self._saved_state = data["fields"]
