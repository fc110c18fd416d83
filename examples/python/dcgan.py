# SPDX-License-Identifier: Apache-2.0
"""PyTorch's DCGAN, written as its users write it, trained with hvd.

Both models keep PyTorch's layout (`self.main = nn.Sequential(...)`, so both have parameters
named `main.0.weight`), each gets its own DistributedOptimizer with its own
`named_parameters()`, and the training step is the tutorial's: `netD.zero_grad()` (the module's,
not the optimizer's), two discriminator backward passes (real, then `fake.detach()`) before
`optimizerD.step()`, then the generator's loss through the discriminator. No renaming, no
`synchronize()`, no `backward_passes_per_step`. Data are synthetic 16x16 images; batch norm
spans every rank's batch (hvd.SyncBatchNorm), as one process on the whole batch would compute.

    hvdrun -np 2 python3 examples/python/dcgan.py [--iters 10] [--check]

--check: also train the same program in plain PyTorch on the whole batch (every rank's share of
each step, no hvd) and exit 1 unless hvd's weights match it on every rank.
"""
import argparse
import copy
import sys

import torch
import torch.nn as nn

import hvd.torch as hvd

NZ, NGF, NDF, NC = 8, 8, 8, 1


def norm(c, distributed):
    return hvd.SyncBatchNorm(c) if distributed else nn.BatchNorm2d(c)


class Generator(nn.Module):
    def __init__(self, distributed):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(NZ, NGF * 2, 4, 1, 0, bias=False), norm(NGF * 2, distributed),
            nn.ReLU(True),  # 4x4
            nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False), norm(NGF, distributed),
            nn.ReLU(True),  # 8x8
            nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False), nn.Tanh())  # 16x16

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, distributed):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(NC, NDF, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),  # 8x8
            nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False), norm(NDF * 2, distributed),
            nn.LeakyReLU(0.2, inplace=True),  # 4x4
            nn.Conv2d(NDF * 2, 1, 4, 1, 0, bias=False))  # 1x1 logit

    def forward(self, x):
        return self.main(x).view(-1)


def weights_init(m):
    if "Conv" in type(m).__name__:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif "BatchNorm" in type(m).__name__:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


def batch(i, n, seed=11):
    """The whole step's images (blurry blobs) and noise; each rank trains on its share."""
    g = torch.Generator().manual_seed(seed + i)
    centers = torch.rand(n, 2, generator=g) * 10 + 3
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    d2 = (yy - centers[:, 0, None, None]) ** 2 + (xx - centers[:, 1, None, None]) ** 2
    real = (torch.exp(-d2 / 8) * 2 - 1).unsqueeze(1)
    noise = torch.randn(n, NZ, 1, 1, generator=g)
    return real, noise


def train_step(net_g, net_d, opt_g, opt_d, real, noise):
    """The tutorial's step, unchanged."""
    criterion = nn.BCEWithLogitsLoss()
    label_real = torch.full((real.shape[0],), 1.0)
    label_fake = torch.full((real.shape[0],), 0.0)
    net_d.zero_grad()
    err_d_real = criterion(net_d(real), label_real)
    err_d_real.backward()
    fake = net_g(noise)
    err_d_fake = criterion(net_d(fake.detach()), label_fake)
    err_d_fake.backward()
    opt_d.step()
    net_g.zero_grad()
    err_g = criterion(net_d(fake), label_real)
    err_g.backward()
    opt_g.step()
    return float(err_d_real + err_d_fake), float(err_g)


def build(distributed):
    torch.manual_seed(1)
    net_g, net_d = Generator(distributed), Discriminator(distributed)
    net_g.apply(weights_init)
    net_d.apply(weights_init)
    return net_g, net_d


def optimizers(net_g, net_d):
    return (torch.optim.Adam(net_g.parameters(), lr=2e-4, betas=(0.5, 0.999)),
            torch.optim.Adam(net_d.parameters(), lr=2e-4, betas=(0.5, 0.999)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--batch", type=int, default=8, help="images per rank per step")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--no-onednn", action="store_true",
                        help="torch's own CPU convolutions instead of oneDNN's (Debian 13's torch "
                             "2.6 can return NaN gradients from oneDNN's with several threads)")
    args = parser.parse_args()
    if args.no_onednn:
        torch.backends.mkldnn.enabled = False
    hvd.init()
    net_g, net_d = build(distributed=True)
    opt_g, opt_d = optimizers(net_g, net_d)
    opt_d = hvd.DistributedOptimizer(opt_d, named_parameters=net_d.named_parameters())
    opt_g = hvd.DistributedOptimizer(opt_g, named_parameters=net_g.named_parameters())
    hvd.broadcast_parameters(net_g.state_dict(), root_rank=0)
    hvd.broadcast_parameters(net_d.state_dict(), root_rank=0)
    n, me = args.batch, hvd.rank()
    for i in range(args.iters):
        real, noise = batch(i, n * hvd.size())
        loss_d, loss_g = train_step(net_g, net_d, opt_g, opt_d, real[me * n:(me + 1) * n],
                                    noise[me * n:(me + 1) * n])
        if me == 0:
            print(f"iter {i}: loss D {loss_d:.4f}  loss G {loss_g:.4f}", flush=True)
    status = 0
    if args.check:
        ref_g, ref_d = build(distributed=False)
        ref_opt_g, ref_opt_d = optimizers(ref_g, ref_d)
        for i in range(args.iters):
            train_step(ref_g, ref_d, ref_opt_g, ref_opt_d, *batch(i, n * hvd.size()))
        diff = max(float((p - q).abs().max()) for p, q in
                   zip(list(net_g.parameters()) + list(net_d.parameters()),
                       list(ref_g.parameters()) + list(ref_d.parameters())))
        ok = diff <= 1e-5
        print(f"rank {me}: largest difference from one process on the whole batch: {diff:.2e} "
              f"({'ok' if ok else 'FAILED'})", flush=True)
        status = 0 if ok else 1
    hvd.shutdown()
    sys.exit(status)


if __name__ == "__main__":
    main()
