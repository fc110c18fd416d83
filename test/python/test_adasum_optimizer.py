# SPDX-License-Identifier: Apache-2.0
"""[python] hvd.torch.DistributedOptimizer(op=hvd.Adasum) against a reference written here:
each rank steps a copy of the model with plain torch on its own data, the ranks' deltas are
gathered (hvd.allgather) and combined with the recursive Adasum rule implemented below in NumPy
(float64), and the copy's parameters become old + that combination."""
import copy

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hvd.torch as hvd

ROWS = 4
TOL = 1e-6  # float32 parameters; the reference combines in float64


def adasum_pair(a, b):
    """Adasum of two vectors: (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b."""
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1.0 - dot / (2.0 * aa) if aa > 0 else 1.0
    cb = 1.0 - dot / (2.0 * bb) if bb > 0 else 1.0
    return ca * a + cb * b


def adasum_reference(vectors):
    """The recursive rule over the ranks' vectors (rank order; a power-of-two count): ranks
    2i and 2i+1 combine first, then neighbouring pairs of results, and so on (what vector halving
    with distance doubling computes, the dot products of each level over whole vectors)."""
    level = [np.asarray(v, dtype=np.float64).ravel() for v in vectors]
    while len(level) > 1:
        level = [adasum_pair(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def gathered(t):
    """The ranks' values of `t`, in rank order, as float64 arrays."""
    every = hvd.allgather(t.detach().reshape(1, -1).contiguous(), name="test.adasum.gather")
    return [row.double().numpy() for row in every]


def data(seed, rank, rows=ROWS, din=4, dout=2):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randn(rows, din, generator=g), torch.randn(rows, dout, generator=g)


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))


def reference_step(ref, ref_opt, batches):
    """One step of the reference: local step of `ref_opt` on the summed gradients of
    `batches`, then every parameter = old + adasum of the ranks' deltas."""
    old = [p.detach().clone() for p in ref.parameters()]
    ref_opt.zero_grad()
    for x, y in batches:
        F.mse_loss(ref(x), y).backward()
    ref_opt.step()
    with torch.no_grad():
        for p, o in zip(ref.parameters(), old):
            combined = adasum_reference(gathered(p - o))
            p.copy_(o + torch.from_numpy(combined).reshape(p.shape).to(p.dtype))


def assert_close(model, ref, tol=TOL):
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=tol, atol=tol,
                                   msg=lambda m: f"rank {hvd.rank()}, {name}: {m}")


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=0.1),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.Adam(ps, lr=0.01),
], ids=["sgd", "sgd-momentum", "adam"])
def test_two_steps_equal_the_reference(make_opt):
    a, b = np.array([1.0, 0.0]), np.array([0.0, 2.0])  # the reference rule itself
    np.testing.assert_allclose(adasum_reference([a, b]), a + b)  # orthogonal: the sum
    np.testing.assert_allclose(adasum_reference([a, a, a, a]), a)  # equal: the mean
    model = mlp()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    ref_opt = make_opt(ref.parameters())
    for step in range(2):
        x, y = data(step, hvd.rank())
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        reference_step(ref, ref_opt, [(x, y)])
        assert_close(model, ref)


def test_param_groups_keep_their_hyperparameters_across_load_state_dict():
    def groups(m):
        return [{"params": m[0].parameters()},
                {"params": m[2].parameters(), "lr": 0.02, "momentum": 0.9}]

    model = mlp()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(groups(model), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    ref_opt = torch.optim.SGD(groups(ref), lr=0.1)
    for step in range(2):
        x, y = data(40 + step, hvd.rank())
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        reference_step(ref, ref_opt, [(x, y)])
        assert_close(model, ref)
        opt.load_state_dict(opt.state_dict())  # new param group dicts, same order


def test_parameters_keep_their_value_until_step():
    model = mlp()
    before = [p.detach().clone() for p in model.parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    x, y = data(7, hvd.rank())
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p, b), f"rank {hvd.rank()}: a parameter changed before step()"
    opt.step()
    assert any(not torch.equal(p, b) for p, b in zip(model.parameters(), before))


def test_backward_passes_per_step_two_equals_the_reference():
    model = mlp()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   backward_passes_per_step=2)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.5)
    for step in range(2):
        batches = [data(10 + 2 * step + k, hvd.rank()) for k in range(2)]
        opt.zero_grad()
        for x, y in batches:
            F.mse_loss(model(x), y).backward()
        opt.step()
        reference_step(ref, ref_opt, batches)
        assert_close(model, ref)


def test_a_pass_too_many_before_step_is_an_error():
    model = mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    x, y = data(3, hvd.rank())
    F.mse_loss(model(x), y).backward()
    with pytest.raises(RuntimeError, match="skip_synchronize"):
        opt.skip_synchronize()
    if hvd.size() > 1:  # with one rank the optimizer is the wrapped one
        with pytest.raises(RuntimeError, match="backward_passes_per_step"):
            F.mse_loss(model(x), y).backward()
        with pytest.raises(RuntimeError, match="call step"):
            opt.zero_grad()
    opt.step()
    opt.zero_grad()


def regression(rank, rows=64, din=8):
    """A noiseless linear regression shard: y = x @ w_true."""
    g = torch.Generator().manual_seed(500 + rank)
    x = torch.randn(rows, din, generator=g)
    return x, x @ torch.linspace(-1.0, 1.0, din).reshape(din, 1)


def full_loss(model):
    with torch.no_grad():
        return sum(float(F.mse_loss(model(x), y)) for x, y in
                   (regression(r) for r in range(hvd.size()))) / hvd.size()


def train_regression(op, lr, steps=30):
    model = nn.Linear(8, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                   named_parameters=model.named_parameters(), op=op)
    x, y = regression(hvd.rank())
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return full_loss(model), model


def test_a_learning_rate_that_diverges_with_sum_converges_with_adasum():
    # The largest curvature over the shards: a step of lr on one shard's gradient converges
    # when lr * curvature < 2; Sum over n ranks multiplies the step by about n.
    curv = max(float(torch.linalg.eigvalsh(2.0 * x.T @ x / x.shape[0]).max())
               for x, _ in (regression(r) for r in range(hvd.size())))
    lr = 1.2 / curv
    start = full_loss(lambda x: torch.zeros(x.shape[0], 1))
    adasum, model = train_regression(hvd.Adasum, lr)
    if hvd.size() == 1:
        plain = nn.Linear(8, 1, bias=False)
        with torch.no_grad():
            plain.weight.zero_()
        opt = torch.optim.SGD(plain.parameters(), lr=lr)
        x, y = regression(0)
        for _ in range(30):
            opt.zero_grad()
            F.mse_loss(plain(x), y).backward()
            opt.step()
        assert torch.equal(model.weight, plain.weight)
        return
    summed, _ = train_regression(hvd.Sum, lr)
    assert np.isfinite(adasum) and adasum < 1e-3 * start, \
        f"rank {hvd.rank()}: Adasum loss {adasum} from {start}"
    assert not np.isfinite(summed) or summed > start, \
        f"rank {hvd.rank()}: Sum loss {summed} from {start} did not diverge"


def test_compression_fp16_steps_close_to_the_reference():
    model = mlp()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   compression=hvd.Compression.fp16)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x, y = data(20, hvd.rank())
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()
    reference_step(ref, ref_opt, [(x, y)])
    assert_close(model, ref, tol=2e-3)


@pytest.mark.ranks(3, "a process set of 3 ranks")
def test_a_set_that_is_not_a_power_of_two_is_refused_on_every_rank():
    ps = hvd.add_process_set([0, 1, 2])
    try:
        with pytest.raises(ValueError, match="power-of-two number of ranks.*it has 3"):
            hvd.DistributedOptimizer(torch.optim.SGD(mlp().parameters(), lr=0.1), op=hvd.Adasum,
                                     process_set=ps)
    finally:
        hvd.remove_process_set(ps)


@pytest.mark.ranks(4, "a process set of 2 ranks leaving ranks out")
def test_a_process_set_reduces_over_its_ranks_and_others_step_alone():
    ps = hvd.add_process_set([1, 3])
    try:
        model = mlp()
        ref = copy.deepcopy(model)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), op=hvd.Adasum,
                                       process_set=ps)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        x, y = data(30, hvd.rank())
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        ref_opt.zero_grad()
        old = [p.detach().clone() for p in ref.parameters()]
        F.mse_loss(ref(x), y).backward()
        ref_opt.step()
        with torch.no_grad():
            for p, o in zip(ref.parameters(), old):
                deltas = gathered(p - o)
                if hvd.rank() in (1, 3):
                    combined = adasum_reference([deltas[1], deltas[3]])
                    p.copy_(o + torch.from_numpy(combined).reshape(p.shape).float())
        assert_close(model, ref)
    finally:
        hvd.remove_process_set(ps)


def test_wire_names_do_not_depend_on_what_a_rank_keeps_alive():
    """An old Adasum optimizer kept alive on rank 0 only (a traceback, a logger) and collected on
    the others: a new optimizer over the same names gets the same wire names on every rank, then
    trains to the same parameters (names given out in registration order, never reused)."""
    import gc
    model = nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    old = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    kept = [old] if hvd.rank() == 0 else []
    del old
    gc.collect()
    fresh = nn.Linear(3, 2)
    hvd.broadcast_parameters(fresh.state_dict(), root_rank=0)
    new = hvd.DistributedOptimizer(torch.optim.SGD(fresh.parameters(), lr=0.1),
                                   named_parameters=fresh.named_parameters(), op=hvd.Adasum)
    names = sorted(sl.name for sl in new._hvd_slots)
    assert names and all(n == names for n in hvd.allgather_object(names, name="test.adasum.wires"))
    torch.manual_seed(hvd.rank())
    new.zero_grad()
    fresh(torch.randn(ROWS, 3)).pow(2).sum().backward()
    new.step()
    for p in fresh.parameters():
        every = gathered(p)
        assert all(np.array_equal(e, every[0]) for e in every)
    del kept
