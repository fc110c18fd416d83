# SPDX-License-Identifier: Apache-2.0
"""MNIST-style training written exactly as a Horovod user writes it (synthetic data).

The only hvd-specific line is the import:
`import horovod.torch as hvd` -> `import hvd.torch as hvd`.

    hvdrun -np 2 python3 examples/python/mnist.py [--epochs 3] [--check]

--check: exit 1 unless the loss went down and every rank ends with the same weights.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
import torch.utils.data.distributed

import hvd.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch MNIST example")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--fp16-allreduce", action="store_true", default=False)
parser.add_argument("--samples", type=int, default=2048)
parser.add_argument("--check", action="store_true", default=False)
parser.add_argument("--no-onednn", action="store_true",
                    help="torch's own CPU convolutions instead of oneDNN's (Debian 13's torch 2.6 "
                         "can return NaN from oneDNN's)")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic_mnist(n, seed):
    """Images whose class is readable from them: each class lights a different stripe."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = torch.randn(n, 1, 28, 28, generator=g) * 0.3
    for c in range(10):
        images[labels == c, 0, 2 * c + 4, :] += 2.0
    return torch.utils.data.TensorDataset(images, labels)


def metric_average(val, name):
    return hvd.allreduce(torch.tensor(val), name=name).item()


def main():
    args = parser.parse_args()
    if args.no_onednn:
        torch.backends.mkldnn.enabled = False
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train_dataset = synthetic_mnist(args.samples, args.seed)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                               sampler=train_sampler)

    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

    losses = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)
        total, correct, loss_sum = 0, 0, 0.0
        for data, target in train_loader:
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(data)
            correct += (output.argmax(1) == target).sum().item()
            total += len(data)
        avg_loss = metric_average(loss_sum / total, "avg_loss")
        avg_acc = metric_average(correct / total, "avg_accuracy")
        losses.append(avg_loss)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {avg_loss:.4f}  accuracy {avg_acc:.1%}  "
                  f"({hvd.size()} ranks)", flush=True)

    if args.check:
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        ref = hvd.broadcast(flat, root_rank=0, name="check.weights")
        same = bool(torch.equal(flat, ref))
        learned = losses[-1] < 0.5 * losses[0]
        if not (same and learned):
            print(f"rank {hvd.rank()}: check failed: weights equal to rank 0: {same}, "
                  f"losses {losses}", flush=True)
            raise SystemExit(1)
    hvd.shutdown()


if __name__ == "__main__":
    main()
