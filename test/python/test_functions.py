# SPDX-License-Identifier: Apache-2.0
"""[python] hvd.torch's broadcast_parameters, broadcast_optimizer_state, broadcast_object and
allgather_object: every rank ends with what the root rank had, which each rank recomputes
itself (rank-dependent seeds, learning rates and numbers of steps)."""
import faulthandler
import time

import pytest
import torch
import torch.nn as nn

import hvd.torch as hvd


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.bn = nn.BatchNorm1d(4)
        self.out = nn.Linear(4, 2, bias=False)

    def forward(self, x):
        return self.out(self.bn(self.fc(x)))


def net(seed, batches=0):
    """The model rank `seed` starts with (its BatchNorm buffers moved by `batches` batches)."""
    torch.manual_seed(seed)
    model = Net().double()
    for _ in range(batches):
        model(torch.randn(5, 3, dtype=torch.float64))
    return model


def roots():
    return sorted({0, hvd.size() - 1})


@pytest.mark.parametrize("root", [0, -1], ids=["root0", "rootlast"])
@pytest.mark.parametrize("form", ["state_dict", "named_parameters", "list"])
def test_broadcast_parameters(form, root):
    root = root % hvd.size()
    model, expected = net(hvd.rank(), batches=hvd.rank() + 1), net(root, batches=root + 1)
    if form == "state_dict":
        hvd.broadcast_parameters(model.state_dict(), root_rank=root)
        names = list(expected.state_dict())
    elif form == "named_parameters":
        hvd.broadcast_parameters(model.named_parameters(), root_rank=root)
        names = [n for n, _ in expected.named_parameters()]
    else:
        hvd.broadcast_parameters(list(model.parameters()), root_rank=root)
        names = [n for n, _ in expected.named_parameters()]
    mine, theirs = model.state_dict(), expected.state_dict()
    assert "bn.num_batches_tracked" in names or form != "state_dict"
    for name in names:
        assert torch.equal(mine[name], theirs[name]), name
    if hvd.rank() != root and form != "state_dict":  # buffers were not part of the broadcast
        assert not torch.equal(mine["bn.running_mean"], theirs["bn.running_mean"])


OPTIMIZERS = {
    "sgd_momentum": lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9, nesterov=True),
    "adam": lambda ps, lr: torch.optim.Adam(ps, lr=lr, amsgrad=True),
    "adamw": lambda ps, lr: torch.optim.AdamW(ps, lr=lr, weight_decay=0.1),
    "adagrad": lambda ps, lr: torch.optim.Adagrad(ps, lr=lr, lr_decay=0.01),
    "rmsprop": lambda ps, lr: torch.optim.RMSprop(ps, lr=lr, momentum=0.5, centered=True),
}

SCENARIOS = {  # name: (root, steps taken by rank r)
    "root_stepped_others_not": (lambda s: s - 1, lambda r, root: 2 if r == root else 0),
    "others_stepped_root_not": (lambda s: 0, lambda r, root: 0 if r == root else r + 1),
    "nobody_stepped": (lambda s: 0, lambda r, root: 0),
    "everyone_stepped_differently": (lambda s: 1 % s, lambda r, root: r + 1),
}


def data(seed):
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randn(6, 3, generator=g, dtype=torch.float64)


def trained(kind, r, steps, wrap=False):
    """Model and optimizer as rank r has them: its own seed, lr and number of local steps."""
    model = net(r)
    opt = OPTIMIZERS[kind](model.parameters(), 0.01 * (r + 1))
    opt.param_groups[0]["weight_decay"] = 0.001 * r
    for _ in range(steps):
        opt.zero_grad()
        model(data(r)).pow(2).mean().backward()
        opt.step()
    if wrap:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    return model, opt


def state_mismatch(opt, expected, params, expected_params):
    """The first difference between two optimizers' options and state, or None."""
    for g, h in zip(opt.param_groups, expected.param_groups):
        g, h = ({k: v for k, v in x.items() if k != "params"} for x in (g, h))
        if g != h:
            return f"param group options {g} != {h}"
    for i, (p, q) in enumerate(zip(params, expected_params)):
        mine, theirs = opt.state.get(p, {}), expected.state.get(q, {})
        if sorted(mine) != sorted(theirs):
            return f"param {i}: keys {sorted(mine)} != {sorted(theirs)}"
        for key, v in theirs.items():
            same = torch.equal(mine[key], v) if isinstance(v, torch.Tensor) else mine[key] == v
            if not same:
                return f"param {i} '{key}': {mine[key]} != {v}"
    return None


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_broadcast_optimizer_state(kind, scenario):
    root_of, steps_of = SCENARIOS[scenario]
    root = root_of(hvd.size())
    wrap = kind == "adam" and scenario == "everyone_stepped_differently"
    model, opt = trained(kind, hvd.rank(), steps_of(hvd.rank(), root), wrap=wrap)
    ref, ref_opt = trained(kind, root, steps_of(root, root))
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    after_broadcast = state_mismatch(opt, ref_opt, list(model.parameters()),
                                     list(ref.parameters()))
    # ... and the next step is root's next step (Adam's 'step' counts, buffers are in use)
    for m, o in ((model, opt), (ref, ref_opt)):
        o.zero_grad()
        m(data(99)).pow(2).mean().backward()
        o.step()
    assert after_broadcast is None, after_broadcast
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12, msg=lambda m: f"{name}: {m}")
    after_step = state_mismatch(opt, ref_opt, list(model.parameters()), list(ref.parameters()))
    assert after_step is None, after_step


@pytest.mark.ranks(2, "a mismatch between ranks")
def test_broadcast_optimizer_state_rejects_different_models_on_every_rank():
    model = nn.Linear(3, 2 + (hvd.rank() == hvd.size() - 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="optimizers differ across ranks"):
        hvd.broadcast_optimizer_state(opt, root_rank=0)


class ModelNoGrad(nn.Module):  # Horovod's test_broadcast_state_no_grad
    def __init__(self, a, b):
        super().__init__()
        self.a = nn.Parameter(a.int(), requires_grad=False)
        self.b = nn.Parameter(b)

    def forward(self, x):
        return torch.index_select(self.b, 0, self.a.long()) * x


@pytest.mark.parametrize("kind", ["sgd", "sparse_adam"])
def test_broadcast_optimizer_state_gives_fresh_parameters_zero_gradients(kind):
    if kind == "sgd":
        torch.manual_seed(hvd.rank())
        model = ModelNoGrad(torch.tensor([1.0, 3.0]), torch.rand(4))
        opt = torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9,
                              nesterov=True)
    else:
        model = nn.Embedding(4, 2, sparse=True)
        opt = torch.optim.SparseAdam(model.parameters(), lr=0.1)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    params = opt.param_groups[0]["params"]
    grad = params[-1].grad
    assert grad is not None
    assert grad.is_sparse == (kind == "sparse_adam")  # what the optimizer accepts
    assert torch.equal(grad.to_dense(), torch.zeros_like(params[-1]))
    if kind == "sgd":
        assert params[0].grad is None  # requires_grad=False: untouched
        assert torch.equal(hvd.broadcast(grad, root_rank=0, name="no_grad.bcast"), grad)
    # Training goes on from there: the first backward pass accumulates into the zeros.
    x = torch.tensor([1.0, 2.0]) * (hvd.rank() + 1) if kind == "sgd" else \
        torch.tensor([hvd.rank() % 4])
    model(x).sum().backward()
    opt.step()
    w = params[-1].detach()
    assert all(torch.equal(w, q) for q in hvd.allgather_object(w, name="no_grad.after"))


def obj_of(r):
    return {"rank": r, "payload": list(range(3 * r)), "text": "x" * (100 * r),
            "tensor": torch.arange(r + 1)}


def assert_obj(got, r):
    want = obj_of(r)
    assert got.keys() == want.keys()
    assert torch.equal(got["tensor"], want["tensor"])
    assert {k: v for k, v in got.items() if k != "tensor"} == \
        {k: v for k, v in want.items() if k != "tensor"}


@pytest.mark.parametrize("root", [0, -1], ids=["root0", "rootlast"])
def test_broadcast_object(root):
    root = root % hvd.size()
    mine = obj_of(hvd.rank()) if hvd.rank() == root else None
    assert_obj(hvd.broadcast_object(mine, root_rank=root), root)
    assert hvd.broadcast_object(None, root_rank=root, name="none") is None
    assert hvd.broadcast_object(hvd.rank() * 7, root_rank=root, name="int") == root * 7


def test_allgather_object():
    got = hvd.allgather_object(obj_of(hvd.rank()))
    assert len(got) == hvd.size()
    for r, o in enumerate(got):
        assert_obj(o, r)
    assert hvd.allgather_object(None, name="nothing") == [None] * hvd.size()



class _Unpicklable:
    def __reduce__(self):
        raise TypeError("this object refuses to be pickled")


@pytest.mark.parametrize("root", sorted({0, hvd.size() - 1}))
@pytest.mark.parametrize("name", ["fn.unpicklable", None])
def test_broadcast_object_the_root_cannot_pickle_fails_every_rank_within_2s(root, name):
    faulthandler.dump_traceback_later(20, exit=True)  # a rank left waiting ends the run
    hvd.barrier()  # a common start: the time to fail, not the ranks' skew
    start = time.monotonic()
    if hvd.rank() == root:
        with pytest.raises(TypeError, match="refuses to be pickled"):
            hvd.broadcast_object(_Unpicklable(), root_rank=root, name=name)
    else:
        with pytest.raises(hvd.HorovodInternalError) as e:
            hvd.broadcast_object(None, root_rank=root, name=name)
        msg = str(e.value)
        assert f"refused on rank {root}" in msg and "could not pickle" in msg, msg
        assert "refuses to be pickled" in msg, msg
    elapsed = time.monotonic() - start
    took = hvd.allgather(torch.tensor([elapsed]))
    print(f"[broadcast_object unpicklable, root {root}] np {hvd.size()}: every rank failed "
          f"within {float(took.max()) * 1000:.1f} ms")
    assert elapsed < 2.0, f"rank {hvd.rank()} took {elapsed:.2f} s to fail"
    faulthandler.cancel_dump_traceback_later()
    assert hvd.broadcast_object({"ok": root}, root_rank=root, name=name) == {"ok": root}
