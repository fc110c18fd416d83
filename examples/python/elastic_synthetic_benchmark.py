# SPDX-License-Identifier: Apache-2.0
"""Elastic synthetic benchmark written as a Horovod elastic user writes it: a torchvision model on
random images, throughput per iteration, `state.commit()` after every iteration.

The only hvd-specific line is the import:
`import horovod.torch as hvd` -> `import hvd.torch as hvd`.

    hvdrun -np 2 --min-np 2 python3 examples/python/elastic_synthetic_benchmark.py \
        [--model resnet50] [--batch-size 32] [--image-size 224] [--num-iters 10] [--check]

Under `hvdrun --min-np` a failed rank ends the generation; the next one resumes from the last
commit, so the iterations already timed are neither lost nor timed twice (docs/elastic.md).
--image-size and --num-classes shrink the job for CPUs (the defaults are ImageNet's). --check:
exit 1 unless exactly --num-iters iterations were timed across all generations and every rank
ends with the same weights.
"""
import argparse
import timeit

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim
from torchvision import models

import hvd.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch elastic synthetic benchmark",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="compress gradients to float16 for the allreduce")
parser.add_argument("--model", type=str, default="resnet50", help="torchvision model name")
parser.add_argument("--batch-size", type=int, default=32, help="images per rank and batch")
parser.add_argument("--image-size", type=int, default=224, help="height and width of an image")
parser.add_argument("--num-classes", type=int, default=1000)
parser.add_argument("--num-warmup-batches", type=int, default=10)
parser.add_argument("--num-batches-per-iter", type=int, default=10)
parser.add_argument("--num-iters", type=int, default=10)
parser.add_argument("--batches-per-commit", type=int, default=50)
parser.add_argument("--batches-per-host-check", type=int, default=5)
parser.add_argument("--no-cuda", action="store_true", default=False)
parser.add_argument("--check", action="store_true", default=False)


def main():
    args = parser.parse_args()
    args.cuda = not args.no_cuda and torch.cuda.is_available()

    hvd.init()
    torch.manual_seed(42)
    if args.cuda:
        torch.cuda.set_device(hvd.local_rank())
    else:
        torch.set_num_threads(1)
    device = "GPU" if args.cuda else "CPU"

    model = getattr(models, args.model)(num_classes=args.num_classes)
    # The learning rate grows with the number of ranks; on_state_reset keeps it so after a resize.
    lr_scaler = hvd.size()
    if args.cuda:
        model.cuda()
    optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, args.num_classes, (args.batch_size,))
    if args.cuda:
        data, target = data.cuda(), target.cuda()

    def benchmark_step(state):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        state.batch += 1
        if state.batch % args.batches_per_commit == 0:
            state.commit()
        elif state.batch % args.batches_per_host_check == 0:
            state.check_host_updates()

    def log(s):
        if hvd.rank() == 0:
            print(s, flush=True)

    @hvd.elastic.run
    def run_benchmark(state):
        if not state.warm:
            log(f"Model: {args.model}, batch size: {args.batch_size}, ranks: {hvd.size()}")
            log("Running warmup...")
            timeit.timeit(lambda: benchmark_step(state), number=args.num_warmup_batches)
            state.warm = True
            state.commit()
        log("Running benchmark...")
        for state.iter in range(state.iter, args.num_iters):
            t = timeit.timeit(lambda: benchmark_step(state), number=args.num_batches_per_iter)
            img_sec = args.batch_size * args.num_batches_per_iter / t
            log(f"Iter #{state.iter}: {img_sec:.1f} img/sec per {device} ({hvd.size()} ranks)")
            state.img_secs.append(img_sec)
            state.iter += 1  # committed as the next iteration: a restart starts there
            state.commit()

    def on_state_reset():
        for param_group in optimizer.param_groups:
            param_group["lr"] = 0.01 * hvd.size()

    state = hvd.elastic.TorchState(model, optimizer, img_secs=[], iter=0, batch=0, warm=False)
    state.register_reset_callbacks([on_state_reset])
    run_benchmark(state)

    img_sec_mean = np.mean(state.img_secs)
    img_sec_conf = 1.96 * np.std(state.img_secs)
    log(f"Img/sec per {device}: {img_sec_mean:.1f} +-{img_sec_conf:.1f}")
    log(f"Total img/sec on {hvd.size()} {device}(s): {hvd.size() * img_sec_mean:.1f} "
        f"+-{hvd.size() * img_sec_conf:.1f}")

    if args.check:
        flat = torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
        ref = hvd.broadcast(flat, root_rank=0, name="check.weights")
        same = bool(torch.equal(flat, ref))
        timed = len(state.img_secs)
        if not same or timed != args.num_iters:
            print(f"rank {hvd.rank()}: check failed: weights equal to rank 0: {same}, "
                  f"iterations timed {timed} of {args.num_iters}", flush=True)
            raise SystemExit(1)
    hvd.shutdown()


if __name__ == "__main__":
    main()
