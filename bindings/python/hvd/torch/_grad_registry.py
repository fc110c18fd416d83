# SPDX-License-Identifier: Apache-2.0
"""The process-wide gradient registry behind hvd.torch.DistributedOptimizer (private).

The Python twin of optimizer/src/grad_registry.{h,cc}. One entry per parameter tensor (keyed by
the tensor object's identity), whatever number of optimizers hold it. Each entry owns one hook on
the parameter's gradient accumulator (it fires after autograd has added a backward pass's
gradient into ``.grad``) and walks a small state machine once per backward pass ("round"):

    IDLE --hook--> ACCUM (passes < backward_passes_per_step, or waiting for group mates)
         --last pass / synchronize()--> INFLIGHT (allreduce of .grad, or of a compressed copy)
         --synchronize() waits--> REDUCED (.grad holds the reduced gradient)

A REDUCED entry keeps the set of owners that have not stepped on it yet ("pending"); while an
owner is pending, its synchronize() reuses the reduction instead of starting another. The next
hook firing (a new backward pass), a zero_grad() of an owner, or a synchronize() by an owner that
already consumed it starts a new round. synchronize() starts the reductions that did not start
during backward (no gradient on this rank: the current .grad, zeros if None, is contributed), so
every rank submits the same names and nobody hangs.

Submission is bucketed, as DDP does: a hook that makes a reduction ready queues it; the queue is
submitted once it holds BUCKET_BYTES of gradients, and what is left when the backward pass ends
(an autograd final callback), so the runtime fuses a pass's gradients into few rounds instead of
waking once per parameter while backward computes. Reductions are named "grad.<name>" (groups
"grad.group.<first name>+<n-1>"); names are identical on every rank because parameters are
registered in the same order everywhere.
"""
import collections
import gc
import threading
import weakref

import torch

from hvd.common.basics import _OP_NAMES, Average
from hvd.torch import mpi_ops

IDLE, ACCUM, INFLIGHT, REDUCED = "idle", "accumulating", "in flight", "reduced"

#: Ready reductions queued during backward are submitted once they hold this many bytes (and at
#: the end of the backward pass). 0 submits each at once, from its hook.
BUCKET_BYTES = 25 << 20
_SPARSE = object()  # ctx marker: the entry was reduced with sparse_allreduce_async

#: How a parameter is reduced; optimizers sharing a parameter must agree.
Settings = collections.namedtuple(
    "Settings", "op compression bpps predivide process_set sparse_as_dense")


def _describe(s):
    compression = getattr(s.compression, "__name__", s.compression)
    return (f"op {_OP_NAMES.get(s.op, s.op)}, compression {compression}, "
            f"backward_passes_per_step {s.bpps}, gradient_predivide_factor {s.predivide}, "
            f"process set {s.process_set}, sparse_as_dense {s.sparse_as_dense}")


def _same_reduction(a, b):
    return (a.op, a.compression, a.bpps, a.predivide, a.process_set, a.sparse_as_dense) == \
        (b.op, b.compression, b.bpps, b.predivide, b.process_set, b.sparse_as_dense)


def _tensor_str(t):
    return f"{t.dtype}{list(t.shape)} at {hex(id(t))}"


class Entry:
    """One registered parameter (see the module docstring for its states)."""
    __slots__ = ("param", "name", "aliases", "acc", "hook", "owners", "settings", "group",
                 "slot", "state", "passes", "handle", "ctx", "pending", "__weakref__")

    def __init__(self, param, name, settings):
        self.param, self.name, self.settings = param, name, settings
        self.aliases, self.owners, self.pending = [], {}, set()
        self.acc = self.hook = self.group = self.slot = self.handle = self.ctx = None
        self.state, self.passes = IDLE, 0

    def owner_labels(self):
        return ", ".join(f"'{label}'" for label in self.owners.values())


class Group:
    """Parameters reduced together as one grouped allreduce."""
    __slots__ = ("name", "members")

    def __init__(self, name, members):
        self.name, self.members = name, members


class _Problem(Exception):
    pass


class Registry:
    """All registered parameters of this process; every method is thread-safe."""

    def __init__(self):
        self._lock = threading.RLock()
        self._by_id = {}    # id(param) -> Entry (the entry holds the param: ids stay unique)
        self._by_name = {}  # name or alias -> Entry
        self._auto_names = 0
        self._queued = []  # [(entries, group name)] ready, waiting for their bucket
        self._queued_bytes = 0
        self._callback_queued = False

    # ---- registration --------------------------------------------------------------------

    def add(self, owner, label, specs, settings, groups):
        """Registers `specs` [(name or None, param)] for `owner` and returns their entries.
        `groups` are lists of indices into `specs`. Validates everything first and raises
        ValueError (naming the parameter) without changing anything. A conflict with an entry
        whose optimizers are unreachable but not yet collected is retried after gc.collect()."""
        for attempt in range(2):
            with self._lock:
                try:
                    self._validate(label, specs, settings, groups)
                    return self._register(owner, label, specs, settings, groups)
                except _Problem as problem:
                    message = str(problem)
            if attempt == 0:
                gc.collect()
        raise ValueError(message)

    def _validate(self, label, specs, settings, groups):
        mine = {}
        for name, p in specs:
            if not p.is_leaf:
                raise _Problem(f"DistributedOptimizer '{label}': parameter '{name}' "
                               f"({_tensor_str(p)}) is not a leaf tensor")
            e = self._by_id.get(id(p))
            if e is not None and not _same_reduction(e.settings, settings):
                raise _Problem(
                    f"DistributedOptimizer: parameter '{e.name}' is shared by {e.owner_labels()} "
                    f"({_describe(e.settings)}) and '{label}' ({_describe(settings)}); "
                    "optimizers sharing a parameter must reduce it the same way")
            if name is None:
                continue
            other = self._by_name.get(name)
            if other is not None and other.param is not p:
                raise _Problem(
                    f"DistributedOptimizer: two different tensors are registered under the name "
                    f"'{name}': {_tensor_str(other.param)} held by {other.owner_labels()}, and "
                    f"{_tensor_str(p)} given to '{label}'; names must identify one tensor on "
                    "every rank (prefix one model's names, e.g. "
                    "[('gen.' + n, p) for n, p in gen.named_parameters()])")
            if mine.setdefault(name, p) is not p:
                raise _Problem(
                    f"DistributedOptimizer: two different tensors are registered under the name "
                    f"'{name}': {_tensor_str(mine[name])} and {_tensor_str(p)}, both given to "
                    f"'{label}'; names must identify one tensor on every rank")
        for g in groups:
            existing = [self._by_id.get(id(specs[i][1])) for i in g]
            if all(e is None for e in existing):
                continue
            first = existing[0].group if existing[0] is not None else None
            if first is not None and all(e is not None and e.group is first for e in existing) \
                    and len(first.members) == len(g):
                continue  # the identical group, registered by another optimizer
            raise _Problem(
                f"DistributedOptimizer '{label}': the group starting with parameter "
                f"'{specs[g[0]][0]}' contains a parameter that another optimizer already reduces "
                "with a different grouping; give shared parameters identical groups")

    def _register(self, owner, label, specs, settings, groups):
        out = []
        for name, p in specs:
            e = self._by_id.get(id(p))
            if e is None:
                if name is None:
                    name = f"param.{self._auto_names}"
                    self._auto_names += 1
                e = Entry(p, name, settings)
                self._hook(e)
                self._by_id[id(p)] = e
                self._by_name[name] = e
            elif name is not None and name != e.name and name not in e.aliases:
                e.aliases.append(name)
                self._by_name[name] = e
            e.owners.setdefault(owner, label)
            out.append(e)
        for g in groups:
            if out[g[0]].group is not None:
                continue  # validated: identical existing group
            members = [out[i] for i in g]
            grp = Group(f"grad.group.{members[0].name}+{len(members) - 1}", members)
            for m in members:
                m.group = grp
        return out

    def _hook(self, e):
        ref = weakref.ref(e)
        registry = self

        def fire(*_):
            entry = ref()
            if entry is not None:
                registry.on_grad_ready(entry)

        p = e.param
        if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
            e.hook = p.register_post_accumulate_grad_hook(fire)
        else:
            with torch.enable_grad():
                e.acc = p.expand_as(p).grad_fn.next_functions[0][0]
            e.hook = e.acc.register_hook(fire)  # e.acc keeps the accumulator (and hook) alive

    def remove(self, owner, entries):
        """Drops `owner`; entries nobody holds lose their hook and their names."""
        with self._lock:
            for e in entries:
                e.owners.pop(owner, None)
                e.pending.discard(owner)
                if e.owners or self._by_id.get(id(e.param)) is not e:
                    continue
                e.hook.remove()
                e.acc = None
                if e.group is not None:
                    for m in e.group.members:
                        m.group = None  # the group dissolves with its first departing member
                del self._by_id[id(e.param)]
                for n in [e.name] + e.aliases:
                    if self._by_name.get(n) is e:
                        del self._by_name[n]

    def set_bpps(self, entries, bpps):
        """New backward_passes_per_step for `entries`; counted passes restart from zero."""
        with self._lock:
            for e in entries:
                e.settings = e.settings._replace(bpps=bpps)
                if e.state == ACCUM:
                    e.passes = 0

    # ---- rounds ------------------------------------------------------------------------

    @staticmethod
    def _start_round(e):
        e.state, e.passes = IDLE, 0
        e.pending.clear()

    def on_grad_ready(self, e):
        """The hook: a backward pass has accumulated e's gradient into .grad."""
        with self._lock:
            if e.state == INFLIGHT:
                raise RuntimeError(
                    f"DistributedOptimizer: the gradient of '{e.name}' was computed again while "
                    "its allreduce is in flight: more than backward_passes_per_step="
                    f"{e.settings.bpps} backward passes before step() or synchronize() of "
                    f"{e.owner_labels()}; raise backward_passes_per_step to accumulate "
                    "gradients locally, or call step() between backward passes")
            if e.state == REDUCED:
                self._start_round(e)
            e.passes += 1
            e.state = ACCUM
            if e.passes < e.settings.bpps:
                return
            if e.group is None:
                self._queue([e], None)
            elif all(m.state == ACCUM and m.passes >= m.settings.bpps for m in e.group.members):
                self._queue(e.group.members, e.group.name)

    def _queue(self, entries, group_name):
        """Queues a ready reduction (lock held): submitted with its bucket, or when the backward
        pass ends; at once where no backward pass can run the end-of-pass callback."""
        if BUCKET_BYTES <= 0 or not self._end_of_pass_callback():
            self._submit(entries, group_name)
            return
        self._queued.append((entries, group_name))
        self._queued_bytes += sum(m.param.numel() * m.param.element_size() for m in entries)
        if self._queued_bytes >= BUCKET_BYTES:
            self._flush()

    def _end_of_pass_callback(self):
        """True once the current backward pass will call _flush_at_end (lock held)."""
        if self._callback_queued:
            return True
        try:
            torch.autograd.Variable._execution_engine.queue_callback(self._flush_at_end)
        except RuntimeError:  # not inside a backward pass
            return False
        self._callback_queued = True
        return True

    def _flush_at_end(self):
        with self._lock:
            self._callback_queued = False
            self._flush()

    def _flush(self):
        """Submits the queued reductions, in the order they became ready (lock held)."""
        queued, self._queued, self._queued_bytes = self._queued, [], 0
        for i, (entries, group_name) in enumerate(queued):
            try:
                self._submit(entries, group_name)
            except BaseException:
                for rest, _ in queued[i + 1:]:
                    for m in rest:
                        self._start_round(m)
                raise

    def _submit(self, entries, group_name):
        s = entries[0].settings
        pre, post = (1.0 / s.predivide, s.predivide) if s.op == Average else (1.0, 1.0)
        try:
            wires = []
            with torch.no_grad():
                for e in entries:
                    p = e.param
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    if p.grad.is_sparse and (s.sparse_as_dense or group_name is not None):
                        p.grad = p.grad.to_dense()
                    if p.grad.is_sparse:
                        e.ctx = _SPARSE
                        wires.append(p.grad)
                    else:
                        wire, e.ctx = s.compression.compress(p.grad)
                        wires.append(wire)
            e = entries[0]
            if group_name is not None:
                h = mpi_ops.grouped_allreduce_async_(wires, name=group_name, op=s.op,
                                                     prescale_factor=pre, postscale_factor=post,
                                                     process_set=s.process_set)
            elif e.ctx is _SPARSE:
                h = mpi_ops.sparse_allreduce_async(wires[0], "grad." + e.name, s.op,
                                                   process_set=s.process_set)
            else:
                h = mpi_ops.allreduce_async_(wires[0], name="grad." + e.name, op=s.op,
                                             prescale_factor=pre, postscale_factor=post,
                                             process_set=s.process_set)
        except BaseException:
            for e in entries:
                self._start_round(e)
                e.ctx = None
            raise
        for i, e in enumerate(entries):
            e.handle, e.slot, e.state = h, (i if group_name is not None else None), INFLIGHT
            e.pending = set(e.owners)

    def _finish(self, e, result):
        """Completes e's reduction with `result` (the handle's output), or marks it failed."""
        if result is not None:
            val = result if e.slot is None else result[e.slot]
            with torch.no_grad():
                if e.ctx is _SPARSE:
                    e.param.grad = val
                else:
                    val = e.settings.compression.decompress(val, e.ctx)
                    if val is not e.param.grad:
                        e.param.grad.copy_(val)
            e.state = REDUCED
        else:
            e.state = IDLE
            e.pending.clear()
        e.passes, e.handle, e.ctx, e.slot = 0, None, None, None

    def _in_flight(self, entries):
        """[(handle, [entries])] for `entries` (and their group mates) being reduced."""
        waits = {}
        for e in entries:
            for m in (e.group.members if e.group is not None else (e,)):
                if m.state == INFLIGHT:
                    waits.setdefault(id(m.handle), (m.handle, []))
                    if m not in waits[id(m.handle)][1]:
                        waits[id(m.handle)][1].append(m)
        return list(waits.values())

    def _wait(self, waits, swallow):
        first_error = None
        for h, members in waits:
            try:
                result = mpi_ops.synchronize(h)
            except Exception as ex:  # noqa: BLE001 - stored and re-raised below
                result = None
                first_error = first_error or ex
            with self._lock:
                for m in members:
                    if m.handle is h and m.state == INFLIGHT:
                        self._finish(m, result)
        if first_error is not None and not swallow:
            raise first_error

    def synchronize(self, owner, entries):
        """Starts what has not started for `entries` and waits until all hold reduced
        gradients. Raises HorovodInternalError when a reduction failed."""
        with self._lock:
            self._flush()
            groups = []
            for e in entries:
                if e.state == INFLIGHT or (e.state == REDUCED and owner in e.pending):
                    continue
                if e.group is None:
                    if e.state == REDUCED:
                        self._start_round(e)
                    self._submit([e], None)
                elif e.group not in groups:
                    groups.append(e.group)
            for g in groups:
                for m in g.members:
                    if m.state != ACCUM:
                        self._start_round(m)
                self._submit(g.members, g.name)
            waits = self._in_flight(entries)
        self._wait(waits, swallow=False)

    def consume(self, owner, entries):
        """`owner` has applied the reduced gradients of `entries`."""
        with self._lock:
            for e in entries:
                e.pending.discard(owner)

    def quiesce(self, entries):
        """Before zero_grad(): waits for the reductions of `entries` in flight (their results are
        about to be discarded; failures are ignored) and starts a new round for each."""
        with self._lock:
            self._flush()
            waits = self._in_flight(entries)
        self._wait(waits, swallow=True)
        with self._lock:
            for e in entries:
                if e.state != INFLIGHT:
                    self._start_round(e)

    def first_in_flight(self, entries):
        """The first of `entries` whose reduction is in flight, or None."""
        with self._lock:
            return next((e for e in entries if e.state == INFLIGHT), None)


REGISTRY = Registry()
