# SPDX-License-Identifier: Apache-2.0
"""[python] Gradients in every order plain PyTorch accepts (several backward passes before a step,
module.zero_grad(), retain_graph, per-optimizer backward/step/zero_grad through a shared
encoder), several models whose parameter names collide, optimizers built while older ones live,
sparse gradients, a process set this rank is outside of: after 20 steps the weights equal one
process training on the whole batch (float32, largest difference <= 1e-6), which each rank
computes itself. Counts reductions per parameter per step, so a shared parameter reduced twice,
or skipped, fails."""
import copy
import faulthandler
import time
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hvd.torch as hvd
from hvd import _core

STEPS = 20
ROWS = 4
TOL = 1e-6


def data(seed, din=6, dout=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(hvd.size() * ROWS, din, generator=g)
    y = torch.randn(hvd.size() * ROWS, dout, generator=g)
    return x, y


def shard(t):
    return t[hvd.rank() * ROWS:(hvd.rank() + 1) * ROWS]


def mlp(seed, din=6, dout=3):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(din, 8), nn.Tanh(), nn.Linear(8, dout))


def max_diff(a, b):
    return max(float((p - q).abs().max()) for p, q in zip(a.parameters(), b.parameters()))


def submissions():
    return dict(_core.registry_submissions())


def counted(before, names):
    after = submissions()
    return {n: after.get(n, 0) - before.get(n, 0) for n in names}


@pytest.mark.parametrize("op", ["average", "sum"])
@pytest.mark.parametrize("zero", ["optimizer", "module", "module_none", "optimizer_none"])
def test_two_backward_passes_before_step(op, zero):
    """DCGAN's discriminator: errD_real.backward(); errD_fake.backward(); optD.step()."""
    x, y = data(1)
    model, ref = mlp(0), mlp(0)
    hop = hvd.Sum if op == "sum" else hvd.Average
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(), op=hop)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    # One process on the whole batch: mean over all rows (Average), or the sum of each rank's
    # shard mean (Sum).
    scale = hvd.size() if op == "sum" else 1.0
    names = opt._hvd_entries.wires
    for step in range(STEPS):
        before = submissions()
        for m, o, xs, ys, s in ((model, opt, shard(x), shard(y), 1.0), (ref, ref_opt, x, y, scale)):
            if zero == "optimizer":
                o.zero_grad(set_to_none=False)
            elif zero == "optimizer_none":
                o.zero_grad(set_to_none=True)
            else:
                m.zero_grad(set_to_none=(zero == "module_none"))
            (s * F.mse_loss(m(xs), ys)).backward()
            (s * F.mse_loss(m(xs * 0.5), ys)).backward()
            o.step()
        n = counted(before, names)
        assert all(v == 2 for v in n.values()), (step, n)  # one per parameter per pass
    assert max_diff(model, ref) <= TOL


def test_retain_graph_twice_and_bpps_keeps_horovods_meaning():
    x, y = data(2)
    for bpps in (1, 2):
        model, ref = mlp(1), mlp(1)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                       named_parameters=model.named_parameters(),
                                       backward_passes_per_step=bpps)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
        names = opt._hvd_entries.wires
        for _ in range(STEPS):
            before = submissions()
            for m, o, xs, ys in ((model, opt, shard(x), shard(y)), (ref, ref_opt, x, y)):
                o.zero_grad()
                loss = F.mse_loss(m(xs), ys)
                loss.backward(retain_graph=True)
                loss.backward()
                o.step()
            # bpps=2: both passes accumulate locally, then one reduction (Horovod's meaning).
            assert set(counted(before, names).values()) == {2 // bpps}
        assert max_diff(model, ref) <= TOL


class Gen(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 6))

    def forward(self, z):
        return self.main(z)


class Disc(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))

    def forward(self, x):
        return self.main(x)


def dcgan_step(net_g, net_d, opt_g, opt_d, real, z):
    """PyTorch's DCGAN loop, verbatim in shape: both models have `main`, netD.zero_grad(),
    two D backward passes, fake.detach(), the generator's loss through D."""
    crit = nn.BCEWithLogitsLoss()
    ones, zeros = torch.ones(real.shape[0], 1), torch.zeros(real.shape[0], 1)
    net_d.zero_grad()
    err_real = crit(net_d(real), ones)
    err_real.backward()
    fake = net_g(z)
    err_fake = crit(net_d(fake.detach()), zeros)
    err_fake.backward()
    opt_d.step()
    net_g.zero_grad()
    err_g = crit(net_d(fake), ones)
    err_g.backward()
    opt_g.step()


def test_dcgan_two_models_with_colliding_names_train_like_one_process():
    g = torch.Generator().manual_seed(3)
    real = torch.randn(hvd.size() * ROWS, 6, generator=g)
    z = torch.randn(hvd.size() * ROWS, 3, generator=g)
    torch.manual_seed(4)
    net_g, net_d = Gen(), Disc()
    ref_g, ref_d = copy.deepcopy(net_g), copy.deepcopy(net_d)
    opt_d = hvd.DistributedOptimizer(torch.optim.Adam(net_d.parameters(), lr=1e-3),
                                     named_parameters=net_d.named_parameters())
    opt_g = hvd.DistributedOptimizer(torch.optim.Adam(net_g.parameters(), lr=1e-3),
                                     named_parameters=net_g.named_parameters())
    assert opt_d._hvd_entries.wires[0] == "grad.main.0.weight"
    assert opt_g._hvd_entries.wires[0] == "grad.main.0.weight#2"
    everyone = hvd.allgather_object(opt_g._hvd_entries.wires)
    assert all(w == opt_g._hvd_entries.wires for w in everyone)
    r_opt_d = torch.optim.Adam(ref_d.parameters(), lr=1e-3)
    r_opt_g = torch.optim.Adam(ref_g.parameters(), lr=1e-3)
    for _ in range(STEPS):
        dcgan_step(net_g, net_d, opt_g, opt_d, shard(real), shard(z))
        # One process: losses are means over the shard; the whole-batch mean equals the
        # average of the shard means.
        dcgan_step(ref_g, ref_d, r_opt_g, r_opt_d, real, z)
    assert max_diff(net_d, ref_d) <= TOL and max_diff(net_g, ref_g) <= TOL


def test_new_model_while_an_old_one_lives():
    x, y = data(5)
    old = mlp(2)
    old_opt = hvd.DistributedOptimizer(torch.optim.SGD(old.parameters(), lr=0.1),
                                       named_parameters=old.named_parameters())
    model, ref = mlp(3), mlp(3)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(STEPS):
        for m, o, xs, ys in ((model, opt, shard(x), shard(y)), (ref, ref_opt, x, y)):
            o.zero_grad()
            F.mse_loss(m(xs), ys).backward()
            o.step()
    assert max_diff(model, ref) <= TOL
    # The old one still trains too, under its own names.
    old_opt.zero_grad()
    F.mse_loss(old(shard(x)), shard(y)).backward()
    old_opt.step()
    # One name for two tensors inside one optimizer stays an error, as in Horovod.
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    with pytest.raises(ValueError, match="'weight'"):
        hvd.DistributedOptimizer(torch.optim.SGD(list(a.parameters()) + list(b.parameters()),
                                                 lr=0.1),
                                 named_parameters=list(a.named_parameters()) +
                                 list(b.named_parameters()))


@pytest.mark.parametrize("op", ["average", "sum"])
def test_shared_encoder_per_optimizer_backward_step_zero_grad(op):
    """Encoder E shared by three optimizers, each with its decoder; each loss goes through E (the
    third is not detached); each optimizer does backward(); step(); zero_grad() in turn. E is
    reduced once per backward pass (counted), never twice, never skipped."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(hvd.size() * ROWS, 6, generator=g)
    torch.manual_seed(7)
    enc = nn.Linear(6, 4)
    decs = [nn.Linear(4, 6) for _ in range(3)]
    r_enc, r_decs = copy.deepcopy(enc), copy.deepcopy(decs)
    hop = hvd.Sum if op == "sum" else hvd.Average
    scale = hvd.size() if op == "sum" else 1.0

    def opts(e, ds, wrap):
        out = []
        for d in ds:
            params = list(e.parameters()) + list(d.parameters())
            o = torch.optim.SGD(params, lr=0.05)
            if wrap:
                named = list(e.named_parameters()) + [("dec." + n, p) for n, p in
                                                      d.named_parameters()]
                o = hvd.DistributedOptimizer(o, named_parameters=named, op=hop)
            out.append(o)
        return out

    hopts, ropts = opts(enc, decs, True), opts(r_enc, r_decs, False)
    for _ in range(STEPS):
        before = submissions()
        for e, ds, os_, xs, s in ((enc, decs, hopts, shard(x), 1.0),
                                  (r_enc, r_decs, ropts, x, scale)):
            for d, o in zip(ds, os_):
                (s * F.mse_loss(d(torch.tanh(e(xs))), xs)).backward()
                o.step()
                o.zero_grad()
        shared = hopts[0]._hvd_entries.wires[:2]
        assert hopts[1]._hvd_entries.wires[:2] == shared
        assert counted(before, shared) == {w: 3 for w in shared}
        for o in hopts:  # each decoder: once per step
            assert counted(before, o._hvd_entries.wires[2:]) == \
                {w: 1 for w in o._hvd_entries.wires[2:]}
    diff = max(max_diff(enc, r_enc), *(max_diff(a, b) for a, b in zip(decs, r_decs)))
    assert diff <= TOL


class TwoEmbeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4, sparse=True)
        self.emb2 = nn.Embedding(10, 4, sparse=True)

    def forward(self, idx, flagged):
        """Per-row loss summed, / ROWS: emb2 only on flagged rows (none on some ranks)."""
        loss = (self.emb(idx) - 1).pow(2).sum()
        if flagged.any():
            loss = loss + (self.emb2(idx[flagged]) + 1).pow(2).sum()
        return loss / ROWS


@pytest.mark.parametrize("zero", ["optimizer", "module_none"])
def test_sparse_embeddings_with_sparse_adam_one_unused_on_some_ranks(zero):
    g = torch.Generator().manual_seed(8)
    idx = torch.randint(0, 10, (hvd.size() * ROWS, 3), generator=g)
    torch.manual_seed(9)
    model = TwoEmbeddings()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(model.parameters()), lr=0.05),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SparseAdam(list(ref.parameters()), lr=0.05)
    for step in range(STEPS):
        # This step, only rank step % size has rows that use emb2.
        flagged = torch.zeros(hvd.size() * ROWS, dtype=torch.bool)
        owner = step % hvd.size()
        flagged[owner * ROWS:(owner + 1) * ROWS] = True
        for m, o, ii, ff, div in ((model, opt, shard(idx), shard(flagged), 1),
                                  (ref, ref_opt, idx, flagged, hvd.size())):
            if zero == "optimizer":
                o.zero_grad()
            else:
                m.zero_grad(set_to_none=True)
            (m(ii, ff) / div).backward()
            o.step()
    assert max_diff(model, ref) <= TOL


def test_optimizer_outside_its_process_set_steps_locally():
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    ps = hvd.add_process_set([0])
    try:
        x, y = data(10)
        model, ref = mlp(4), mlp(4)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), process_set=ps)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        before = submissions()
        for m, o in ((model, opt), (ref, ref_opt)):
            for _ in range(3):
                o.zero_grad()
                F.mse_loss(m(shard(x)), shard(y)).backward()
                o.step()
        # Rank 0 is the whole set (its average is its own gradient); the others step locally.
        assert max_diff(model, ref) <= TOL
        # The wire names (numbered when an earlier test used the same names): rank 0's.
        wires = hvd.broadcast_object(opt._hvd_entries.wires if hvd.rank() == 0 else None, 0)
        n = counted(before, wires)
        assert set(n.values()) == ({3} if hvd.rank() == 0 else {0})
        del opt
    finally:
        hvd.remove_process_set(ps)


def test_synchronize_then_step_warns_as_horovod():
    model = mlp(5)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = data(11)
    F.mse_loss(model(shard(x)), shard(y)).backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        opt.step()
    opt.zero_grad()
    F.mse_loss(model(shard(x)), shard(y)).backward()
    opt.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with opt.skip_synchronize():
            opt.step()


@pytest.mark.parametrize("make", ["sgd_momentum", "adam", "frozen"])
def test_broadcast_optimizer_state_with_parameters_without_gradient(make):
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    if make == "frozen":
        model[1].weight.requires_grad_(False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    elif make == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    # Only the first layer gets a gradient, and only on rank 0: the others never stepped.
    if hvd.rank() == 0:
        model[0](torch.ones(1, 3)).sum().backward()
        opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    mine = {i: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in opt.state[p].items()}
            for i, p in enumerate(p for g in opt.param_groups for p in g["params"])
            if p in opt.state}
    root = hvd.broadcast_object(mine, root_rank=0)
    assert mine.keys() == root.keys() and len(mine) == 2  # the first layer's weight and bias
    for i, st in mine.items():
        for k, v in st.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(root[i][k])), (i, k)


class Routed(nn.Module):
    """A trunk and an expert reached only when `use` (a router, LayerDrop, a data-dependent
    branch)."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(6, 8)
        self.expert = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x, use):
        h = torch.tanh(self.trunk(x))
        if use:
            h = h + torch.tanh(self.expert(h))
        return self.head(h)


def uses_expert(rank, p, passes):
    """Rank 0 uses the expert in every pass, rank 1 only in the last, the others in every other
    one: the number of passes that reach it differs between ranks."""
    if rank == 0:
        return True
    if rank == 1:
        return p == passes - 1
    return (p + rank) % 2 == 0


def same_on_every_rank(model):
    mine = [p.detach().clone() for p in model.parameters()]
    for other in hvd.allgather_object(mine):
        if not all(torch.equal(a, b) for a, b in zip(other, mine)):
            return False
    return True


@pytest.mark.parametrize("passes", [2, 3])
@pytest.mark.parametrize("bpps", [1, 2])
def test_parameter_used_in_different_passes_on_different_ranks(passes, bpps):
    """Issue 37 item 1: several backward passes before step(), the expert reached by a different
    number of them on each rank. Used to block every rank inside backward (the pre-hook waited
    for a reduction the other rank submitted only later) or to pair reductions off by one. Now:
    no wait inside backward, every step the same bits on every rank and one process's weights."""
    faulthandler.dump_traceback_later(20, exit=True)  # a hang fails in 20 s, not 120
    g = torch.Generator().manual_seed(20 + passes)
    xs = [torch.randn(hvd.size() * ROWS, 6, generator=g) for _ in range(passes)]
    y = torch.randn(hvd.size() * ROWS, 3, generator=g)
    torch.manual_seed(21)
    model = Routed()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=bpps)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.5)
    names = opt._hvd_entries.wires
    t0 = time.monotonic()
    for step in range(6):
        before = submissions()
        opt.zero_grad()
        ref_opt.zero_grad()
        for p in range(passes):
            use = uses_expert(hvd.rank(), (p + step) % passes, passes)
            F.mse_loss(model(shard(xs[p]), use), shard(y)).backward()
            # One process: each rank's shard with that rank's routing, averaged.
            loss = sum(F.mse_loss(ref(xs[p][r * ROWS:(r + 1) * ROWS],
                                      uses_expert(r, (p + step) % passes, passes)),
                                  y[r * ROWS:(r + 1) * ROWS]) for r in range(hvd.size()))
            (loss / hvd.size()).backward()
        opt.step()
        ref_opt.step()
        # Reductions per parameter: as many on every rank (the ranks with fewer passes through
        # the expert padded with zeros), one at least, one per pass at most.
        n = counted(before, names)
        assert all(other == n for other in hvd.allgather_object(n)), (step, n)
        assert all(1 <= v <= passes for v in n.values()), (step, n)
        assert same_on_every_rank(model), step
        assert max_diff(model, ref) <= TOL, step
    assert time.monotonic() - t0 < 10


@pytest.mark.ranks(2, "the ranks use the expert in different passes")
def test_zeroing_after_uneven_passes_fails_every_rank():
    """A pass through the expert on rank 0 only, then zero_grad() while its reduction is in
    flight, then a pass through it everywhere: the ranks' reductions would pair a dropped
    gradient with a kept one. step() refuses on every rank at once, saying what to do; the
    optimizer works again afterwards."""
    faulthandler.dump_traceback_later(20, exit=True)
    x, y = data(22, dout=3)
    torch.manual_seed(23)
    model = Routed()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    F.mse_loss(model(shard(x), hvd.rank() == 0), shard(y)).backward()
    opt.zero_grad()
    F.mse_loss(model(shard(x), True), shard(y)).backward()
    t0 = time.monotonic()
    with pytest.raises(Exception, match="expert.weight.*zeroed on some ranks.*before zero_grad"):
        opt.step()
    assert time.monotonic() - t0 < 2
    opt.zero_grad()
    F.mse_loss(model(shard(x), True), shard(y)).backward()
    opt.step()
    assert same_on_every_rank(model)


def test_overlap_resumes_after_a_backward_pass_that_raised():
    """Issue 37 item 3: a pass that raises (a NaN check in a hook, a caught out-of-memory) used
    to leave the end-of-pass flag set: later passes submitted nothing until step(). Now the
    next pass's reductions start during its backward()."""
    x, y = data(24)
    model = mlp(25)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    names = opt._hvd_entries.wires

    def fail(_):
        raise RuntimeError("nan in the activations")

    h = model[0](shard(x))
    h.register_hook(fail)  # runs after the last layer's gradients were queued
    with pytest.raises(RuntimeError, match="nan in the activations"):
        F.mse_loss(model[2](torch.tanh(h)), shard(y)).backward()
    opt.zero_grad()
    for step in range(3):
        before = submissions()
        F.mse_loss(model(shard(x)), shard(y)).backward()
        # Started before step(): overlapped. (In the first pass the last layer's names may still
        # be busy with the failed pass's reductions, dropped by zero_grad(): those go at step().)
        if step > 0:
            assert counted(before, names) == {n: 1 for n in names}
        opt.step()
        opt.zero_grad()
    assert same_on_every_rank(model)


def test_autograd_grad_leaves_grad_alone_then_trains_like_one_process():
    """Issue 37 item 4: torch.autograd.grad (a gradient penalty, WGAN-GP) does not touch .grad,
    as in plain PyTorch; then backward() and step() give one process's weights."""
    x, y = data(26)
    model, ref = mlp(27), mlp(27)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    # One process: the penalty is per shard (each rank's own gradient), averaged.
    shards = [(x[r * ROWS:(r + 1) * ROWS], y[r * ROWS:(r + 1) * ROWS]) for r in range(hvd.size())]
    for step in range(4):
        for m, o, parts in ((model, opt, [(shard(x), shard(y))]), (ref, ref_opt, shards)):
            o.zero_grad()
            if step % 2:  # a gradient already there (in flight, for hvd)
                (sum(F.mse_loss(m(a), b) for a, b in parts) / len(parts)).backward()
            before = [p.grad for p in m.parameters()]
            total = 0
            for a, b in parts:
                loss = F.mse_loss(m(a), b)
                grads = torch.autograd.grad(loss, list(m.parameters()), create_graph=True)
                assert all(p.grad is g for p, g in zip(m.parameters(), before))
                total = total + loss + 0.1 * sum(gr.pow(2).sum() for gr in grads)
            (total / len(parts)).backward()
            o.step()
        assert max_diff(model, ref) <= TOL, step
    assert same_on_every_rank(model)


@pytest.mark.ranks(2, "rank 0 steps once more than the others, which have joined")
def test_step_agreement_with_ranks_that_joined():
    """Uneven data, Horovod's way: the ranks that ran out join, rank 0 steps once more. The
    joined ranks contribute zeros to its allreduces, the agreement of step() included (guards
    the agreement's encoding: minima must survive the zeros)."""
    faulthandler.dump_traceback_later(20, exit=True)
    x, y = data(28)
    model = mlp(29)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for _ in range(3 if hvd.rank() == 0 else 2):
        opt.zero_grad()
        F.mse_loss(model(shard(x)), shard(y)).backward()
        opt.step()
    assert hvd.join() == 0
