# SPDX-License-Identifier: Apache-2.0
"""[python] hvd.torch.DistributedOptimizer: training on rank-dependent shards equals training on
the whole batch in one process (each rank computes that reference itself), in Horovod's
explicit style and in hvd's (several optimizers sharing parameters, no renaming, no
synchronize() calls)."""
import copy
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hvd.torch as hvd
from hvd.torch import mpi_ops

N = 3      # rows per rank
STEPS = 3
TOL = 1e-10


def full_data(seed, rows=N, din=4, dout=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(hvd.size() * rows, din, generator=g, dtype=torch.float64)
    y = torch.randn(hvd.size() * rows, dout, generator=g, dtype=torch.float64)
    return x, y


def shard(t, rows=N, rank=None):
    r = hvd.rank() if rank is None else rank
    return t[r * rows:(r + 1) * rows]


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2)).double()


def assert_same(model, ref, tol=TOL):
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p, q, rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")


def max_diff(model, ref):
    return max(float((p - q).abs().max()) for p, q in zip(model.parameters(), ref.parameters()))


def train(model, opt, x, y, steps=STEPS):
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()


def check_full_batch(make_opt, tol=TOL, seed=1, **kw):
    """Distributed training on this rank's shard vs. one process on the whole batch."""
    x, y = full_data(seed)
    model = mlp()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()),
                                   named_parameters=model.named_parameters(), **kw)
    train(model, opt, shard(x), shard(y))
    train(ref, make_opt(ref.parameters()), x, y)
    assert_same(model, ref, tol)
    return model, ref


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def adam(params):
    return torch.optim.Adam(params, lr=0.05)


@pytest.mark.parametrize("make_opt", [sgd, adam], ids=["sgd", "adam"])
def test_training_on_shards_equals_full_batch(make_opt):
    check_full_batch(make_opt)


@pytest.mark.ranks(2, "a shard that is not the whole batch")
def test_local_training_alone_differs_from_full_batch():
    """The reference is sensitive: without averaging, a rank's result differs from it."""
    x, y = full_data(1)
    model = mlp()
    ref = copy.deepcopy(model)
    train(model, sgd(model.parameters()), shard(x), shard(y))
    train(ref, sgd(ref.parameters()), x, y)
    assert max_diff(model, ref) > 1e-4


def test_wrapped_optimizer_is_an_instance_of_its_class():
    model = mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
                                   named_parameters=model.named_parameters())
    assert isinstance(opt, torch.optim.SGD) and type(opt).__name__ == "SGD"
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0.5
    x, y = full_data(2)
    train(model, opt, shard(x), shard(y), steps=1)
    sd = opt.state_dict()
    assert len(sd["state"]) == 4 and "momentum_buffer" in sd["state"][0]
    opt.load_state_dict(sd)


def test_op_sum_sums_the_shard_gradients():
    x, y = full_data(3)
    model = mlp()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    train(model, opt, shard(x), shard(y))
    ref_opt = sgd(ref.parameters())
    for _ in range(STEPS):
        ref_opt.zero_grad()
        sum(F.mse_loss(ref(shard(x, rank=r)), shard(y, rank=r)) for r in range(hvd.size())) \
            .backward()
        ref_opt.step()
    assert_same(model, ref)


@pytest.mark.parametrize("two_passes", [False, True])
def test_gradients_sharing_a_version_counter_are_kept_while_in_flight(two_passes):
    """Gradients reached through one torch.cat can share one version counter (the libtorch
    optimizer's case): rank 1 comes late, so rank 0's reductions are in flight at step() while
    later accumulations bump the shared version; nothing may be dropped (the result is checked
    against the gradients computed here)."""
    k, steps = 8, 3
    ps = [torch.zeros(3, requires_grad=True) for _ in range(k)]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(ps, lr=1.0), op=hvd.Sum,
                                   named_parameters=[(f"shared_version.{two_passes}.{i}", p)
                                                     for i, p in enumerate(ps)])
    c = torch.arange(k * 3, dtype=torch.float32) + 1
    passes = 2 if two_passes else 1
    for _ in range(steps):
        opt.zero_grad()
        if hvd.rank() == 1:
            time.sleep(0.2)
        for _ in range(passes):
            (torch.cat(ps).dot(c) * (hvd.rank() + 1)).backward()
        opt.step()
    ranks_sum = hvd.size() * (hvd.size() + 1) / 2
    want = -steps * passes * ranks_sum * c
    assert torch.allclose(torch.cat(ps).detach(), want, atol=1e-3)


def bpps_data():
    x0, y0 = full_data(4)
    x1, y1 = full_data(5)
    return [(x0, y0), (x1, y1)]


def train_two_passes(model, opt, batches, take):
    for _ in range(STEPS):
        opt.zero_grad()
        for x, y in batches:
            F.mse_loss(model(take(x)), take(y)).backward()
        opt.step()


@pytest.mark.parametrize("groups", [None, 2])
def test_backward_passes_per_step_accumulates_locally(groups):
    batches = bpps_data()
    model = mlp()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(adam(model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2, groups=groups)
    train_two_passes(model, opt, batches, shard)
    train_two_passes(ref, adam(ref.parameters()), batches, lambda t: t)
    assert_same(model, ref)


def test_set_backward_passes_per_step():
    batches = bpps_data()
    model = mlp()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=model.named_parameters())
    opt.set_backward_passes_per_step(2)
    assert opt.backward_passes_per_step == 2
    train_two_passes(model, opt, batches, shard)
    train_two_passes(ref, sgd(ref.parameters()), batches, lambda t: t)
    assert_same(model, ref)


@pytest.mark.parametrize("kw", [dict(num_groups=2), dict(groups=2), dict(groups="tensors"),
                                dict(groups="names")], ids=["num_groups", "groups_int",
                                                            "groups_tensors", "groups_names"])
def test_grouped_reduction_equals_full_batch(kw, monkeypatch):
    calls = []
    real = mpi_ops.grouped_allreduce_async_
    monkeypatch.setattr(mpi_ops, "grouped_allreduce_async_",
                        lambda ts, **k: calls.append(len(ts)) or real(ts, **k))
    x, y = full_data(7)
    model = mlp()
    ref = copy.deepcopy(model)
    if kw.get("groups") == "tensors":
        kw = dict(groups=[[model[0].weight, model[2].bias], [model[0].bias, model[2].weight]])
    elif kw.get("groups") == "names":
        kw = dict(groups=[["0.weight", "0.bias", "2.weight"]])
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=model.named_parameters(), **kw)
    train(model, opt, shard(x), shard(y))
    train(ref, sgd(ref.parameters()), x, y)
    assert_same(model, ref)
    assert calls and sum(calls) in (3 * STEPS, 4 * STEPS) and max(calls) > 1


@pytest.mark.parametrize("groups", [None, 2])
def test_fp16_compression_equals_full_batch_to_fp16_precision(groups):
    check_full_batch(sgd, tol=2e-3, compression=hvd.Compression.fp16, groups=groups)


def test_gradient_predivide_factor_splits_the_average(monkeypatch):
    seen = []
    real = mpi_ops.allreduce_async_
    monkeypatch.setattr(mpi_ops, "allreduce_async_", lambda t, **k: seen.append(
        (k["prescale_factor"], k["postscale_factor"])) or real(t, **k))
    check_full_batch(sgd, gradient_predivide_factor=4.0)
    assert seen and set(seen) == {(0.25, 4.0)}


def test_invalid_options_are_rejected():
    model = mlp()
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(sgd(model.parameters()), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(sgd(model.parameters()), op=hvd.Adasum,
                                 gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="gradient_as_bucket_view"):
        hvd.DistributedOptimizer(sgd(model.parameters()), op=hvd.Adasum,
                                 gradient_as_bucket_view=True)
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        hvd.DistributedOptimizer(sgd(model.parameters()), backward_passes_per_step=0)
    with pytest.raises(ValueError, match="not named"):
        hvd.DistributedOptimizer(sgd(model.parameters()),
                                 named_parameters=list(model.named_parameters())[:2])


def test_adasum_is_accepted_and_steps_every_rank_to_the_same_parameters():
    model = mlp()
    opt = hvd.DistributedOptimizer(sgd(model.parameters()), op=hvd.Adasum,
                                   named_parameters=model.named_parameters())
    assert opt.op == hvd.Adasum and isinstance(opt, torch.optim.SGD)
    x, y = full_data(5)
    opt.zero_grad()
    F.mse_loss(model(shard(x)), shard(y)).backward()
    opt.step()
    for name, p in model.named_parameters():
        every = hvd.allgather(p.detach().unsqueeze(0), name="test.adasum." + name)
        for r in range(hvd.size()):
            assert torch.equal(every[r], p), f"rank {hvd.rank()}: {name} differs on rank {r}"


def test_duplicate_names_for_different_tensors_are_an_error():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    both = list(a.named_parameters()) + list(b.named_parameters())
    with pytest.raises(ValueError, match="'weight'"):
        hvd.DistributedOptimizer(sgd(list(a.parameters()) + list(b.parameters())),
                                 named_parameters=both)
    opt_a = hvd.DistributedOptimizer(sgd(a.parameters()), named_parameters=a.named_parameters())
    with pytest.raises(ValueError, match="must reduce it the same way"):
        hvd.DistributedOptimizer(sgd(a.parameters()), named_parameters=a.named_parameters(),
                                 op=hvd.Sum)
    del opt_a
    hvd.DistributedOptimizer(sgd(b.parameters()), named_parameters=b.named_parameters())


def test_unnamed_parameters_get_the_same_names_on_every_rank(monkeypatch):
    names = []
    real = mpi_ops.allreduce_async_
    monkeypatch.setattr(mpi_ops, "allreduce_async_",
                        lambda t, **k: names.append(k["name"]) or real(t, **k))
    x, y = full_data(8)
    model = mlp()
    ref = copy.deepcopy(model)
    train(model, hvd.DistributedOptimizer(sgd(model.parameters())), shard(x), shard(y))
    train(ref, sgd(ref.parameters()), x, y)
    everyone = hvd.allgather_object(names)
    assert_same(model, ref)
    assert all(n == names for n in everyone) and len(set(names)) == 4
    assert all(n.startswith("grad.param.") for n in names)


def test_optimizer_no_named_parameters_has_parameter_names():
    # Horovod's test_optimizer_no_named_parameters, plus the names the reductions use.
    model = nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 10))
    frozen = nn.Parameter(torch.zeros(2), requires_grad=False)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(
        [{"params": model[0].parameters()}, {"params": list(model[1].parameters()) + [frozen]}],
        lr=0.001))
    params = opt._parameter_names
    assert list(params) == list(model.parameters()) + [frozen]
    assert len(params) == len(set(params.values())) == 5
    assert list(params.values())[:4] == opt._hvd_entries.names  # the reductions' names
    assert params[frozen] == "allreduce.noname.4"
    all_param_names = hvd.allgather_object(list(params.values()))
    assert len(all_param_names) == hvd.size()
    assert all(names == all_param_names[0] for names in all_param_names)
    named = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
    assert named._parameter_names == dict((p, n) for n, p in model.named_parameters())


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 2)
        self.b = nn.Linear(4, 2)

    def forward(self, x, use_b):
        return self.a(x) + self.b(x) if use_b else self.a(x)


@pytest.mark.parametrize("groups", [None, 1], ids=["single", "one_group"])
def test_gradient_missing_on_some_ranks_contributes_zeros(groups):
    x, y = full_data(9)
    torch.manual_seed(0)
    model = Branchy().double()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=model.named_parameters(), groups=groups)
    ref_opt = sgd(ref.parameters())
    for _ in range(STEPS):
        opt.zero_grad()
        F.mse_loss(model(shard(x), hvd.rank() == 0), shard(y)).backward()
        opt.step()
        ref_opt.zero_grad()
        (sum(F.mse_loss(ref(shard(x, rank=r), r == 0), shard(y, rank=r))
             for r in range(hvd.size())) / hvd.size()).backward()
        ref_opt.step()
    assert_same(model, ref)


def test_step_with_closure_returns_the_averaged_loss():
    x, y = full_data(10)
    model = mlp()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=model.named_parameters())
    ref_opt = sgd(ref.parameters())

    def closure(m, o, xx, yy):
        def run():
            o.zero_grad()
            loss = F.mse_loss(m(xx), yy)
            loss.backward()
            return loss
        return run
    for _ in range(STEPS):
        loss = opt.step(closure(model, opt, shard(x), shard(y)))
        ref_loss = ref_opt.step(closure(ref, ref_opt, x, y))
        torch.testing.assert_close(loss, ref_loss.detach(), rtol=TOL, atol=TOL)
    assert_same(model, ref)


def test_explicit_synchronize_then_clip_inside_skip_synchronize():
    x, y = full_data(11)
    model = mlp()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=model.named_parameters())
    ref_opt = sgd(ref.parameters())
    for m, o, xx, yy, dist in ((model, opt, shard(x), shard(y), True),
                               (ref, ref_opt, x, y, False)):
        for _ in range(STEPS):
            o.zero_grad()
            F.mse_loss(m(xx), yy).backward()
            if dist:
                o.synchronize()
            nn.utils.clip_grad_norm_(m.parameters(), 0.05)
            if dist:
                with o.skip_synchronize():
                    o.step()
            else:
                o.step()
    assert_same(model, ref)


@pytest.mark.parametrize("as_dense", [False, True], ids=["allgather", "sparse_as_dense"])
def test_sparse_gradients(as_dense):
    g = torch.Generator().manual_seed(12)
    idx = torch.randint(0, 7, (hvd.size() * N, 2), generator=g)
    torch.manual_seed(0)
    model = nn.Embedding(7, 3, sparse=True).double()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(),
                                   sparse_as_dense=as_dense)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    for m, o, ii in ((model, opt, shard(idx)), (ref, ref_opt, idx)):
        for _ in range(STEPS):
            o.zero_grad()
            (m(ii) - 1).pow(2).sum(-1).mean().backward()
            o.step()
    assert_same(model, ref)


class TwoEmbeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Embedding(7, 3, sparse=True)
        self.b = nn.Embedding(5, 2, sparse=True)

    def forward(self, i):
        return (self.a(i) - 1).pow(2).sum(-1).mean() + (self.b(i % 5) + 1).pow(2).sum(-1).mean()


@pytest.mark.parametrize("kw", [dict(sparse_as_dense=True), dict(groups=1), dict(num_groups=2),
                                dict(groups=1, sparse_as_dense=True)],
                         ids=["sparse_as_dense", "groups", "num_groups", "groups_as_dense"])
def test_sparse_adam_gets_sparse_gradients_reduced_as_asked(kw, monkeypatch):
    calls = {"sparse": 0, "grouped": 0}
    for fn, key in (("sparse_allreduce_async", "sparse"), ("grouped_allreduce_async_", "grouped")):
        real = getattr(mpi_ops, fn)
        monkeypatch.setattr(mpi_ops, fn, lambda *a, _r=real, _k=key, **k:
                            calls.__setitem__(_k, calls[_k] + 1) or _r(*a, **k))
    g = torch.Generator().manual_seed(13)
    idx = torch.randint(0, 7, (hvd.size() * N, 2), generator=g)
    torch.manual_seed(0)
    model = TwoEmbeddings().double()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), **kw)
    ref_opt = torch.optim.SparseAdam(ref.parameters(), lr=0.1)
    for m, o, ii in ((model, opt, shard(idx)), (ref, ref_opt, idx)):
        for _ in range(STEPS):
            o.zero_grad()
            m(ii).backward()
            o.step()
            assert all(p.grad.is_sparse for p in m.parameters())  # what SparseAdam takes
    assert_same(model, ref)
    dense = kw.get("sparse_as_dense", False)
    assert calls["sparse"] == (0 if dense else 2 * STEPS)  # never densified unless asked
    assert calls["grouped"] == (STEPS if "groups" in kw and dense else 0)
