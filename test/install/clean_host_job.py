# SPDX-License-Identifier: Apache-2.0
# The 2-rank job clean_host_test.sh runs through the installed hvdrun on a clean Debian 12 root:
# an allreduce, then three DistributedOptimizer steps whose parameters must match a one-process
# reference (plain SGD on the mean of every rank's gradient, computed here without hvd).
import torch

import hvd.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
assert size == 2, size

t = torch.arange(5, dtype=torch.float32) * (rank + 1)
got = hvd.allreduce(t, op=hvd.Sum)
assert torch.equal(got, torch.arange(5, dtype=torch.float32) * 3), got


def make_model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2)


def batch(step, r):
    g = torch.Generator().manual_seed(100 * step + r)
    return torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)


model = make_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for step in range(3):
    x, y = batch(step, rank)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()

# The reference: one process, the average of both ranks' gradients, plain SGD.
ref = make_model()
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
for step in range(3):
    grads = []
    for r in range(size):
        ref.zero_grad()
        x, y = batch(step, r)
        torch.nn.functional.mse_loss(ref(x), y).backward()
        grads.append([p.grad.clone() for p in ref.parameters()])
    for p, *gs in zip(ref.parameters(), *grads):
        p.grad = sum(gs) / size
    ref_opt.step()

for (name, p), q in zip(model.named_parameters(), ref.parameters()):
    assert torch.allclose(p, q, atol=1e-6), (name, p, q)
print(f"OK rank {rank}: allreduce and 3 DistributedOptimizer steps match the reference "
      f"(hvd from {hvd.__file__})", flush=True)
hvd.shutdown()
