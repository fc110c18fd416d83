# SPDX-License-Identifier: Apache-2.0
"""[elastic] A Horovod elastic training script (only the import changed), with a failure that
test/elastic/elastic_test.py asks for in generation 0 (--fail kill|exit0|always, --fail-step;
--fail-gens N: in generations 0..N-1).

Linear regression, SGD with momentum, ElasticSampler over 64 samples, 4 per rank per batch,
commit every --commit-every batches and at each epoch's end. Rank 0 writes the final
parameters (float64 hex), and every rank its events with their times, to --out.log."""
import argparse
import os
import signal
import time

import torch

import hvd.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--fail", choices=["none", "kill", "exit0", "always"], default="none")
p.add_argument("--fail-step", type=int, default=11)
p.add_argument("--fail-rank", type=int, default=1)
p.add_argument("--commit-every", type=int, default=3)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--fail-gens", type=int, default=1, help="fail in generations below this")
p.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step (slow jobs)")
p.add_argument("--log-batches", action="store_true",
               help="rank 0 logs every step's batches of all ranks (for a replay)")
args = p.parse_args()

hvd.init()
generation = int(os.environ.get("HVD_ELASTIC_GENERATION", "0"))
log = open(args.out + ".log", "a")  # every rank appends whole lines


def event(text):
    log.write(f"{time.time():.6f} gen{generation} rank{hvd.rank()} {text}\n")
    log.flush()


torch.manual_seed(0)
N, BATCH = 64, 4
X = torch.randn(N, 4, dtype=torch.float64)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]], dtype=torch.float64) + 0.1
dataset = list(range(N))

model = torch.nn.Linear(4, 1).double()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9),
                               named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=1)
state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=0, step=0)
state.register_reset_callbacks([lambda: event(f"reset at commit {state.commit_id} "
                                              f"step {state.step}")])


@hvd.elastic.run
def train(state):
    first = True
    while state.epoch < args.epochs:
        batches = [list(sampler)[i:i + BATCH] for i in range(0, len(sampler), BATCH)]
        for b, idx in enumerate(batches):
            fail = (args.fail == "always" or generation < args.fail_gens) and args.fail != "none"
            if fail and state.step == args.fail_step and hvd.rank() == args.fail_rank:
                event(f"failing ({args.fail}) at step {state.step}")
                if args.fail == "exit0":
                    os._exit(0)
                os.kill(os.getpid(), signal.SIGKILL)
            if args.log_batches:
                every = hvd.allgather_object(idx, name="test.batches")
                if hvd.rank() == 0:
                    event(f"batch step {state.step + 1} epoch {state.epoch} np {hvd.size()} "
                          f"{every}")
            if args.step_sleep:
                time.sleep(args.step_sleep)
            opt.zero_grad()
            loss = ((model(X[idx]) - Y[idx]) ** 2).mean()
            loss.backward()
            opt.step()
            state.step += 1
            if first:
                event(f"first step done (step {state.step})")
                first = False
            sampler.record_batch(b, BATCH)
            if state.step % args.commit_every == 0:
                t = time.perf_counter()
                state.commit()
                event(f"commit {state.commit_id} at step {state.step} "
                      f"took {1e3 * (time.perf_counter() - t):.3f} ms")
        state.epoch += 1
        sampler.set_epoch(state.epoch)
        state.commit()
    return state.step


steps = train(state)
if hvd.rank() == 0:
    with open(args.out, "w") as f:
        f.write(f"steps {steps}\n")
        for name, t in model.state_dict().items():
            f.write(name + " " + " ".join(float(v).hex() for v in t.flatten().tolist()) + "\n")
event("done")
hvd.shutdown()
