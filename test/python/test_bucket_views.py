# SPDX-License-Identifier: Apache-2.0
"""[python] DistributedOptimizer(gradient_as_bucket_view=True) (issue 38 item 1): each
parameter's .grad is a view into a flat per-bucket buffer, reduced in place by one allreduce per
bucket. Training gives what one process on the whole batch gives, and what the option off
gives: plain training, zero_grad(set_to_none=True), shared parameters (a shared encoder, a GAN),
a parameter reached on some ranks only, fp16 compression, backward_passes_per_step=2, sparse
gradients (never bucketed) and a process set."""
import copy
import faulthandler

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hvd.torch as hvd
from hvd.torch import _grad_registry, mpi_ops

ROWS = 3
STEPS = 3
TOL = 1e-10
BV = dict(gradient_as_bucket_view=True)


def full_data(seed, din=4, dout=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(hvd.size() * ROWS, din, generator=g, dtype=torch.float64)
    y = torch.randn(hvd.size() * ROWS, dout, generator=g, dtype=torch.float64)
    return x, y


def shard(t, rank=None):
    r = hvd.rank() if rank is None else rank
    return t[r * ROWS:(r + 1) * ROWS]


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 5), nn.Tanh(),
                         nn.Linear(5, 2)).double()


def assert_same(model, ref, tol=TOL):
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p, q, rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")


def named(model):
    """The model's names under a prefix of this file: every name a test registers takes the
    name's next number on the wire in this process ("grad.x#2"), and other files' tests expect
    the first."""
    return [("bv." + n, p) for n, p in model.named_parameters()]


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def inside(t, flat):
    """t's storage lies inside flat's."""
    lo, n = flat.data_ptr(), flat.numel() * flat.element_size()
    return lo <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= lo + n


def assert_views(params):
    """Every parameter's .grad is a view into its bucket's flat buffer."""
    for p in params:
        flat = _grad_registry.bucket_buffer(p)
        assert flat is not None, f"{list(p.shape)}: not bucketed"
        assert p.grad is not None and inside(p.grad, flat), list(p.shape)


def step(model, opt, x, y, set_to_none=True):
    opt.zero_grad(set_to_none=set_to_none)
    F.mse_loss(model(x), y).backward()
    opt.step()


def all_ranks(ok):
    """`ok` on every rank (each rank asserts the same verdict)."""
    return all(hvd.allgather_object(bool(ok)))


@pytest.mark.parametrize("set_to_none", [True, False], ids=["set_to_none", "zeros"])
def test_grads_are_views_and_training_equals_full_batch_and_option_off(set_to_none):
    x, y = full_data(1)
    model, off, ref = mlp(), mlp(), mlp()
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=named(model), **BV)
    opt_off = hvd.DistributedOptimizer(sgd(off.parameters()),
                                       named_parameters=named(off))
    ref_opt = sgd(ref.parameters())
    for i in range(STEPS + 2):
        step(model, opt, shard(x), shard(y), set_to_none)
        step(off, opt_off, shard(x), shard(y), set_to_none)
        step(ref, ref_opt, x, y, set_to_none)
        if i >= 1:  # the layout is learned on the first step
            assert_views(model.parameters())
    assert_same(model, ref)
    assert_same(model, off)
    # zero_grad(set_to_none=True) empties .grad; the next pass accumulates into the view again.
    opt.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in model.parameters())
    step(model, opt, shard(x), shard(y), set_to_none=False)
    assert_views(model.parameters())


def test_one_allreduce_per_bucket(monkeypatch):
    """After the first step a step's gradients go as one flat allreduce (a bucket), not one per
    parameter."""
    x, y = full_data(2)
    model = mlp()
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=named(model), **BV)
    step(model, opt, shard(x), shard(y))
    sizes = []
    real = mpi_ops.allreduce_async_
    monkeypatch.setattr(mpi_ops, "allreduce_async_",
                        lambda t, **k: sizes.append(t.numel()) or real(t, **k))
    step(model, opt, shard(x), shard(y))
    assert sizes == [sum(p.numel() for p in model.parameters())]


def test_option_off_keeps_separate_gradients():
    """The check above can fail: without the option no gradient is a bucket's view."""
    x, y = full_data(3)
    model = mlp()
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=named(model))
    for _ in range(2):
        step(model, opt, shard(x), shard(y))
    assert all(_grad_registry.bucket_buffer(p) is None for p in model.parameters())


def test_backward_passes_per_step_two():
    g = torch.Generator().manual_seed(4)
    batches = [tuple(torch.randn(hvd.size() * ROWS, d, generator=g, dtype=torch.float64)
                     for d in (4, 2)) for _ in range(2)]
    model, off, ref = mlp(), mlp(), mlp()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.05),
                                   named_parameters=named(model),
                                   backward_passes_per_step=2, **BV)
    opt_off = hvd.DistributedOptimizer(torch.optim.Adam(off.parameters(), lr=0.05),
                                       named_parameters=named(off),
                                       backward_passes_per_step=2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.05)
    for _ in range(STEPS + 1):
        for m, o, take in ((model, opt, shard), (off, opt_off, shard), (ref, ref_opt, None)):
            o.zero_grad()
            for x, y in batches:
                F.mse_loss(m(take(x) if take else x), take(y) if take else y).backward()
            o.step()
        assert_views(model.parameters())
    assert_same(model, ref)
    assert_same(model, off)


def test_fp16_compression_through_a_bucket_of_its_own(monkeypatch):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))  # float32
    off, ref = copy.deepcopy(model), copy.deepcopy(model)
    x, y = (t.float() for t in full_data(5))
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=named(model),
                                   compression=hvd.Compression.fp16, **BV)
    opt_off = hvd.DistributedOptimizer(sgd(off.parameters()),
                                       named_parameters=named(off),
                                       compression=hvd.Compression.fp16)
    ref_opt = sgd(ref.parameters())
    step(model, opt, shard(x), shard(y))
    wires = []
    real = mpi_ops.allreduce_async_
    monkeypatch.setattr(mpi_ops, "allreduce_async_",
                        lambda t, **k: wires.append((t.dtype, t.numel())) or real(t, **k))
    for _ in range(STEPS):
        step(model, opt, shard(x), shard(y))
    monkeypatch.undo()
    for _ in range(STEPS + 1):
        step(off, opt_off, shard(x), shard(y))
        step(ref, ref_opt, x, y)
    # One float16 allreduce of the whole bucket per step.
    assert wires == [(torch.float16, sum(p.numel() for p in model.parameters()))] * STEPS
    assert_views(model.parameters())
    # The same casts element by element as option off; one process to fp16 precision.
    assert_same(model, off, tol=1e-6)
    assert_same(model, ref, tol=2e-3)


class AutoEncoder(nn.Module):
    """One encoder shared by two decoders, each with its own optimizer."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 3)
        self.dec = nn.ModuleList([nn.Linear(3, 4) for _ in range(2)])

    def loss(self, x, k):
        return F.mse_loss(self.dec[k](torch.tanh(self.enc(x))), x)


def autoencoder():
    torch.manual_seed(0)
    return AutoEncoder().double()


@pytest.mark.parametrize("style", ["sequential", "combined"])
def test_shared_encoder_between_two_optimizers(style):
    x, _ = full_data(6)

    def make(model, wrap):
        opts = [sgd(list(model.enc.parameters()) + list(model.dec[k].parameters()))
                for k in range(2)]
        return [hvd.DistributedOptimizer(o, named_parameters=named(model), **wrap)
                if wrap is not None else o for o in opts]
    model, off, ref = autoencoder(), autoencoder(), autoencoder()
    runs = [(model, make(model, BV), shard(x)), (off, make(off, {}), shard(x)),
            (ref, make(ref, None), x)]
    for _ in range(STEPS + 1):
        for m, opts, data in runs:
            if style == "sequential":
                for k, o in enumerate(opts):
                    o.zero_grad()
                    m.loss(data, k).backward()
                    o.step()
            else:
                for o in opts:
                    o.zero_grad()
                    (m.loss(data, 0) + m.loss(data, 1)).backward()
                for o in opts:
                    o.step()
    assert_same(model, ref)
    assert_same(model, off)
    # The decoders (one optimizer each) are bucketed; the encoder, held by both, is not.
    assert_views(model.dec.parameters())
    assert all(_grad_registry.bucket_buffer(p) is None for p in model.enc.parameters())


class Gen(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 4))

    def forward(self, z):
        return self.net(z)


class Disc(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))

    def forward(self, x):
        return self.net(x)


def test_gan_two_models_with_colliding_names():
    """DCGAN's shape: D's step on real and fake, then G's through D (D's gradients accumulate
    again on top of its reduced ones, D zeroed only at its next step)."""
    g = torch.Generator().manual_seed(7)
    real = torch.randn(hvd.size() * ROWS, 4, generator=g, dtype=torch.float64)
    z = torch.randn(hvd.size() * ROWS, 2, generator=g, dtype=torch.float64)

    def models():
        torch.manual_seed(3)
        return Gen().double(), Disc().double()

    def run(gen, disc, opt_g, opt_d, r, zz, steps):
        for _ in range(steps):
            disc.zero_grad()
            out_r = disc(r)
            F.binary_cross_entropy_with_logits(out_r, torch.ones_like(out_r)).backward()
            fake = gen(zz)
            out_f = disc(fake.detach())
            F.binary_cross_entropy_with_logits(out_f, torch.zeros_like(out_f)).backward()
            opt_d.step()
            gen.zero_grad()
            out = disc(fake)
            F.binary_cross_entropy_with_logits(out, torch.ones_like(out)).backward()
            opt_g.step()

    results = []
    for wrap in (BV, {}, None):
        gen, disc = models()
        opt_g = torch.optim.Adam(gen.parameters(), lr=0.01)
        opt_d = torch.optim.Adam(disc.parameters(), lr=0.01)
        if wrap is not None:
            opt_g = hvd.DistributedOptimizer(opt_g, named_parameters=named(gen),
                                             **wrap)
            opt_d = hvd.DistributedOptimizer(opt_d, named_parameters=named(disc),
                                             **wrap)
            run(gen, disc, opt_g, opt_d, shard(real), shard(z), STEPS + 1)
            if wrap:  # (while the optimizers live: a parameter leaves its bucket with them)
                assert_views(list(gen.parameters()) + list(disc.parameters()))
        else:
            # one process on the whole batch: every rank's shard, averaged (the loss is a mean)
            run(gen, disc, opt_g, opt_d, real, z, STEPS + 1)
        results.append((gen, disc))
    (g_bv, d_bv), (g_off, d_off), (g_ref, d_ref) = results
    assert_same(g_bv, g_off)
    assert_same(d_bv, d_off)
    assert_same(g_bv, g_ref)
    assert_same(d_bv, d_ref)


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 2)
        self.b = nn.Linear(4, 2)

    def forward(self, x, use_b):
        return self.a(x) + self.b(x) if use_b else self.a(x)


@pytest.mark.parametrize("bpps", [1, 2])
def test_a_parameter_reached_on_some_ranks_only(bpps):
    """Rank 0 alone uses branch b (its bucket mates get gradients everywhere): no rank hangs,
    every rank gets one process's weights."""
    faulthandler.dump_traceback_later(20, exit=True)  # a hang fails in 20 s, not 120
    x, y = full_data(9)
    torch.manual_seed(0)
    model = Branchy().double()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=named(model),
                                   backward_passes_per_step=bpps, **BV)
    ref_opt = sgd(ref.parameters())
    for _ in range(STEPS + 1):
        opt.zero_grad()
        ref_opt.zero_grad()
        for _ in range(bpps):
            F.mse_loss(model(shard(x), hvd.rank() == 0), shard(y)).backward()
            (sum(F.mse_loss(ref(shard(x, rank=r), r == 0), shard(y, rank=r))
                 for r in range(hvd.size())) / hvd.size()).backward()
        opt.step()
        ref_opt.step()
    assert_views(model.parameters())  # branch b too, zeros on the ranks that skip it
    assert_same(model, ref)
    assert all_ranks(all(torch.equal(a, b) for a, b in zip(
        hvd.broadcast_object([p.detach() for p in model.parameters()], 0),
        [p.detach() for p in model.parameters()])))


def test_sparse_gradients_are_not_bucketed():
    torch.manual_seed(0)
    emb = nn.Embedding(10, 3, sparse=True).double()
    lin = nn.Linear(3, 1).double()
    ref_emb, ref_lin = copy.deepcopy(emb), copy.deepcopy(lin)
    params = list(emb.parameters()) + list(lin.parameters())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1),
                                   named_parameters=[("bv.emb", emb.weight), ("bv.w", lin.weight),
                                                     ("bv.b", lin.bias)], **BV)
    ref_opt = torch.optim.SGD(list(ref_emb.parameters()) + list(ref_lin.parameters()), lr=0.1)
    idx = torch.arange(hvd.size() * 2) % 10
    for _ in range(STEPS):
        opt.zero_grad()
        lin(emb(idx[hvd.rank() * 2:(hvd.rank() + 1) * 2])).sum().backward()
        opt.step()
        ref_opt.zero_grad()
        (sum(ref_lin(ref_emb(idx[r * 2:(r + 1) * 2])).sum() for r in range(hvd.size()))
         / hvd.size()).backward()
        ref_opt.step()
    assert emb.weight.grad.is_sparse and _grad_registry.bucket_buffer(emb.weight) is None
    assert_views(lin.parameters())
    for a, b in ((emb, ref_emb), (lin, ref_lin)):
        assert_same(a, b)


@pytest.mark.ranks(2, "a process set of every rank but 0")
def test_process_set():
    ps = hvd.add_process_set(list(range(1, hvd.size())))
    try:
        x, y = full_data(11)
        model, ref = mlp(), mlp()
        opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                       named_parameters=named(model),
                                       process_set=ps, **BV)
        ref_opt = sgd(ref.parameters())
        members = list(range(1, hvd.size()))
        for _ in range(STEPS):
            step(model, opt, shard(x), shard(y))
            ref_opt.zero_grad()
            if hvd.rank() == 0:  # outside the set: steps on its own shard
                F.mse_loss(ref(shard(x)), shard(y)).backward()
            else:
                (sum(F.mse_loss(ref(shard(x, r)), shard(y, r)) for r in members)
                 / len(members)).backward()
            ref_opt.step()
        assert_same(model, ref)
        if hvd.rank() != 0:
            assert_views(model.parameters())
    finally:
        hvd.barrier()
        hvd.remove_process_set(ps)


def test_buckets_follow_the_order_of_backward(monkeypatch):
    """With buckets smaller than the model, each bucket holds parameters backward reaches one
    after the other (the last layer first, at increasing offsets), learned on the first step;
    a step then reduces each bucket once."""
    x, y = full_data(12)
    model = mlp()
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=named(model),
                                   bucket_cap_mb=200 / 2**20, **BV)  # 200 bytes
    step(model, opt, shard(x), shard(y))
    sizes = []
    real = mpi_ops.allreduce_async_
    monkeypatch.setattr(mpi_ops, "allreduce_async_",
                        lambda t, **k: sizes.append(t.numel()) or real(t, **k))
    step(model, opt, shard(x), shard(y))
    assert_views(model.parameters())
    backward_order = list(model.parameters())[::-1]
    runs = []  # (flat buffer, [params]) in backward order
    for p in backward_order:
        flat = _grad_registry.bucket_buffer(p)
        if runs and runs[-1][0] is flat:
            runs[-1][1].append(p)
        else:
            runs.append((flat, [p]))
    assert len(runs) > 1 and len({id(f) for f, _ in runs}) == len(runs), "not contiguous runs"
    for flat, members in runs:
        offsets = [p.grad.data_ptr() - flat.data_ptr() for p in members]
        assert offsets == sorted(offsets) and offsets[0] == 0
        assert sum(p.numel() for p in members) == flat.numel()
    assert sorted(sizes) == sorted(flat.numel() for flat, _ in runs)


def test_elastic_commit_restore_then_training_goes_on_as_option_off():
    """A TorchState committed, two steps taken, restored (parameters and momentum back), then
    training resumes: the gradients are still the buckets' views and the weights are those of
    the same run with the option off."""
    x, y = full_data(13)
    runs = []
    for wrap in (BV, {}):
        model = mlp()
        opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                       named_parameters=named(model), **wrap)
        state = hvd.elastic.TorchState(model, opt, batch=0)
        step(model, opt, shard(x), shard(y))
        state.commit()
        for _ in range(2):
            step(model, opt, shard(x), shard(y))
        state.restore()
        for _ in range(STEPS):
            step(model, opt, shard(x), shard(y))
        if wrap:
            assert_views(model.parameters())
        runs.append(model)
    assert_same(runs[0], runs[1])


def test_add_param_group_joins_a_new_layout():
    """Parameters added after the first step get a layout at a later step (views), and training
    stays that of the option off."""
    x, y = full_data(14)
    runs = []
    for wrap in (BV, {}):
        model = mlp()
        layers = [model[0], model[2], model[4]]
        opt = hvd.DistributedOptimizer(sgd(layers[0].parameters()),
                                       named_parameters=named(model), **wrap)
        step(model, opt, shard(x), shard(y))
        opt.add_param_group({"params": list(layers[1].parameters()) +
                             list(layers[2].parameters())})
        for _ in range(STEPS):
            step(model, opt, shard(x), shard(y))
        if wrap:
            assert_views(model.parameters())
        runs.append(model)
    assert_same(runs[0], runs[1])


def vm_flags(address):
    """The VmFlags of the mapping that starts at `address` in /proc/self/smaps (None if none)."""
    ours = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                lo = head.split("-")[0]
                ours = int(lo, 16) == address
            elif ours and line.startswith("VmFlags:"):
                return line.split()[1:]
    return None


def test_cpu_buckets_are_huge_page_host_buffers():
    """A CPU bucket of 1 MiB or more is hvd's HostBuffer: on a 2 MiB boundary, its own mapping,
    advised huge pages ("hg"), zero-filled when new; training through it is still exact (the
    tests above)."""
    flat = _grad_registry._flat_buffer(300_000, torch.zeros(1))
    assert flat.numel() == 300_000 and flat.dtype == torch.float32
    assert flat.data_ptr() % (2 << 20) == 0
    assert int(torch.count_nonzero(flat)) == 0
    assert "hg" in (vm_flags(flat.data_ptr()) or []), vm_flags(flat.data_ptr())
    flat.add_(1)  # writable, and alive without a reference to the HostBuffer object
    assert float(flat.sum()) == 300_000
    # A bucket of a real optimizer: 600 x 600 float32 weights (1.44 MB) in one bucket.
    torch.manual_seed(0)
    model = nn.Linear(600, 600, bias=False)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=[("bv.huge.w", model.weight)], **BV)
    for _ in range(2):
        opt.zero_grad()
        model(torch.full((2, 600), float(hvd.rank() + 1))).sum().backward()
        opt.step()
    bucket = _grad_registry.bucket_buffer(model.weight)
    assert bucket is not None and bucket.data_ptr() % (2 << 20) == 0
    assert "hg" in (vm_flags(bucket.data_ptr()) or [])
    # Average over ranks of (2 rows of rank + 1): 2 * mean(1..size) in every element.
    want = 2.0 * (hvd.size() + 1) / 2.0
    torch.testing.assert_close(model.weight.grad, torch.full((600, 600), want))
