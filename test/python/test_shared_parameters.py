# SPDX-License-Identifier: Apache-2.0
"""[python] Several DistributedOptimizers over overlapping parameters (a shared encoder with
decoders A/B/C, a GAN) train as the same program does in one process on the whole batch: in
hvd's style (each optimizer given the model's own named_parameters(), no renaming, no
synchronize()), in Horovod's explicit style, and as plain PyTorch whose zero_grad() follows
another optimizer's backward pass."""
import copy
import faulthandler
import gc

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hvd.torch as hvd
from hvd.torch import mpi_ops

from conftest import DEADLINE

N = 3
STEPS = 3
TOL = 1e-10


def full_batch(seed, din=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(hvd.size() * N, din, generator=g, dtype=torch.float64)


def shard(t):
    return t[hvd.rank() * N:(hvd.rank() + 1) * N]


def assert_same(model, ref):
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p, q, rtol=TOL, atol=TOL, msg=lambda m: f"{name}: {m}")


class AutoEncoder(nn.Module):
    """One encoder shared by three decoders."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 3)
        self.dec = nn.ModuleList([nn.Linear(3, 4) for _ in range(3)])

    def loss(self, x, k):
        return F.mse_loss(self.dec[k](torch.tanh(self.enc(x))), x)


def autoencoder():
    torch.manual_seed(0)
    return AutoEncoder().double()


def make_opts(model, holds, wrap):
    """One optimizer per entry of `holds` (lists of submodule names), wrapped by `wrap`."""
    makers = [lambda ps: torch.optim.SGD(ps, lr=0.2, momentum=0.9),
              lambda ps: torch.optim.Adam(ps, lr=0.05),
              lambda ps: torch.optim.SGD(ps, lr=0.1)]
    opts = []
    for i, parts in enumerate(holds):
        params = [p for part in parts for p in model.get_submodule(part).parameters()]
        opts.append(wrap(makers[i](params), i, model))
    return opts


def plain(opt, i, model):
    return opt


def hvd_style(opt, i, model):
    return hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())


def horovod_style(opt, i, model):
    return hvd.DistributedOptimizer(
        opt, named_parameters=[(f"opt{i}.{n}", p) for n, p in model.named_parameters()])


SHARED = [["enc", "dec.0"], ["enc", "dec.1"], ["enc", "dec.2"]]


def sequential(model, opts, x):
    """Per decoder: zero_grad, backward of its loss, step."""
    for _ in range(STEPS):
        for k, opt in enumerate(opts):
            opt.zero_grad()
            model.loss(x, k).backward()
            opt.step()


def test_shared_encoder_sequential_hvd_style(monkeypatch):
    names = []
    real = mpi_ops.allreduce_async_
    monkeypatch.setattr(mpi_ops, "allreduce_async_",
                        lambda t, **k: names.append(k["name"]) or real(t, **k))
    x = full_batch(1)
    model, ref = autoencoder(), autoencoder()
    sequential(model, make_opts(model, SHARED, hvd_style), shard(x))
    sequential(ref, make_opts(ref, SHARED, plain), x)
    assert_same(model, ref)
    # one reduction of the encoder per backward pass, not one per optimizer holding it
    assert names.count("grad.enc.weight") == 3 * STEPS


def combined(model, opts, x, ritual):
    """All zero_grad, one backward of the summed losses, all steps (Horovod's ritual: explicit
    synchronize() of every optimizer, then each step inside skip_synchronize())."""
    for _ in range(STEPS):
        for opt in opts:
            opt.zero_grad()
        sum(model.loss(x, k) for k in range(3)).backward()
        if ritual:
            for opt in opts:
                opt.synchronize()
        for opt in opts:
            if ritual:
                with opt.skip_synchronize():
                    opt.step()
            else:
                opt.step()


@pytest.mark.parametrize("style", ["hvd", "horovod"])
def test_shared_encoder_one_backward(style):
    x = full_batch(2)
    model, ref = autoencoder(), autoencoder()
    wrap = hvd_style if style == "hvd" else horovod_style
    combined(model, make_opts(model, SHARED, wrap), shard(x), ritual=style == "horovod")
    combined(ref, make_opts(ref, SHARED, plain), x, ritual=False)
    assert_same(model, ref)


ZERO_GRAD_DEFAULT_IS_NONE = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 0)


@pytest.mark.parametrize("set_to_none", ["default", False, True])
def test_zero_grad_after_another_optimizers_backward_waits_and_discards(set_to_none):
    """Plain PyTorch: the third loss reaches the encoder, whose optimizers do not step on it;
    the next zero_grad() of the first optimizer discards that gradient (None with set_to_none,
    the default since torch 2.0; zeros without, 1.13's default), and training goes on as in
    one process."""
    x = full_batch(3)
    holds = [["enc", "dec.0"], ["enc", "dec.1"], ["dec.2"]]
    model, ref = autoencoder(), autoencoder()
    opts = make_opts(model, holds, hvd_style)
    ref_opts = make_opts(ref, holds, plain)
    sequential(model, opts, shard(x))
    sequential(ref, ref_opts, x)
    assert_same(model, ref)
    kw = {} if set_to_none == "default" else dict(set_to_none=set_to_none)
    opts[0].zero_grad(**kw)
    ref_opts[0].zero_grad(**kw)
    to_none = ZERO_GRAD_DEFAULT_IS_NONE if set_to_none == "default" else set_to_none
    for m in (model, ref):
        if to_none:
            assert m.enc.weight.grad is None
        else:
            assert float(m.enc.weight.grad.abs().max()) == 0.0
    sequential(model, opts, shard(x))  # the discarded reduction reaches no later step
    sequential(ref, ref_opts, x)
    assert_same(model, ref)


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = nn.Linear(2, 3)
        self.disc = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def gan_training(model, opt_d, opt_g, real, z):
    for _ in range(STEPS):
        opt_d.zero_grad()
        fake = model.gen(z)
        loss_d = F.softplus(-model.disc(real)).mean() + \
            F.softplus(model.disc(fake.detach())).mean()
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        F.softplus(-model.disc(fake)).mean().backward()  # reaches the discriminator too
        opt_g.step()
    opt_d.zero_grad()


def test_gan_two_optimizers_hvd_style():
    real, z = full_batch(4, din=3), full_batch(5, din=2)
    torch.manual_seed(0)
    model = GAN().double()
    ref = copy.deepcopy(model)
    opt_d = hvd.DistributedOptimizer(torch.optim.Adam(model.disc.parameters(), lr=0.05),
                                     named_parameters=model.named_parameters())
    opt_g = hvd.DistributedOptimizer(torch.optim.SGD(model.gen.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
    gan_training(model, opt_d, opt_g, shard(real), shard(z))
    gan_training(ref, torch.optim.Adam(ref.disc.parameters(), lr=0.05),
                 torch.optim.SGD(ref.gen.parameters(), lr=0.1), real, z)
    assert_same(model, ref)


def test_optimizers_sharing_a_parameter_can_be_created_and_dropped_repeatedly():
    """Registration follows the optimizers' lifetimes: names are free again once they go."""
    x = full_batch(6)
    for _ in range(2):
        model, ref = autoencoder(), autoencoder()
        sequential(model, make_opts(model, SHARED, hvd_style), shard(x))
        sequential(ref, make_opts(ref, SHARED, plain), x)
        assert_same(model, ref)


def _train_within(seconds, model, opt, x, steps=3):
    """`steps` SGD steps on this rank's shard; the run fails (every thread's traceback, exit) if
    they do not finish within `seconds` (a stall on mismatched names would never end)."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        for _ in range(steps):
            opt.zero_grad()
            model(shard(x)).pow(2).mean().backward()
            opt.step()
    finally:
        faulthandler.dump_traceback_later(DEADLINE, exit=True)  # the conftest deadline again


def _assert_equal_on_every_rank(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = hvd.allgather(flat.unsqueeze(0), name="test.equal_on_every_rank")
    for r in range(hvd.size()):
        assert torch.equal(every[r], flat), f"parameters of rank {r} differ from rank {hvd.rank()}"


def _mlp_and_optimizer(model=None):
    if model is None:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1)).double()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    return model, opt


@pytest.mark.ranks(2, "an old optimizer kept alive on rank 0 only")
def test_old_optimizer_alive_on_one_rank_only_changes_no_wire_name():
    """A saved traceback or a logger keeps an old optimizer alive on rank 0 only: a new model with
    the same parameter names, and a new optimizer over the same model, still train in step
    (wire names come from the registration order, not from which optimizers are gone)."""
    x = full_batch(7)
    old = _mlp_and_optimizer()
    _train_within(20, *old, x, steps=1)
    kept = [old] if hvd.rank() == 0 else []
    del old
    gc.collect()  # gone everywhere but on rank 0
    model, opt = _mlp_and_optimizer()  # the same names, new tensors
    _train_within(20, model, opt, x)
    _assert_equal_on_every_rank(model)
    # A new optimizer over the same model, the previous one again alive on rank 0 only.
    kept.append(opt)
    del opt
    gc.collect()
    model, opt = _mlp_and_optimizer(model)
    _train_within(20, model, opt, x)
    _assert_equal_on_every_rank(model)
    del kept
