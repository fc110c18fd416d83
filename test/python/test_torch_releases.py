# SPDX-License-Identifier: Apache-2.0
"""[python] hvd.torch on every torch release it serves (Debian 12's 1.13, Debian 13's 2.6), where
torch 2.x changed what a training script meets: zero_grad() setting gradients to None by
default, the foreach and fused optimizer implementations, optimizer state layouts (a
momentum_buffer of None, 'step' as a tensor) through broadcast_optimizer_state and the elastic
TorchState, the post-accumulate-grad hook (torch >= 2.1), torch.compile'd models, and the
torch.nn.parallel idioms met beside hvd (DataParallel's 'module.' names, SyncBatchNorm
conversion). Every result is compared with one process training on the whole batch, which each
rank computes itself. What a release lacks is a visible skip naming it."""
import copy
import importlib
import io
import os
import shutil

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hvd.torch as hvd
from hvd.torch import _grad_registry, mpi_ops
from hvd.torch.elastic import saved

R, N = hvd.rank(), hvd.size()
ROWS = 3
STEPS = 4
TOL = 1e-10
RELEASE = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
TORCH = f"torch {torch.__version__}"


def full_data(seed, din=4, dout=2):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(N * ROWS, din, generator=g, dtype=torch.float64),
            torch.randn(N * ROWS, dout, generator=g, dtype=torch.float64))


def shard(t, rank=None):
    r = R if rank is None else rank
    return t[r * ROWS:(r + 1) * ROWS]


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2)).double()


def assert_same(model, ref, tol=TOL):
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")


def train(model, opt, x, y, steps=STEPS, zero=lambda o: o.zero_grad()):
    for step in range(steps):
        zero(opt)
        F.mse_loss(model(x * (1 + 0.1 * step)), y).backward()
        opt.step()


def check_trains_like_one_process(make_opt, model=None, tol=TOL, **kw):
    """make_opt's optimizer, wrapped, on this rank's shard vs. unwrapped on the whole batch."""
    x, y = full_data(1)
    model = mlp() if model is None else model
    ref = mlp()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()),
                                   named_parameters=model.named_parameters(), **kw)
    train(model, opt, shard(x), shard(y))
    train(ref, make_opt(ref.parameters()), x, y)
    assert_same(model, ref, tol)
    return model, opt


# ---- zero_grad(): None by default since torch 2.0 -----------------------------------------

def test_zero_grad_default_is_the_releases_and_trains_like_one_process():
    """torch >= 2.0: opt.zero_grad() sets .grad to None (1.13: zeros); either way every
    reduction contributes this rank's gradient and the step equals one process's."""
    x, y = full_data(2)
    model, ref = mlp(), mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        for m, o, xs, ys in ((model, opt, shard(x), shard(y)), (ref, ref_opt, x, y)):
            o.zero_grad()
            grads = [p.grad for p in m.parameters()]
            if step:
                if RELEASE >= (2, 0):
                    assert all(g is None for g in grads), "torch 2.x: zero_grad() sets None"
                else:
                    assert all(g is not None and not g.any() for g in grads), "1.13: zeros"
            F.mse_loss(m(xs), ys).backward()
            F.mse_loss(m(xs * 0.5), ys).backward()
            o.step()
    assert_same(model, ref)


def test_a_parameter_without_gradient_after_zero_grad_to_none_contributes_zeros():
    """With set_to_none a parameter unused on some ranks has .grad None there: it takes part
    in the reduction with zeros, and the others' average is the one process's."""
    x, y = full_data(3)
    torch.manual_seed(0)
    model = nn.ModuleDict(dict(a=nn.Linear(4, 2), b=nn.Linear(4, 2))).double()
    ref = copy.deepcopy(model)

    def out(m, xs, use_b):
        return m["a"](xs) + m["b"](xs) if use_b else m["a"](xs)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.05)
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        F.mse_loss(out(model, shard(x), R % 2 == 0), shard(y)).backward()
        opt.step()
        ref_opt.zero_grad(set_to_none=True)
        (sum(F.mse_loss(out(ref, shard(x, r), r % 2 == 0), shard(y, r)) for r in range(N))
         / N).backward()
        ref_opt.step()
    assert_same(model, ref)


# ---- foreach and fused optimizer implementations ------------------------------------------

IMPLEMENTATIONS = {
    "sgd_foreach": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True),
    "sgd_for_loop": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=False),
    "sgd_fused": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, fused=True),
    "adam_foreach": lambda ps: torch.optim.Adam(ps, lr=0.05, foreach=True),
    "adam_fused": lambda ps: torch.optim.Adam(ps, lr=0.05, fused=True),
    "adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1, foreach=True),
    "adamw_fused": lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1, fused=True),
    "adagrad_foreach": lambda ps: torch.optim.Adagrad(ps, lr=0.1, foreach=True),
    "rmsprop_foreach": lambda ps: torch.optim.RMSprop(ps, lr=0.01, momentum=0.5, foreach=True),
    "nadam_foreach": lambda ps: torch.optim.NAdam(ps, lr=0.05, foreach=True),
}


def available(kind):
    """IMPLEMENTATIONS[kind], or a skip naming what this torch lacks (the same on every rank:
    the probe is local and deterministic)."""
    make = IMPLEMENTATIONS[kind]
    p = nn.Parameter(torch.ones(2, dtype=torch.float64))
    try:
        opt = make([p])
        p.grad = torch.ones_like(p)
        opt.step()
    except (TypeError, RuntimeError, ValueError) as e:
        pytest.skip(f"{TORCH} has no {kind.replace('_', ' ')} optimizer on CPU float64: "
                    f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
    return make


@pytest.mark.parametrize("kind", sorted(IMPLEMENTATIONS))
def test_foreach_and_fused_optimizers_train_like_one_process(kind):
    make = available(kind)
    _, opt = check_trains_like_one_process(make, tol=1e-9)
    flag = kind.rsplit("_", 1)[1]
    if flag in ("foreach", "fused"):
        assert opt.param_groups[0][flag] is True  # the implementation really in use


# ---- optimizer state layouts: None entries and 'step' tensors -----------------------------

def with_none_buffers(opt):
    """`opt` (SGD) holding a momentum_buffer of None for every parameter, as torch 1.13's SGD
    without momentum leaves it, and as its checkpoints bring it to torch 2.x."""
    sd = opt.state_dict()
    sd["state"] = {i: {"momentum_buffer": None} for g in sd["param_groups"] for i in g["params"]}
    opt.load_state_dict(sd)
    return opt


LAYOUTS = {  # kind: (optimizer, what its state holds after a step)
    "sgd_no_momentum": (lambda ps, lr: torch.optim.SGD(ps, lr=lr),  # 2.x: no state, 1.13: None
                        lambda st: st.get("momentum_buffer", None) is None),
    "sgd_momentum_buffer_none": (lambda ps, lr: with_none_buffers(torch.optim.SGD(ps, lr=lr)),
                                 lambda st: "momentum_buffer" in st
                                 and st["momentum_buffer"] is None),
    "sgd_momentum_foreach": (lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9,
                                                            foreach=True),
                             lambda st: isinstance(st["momentum_buffer"], torch.Tensor)),
    "adam_step_tensor": (lambda ps, lr: torch.optim.Adam(ps, lr=lr, amsgrad=True),
                         lambda st: torch.is_tensor(st["step"]) and st["step"].dim() == 0),
    "adam_fused": (lambda ps, lr: torch.optim.Adam(ps, lr=lr, fused=True),
                   lambda st: torch.is_tensor(st["step"])),
    "nadam": (lambda ps, lr: torch.optim.NAdam(ps, lr=lr),
              lambda st: torch.is_tensor(st["step"]) and "mu_product" in st),
    "rprop": (lambda ps, lr: torch.optim.Rprop(ps, lr=lr),
              lambda st: torch.is_tensor(st["step_size"])),
}


def layout_optimizer(kind, model, lr):
    if kind == "adam_fused":
        available("adam_fused")  # a skip where this torch has no CPU fused Adam
    return LAYOUTS[kind][0](model.parameters(), lr)


def local_steps(kind, seed, steps, wrap=False, reloaded=False):
    """(model, optimizer) of rank `seed` after `steps` local steps (its own lr and data); with
    `reloaded`, the optimizer then loads a copy of its own state dict, as a script resuming
    from torch.save does: torch's load_state_dict casts floating state other than 'step' to
    the parameter's dtype (NAdam's float32 mu_product becomes float64 beside float64
    parameters), and so does an elastic restore, which goes through it as Horovod's does."""
    model = mlp(seed)
    opt = layout_optimizer(kind, model, 0.01 * (seed + 1))
    g = torch.Generator().manual_seed(100 + seed)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 4, generator=g, dtype=torch.float64)).pow(2).mean().backward()
        opt.step()
    if reloaded:
        opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    if wrap:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    return model, opt


def state_difference(opt, ref_opt):
    """The first difference between two optimizers' state dicts (values, types, dtypes)."""
    a, b = opt.state_dict(), ref_opt.state_dict()
    if a["param_groups"] != b["param_groups"]:
        return f"param groups {a['param_groups']} != {b['param_groups']}"
    if sorted(a["state"]) != sorted(b["state"]):
        return f"state of params {sorted(a['state'])} != {sorted(b['state'])}"
    for i, st in b["state"].items():
        if sorted(a["state"][i]) != sorted(st):
            return f"param {i}: keys {sorted(a['state'][i])} != {sorted(st)}"
        for key, v in st.items():
            mine = a["state"][i][key]
            if type(mine) is not type(v):
                return f"param {i} '{key}': {type(mine).__name__} != {type(v).__name__}"
            if isinstance(v, torch.Tensor):
                if (mine.dtype, mine.device, mine.shape) != (v.dtype, v.device, v.shape) or \
                        not torch.equal(mine, v):
                    return f"param {i} '{key}': {mine!r} != {v!r}"
            elif mine != v:
                return f"param {i} '{key}': {mine!r} != {v!r}"
    return None


def one_more_step(model, opt):
    opt.zero_grad()
    model(full_data(99)[0]).pow(2).mean().backward()
    opt.step()


@pytest.mark.parametrize("kind", sorted(LAYOUTS))
def test_broadcast_optimizer_state_carries_every_state_layout(kind):
    root = N - 1
    model, opt = local_steps(kind, R, steps=2 if R == root else R % 2, wrap=kind == "nadam")
    ref, ref_opt = local_steps(kind, root, steps=2)
    assert all(LAYOUTS[kind][1](st) for st in ref_opt.state.values()), ref_opt.state_dict()
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    after_broadcast = state_difference(opt, ref_opt)
    for m, o in ((model, opt), (ref, ref_opt)):  # the next step is root's next step
        one_more_step(m, o)
    assert after_broadcast is None, after_broadcast
    assert_same(model, ref, 1e-12)
    assert state_difference(opt, ref_opt) is None


@pytest.mark.parametrize("kind", sorted(LAYOUTS))
def test_elastic_torch_state_commits_restores_and_syncs_every_state_layout(kind):
    model, opt = local_steps(kind, R, steps=2)
    state = hvd.elastic.TorchState(model, opt, epoch=R)
    state.commit()
    for _ in range(2):
        one_more_step(model, opt)
    state.restore()  # back to the commit ...
    ref, ref_opt = local_steps(kind, R, steps=2, reloaded=True)
    assert state_difference(opt, ref_opt) is None, state_difference(opt, ref_opt)
    one_more_step(model, opt)  # ... from which training goes on as if nothing happened
    one_more_step(ref, ref_opt)
    assert_same(model, ref, 1e-12)
    assert state_difference(opt, ref_opt) is None
    # The committed snapshot (what a restarted job resumes from) keeps the layout too.
    back = saved.loads(saved.dumps(state._handlers["optimizer"].saved))
    fresh_model, fresh_opt = local_steps(kind, R, steps=0)
    fresh_opt.load_state_dict(back)
    ref, ref_opt = local_steps(kind, R, steps=2, reloaded=True)
    assert state_difference(fresh_opt, ref_opt) is None, state_difference(fresh_opt, ref_opt)
    # sync(): every rank ends with rank 0's model, optimizer state and fields.
    state.sync()
    ref0, ref0_opt = local_steps(kind, 0, steps=2, reloaded=True)
    one_more_step(ref0, ref0_opt)
    assert_same(model, ref0, 0)
    assert state_difference(opt, ref0_opt) is None, state_difference(opt, ref0_opt)
    assert state.epoch == 0


# ---- the hook that starts a reduction ------------------------------------------------------

def hooks_installed(monkeypatch):
    """Counts post-accumulate-grad hooks registered through torch and the calls they get."""
    seen = {"registered": 0, "fired": 0}
    real = torch.Tensor.register_post_accumulate_grad_hook

    def register(self, fn):
        seen["registered"] += 1

        def counted(*args):
            seen["fired"] += 1
            return fn(*args)
        return real(self, counted)
    monkeypatch.setattr(torch.Tensor, "register_post_accumulate_grad_hook", register)
    return seen


@pytest.mark.skipif(not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"),
                    reason=f"{TORCH} has no Tensor.register_post_accumulate_grad_hook "
                           "(torch >= 2.1); the gradient accumulator's hook is used instead")
def test_on_torch_2_1_and_later_the_post_accumulate_grad_hook_starts_each_reduction(
        monkeypatch):
    seen = hooks_installed(monkeypatch)
    x, y = full_data(4)
    model, ref = mlp(), mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    slots = opt._hvd_entries.slots
    assert seen["registered"] == len(slots) == 4
    assert all(isinstance(s, _grad_registry._Slot) and s.acc is None for s in slots)
    before = dict(_grad_registry._core.registry_submissions())
    train(model, opt, shard(x), shard(y), steps=2)
    train(ref, torch.optim.SGD(ref.parameters(), lr=0.1), x, y, steps=2)
    assert seen["fired"] == 2 * 4  # once per parameter per backward pass
    after = dict(_grad_registry._core.registry_submissions())
    assert all(after[w] - before.get(w, 0) == 2 for w in opt._hvd_entries.wires)
    assert_same(model, ref)


@pytest.mark.skipif(hasattr(torch.Tensor, "register_post_accumulate_grad_hook"),
                    reason=f"{TORCH} has Tensor.register_post_accumulate_grad_hook, used instead")
def test_before_torch_2_1_a_hook_on_the_gradient_accumulator_starts_each_reduction():
    model = mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    slots = opt._hvd_entries.slots
    assert all(type(s.acc).__name__ == "AccumulateGrad" for s in slots)
    check_trains_like_one_process(lambda ps: torch.optim.SGD(ps, lr=0.1))


# ---- torch.compile -------------------------------------------------------------------------

def compile_unavailable(backend):
    """Why torch.compile with `backend` cannot run here, or None."""
    if not hasattr(torch, "compile"):
        return f"torch.compile needs torch >= 2.0; this is {TORCH}"
    if backend == "inductor":
        try:  # inductor builds its CPU kernels through torch.utils.cpp_extension
            importlib.import_module("torch.utils.cpp_extension")
        except ImportError as e:
            return (f"inductor on CPU needs torch.utils.cpp_extension, which fails to import "
                    f"({type(e).__name__}: {e}; Debian: install python3-setuptools)")
        cxx = os.environ.get("CXX", "c++")
        if shutil.which(cxx) is None:
            return f"inductor on CPU needs a C++ compiler; '{cxx}' is not on PATH"
    return None


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_compiled_model_trains_through_distributed_optimizer_like_one_process(backend):
    """torch.compile(model): its parameters are the model's ('_orig_mod.' names); AOTAutograd's
    backward still accumulates into them, so the hooks start every reduction, and N steps give
    the weights of the uncompiled model trained on the whole batch in one process."""
    why = compile_unavailable(backend)
    if why:
        pytest.skip(why)
    import torch._dynamo
    torch._dynamo.reset()
    if backend == "inductor":
        import torch._inductor.config as inductor_config
        inductor_config.compile_threads = 1  # no worker processes forked inside an MPI rank
    x, y = full_data(5)
    model, ref = mlp(), mlp()
    compiled = torch.compile(model, backend=backend)
    names = [n for n, _ in compiled.named_parameters()]
    assert names == ["_orig_mod." + n for n, _ in ref.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.Adam(compiled.parameters(), lr=0.05),
                                   named_parameters=compiled.named_parameters())
    train(compiled, opt, shard(x), shard(y))
    train(ref, torch.optim.Adam(ref.parameters(), lr=0.05), x, y)
    assert_same(model, ref, 1e-9 if backend == "inductor" else TOL)
    torch._dynamo.reset()


# ---- torch.nn.parallel idioms ------------------------------------------------------------

def test_a_data_parallel_wrapped_model_broadcasts_and_trains_under_module_names(monkeypatch):
    """nn.DataParallel(model) (on CPU: the model itself runs): parameters and state carry
    'module.' names, which hvd sends as they are; broadcast_parameters, broadcast_optimizer_state
    and DistributedOptimizer give one process's result, and the wrapped model's .module loads
    into an unwrapped one."""
    x, y = full_data(6)
    dp = nn.DataParallel(mlp(seed=R))  # every rank starts elsewhere: the broadcast fixes it
    names = [n for n, _ in dp.named_parameters()]
    assert names == ["module.0.weight", "module.0.bias", "module.2.weight", "module.2.bias"]
    hvd.broadcast_parameters(dp.state_dict(), root_rank=0)
    wires = []
    real = mpi_ops.allreduce_async_
    monkeypatch.setattr(mpi_ops, "allreduce_async_",
                        lambda t, **k: wires.append(k["name"]) or real(t, **k))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dp.parameters(), lr=0.1 * (R + 1),
                                                   momentum=0.9),
                                   named_parameters=dp.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    train(dp, opt, shard(x), shard(y))
    ref = mlp(seed=0)
    train(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), x, y)
    assert_same(dp, ref)
    assert sorted(set(wires)) == sorted(opt._hvd_entries.wires)
    assert all(w.split("#")[0] == f"grad.{n}" for w, n in zip(opt._hvd_entries.wires, names))
    plain = mlp(seed=1)
    plain.load_state_dict(dp.module.state_dict())
    assert_same(plain, ref)


class Convs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3), nn.ReLU())
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(12, 4), nn.BatchNorm1d(4, momentum=None),
                                  nn.Tanh(), nn.Linear(4, 1))

    def forward(self, x):
        return self.head(self.conv(x))


def test_convert_sync_batchnorm_keeps_the_tensors_and_trains_like_the_whole_batch():
    """hvd.SyncBatchNorm.convert_sync_batchnorm, like torch.nn.SyncBatchNorm's (which needs
    torch.distributed and, in training, CUDA): every BatchNorm, and every torch SyncBatchNorm,
    becomes hvd's, keeping the same parameter and buffer tensors; with DistributedOptimizer
    the model trains as the unconverted one on the whole batch in one process."""
    torch.manual_seed(0)
    model = Convs().double()
    ref = copy.deepcopy(model)
    keys = list(model.state_dict())
    tensors = {k: v.data_ptr() for k, v in model.state_dict().items()}
    params = list(model.parameters())
    via_torch = torch.nn.SyncBatchNorm.convert_sync_batchnorm(copy.deepcopy(model))
    assert isinstance(via_torch.conv[1], torch.nn.SyncBatchNorm)
    assert all(type(m) is hvd.SyncBatchNorm for m in (
        hvd.SyncBatchNorm.convert_sync_batchnorm(via_torch).conv[1], via_torch.head[2]))
    model = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    assert type(model.conv[1]) is hvd.SyncBatchNorm and type(model.head[2]) is hvd.SyncBatchNorm
    assert model.head[2].momentum is None and model.training
    assert list(model.state_dict()) == keys
    assert {k: v.data_ptr() for k, v in model.state_dict().items()} == tensors
    assert all(p is q for p, q in zip(model.parameters(), params))
    g = torch.Generator().manual_seed(7)
    rows = [2 + r for r in range(N)]  # uneven batches
    start = sum(rows[:R])
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(sum(rows), 2, 2, 2, generator=g, dtype=torch.float64)
        t = torch.randn(sum(rows), 1, generator=g, dtype=torch.float64)
        opt.zero_grad()
        (model(x[start:start + rows[R]]) - t[start:start + rows[R]]).pow(2).sum().backward()
        opt.step()
        ref_opt.zero_grad()
        (ref(x) - t).pow(2).sum().backward()
        ref_opt.step()
    for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=TOL, atol=TOL, msg=lambda m: f"{name}: {m}")


class Progress:
    """A user's own class in a TorchState field."""

    def __init__(self, epoch):
        self.epoch = epoch


def test_a_snapshot_written_by_torch_save_loads_whatever_it_holds():
    """torch 2.6's torch.load defaults to weights_only=True, which refuses a user's class; an
    hvd snapshot is the job's own and loads whole on every release."""
    buf = io.BytesIO()
    torch.save({"fields": {"progress": Progress(3), "seen": {1, 2}}, "w": torch.ones(2)}, buf)
    back = saved.loads(buf.getvalue())
    assert type(back["fields"]["progress"]) is Progress and back["fields"]["progress"].epoch == 3
    assert back["fields"]["seen"] == {1, 2} and torch.equal(back["w"], torch.ones(2))


@pytest.mark.parametrize("built", ["before_wrapping", "after_wrapping"])
def test_an_lr_scheduler_built_before_or_after_wrapping_keeps_the_reductions(built):
    """LR schedulers replace optimizer.step by an instance attribute (torch 2.x: to track that
    it was called; 1.13: to count the calls). Built on the unwrapped optimizer, that attribute
    must not bypass DistributedOptimizer's step: training still equals one process's, and the
    schedule still sets every step's learning rate."""
    x, y = full_data(8)
    model, ref = mlp(), mlp()

    def schedule(o):
        return torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)
    base = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.5)
    sched = schedule(base) if built == "before_wrapping" else None
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    sched = sched or schedule(opt)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.2, momentum=0.5)
    ref_sched = schedule(ref_opt)
    for step in range(STEPS):
        for m, o, s, xs, ys in ((model, opt, sched, shard(x), shard(y)),
                                (ref, ref_opt, ref_sched, x, y)):
            o.zero_grad()
            F.mse_loss(m(xs), ys).backward()
            o.step()
            s.step()
        assert opt.param_groups[0]["lr"] == pytest.approx(0.2 * 0.5 ** (step + 1))
    assert_same(model, ref)
