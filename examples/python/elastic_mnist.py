# SPDX-License-Identifier: Apache-2.0
"""Elastic MNIST-style training written as a Horovod elastic user writes it (synthetic data).

The only hvd-specific line is the import:
`import horovod.torch as hvd` -> `import hvd.torch as hvd`.

    hvdrun -np 2 --min-np 2 python3 examples/python/elastic_mnist.py [--epochs 3] [--check]

Under `hvdrun --min-np` a failed rank ends the generation and the next one resumes from the last
`state.commit()` (docs/elastic.md). --check: exit 1 unless the last epoch's loss is below 0.5
(chance: 2.30) and every rank ends with the same weights.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data

import hvd.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch elastic MNIST example")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--batches-per-commit", type=int, default=10)
parser.add_argument("--batches-per-host-check", type=int, default=5)
parser.add_argument("--samples", type=int, default=2048)
parser.add_argument("--check", action="store_true", default=False)
parser.add_argument("--no-onednn", action="store_true",
                    help="torch's own CPU convolutions instead of oneDNN's (Debian 13's torch 2.6 "
                         "can return NaN gradients from oneDNN's with several threads)")


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
    # Elastic: the sampler remembers the processed samples; after a restart the epoch goes on
    # with the rest, partitioned over the ranks the job has now.
    train_sampler = hvd.elastic.ElasticSampler(train_dataset, shuffle=True, seed=args.seed)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                               sampler=train_sampler)

    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    losses = []

    @hvd.elastic.run
    def train(state):
        # The state was synced (or restored from the last commit) before this runs.
        for state.epoch in range(state.epoch, args.epochs + 1):
            state.model.train()
            total, correct, loss_sum = 0, 0, 0.0
            for state.batch, (data, target) in enumerate(train_loader):
                state.optimizer.zero_grad()
                output = state.model(data)
                loss = F.nll_loss(output, target)
                loss.backward()
                state.optimizer.step()
                loss_sum += loss.item() * len(data)
                correct += (output.argmax(1) == target).sum().item()
                total += len(data)
                state.train_sampler.record_batch(state.batch, args.batch_size)
                if state.batch % args.batches_per_commit == 0:
                    state.commit()
                elif state.batch % args.batches_per_host_check == 0:
                    state.check_host_updates()
            avg_loss = metric_average(loss_sum / max(total, 1), "avg_loss")
            avg_acc = metric_average(correct / max(total, 1), "avg_accuracy")
            losses.append(avg_loss)
            if hvd.rank() == 0:
                print(f"epoch {state.epoch}: loss {avg_loss:.4f}  accuracy {avg_acc:.1%}  "
                      f"({hvd.size()} ranks)", flush=True)
            end_epoch(state)

    def end_epoch(state):
        # Committed with the next epoch's number: a restart after this commit starts there.
        state.epoch += 1
        state.batch = 0
        state.train_sampler.set_epoch(state.epoch)
        state.commit()

    def on_state_reset():
        # The learning rate follows the number of ranks the job has now.
        for param_group in optimizer.param_groups:
            param_group["lr"] = args.lr * hvd.size()

    state = hvd.elastic.TorchState(model, optimizer, train_sampler=train_sampler, epoch=1,
                                   batch=0)
    state.register_reset_callbacks([on_state_reset])
    train(state)

    if args.check:
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        ref = hvd.broadcast(flat, root_rank=0, name="check.weights")
        same = bool(torch.equal(flat, ref))
        # Chance level is ln(10) = 2.30. After a restart `losses` holds this generation's
        # epochs only, so the check is on the last one.
        learned = bool(losses) and losses[-1] < 0.5
        if not (same and learned):
            print(f"rank {hvd.rank()}: check failed: weights equal to rank 0: {same}, "
                  f"losses {losses}", flush=True)
            raise SystemExit(1)
    hvd.shutdown()


if __name__ == "__main__":
    main()
