# SPDX-License-Identifier: Apache-2.0
"""[python] hvd.torch.SyncBatchNorm equals torch's BatchNorm applied in one process to the
concatenation of every rank's batch (ranks hold different batch sizes): output, input gradient,
summed weight/bias gradients, running statistics, and eval mode."""
import pytest
import torch
import torch.nn as nn

import hvd.torch as hvd

C = 3
TOL = 1e-10


def rows(r):
    return 2 + r


def full(seed, tail):
    g = torch.Generator().manual_seed(seed)
    total = sum(rows(r) for r in range(hvd.size()))
    return torch.randn((total, C) + tail, generator=g, dtype=torch.float64) * 2 + 1


def mine(t):
    start = sum(rows(r) for r in range(hvd.rank()))
    return t[start:start + rows(hvd.rank())]


def pair(ref_cls, **kw):
    sync = hvd.SyncBatchNorm(C, **kw).double()
    ref = ref_cls(C, **kw).double()
    if sync.affine:
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():
            sync.weight.copy_(torch.rand(C, generator=g, dtype=torch.float64) + 0.5)
            sync.bias.copy_(torch.randn(C, generator=g, dtype=torch.float64))
    ref.load_state_dict(sync.state_dict())
    return sync, ref


def close(a, b, what, errors=None):
    """Asserts a == b; with `errors`, records the mismatch instead, so that this rank keeps
    taking part in the collectives that follow (the test asserts at its end)."""
    try:
        torch.testing.assert_close(a, b, rtol=TOL, atol=TOL, msg=lambda m: f"{what}: {m}")
    except AssertionError as e:
        if errors is None:
            raise
        errors.append(str(e))


CASES = {
    "1d_2d_input": (nn.BatchNorm1d, ()),
    "1d_3d_input": (nn.BatchNorm1d, (4,)),
    "2d": (nn.BatchNorm2d, (2, 3)),
}


@pytest.mark.parametrize("kw", [{}, dict(momentum=None), dict(affine=False)],
                         ids=["default", "cumulative_average", "no_affine"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_sync_batch_norm_equals_batch_norm_on_the_whole_batch(case, kw):
    ref_cls, tail = CASES[case]
    sync, ref = pair(ref_cls, **kw)
    errors = []
    for step in range(2):
        x_full = full(10 + step, tail).requires_grad_()
        upstream = full(20 + step, tail)
        x = mine(x_full.detach()).clone().requires_grad_()
        y = sync(x)
        y_ref = ref(x_full)
        close(y, mine(y_ref.detach()), "output", errors)
        (y * mine(upstream)).sum().backward()
        (y_ref * upstream).sum().backward()
        close(x.grad, mine(x_full.grad), "input gradient", errors)
        if sync.affine:
            close(hvd.allreduce(sync.weight.grad, op=hvd.Sum), ref.weight.grad, "weight grad",
                  errors)
            close(hvd.allreduce(sync.bias.grad, op=hvd.Sum), ref.bias.grad, "bias grad", errors)
            sync.zero_grad()
            ref.zero_grad()
    assert not errors, errors[0]
    close(sync.running_mean, ref.running_mean, "running_mean")
    close(sync.running_var, ref.running_var, "running_var")
    assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked) == 2
    sync.eval()
    ref.eval()
    x_full = full(30, tail)
    close(sync(mine(x_full)), mine(ref(x_full)), "eval output")


@pytest.mark.ranks(2, "a shard that is not the whole batch")
def test_local_batch_norm_differs_from_the_whole_batch():
    """The comparison is sensitive: a rank's own batch statistics give other outputs."""
    x_full = full(40, ())
    _, ref = pair(nn.BatchNorm1d)
    local = nn.BatchNorm1d(C).double()
    local.load_state_dict(ref.state_dict())
    assert float((local(mine(x_full)) - mine(ref(x_full))).abs().max()) > 1e-3


def test_sync_batch_norm_rejects_1d_input():
    with pytest.raises(ValueError, match="at least 2D"):
        hvd.SyncBatchNorm(C)(torch.randn(C))


def test_sync_batch_norm_trains_with_distributed_optimizer():
    """Model with SyncBatchNorm, DistributedOptimizer averaging: the same parameters as the
    model with BatchNorm trained on the whole batch in one process."""
    torch.manual_seed(0)
    lin = nn.Linear(C, C).double()
    model = nn.Sequential(lin, hvd.SyncBatchNorm(C).double(), nn.Tanh(), nn.Linear(C, 1))
    ref = nn.Sequential(nn.Linear(C, C), nn.BatchNorm1d(C), nn.Tanh(), nn.Linear(C, 1))
    model.double()
    ref.double().load_state_dict(model.state_dict())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        x_full, target = full(50 + step, ()), full(60 + step, ())[:, :1]
        opt.zero_grad()
        (model(mine(x_full)) - mine(target)).pow(2).sum().backward()
        opt.step()
        ref_opt.zero_grad()
        (ref(x_full) - target).pow(2).sum().backward()
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        close(p, q, name)
