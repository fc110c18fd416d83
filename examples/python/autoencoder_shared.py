# SPDX-License-Identifier: Apache-2.0
"""One encoder, three decoders (A, B, C), three optimizers: the source article's autoencoder.

Written as plain PyTorch is written: optimizer 1 holds encoder + decoder A, optimizer 2 holds
encoder + decoder B, optimizer 3 holds decoder C only; each step computes its own loss, calls
backward() and steps. Every DistributedOptimizer gets the model's own named_parameters(): no
renaming, no synchronize() or skip_synchronize() calls. (Horovod needs distinct name prefixes
and explicit synchronize() rituals for this program, and loss C's backward - which also writes
the encoder's gradient - makes its next zero_grad() fail.)

    hvdrun -np 2 python3 examples/python/autoencoder_shared.py [--epochs 5] [--check]

--check: also train the same program in plain PyTorch on the whole batch (every rank's share
of each step, no hvd) and exit 1 unless hvd's weights match it on every rank.
"""
import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import hvd.torch as hvd


class SharedAutoencoder(nn.Module):
    def __init__(self, dim=32, code=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, 24), nn.Tanh(), nn.Linear(24, code))
        self.decoder_a = nn.Sequential(nn.Linear(code, 24), nn.Tanh(), nn.Linear(24, dim))
        self.decoder_b = nn.Sequential(nn.Linear(code, 24), nn.Tanh(), nn.Linear(24, dim))
        self.decoder_c = nn.Linear(code, dim)


def data(n, dim=32, seed=7):
    """Points near a low-dimensional subspace: an autoencoder can learn them."""
    g = torch.Generator().manual_seed(seed)
    basis = torch.randn(6, dim, generator=g)
    return torch.randn(n, 6, generator=g) @ basis * 0.3 + 0.01 * torch.randn(n, dim, generator=g)


def make_optimizers(model):
    """Optimizer 1: encoder + decoder A; 2: encoder + decoder B; 3: decoder C only."""
    opt1 = torch.optim.SGD(list(model.encoder.parameters()) + list(model.decoder_a.parameters()),
                           lr=0.05, momentum=0.9)
    opt2 = torch.optim.Adam(list(model.encoder.parameters()) +
                            list(model.decoder_b.parameters()), lr=1e-3)
    opt3 = torch.optim.SGD(model.decoder_c.parameters(), lr=0.05)
    return opt1, opt2, opt3


def train_step(model, steps, x):
    """The program as plain PyTorch writes it: each optimizer its own loss, backward, step."""
    losses = []
    for opt, decoder in steps:
        opt.zero_grad()
        loss = F.mse_loss(decoder(model.encoder(x)), x)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_reference(model, x_all, size, epochs, batch_size):
    """Single process, whole batch: step i sees every rank's i-th batch at once."""
    o1, o2, o3 = make_optimizers(model)
    steps = ((o1, model.decoder_a), (o2, model.decoder_b), (o3, model.decoder_c))
    shards = [x_all[r::size] for r in range(size)]
    for _ in range(epochs):
        for i in range(0, len(shards[0]), batch_size):
            train_step(model, steps, torch.cat([s[i:i + batch_size] for s in shards]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    hvd.init()
    torch.manual_seed(7 + hvd.rank())  # different on purpose: the broadcast fixes it
    torch.set_num_threads(1)

    model = SharedAutoencoder()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    reference = copy.deepcopy(model)  # the same start, trained below without hvd (--check)
    opt1, opt2, opt3 = make_optimizers(model)
    names = list(model.named_parameters())
    opt1 = hvd.DistributedOptimizer(opt1, named_parameters=names)
    opt2 = hvd.DistributedOptimizer(opt2, named_parameters=names)
    opt3 = hvd.DistributedOptimizer(opt3, named_parameters=names)
    steps = ((opt1, model.decoder_a), (opt2, model.decoder_b), (opt3, model.decoder_c))

    x_all = data(1024)
    shard = x_all[hvd.rank()::hvd.size()]
    history = []
    for epoch in range(1, args.epochs + 1):
        sums = [0.0, 0.0, 0.0]
        batches = 0
        for i in range(0, len(shard), args.batch_size):
            losses = train_step(model, steps, shard[i:i + args.batch_size])
            sums = [s + v for s, v in zip(sums, losses)]
            batches += 1
        mean = hvd.allreduce(torch.tensor(sums) / batches, name="epoch_loss")
        history.append(mean)
        if hvd.rank() == 0:
            a, b, c = mean.tolist()
            print(f"epoch {epoch}  reconstruction loss A {a:.4f}  B {b:.4f}  C {c:.4f}  "
                  f"({hvd.size()} ranks)", flush=True)

    if args.check:
        train_reference(reference, x_all, hvd.size(), args.epochs, args.batch_size)
        worst = max((p - q).abs().max().item()
                    for p, q in zip(model.parameters(), reference.parameters()))
        learned = bool((history[-1][:2] < history[0][:2]).all())
        if worst > 1e-4 or not learned:
            print(f"rank {hvd.rank()}: check failed: largest difference from single-process "
                  f"training {worst:.3g}; losses first {history[0].tolist()} last "
                  f"{history[-1].tolist()}", flush=True)
            raise SystemExit(1)
        if hvd.rank() == 0:
            print(f"check: weights match single-process training on the whole batch "
                  f"(largest difference {worst:.2g})", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
