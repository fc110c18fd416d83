# SPDX-License-Identifier: Apache-2.0
"""[elastic] A Horovod elastic training script (only the import changed), with a failure that
test/elastic/elastic_test.py asks for in generation 0 (--fail MODE, --fail-step, --fail-rank;
--fail-gens N: in generations 0..N-1):

  kill            SIGKILL at the start of the step
  kill-allreduce  SIGKILL after backward() queued the gradients' allreduces, before step() waits
  exit0           exit 0 at the start of the step (not returning from @hvd.elastic.run)
  raise           raise a RuntimeError from the training function
  stop            SIGSTOP (the process stays alive; hvdrun's step watchdog must notice)
  kill-commit     SIGKILL in the middle of writing the commit's snapshot (half a file written)
  kill-restore    SIGKILL at --fail-step, then (generation 1) SIGKILL again while receiving the
                  snapshot broadcast of the restore
  always          SIGKILL at --fail-step in every generation

--fake-hosts K puts rank r on fake host r % K: its own snapshot directory, local rank r // K
(so K ranks write snapshots). --lose-host H: generation 1 starts without fake host H's snapshot
(that host was lost with the state it held). --long-step S: in generation 0, step 2 runs
collectives for S seconds without a commit. --step-sleep S: sleep S seconds per step.
--log-batches: rank 0 logs every step's batches of all ranks (elastic_hosts_test.py replays them).

--model linear (the default): linear regression (5 parameters, float64), SGD with momentum,
ElasticSampler over 64 samples, 4 per rank per batch. --model cnn (bench/elastic_bench.sh): a
small CNN (two 3x3 conv layers with ReLU and 2x2 max-pooling, then a linear layer: 9.1k
parameters, float32) classifying --samples synthetic 1x28x28 images into 10 classes, --batch
per rank per batch, cross-entropy loss, one torch thread per rank. Commit every --commit-every
batches and at each epoch's end; --time-steps: rank 0 logs each step's time (without the
commit) as `step S took MS ms cpu MS ms` (the main thread's CPU time). Every step allgathers
the batch's sample indices into the state (`seen`), and each epoch's end checks that the
committed steps covered every sample exactly once; --no-coverage leaves that out (a plain
training step: bench/elastic_bench.sh --commit-cost). Rank 0 writes the step count, the final
parameters (float64 hex) and then the coverage, and every rank its events with their times, to
--out.log."""
import time  # noqa: I100 (first: the start-up times of bench/elastic_bench.sh)

T_STARTED = time.time()

import argparse  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402

import torch  # noqa: E402

import hvd.torch as hvd  # noqa: E402
from hvd.common import basics  # noqa: E402
import hvd.common.elastic as common_elastic  # noqa: E402

T_IMPORTED = time.time()

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--fail", default="none",
               choices=["none", "kill", "kill-allreduce", "exit0", "raise", "stop", "kill-commit",
                        "kill-restore", "always"])
p.add_argument("--fail-step", type=int, default=11)
p.add_argument("--fail-rank", type=int, default=1)
p.add_argument("--commit-every", type=int, default=3)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--fail-gens", type=int, default=1, help="fail in generations below this")
p.add_argument("--fake-hosts", type=int, default=0)
p.add_argument("--lose-host", type=int, default=-1)
p.add_argument("--long-step", type=float, default=0)
p.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step (slow jobs)")
p.add_argument("--log-batches", action="store_true",
               help="rank 0 logs every step's batches of all ranks (for a replay)")
p.add_argument("--model", default="linear", choices=["linear", "cnn"])
p.add_argument("--samples", type=int, default=256, help="--model cnn: samples per epoch")
p.add_argument("--batch", type=int, default=32, help="--model cnn: samples per rank per batch")
p.add_argument("--time-steps", action="store_true", help="rank 0 logs each step's time")
p.add_argument("--no-coverage", action="store_true",
               help="no `seen` bookkeeping (its allgather and state): a plain training step")
args = p.parse_args()

hvd.init()
T_INITIALIZED = time.time()
generation = int(os.environ.get("HVD_ELASTIC_GENERATION", "0"))
rank = hvd.rank()
log = open(args.out + ".log", "a")  # every rank appends whole lines


def event(text):
    log.write(f"{time.time():.6f} gen{generation} rank{rank} {text}\n")
    log.flush()


event(f"timing started {T_STARTED:.6f} imported {T_IMPORTED:.6f} "
      f"initialized {T_INITIALIZED:.6f}")


if args.fake_hosts:
    host_dir = os.path.join(os.environ["HVD_ELASTIC_STATE_DIR"], f"host{rank % args.fake_hosts}")
    os.environ["HVD_ELASTIC_STATE_DIR"] = host_dir
    os.makedirs(host_dir, mode=0o700, exist_ok=True)  # a fake host's private directory
    basics.local_rank = lambda: rank // args.fake_hosts
    if generation == 1 and rank == args.lose_host:
        try:
            os.unlink(os.path.join(host_dir, "snapshot"))
        except FileNotFoundError:
            pass
        event("lost my host's snapshot")

failing = args.fail != "none" and (args.fail == "always" or generation < args.fail_gens)
if failing and args.fail == "kill-commit" and rank == args.fail_rank:
    real_write = common_elastic.write_snapshot

    def torn_write(directory, commit_id, world_size, payload):
        if state.step == args.fail_step:
            with open(os.path.join(directory, "snapshot.tmp.%d" % os.getpid()), "wb") as f:
                f.write(b"HVDSNAP1" + payload[:len(payload) // 2])
                f.flush()
            event(f"failing (kill-commit) in commit {commit_id} at step {state.step}")
            os.kill(os.getpid(), signal.SIGKILL)
        real_write(directory, commit_id, world_size, payload)

    common_elastic.write_snapshot = torn_write

torch.manual_seed(0)
if args.model == "linear":
    N, BATCH = 64, 4
    X = torch.randn(N, 4, dtype=torch.float64)
    Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]], dtype=torch.float64) + 0.1
    model = torch.nn.Linear(4, 1).double()

    def loss_fn(out, y):
        return ((out - y) ** 2).mean()
else:
    torch.set_num_threads(1)
    N, BATCH = args.samples, args.batch
    X = torch.randn(N, 1, 28, 28)
    Y = torch.randint(0, 10, (N,))
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(16 * 7 * 7, 10))
    loss_fn = nn.functional.cross_entropy
dataset = list(range(N))

opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9),
                               named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=1)
state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=0, step=0, seen=[],
                               covered=[])
state.register_reset_callbacks([lambda: event(f"reset at commit {state.commit_id} "
                                              f"step {state.step}")])

if args.fail == "kill-restore" and generation == 1 and rank == args.fail_rank:
    # The resume protocol (commit ids allgathered, the newest snapshot broadcast) runs in C++
    # (hvd/optim/elastic_store.h): this rank dies as it enters it, while the others are inside.
    import hvd.common.elastic as common_elastic

    def dying_resume(directory):
        event("failing (kill-restore) in the snapshot broadcast")
        os.kill(os.getpid(), signal.SIGKILL)

    common_elastic.resume_from_newest = dying_resume


def fail_now():
    event(f"failing ({args.fail}) at step {state.step}")
    if args.fail == "exit0":
        os._exit(0)
    if args.fail == "raise":
        raise RuntimeError(f"rank {rank} fails on purpose at step {state.step}")
    os.kill(os.getpid(), signal.SIGSTOP if args.fail == "stop" else signal.SIGKILL)


@hvd.elastic.run
def train(state):
    first = True
    while state.epoch < args.epochs:
        batches = [list(sampler)[i:i + BATCH] for i in range(0, len(sampler), BATCH)]
        for b, idx in enumerate(batches):
            fail = failing and state.step == args.fail_step and rank == args.fail_rank
            if fail and args.fail in ("kill", "exit0", "raise", "stop", "kill-restore", "always"):
                fail_now()
            if generation == 0 and args.long_step and state.step == 2:
                t = time.time()
                x = torch.zeros(1)
                while time.time() - t < args.long_step:  # a long step: collectives, no commit
                    hvd.allreduce(x, name="long_step")
                    time.sleep(0.2)
                event(f"long step of {time.time() - t:.1f} s without a commit")
            if args.log_batches:
                every = hvd.allgather_object(idx, name="test.batches")
                if rank == 0:
                    event(f"batch step {state.step + 1} epoch {state.epoch} np {hvd.size()} "
                          f"{every}")
            if args.step_sleep:
                time.sleep(args.step_sleep)
            t_step, cpu_step = time.perf_counter(), time.thread_time()
            opt.zero_grad()
            loss = loss_fn(model(X[idx]), Y[idx])
            loss.backward()
            if fail and args.fail == "kill-allreduce":
                fail_now()
            opt.step()
            if not args.no_coverage:
                state.seen.extend(i for ids in hvd.allgather_object(idx) for i in ids)
            state.step += 1
            if first:
                event(f"first step done (step {state.step})")
                first = False
            sampler.record_batch(b, BATCH)
            if args.time_steps and rank == 0:
                event(f"step {state.step} took {1e3 * (time.perf_counter() - t_step):.3f} ms "
                      f"cpu {1e3 * (time.thread_time() - cpu_step):.3f} ms")
            if state.step % args.commit_every == 0:
                t, cpu = time.perf_counter(), time.thread_time()
                state.commit()
                event(f"commit {state.commit_id} at step {state.step} "
                      f"took {1e3 * (time.perf_counter() - t):.3f} ms "
                      f"cpu {1e3 * (time.thread_time() - cpu):.3f} ms")
        state.covered.append(sorted(state.seen) == dataset)
        state.seen = []
        state.epoch += 1
        sampler.set_epoch(state.epoch)
        state.commit()
    return state.step


steps = train(state)
if rank == 0:
    with open(args.out, "w") as f:
        f.write(f"steps {steps}\n")
        for name, t in model.state_dict().items():
            f.write(name + " " + " ".join(float(v).hex() for v in t.flatten().tolist()) + "\n")
        f.write(f"epochs covered exactly once: {sum(state.covered)} of {len(state.covered)}\n")
event("done")
hvd.shutdown()
