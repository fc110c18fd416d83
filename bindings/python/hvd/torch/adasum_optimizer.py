# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer(op=hvd.Adasum): horovod.torch's _DistributedAdasumOptimizer (0.28).

Each rank steps with the wrapped optimizer on its own gradients; what the ranks combine is the
step, not the gradient: for every parameter the delta (new value - old value) is Adasum-reduced
over the process set and the parameter becomes old + adasum(deltas).

    after the k-th backward pass (k = backward_passes_per_step) reached parameter p:
        old = p;  wrapped.step() on p alone;  delta = p - old;  p = old
        allreduce_async_(delta, op=Adasum)          # overlaps the rest of backward
    step():
        parameters not reached yet: the same local step and allreduce, now
        wait for every allreduce;  p = old + adasum(delta)

The parameter keeps its old value until step() (the local step is only seen through its delta).
With one rank in the set, or on a rank outside it, the optimizer is the wrapped one (no
communication), as Horovod, whose Adasum with one rank is the plain optimizer.
"""
import weakref

import torch

from hvd.common.basics import Adasum
from hvd.torch import mpi_ops

# How often each wire name was given out in this process: a name's first use is the name, later
# ones "name#2", "name#3", ... in the order optimizers register them, never reused. Ranks that
# build their optimizers in the same order agree on every name, whatever each keeps alive (a
# suffix freed by garbage collection would depend on when each rank collects an optimizer).
_wire_uses = {}


class _Slot:
    """One parameter: its hook, its pass count, its reduction in flight."""
    __slots__ = ("param", "name", "group", "passes", "handle", "ctx", "old", "hooks", "acc")

    def __init__(self, param, name, group):
        self.param, self.name = param, name
        # The index of the param group holding it (an index, not the dict: load_state_dict()
        # replaces the dicts, keeping their order).
        self.group = group
        self.passes = 0  # backward passes that reached it since its last reduction
        self.handle = self.ctx = self.old = self.acc = None
        self.hooks = []

    def attach(self, ref):
        def after(*_):
            opt = ref()
            if opt is not None:
                opt._hvd_after_pass(self)

        p = self.param
        if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
            self.hooks.append(p.register_post_accumulate_grad_hook(after))
        else:
            with torch.enable_grad():
                self.acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self.hooks.append(self.acc.register_hook(after))

    def detach(self):
        for h in self.hooks:
            h.remove()
        self.hooks, self.acc = [], None


def _detach_all(slots):
    for sl in slots:
        sl.detach()


def _unique_wire(name):
    k = _wire_uses.get(name, 0) + 1
    _wire_uses[name] = k
    return name if k == 1 else f"{name}#{k}"


class _DistributedAdasumOptimizer:
    """Methods of the subclass DistributedOptimizer(op=hvd.Adasum) creates for the wrapped
    class (see the module docstring)."""

    def _hvd_setup(self, names, settings, passive):
        self._hvd_settings = settings
        self._hvd_names = names
        # One rank in the set, or this rank outside it: the wrapped optimizer, unchanged.
        self._hvd_passive = passive
        self._hvd_slots = []
        self._hvd_add_slots(0)
        weakref.finalize(self, _detach_all, self._hvd_slots)
        # Horovod's public attributes.
        self.backward_passes_per_step = settings.bpps
        self.op = Adasum
        self.gradient_predivide_factor = 1.0
        self.process_set = settings.process_set
        self.sparse_as_dense = settings.sparse_as_dense
        self._compression = settings.compression

    def _hvd_add_slots(self, first_group):
        """Slots (and hooks) for the trainable parameters not held yet of the param groups from
        index `first_group` on; raises ValueError, adding none, for an unnamed (when names were
        given) or non-leaf one."""
        from hvd.torch.optimizer import new_trainable  # optimizer.py imports this module
        seen = {id(sl.param) for sl in self._hvd_slots}
        count = len(seen)
        found = new_trainable(enumerate(self.param_groups[first_group:], first_group),
                              self._hvd_names, seen)
        for _, name, p in found:
            if not p.is_leaf:
                raise ValueError(f"DistributedOptimizer: parameter '{name}' "
                                 f"({p.dtype}{list(p.shape)}) is not a leaf tensor")
        ref = weakref.ref(self)
        for gi, name, p in found:
            wire = _unique_wire("adasum." + (name or f"param.{count}"))
            count += 1
            sl = _Slot(p, wire, gi)
            if not self._hvd_passive:
                sl.attach(ref)
            self._hvd_slots.append(sl)

    @property
    def _parameter_names(self):
        """Horovod's attribute: {parameter: name}: the name given in named_parameters, else the
        wire name ("adasum.param.<n>"); "allreduce.noname.<i>" for a parameter not reduced."""
        wires = {id(sl.param): sl.name for sl in self._hvd_slots}
        out = {}
        for i, p in enumerate(p for g in self.param_groups for p in g["params"]):
            name = None if self._hvd_names is None else self._hvd_names.get(id(p))
            out[p] = name or wires.get(id(p), f"allreduce.noname.{i}")
        return out

    def _hvd_after_pass(self, slot):
        if slot.handle is not None:
            raise RuntimeError(
                f"DistributedOptimizer(op=Adasum): the gradient of '{slot.name}' was computed more "
                f"than backward_passes_per_step ({self.backward_passes_per_step}) times before "
                "step(); raise backward_passes_per_step to accumulate gradients locally, or call "
                "step() after each pass")
        slot.passes += 1
        if slot.passes >= self.backward_passes_per_step:
            self._hvd_start(slot)

    def _hvd_start(self, slot):
        """The wrapped optimizer's step on slot's parameter alone; its delta starts its
        Adasum allreduce and the parameter gets its old value back."""
        p = slot.param
        params = [g["params"] for g in self.param_groups]
        with torch.no_grad():
            old = p.detach().clone()
            try:
                for gi, g in enumerate(self.param_groups):
                    g["params"] = [p] if gi == slot.group else []
                self._hvd_base.step(self)
            finally:
                for g, ps in zip(self.param_groups, params):
                    g["params"] = ps
            delta = p.detach() - old
            p.copy_(old)
            wire, ctx = self._hvd_settings.compression.compress(delta)
        slot.old, slot.ctx = old, ctx
        slot.handle = mpi_ops.allreduce_async_(wire, name=slot.name, op=Adasum,
                                               process_set=self._hvd_settings.process_set)

    def synchronize(self):
        """Completes the update: parameters whose reduction has not started (fewer than
        backward_passes_per_step passes, or no gradient on this rank: a zero delta unless the
        wrapped optimizer moves it anyway) step locally and start theirs now; then every
        parameter becomes old + adasum(delta). Raises HorovodInternalError (after waiting for
        all) when a reduction failed."""
        if self._hvd_passive:
            return
        for sl in self._hvd_slots:
            if sl.handle is None:
                self._hvd_start(sl)
        error = None
        for sl in self._hvd_slots:
            handle, old, ctx = sl.handle, sl.old, sl.ctx
            sl.handle = sl.old = sl.ctx = None
            sl.passes = 0
            try:
                delta = self._hvd_settings.compression.decompress(mpi_ops.synchronize(handle), ctx)
            except Exception as e:  # noqa: BLE001: waited for all, the first one raised
                error = error or e
                continue
            with torch.no_grad():
                sl.param.copy_(old.add_(delta.to(old.dtype)))
        if error is not None:
            raise error

    def skip_synchronize(self):
        """Refused with Adasum (as Horovod): the wrapped optimizer steps during backward, so
        nothing done to the gradients between synchronize() and step() would count."""
        raise RuntimeError("DistributedOptimizer(op=Adasum): skip_synchronize() is not supported: "
                           "the local step happens during backward(), before gradients could be "
                           "changed; call step() (it synchronizes) without it")

    def step(self, closure=None):
        """Evaluates the closure (if any), then synchronize(): every parameter becomes its old
        value plus the Adasum of the ranks' local steps. Returns the closure's loss."""
        if self._hvd_passive:
            return self._hvd_base.step(self, closure) if closure is not None else \
                self._hvd_base.step(self)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.synchronize()
        return loss

    def zero_grad(self, *args, **kwargs):
        """The wrapped zero_grad(); passes counted towards backward_passes_per_step are dropped.
        Raises RuntimeError while a reduction is in flight (a backward pass completed a step
        that step() has not applied yet), as Horovod."""
        busy = next((sl.name for sl in self._hvd_slots if sl.handle is not None), None)
        if busy is not None:
            raise RuntimeError(
                f"DistributedOptimizer(op=Adasum): zero_grad() was called after backward() "
                f"started the reduction of '{busy}' and before step(); call step() first")
        for sl in self._hvd_slots:
            sl.passes = 0
        return self._hvd_base.zero_grad(self, *args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        """Changes backward_passes_per_step; passes counted so far restart from zero."""
        if int(passes) != passes or passes < 1:
            raise ValueError(f"DistributedOptimizer: backward_passes_per_step must be an integer "
                             f">= 1, got {passes!r}")
        self.backward_passes_per_step = int(passes)
        self._hvd_settings = self._hvd_settings._replace(bpps=int(passes))
        for sl in self._hvd_slots:
            sl.passes = 0

    def add_param_group(self, param_group):
        """The wrapped optimizer's add_param_group; the new parameters are reduced too."""
        self._hvd_base.add_param_group(self, param_group)
        try:
            self._hvd_add_slots(len(self.param_groups) - 1)
        except Exception:
            self.param_groups.pop()
            raise


def is_power_of_two(n):
    return n >= 1 and n & (n - 1) == 0
