# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer: horovod.torch.DistributedOptimizer (0.28) on hvd's gradient registry.

    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    for x, y in loader:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()

Each parameter's allreduce starts during backward(), as soon as autograd has accumulated its
gradient, so communication overlaps the rest of backward; step() waits for the reductions of its
own parameters, then applies them with the wrapped optimizer's update rule.

Parameters are tracked in one process-wide registry keyed by tensor identity, the same C++
registry the libtorch DistributedOptimizer uses (hvd/torch/_grad_registry.py is its torch side):
several optimizers holding one parameter (a shared encoder, a GAN's discriminator reached by the
generator's loss) share one hook and one reduction per backward pass, and each of them applies the
same reduced gradient. Gradients accumulate as in plain PyTorch: several backward passes before
step(), ``module.zero_grad()``, ``retain_graph=True``, per-optimizer backward/step/zero_grad all
give the gradients one process on the whole batch computes. Each optimizer may be given its
model's own ``named_parameters()``, even when two models' names collide (both DCGAN models have
``main.0.weight``): names are made unique on the wire, identically on every rank; no renaming and
no ``synchronize()`` calls are needed. Horovod's explicit style (distinct names per optimizer,
``synchronize()``, ``skip_synchronize()``) keeps working and gives the same result.
"""
import collections
import contextlib
import itertools
import warnings
import weakref

import torch

from hvd import _core
from hvd.common import basics
from hvd.common.basics import Adasum, Average, Sum, global_process_set
from hvd.torch import _grad_registry, adasum_optimizer, mpi_ops
from hvd.torch.compression import Compression

_owner_ids = itertools.count()

#: How a parameter is reduced; optimizers sharing a parameter must agree (bucket_view and
#: bucket_cap_mb excepted: a parameter held by several optimizers is never bucketed).
Settings = collections.namedtuple(
    "Settings", "op compression bpps predivide process_set sparse_as_dense bucket_view "
    "bucket_cap_mb")


def _check_settings(compression, bpps, op, predivide, sparse_as_dense, process_set,
                    bucket_view=False, bucket_cap_mb=None):
    op = op if op == Adasum else basics.check_op(op)
    if op not in (Average, Sum, Adasum):
        raise ValueError("DistributedOptimizer: op must be hvd.Average, hvd.Sum or hvd.Adasum")
    if int(bpps) != bpps or bpps < 1:
        raise ValueError(f"DistributedOptimizer: backward_passes_per_step must be an integer "
                         f">= 1, got {bpps!r}")
    if not predivide > 0:
        raise ValueError(f"DistributedOptimizer: gradient_predivide_factor must be > 0, got "
                         f"{predivide!r}")
    if predivide != 1.0 and op != Average:
        raise ValueError("DistributedOptimizer: gradient_predivide_factor is only supported with "
                         "op=hvd.Average")
    if not (hasattr(compression, "compress") and hasattr(compression, "decompress")):
        raise ValueError("DistributedOptimizer: compression must be a Compressor such as "
                         "hvd.Compression.none or hvd.Compression.fp16")
    basics._set_id(process_set)  # TypeError / ValueError for an unusable process set
    if bucket_cap_mb is not None and not (isinstance(bucket_cap_mb, (int, float)) and
                                          bucket_cap_mb > 0):
        raise ValueError(f"DistributedOptimizer: bucket_cap_mb must be a number > 0 (MiB), got "
                         f"{bucket_cap_mb!r}")
    return Settings(op, compression, int(bpps), float(predivide), process_set,
                    bool(sparse_as_dense), bool(bucket_view), bucket_cap_mb)


def _names_by_id(named_parameters):
    """{id(tensor): name} from (name, tensor) pairs; None when no names were given."""
    if named_parameters is None:
        return None
    named = list(named_parameters)
    if any(not isinstance(x, tuple) or len(x) != 2 for x in named):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters()")
    by_name, out = {}, {}
    for name, t in named:
        if by_name.setdefault(name, t) is not t:
            raise ValueError(f"DistributedOptimizer: two different tensors are named '{name}' in "
                             "named_parameters; parameter names must be unique")
        out.setdefault(id(t), name)
    return out


def _split(n, k):
    """k contiguous, nearly equal index ranges covering range(n) (empty ones dropped)."""
    d, r = divmod(n, k)
    bounds = [i * d + min(i, r) for i in range(k + 1)]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(k) if bounds[i + 1] > bounds[i]]


def _make_groups(num_groups, groups, specs):
    """Index lists into `specs` (only groups of two or more parameters)."""
    if groups is None and num_groups:
        groups = num_groups
    if groups is None or (isinstance(groups, int) and groups == 0):
        return []
    if isinstance(groups, int):
        if groups < 0:
            raise ValueError("groups should be a non-negative integer or a list of lists of "
                             "parameters")
        return [g for g in _split(len(specs), groups) if len(g) > 1]
    by_id = {id(p): i for i, (_, p) in enumerate(specs)}
    by_name = {n: i for i, (n, _) in enumerate(specs) if n is not None}
    used, out = set(), []
    for group in groups:
        idx = []
        for member in group:
            i = by_name.get(member) if isinstance(member, str) else (
                by_id.get(id(member)) if isinstance(member, torch.Tensor) else None)
            if i is None:
                raise ValueError(f"DistributedOptimizer: groups member {member!r:.60} is not a "
                                 "trainable parameter (tensor or name) of this optimizer")
            if i in used:
                raise ValueError("DistributedOptimizer: a parameter can only appear once in "
                                 f"groups ('{specs[i][0]}')")
            used.add(i)
            idx.append(i)
        if len(idx) > 1:
            out.append(idx)
    return out


def new_trainable(indexed_groups, names, seen):
    """[(group index, name or None, param)] of the trainable parameters of `indexed_groups`
    ((index, param group) pairs) whose id is not in `seen`, each once (`seen` grows). `names`
    ({id: name}, or None when none were given): a parameter without one is a ValueError."""
    out = []
    for gi, group in indexed_groups:
        for pi, p in enumerate(group["params"]):
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            name = None if names is None else names.get(id(p))
            if names is not None and name is None:
                raise ValueError(
                    f"DistributedOptimizer: named_parameters was given, but parameter {pi} of "
                    f"param group {gi} ({p.dtype}{list(p.shape)}, Python object id {id(p)}) "
                    "is not named; pass the names of all the optimizer's parameters, or none")
            out.append((gi, name, p))
    return out


class _DistributedOptimizer:
    """Methods of the subclass DistributedOptimizer() creates for the wrapped class."""

    def _hvd_setup(self, named_parameters, settings, num_groups, groups):
        self._hvd_owner = next(_owner_ids)
        self._hvd_label = f"DistributedOptimizer#{self._hvd_owner}({self._hvd_base.__name__})"
        self._hvd_settings = settings
        self._hvd_names = _names_by_id(named_parameters)
        self._hvd_sync = True
        self._hvd_synchronized = False
        # A rank outside the process set communicates nothing and steps locally (as Horovod).
        self._hvd_local = process_set_excludes_me(settings.process_set)
        self._hvd_entries = None
        specs = self._hvd_specs(self.param_groups)
        groups = _make_groups(num_groups, groups, specs)
        if self._hvd_sparse_only() and not settings.sparse_as_dense:
            groups = []  # a grouped allreduce is dense: SparseAdam's gradients go one by one
        if not self._hvd_local:
            self._hvd_entries = _grad_registry.add(self._hvd_owner, self._hvd_label, specs,
                                                   settings, groups, self._hvd_sparse_only())
        # Horovod's public attributes.
        self.backward_passes_per_step = settings.bpps
        self.op = settings.op
        self.gradient_predivide_factor = settings.predivide
        self.process_set = settings.process_set
        self.sparse_as_dense = settings.sparse_as_dense
        self._compression = settings.compression
        if not self._hvd_local:
            weakref.finalize(self, _core.registry_remove, self._hvd_owner, self._hvd_entries)

    @property
    def _parameter_names(self):
        """Horovod's attribute: {parameter: name} for this optimizer's parameters, unique and
        equal on every rank: the names given in named_parameters, else the names the reductions
        use ("param.<n>" in registration order); a parameter never reduced (requires_grad
        False, or this rank outside the process set) gets "allreduce.noname.<index>"."""
        entries = self._hvd_entries
        reduced = {} if entries is None else \
            {id(slot.param): name for slot, name in zip(entries.slots, entries.names)}
        out = {}
        for i, p in enumerate(p for g in self.param_groups for p in g["params"]):
            name = None if self._hvd_names is None else self._hvd_names.get(id(p))
            out[p] = name or reduced.get(id(p), f"allreduce.noname.{i}")
        return out

    def _hvd_sparse_only(self):
        """True for optimizers that accept sparse gradients only (SparseAdam)."""
        return issubclass(self._hvd_base, torch.optim.SparseAdam)

    def _hvd_specs(self, param_groups):
        """[(name or None, param)] of the trainable parameters not registered yet."""
        seen = set() if self._hvd_entries is None else \
            {id(slot.param) for slot in self._hvd_entries.slots}
        return [(name, p) for _, name, p in new_trainable(enumerate(param_groups), self._hvd_names,
                                                          seen)]

    def synchronize(self):
        """Waits until every parameter of this optimizer holds its reduced gradient. Reductions
        not yet started (no gradient on this rank this step, or fewer than
        backward_passes_per_step passes) start now, contributing the current .grad (zeros when it
        is None); the ranks then agree (one small allreduce) on how many reductions each
        parameter had, and those with fewer contribute zeros, whatever passes reached it where.
        Raises HorovodInternalError when a reduction failed, and on every rank when a gradient
        was zeroed after uneven passes (see zero_grad())."""
        if not self._hvd_local:
            _core.registry_synchronize(self._hvd_owner, self._hvd_entries)
        self._hvd_synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Inside this context step() does not synchronize: for ``synchronize()``, then e.g.
        gradient clipping, then ``with opt.skip_synchronize(): opt.step()``."""
        previous = self._hvd_sync
        self._hvd_sync = False
        try:
            yield
        finally:
            self._hvd_sync = previous

    def step(self, closure=None):
        """Unless inside skip_synchronize(): synchronize(), then the wrapped optimizer's step.
        With a closure (e.g. LBFGS), every evaluation of the closure is followed by
        synchronize() and the loss it returns is averaged over the ranks, so that every rank
        takes the same decisions. Inside skip_synchronize(), raises RuntimeError when a
        reduction of this optimizer is still in flight (call synchronize() first)."""
        if self._hvd_sync and self._hvd_synchronized:
            warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context "
                          "after optimizer.synchronize(). This can cause training slowdown. You "
                          "may want to consider using optimizer.skip_synchronize() context if you "
                          "use optimizer.synchronize() in your code.")
        if not self._hvd_sync:
            busy = None if self._hvd_local else \
                _core.registry_first_in_flight(self._hvd_entries)
            if busy is not None:
                raise RuntimeError(
                    f"step() of '{self._hvd_label}' was called inside skip_synchronize() while the "
                    f"allreduce of the gradient of '{busy}' is in flight; call "
                    "synchronize() first")
            loss = self._hvd_base.step(self, closure) if closure is not None else \
                self._hvd_base.step(self)
        elif closure is None:
            self.synchronize()
            loss = self._hvd_base.step(self)
        else:
            self.synchronize()
            loss = self._hvd_base.step(self, self._hvd_wrap(closure))
        self._hvd_synchronized = False
        if not self._hvd_local:
            _core.registry_consume(self._hvd_owner, self._hvd_entries)
        return loss

    def _hvd_wrap(self, closure):
        def evaluate():
            loss = closure()
            self.synchronize()
            if loss is None or self._hvd_local:
                return loss
            name = self._hvd_label + ".closure_loss"
            ps = self._hvd_settings.process_set
            if isinstance(loss, torch.Tensor):
                return mpi_ops.allreduce(loss.detach(), name=name, op=Average, process_set=ps)
            t = torch.tensor([float(loss)], dtype=torch.float64)
            return float(mpi_ops.allreduce(t, name=name, op=Average, process_set=ps)[0])
        return evaluate

    def zero_grad(self, *args, **kwargs):
        """Zeroes the gradients as the wrapped optimizer does. Reductions of this optimizer's
        gradients still in flight (a backward pass after its last step(), e.g. through another
        optimizer's loss) are discarded, never waited for; accumulated backward passes are
        dropped. Never raises. (Zeroing after passes that reached a parameter on some ranks
        only would pair a discarded gradient with a kept one across ranks: the next step() or
        synchronize() then raises on every rank; step or synchronize first in that case.
        ``model.zero_grad()`` works too: the next backward pass sees it.)"""
        if not self._hvd_local:
            _core.registry_quiesce(self._hvd_entries)
        return self._hvd_base.zero_grad(self, *args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        """Changes backward_passes_per_step; passes counted so far restart from zero."""
        _check_settings(self._compression, passes, self.op, self.gradient_predivide_factor,
                        self.sparse_as_dense, self.process_set)  # raises for invalid passes
        self.backward_passes_per_step = int(passes)
        self._hvd_settings = self._hvd_settings._replace(bpps=int(passes))
        if not self._hvd_local:
            _core.registry_set_backward_passes_per_step(self._hvd_entries, int(passes))

    def add_param_group(self, param_group):
        """The wrapped optimizer's add_param_group; the new parameters are reduced too (named
        from named_parameters when it was given, else automatically)."""
        self._hvd_base.add_param_group(self, param_group)
        try:
            specs = self._hvd_specs(self.param_groups[-1:])
            if not self._hvd_local:
                self._hvd_entries.extend(_grad_registry.add(self._hvd_owner, self._hvd_label,
                                                            specs, self._hvd_settings, [],
                                                            self._hvd_sparse_only()))
        except Exception:
            self.param_groups.pop()
            raise


def process_set_excludes_me(process_set):
    """True when this rank is not a member of `process_set`."""
    return basics._set_id(process_set) != 0 and not process_set.included()


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set, gradient_as_bucket_view=False,
                         bucket_cap_mb=None):
    """Wraps `optimizer` so that step() applies gradients averaged (op=Average) or summed
    (op=Sum) over the ranks of `process_set`.

    Returns an instance of a subclass of ``type(optimizer)`` created for it (isinstance checks,
    param_groups, state, state_dict() and LR schedulers keep working) that shares the wrapped
    optimizer's param groups and state. `named_parameters`: (name, tensor) pairs, usually
    ``model.named_parameters()``; names identify reductions across ranks and must be identical on
    every rank; pairs for tensors the optimizer does not hold are ignored. Without names,
    parameters get "param.<n>" in registration order (construct optimizers in the same order on
    every rank). `compression`: hvd.Compression.none / fp16 / bf16. `backward_passes_per_step`:
    backward passes summed locally before the allreduce. `gradient_predivide_factor` f (Average
    only): gradients are scaled by 1/f before the sum and by f/size after it. `groups`: an int
    (split the parameters into that many contiguous groups) or lists of parameters (tensors or
    names), each reduced as one grouped allreduce; `num_groups` is the older spelling of an int
    `groups`. `sparse_as_dense`: sparse gradients are densified before a plain allreduce (else
    they are allgathered); an optimizer that takes sparse gradients only (SparseAdam) gets them
    sparse again after the reduction (rows of zeros left out), and ignores `groups` unless
    `sparse_as_dense` is set. On a rank outside `process_set` the optimizer communicates nothing
    and steps on the local gradients (as Horovod). `gradient_as_bucket_view` (DDP's name; not
    in Horovod): each gradient is kept as a view into a flat buffer per bucket (parameters of one
    dtype and device, in the order backward produces their gradients, learned on the first step
    and rebuilt when it changes; a bucket closes at `bucket_cap_mb` MiB, default 4), so that a
    bucket is reduced by one allreduce in place, without copies into a fusion buffer and back;
    parameters held by several DistributedOptimizers, in `groups`, or with sparse gradients are
    reduced one by one as without it (see docs/python.md). Raises ValueError for invalid
    options, for two different tensors under one name in `named_parameters`, for a parameter
    missing from a given `named_parameters`, and for a parameter shared with another
    DistributedOptimizer that reduces it differently.

    op=hvd.Adasum (Horovod's Adasum optimizer, hvd/torch/adasum_optimizer.py): each rank steps
    the wrapped optimizer on its own gradients (after `backward_passes_per_step` passes reached a
    parameter, during backward) and the parameters' deltas are Adasum-reduced; step() sets each
    parameter to its old value plus the reduced delta. The learning rate is not scaled by the
    number of ranks. `process_set` must hold a power-of-two number of ranks (ValueError on every
    rank otherwise); `groups`/`num_groups` and `sparse_as_dense` are accepted and change
    nothing (each delta is dense and its own allreduce, which the runtime fuses);
    gradient_predivide_factor and gradient_as_bucket_view raise ValueError; skip_synchronize()
    raises RuntimeError, and so does zero_grad() between a completed pass and step().
    """
    settings = _check_settings(compression, backward_passes_per_step, op,
                               gradient_predivide_factor, sparse_as_dense, process_set,
                               gradient_as_bucket_view, bucket_cap_mb)
    if settings.op == Adasum:
        return _adasum(optimizer, named_parameters, settings)
    return _wrap(optimizer, _DistributedOptimizer,
                 lambda obj: obj._hvd_setup(named_parameters, settings, num_groups, groups))


def _adasum(optimizer, named_parameters, settings):
    """The Adasum optimizer of DistributedOptimizer(op=hvd.Adasum), after its option checks."""
    if settings.bucket_view:
        raise ValueError("DistributedOptimizer: gradient_as_bucket_view is not supported with "
                         "op=hvd.Adasum (the reduced tensors are parameter deltas, not gradients)")
    ps = settings.process_set
    size = ps.size()
    if not adasum_optimizer.is_power_of_two(size):
        raise ValueError(f"DistributedOptimizer: op=hvd.Adasum needs a power-of-two number of "
                         f"ranks in process_set; it has {size} (ranks {ps.ranks}); use a set of "
                         "1, 2, 4, 8, ... ranks")
    passive = size == 1 or process_set_excludes_me(ps)
    names = _names_by_id(named_parameters)
    return _wrap(optimizer, adasum_optimizer._DistributedAdasumOptimizer,
                 lambda obj: obj._hvd_setup(names, settings, passive))


def _wrap(optimizer, methods, setup):
    """An instance of a new subclass of type(optimizer) with the methods of class `methods`,
    sharing `optimizer`'s state, after setup(instance)."""
    base = type(optimizer)
    namespace = {k: v for k, v in methods.__dict__.items()
                 if k not in ("__dict__", "__weakref__")}
    namespace["_hvd_base"] = base
    namespace["__qualname__"] = base.__qualname__
    cls = type(base.__name__, (base,), namespace)
    obj = cls.__new__(cls)
    # An LR scheduler built on `optimizer` before it was wrapped replaced its step by one bound
    # to `optimizer` (an instance attribute): the wrapper keeps its own step (the schedule still
    # applies: param_groups are shared).
    obj.__dict__.update({k: v for k, v in optimizer.__dict__.items() if k != "step"})
    setup(obj)
    return obj


__all__ = ["DistributedOptimizer"]
