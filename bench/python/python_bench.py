# SPDX-License-Identifier: Apache-2.0
"""hvd.torch against torch.distributed (gloo) at np = 2, on the same models, data and seeds.

    mpirun -np 2 --bind-to none /usr/bin/python3 bench/python/python_bench.py \
        [--cpp hvd_bench.txt] [--steps 30] [--iters 30] [--only train|allreduce|optpath]
        [--case 64x16Ki] [--repeat N] [--models cnn,mlp,resnet18] [--rounds N]
        [--compression none|fp16] [--bucket-view off|both]

1. Training: samples/s of hvd.torch.DistributedOptimizer against DistributedDataParallel
   (gloo) and against no-comm (every rank trains the same model with the plain optimizer at
   the same time and communicates nothing: the limit of any data-parallel framework on this
   machine), torch.set_num_threads(1) per rank: a small CNN (~0.56M parameters, 10 tensors,
   batch 64 per rank), a deep MLP (24 x Linear(256, 256) + Linear(256, 10), ~1.6M parameters,
   50 tensors, batch 64 per rank) and torchvision's ResNet-18 (11.2M parameters, 62 tensors,
   64x64 inputs, batch 16 per rank). Each number is the median step time over --steps steps
   and alternating rounds (hvd, DDP, no-comm, then no-comm, DDP, hvd; --rounds N, default 2:
   above 2 also the median, min and max of each round's ratios), and the CPU time per step of a
   rank's process (all threads), which moves far less with the machine's load than the step
   time. --models picks some; --compression fp16 sends gradients as float16 (hvd's
   Compression.fp16, DDP's fp16_compress_hook); --bucket-view both also runs hvd.torch with
   gradient_as_bucket_view=True ("hvd-bv") in every round (bucket_view_bench.sh runs that
   against another tree's build, in alternating rounds).
2. Allreduce (Sum, float32) of K tensors of S floats: hvd.torch's allreduce_async_ per tensor +
   synchronize, grouped_allreduce_, and gloo's K all_reduce(async_op=True) + wait; medians of
   the slowest rank, compared with the C++ API's figures from hvd_bench (--cpp: its output).
   --case LABEL runs that allreduce case alone (per tensor only: no grouped, no gloo), --repeat
   times, one line each, with the calling thread's CPU time per allreduce_async_ and per
   synchronize (best of 20 bursts): for iterating on the binding's per-call cost, e.g. after
   `mpirun -np 2 --bind-to none build/bench/hvd_bench --case 64x16Ki`.
3. --only optpath: DistributedOptimizer.synchronize() of 1,024 ready gradients of 1 KiB and of
   64 of 16 KiB, and a training step whose backward only makes those gradients (hvd's share:
   step minus the plain optimizer's step), gradient_as_bucket_view off and on, against one raw
   MPI_Allreduce of the same bytes (mpi4py), alternating within each of --rounds rounds
   (--opt-case LABEL: one case); and that step's step() alone, timed after its backward,
   against one raw MPI_Allreduce then the plain step() after the same backward (the reduction
   the backward did not hide, with the ranks' skew in both); and the same reduction timed from
   the last rank's end of backward to the end of synchronize() or of the raw call (skew out).
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import hvd.torch as hvd

CASES = [(1, 1 << 20, "1x1Mi"), (64, 16 << 10, "64x16Ki"), (16, 1 << 20, "16x1Mi"),
         (1024, 256, "1024x256")]
BATCH = 64


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 160)
        self.fc2 = nn.Linear(160, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.conv3(x))
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def deep_mlp():
    layers = []
    for _ in range(24):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(256, 10))


def resnet18():
    import torchvision  # Debian: python3-torchvision (scripts/install-deps.sh)
    return torchvision.models.resnet18(num_classes=10)


# name -> (constructor, input shape, batch per rank)
MODELS = {"cnn": (SmallCNN, (1, 28, 28), BATCH), "mlp": (deep_mlp, (256,), BATCH),
          "resnet18": (resnet18, (3, 64, 64), 16)}
IMPLS = ("hvd", "ddp", "none")  # none: no-comm, the plain optimizer on every rank
# --bucket-view both: hvd.torch also with gradient_as_bucket_view=True ("hvd-bv")
IMPLS_BV = ("hvd", "hvd-bv", "ddp", "none")


def slowest(ms):
    """The slowest rank's value (the job goes at its pace)."""
    t = torch.tensor([ms], dtype=torch.float64)
    return hvd.allreduce(t, op=hvd.Max, name="bench.slowest").item()


def train_steps(kind, impl, steps, compression="none", bucket_view=False):
    make, shape, batch = MODELS[kind]
    torch.manual_seed(0)
    model = make()
    gen = torch.Generator().manual_seed(1234 + hvd.rank())
    xs = [torch.randn((batch,) + shape, generator=gen) for _ in range(4)]
    ys = [torch.randint(0, 10, (batch,), generator=gen) for _ in range(4)]
    if impl == "none":
        net = model
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elif impl in ("hvd", "hvd-bv"):
        kw = {"gradient_as_bucket_view": impl == "hvd-bv"} if bucket_view else {}
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                       named_parameters=model.named_parameters(),
                                       compression=getattr(hvd.Compression, compression), **kw)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        net = model
    else:
        net = nn.parallel.DistributedDataParallel(model)
        if compression == "fp16":  # DDP's counterpart: gradients travel as float16
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            net.register_comm_hook(None, default_hooks.fp16_compress_hook)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    times, cpu = [], 0.0
    for i in range(steps + 5):
        hvd.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        F.cross_entropy(net(xs[i % 4]), ys[i % 4]).backward()
        opt.step()
        dt = (time.perf_counter() - t0) * 1e3
        if i >= 5:
            cpu += time.process_time() - c0
            times.append(slowest(dt))
    # The process's CPU time per step (every thread: hvd's background thread, gloo's), mean over
    # the ranks: unlike the step time, it hardly moves with the machine's load.
    cpu_ms = hvd.allreduce(torch.tensor([cpu * 1e3 / steps], dtype=torch.float64), op=hvd.Average,
                           name="bench.cpu").item()
    return times, cpu_ms


def bench_train(steps, models, rounds, compression="none", bucket_view=False):
    impls = IMPLS_BV if bucket_view else IMPLS
    rows = []
    for kind in models:
        res = {impl: [] for impl in impls}
        # Per round: hvd's samples/s over DDP's and no-comm's of the same round (their median
        # step time over hvd's; the machine's speed drifts between rounds, neighbours see the same).
        per_round = {"ddp": [], "none": [], "bv": []}
        cpu = {impl: [] for impl in impls}
        cpu_round = {"hvd": [], "hvd-bv": []}  # no-comm's CPU per step over hvd's, per round
        for rnd in range(rounds):
            # Every other round in the reverse order: over an even number of rounds each
            # implementation runs at every position alike (the first of a round runs on a
            # process that has just built and freed another model's memory, the last does not).
            order = impls if rnd % 2 == 0 else impls[::-1]
            got = {impl: train_steps(kind, impl, steps, compression, bucket_view)
                   for impl in order}
            for impl in impls:
                res[impl] += got[impl][0]
                cpu[impl].append(got[impl][1])
            for other in ("ddp", "none"):
                per_round[other].append(statistics.median(got[other][0]) /
                                        statistics.median(got["hvd"][0]))
            for h in cpu_round:
                if h in got:
                    cpu_round[h].append(got["none"][1] / got[h][1])
            if bucket_view:
                per_round["bv"].append(statistics.median(got["none"][0]) /
                                       statistics.median(got["hvd-bv"][0]))
        n = hvd.size() * MODELS[kind][2]
        sps = {impl: n / statistics.median(res[impl]) * 1e3 for impl in impls}
        rows.append((kind, sps, per_round, {i: statistics.median(c) for i, c in cpu.items()},
                     cpu_round))
    if hvd.rank() == 0:
        print(f"training: samples/s, np={hvd.size()}, 1 thread/rank, median step of the slowest "
              "rank; no-comm: the plain optimizer on every rank, no communication")
        bv_head = f" {'hvd-bv':>10}" if bucket_view else ""
        print(f"{'model':<9} {'params':>9} {'tensors':>8} {'batch':>6} {'hvd.torch':>10}{bv_head} "
              f"{'DDP gloo':>10} {'no-comm':>10} {'hvd/DDP':>8} {'hvd/no-comm':>12}")
        for kind, sps, _, _, _ in rows:
            m = MODELS[kind][0]()
            params = sum(p.numel() for p in m.parameters())
            tensors = len(list(m.parameters()))
            h, d, z = sps["hvd"], sps["ddp"], sps["none"]
            bv = f" {sps['hvd-bv']:>10.1f}" if bucket_view else ""
            print(f"{kind:<9} {params:>9} {tensors:>8} {MODELS[kind][2]:>6} {h:>10.1f}{bv} "
                  f"{d:>10.1f} {z:>10.1f} {h / d:>7.2f}x {h / z:>11.3f}")
        if rounds > 2:
            print(f"per round ({rounds} rounds of {', '.join(impls)}): median [min, max] of the "
                  "round's ratio")
            for kind, _, per_round, _, _ in rows:
                ddp, none = sorted(per_round["ddp"]), sorted(per_round["none"])
                line = (f"{kind:<9} hvd/DDP {statistics.median(ddp):.2f}x [{ddp[0]:.2f}, "
                        f"{ddp[-1]:.2f}]  hvd/no-comm {statistics.median(none):.3f} "
                        f"[{none[0]:.3f}, {none[-1]:.3f}]")
                if bucket_view:
                    bv = sorted(per_round["bv"])
                    line += (f"  hvd-bv/no-comm {statistics.median(bv):.3f} [{bv[0]:.3f}, "
                             f"{bv[-1]:.3f}]")
                print(line)
        print("CPU time per step (ms, a rank's process, all its threads; median of the rounds): "
              "what each costs the machine")
        for kind, _, _, c, cr in rows:
            line = (f"{kind:<9} hvd {c['hvd']:.1f}  DDP {c['ddp']:.1f}  no-comm {c['none']:.1f}  "
                    f"no-comm/hvd {c['none'] / c['hvd']:.3f}  DDP/hvd {c['ddp'] / c['hvd']:.2f}x")
            if bucket_view:
                line += f"  hvd-bv {c['hvd-bv']:.1f}  no-comm/hvd-bv {c['none'] / c['hvd-bv']:.3f}"
            print(line)
        if rounds > 2:
            print("CPU no-comm / hvd per round: median [min, max]")
            for kind, _, _, _, cr in rows:
                parts = []
                for h, xs in cr.items():
                    if xs:
                        xs = sorted(xs)
                        parts.append(f"{h} {statistics.median(xs):.3f} [{xs[0]:.3f}, "
                                     f"{xs[-1]:.3f}]")
                print(f"{kind:<9} " + "  ".join(parts))
        print()


def median_slowest(iters, fn, prep=None):
    """As hvd_bench's median_ms: MPI_Barrier, time fn, MPI_Allreduce(MAX) of the time, all
    outside hvd (mpi4py on the MPI hvd initialised), so hvd's own threads start each iteration
    idle, as in the C++ figures. `prep`: run after the barrier, untimed, right before fn (what
    it starts in the background keeps running into fn's time)."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    xs = []
    for i in range(iters + 3):
        comm.Barrier()
        if prep is not None:
            prep()
        t0 = time.perf_counter()
        fn()
        dt = comm.allreduce((time.perf_counter() - t0) * 1e3, op=MPI.MAX)
        if i >= 3:
            xs.append(dt)
    return statistics.median(xs)


def median_after_last(iters, fn, prep):
    """The reduction after the last rank's backward: per iteration MPI_Barrier, `prep` (the
    backward, untimed), then `fn`, which returns when (CLOCK_MONOTONIC, one clock for every
    process of a host) its reduction completed; the latest such time over the ranks minus the
    latest end of `prep`. Ranks that finish backward early wait for the last one whatever runs
    next (a raw call too): that skew is not the reduction's cost, and this takes it out. One
    host only. Median over the iterations, ms."""
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    xs = []
    ends = np.zeros(2)
    for i in range(iters + 3):
        comm.Barrier()
        prep()
        ends[0] = time.clock_gettime(time.CLOCK_MONOTONIC)
        ends[1] = fn()
        comm.Allreduce(MPI.IN_PLACE, ends, op=MPI.MAX)
        if i >= 3:
            xs.append((ends[1] - ends[0]) * 1e3)
    return statistics.median(xs)


def read_cpp(path):
    """hvd_bench's table: case -> (per-tensor ms, grouped ms)."""
    out = {}
    if not path or not os.path.exists(path):
        return out
    for line in open(path):
        f = line.split()
        if len(f) >= 7 and f[0] in {c[2] for c in CASES}:
            out[f[0]] = (float(f[2]), float(f[6]))
    return out


def per_tensor_case(k, s, label):
    """The K tensors of S floats of a case, a call allreducing them one by one
    (allreduce_async_ each, then synchronize each), and the submission cost per call in us
    (median of 5 bursts)."""
    ts = [torch.ones(s) for _ in range(k)]
    names = [f"{label}.{j}" for j in range(k)]

    def per_tensor():
        hs = [hvd.allreduce_async_(t, name=n, op=hvd.Sum) for t, n in zip(ts, names)]
        for h in hs:
            hvd.synchronize(h)

    def submit_only():
        t0 = time.perf_counter()
        hs = [hvd.allreduce_async_(t, name=n, op=hvd.Sum) for t, n in zip(ts, names)]
        dt = time.perf_counter() - t0
        for h in hs:
            hvd.synchronize(h)
        return dt

    def per_call_us():
        return statistics.median(submit_only() for _ in range(5)) / k * 1e6

    def cpu_us():
        """This thread's CPU time per call (us) of allreduce_async_ and of synchronize (which
        blocks without CPU while a collective runs), best of 20 bursts."""
        sub = syn = float("inf")
        for _ in range(20):
            t0 = time.thread_time()
            hs = [hvd.allreduce_async_(t, name=n, op=hvd.Sum) for t, n in zip(ts, names)]
            t1 = time.thread_time()
            for h in hs:
                hvd.synchronize(h)
            t2 = time.thread_time()
            sub, syn = min(sub, t1 - t0), min(syn, t2 - t1)
        return sub / k * 1e6, syn / k * 1e6
    return ts, per_tensor, per_call_us, cpu_us


def bench_allreduce(iters, cpp):
    rows = []
    for k, s, label in CASES:
        ts, per_tensor, per_call_us, _ = per_tensor_case(k, s, label)

        def grouped():
            hvd.grouped_allreduce_(ts, name=label + ".group", op=hvd.Sum)

        def gloo():
            works = [dist.all_reduce(t, async_op=True) for t in ts]
            for w in works:
                w.wait()
        us = per_call_us()
        rows.append((label, median_slowest(iters, per_tensor), median_slowest(iters, grouped),
                     median_slowest(iters, gloo), us))
    if hvd.rank() == 0:
        print(f"allreduce (Sum, float32), np={hvd.size()}, {iters} iterations, median of the "
              "slowest rank; C++ = hvd_bench in this run")
        print(f"{'case':<9} {'py ms':>8} {'C++ ms':>8} {'py/C++':>7} {'py grp':>8} "
              f"{'C++ grp':>8} {'grp ratio':>9} {'gloo ms':>8} {'py/gloo':>8} {'us/call':>8}")
        for label, py, grp, gl, us in rows:
            c, cg = cpp.get(label, (float("nan"), float("nan")))
            print(f"{label:<9} {py:>8.3f} {c:>8.3f} {py / c:>6.2f}x {grp:>8.3f} {cg:>8.3f} "
                  f"{grp / cg:>8.2f}x {gl:>8.3f} {py / gl:>7.2f}x {us:>8.2f}")
        print()


def bench_case(label, iters, repeat):
    """One allreduce case, per tensor only, `repeat` times (median ms of the slowest rank, the
    submission cost per call, and the CPU time per call of submission and synchronize)."""
    k, s = next((c[0], c[1]) for c in CASES if c[2] == label)
    _, per_tensor, per_call_us, cpu_us = per_tensor_case(k, s, label)
    for _ in range(repeat):
        ms = median_slowest(iters, per_tensor)
        us = per_call_us()
        sub, syn = cpu_us()
        if hvd.rank() == 0:
            print(f"{label:<9} py ms {ms:8.3f}  us/call {us:6.2f}  CPU us/call: submit {sub:5.2f} "
                  f"synchronize {syn:5.2f}", flush=True)


# The optimizer path (--only optpath): K gradients of S float32 values each.
OPT_CASES = [(1024, 256, "1024x1KiB"), (64, 4096, "64x16KiB")]


def bench_optpath(iters, rounds, only=None):
    """DistributedOptimizer.synchronize() of K ready gradients (one optimizer, SGD with lr 0,
    the step's bookkeeping without the update), gradient_as_bucket_view off and on, against
    one raw MPI_Allreduce (mpi4py, in place) of the same bytes; and a whole training step whose
    backward only makes the K gradients (zero_grad(), one cat and dot, backward(), step()),
    hvd off / on and DDP (gloo, gradient_as_bucket_view=True) against the plain optimizer
    (no-comm): a framework's share of a step is step - no-comm, to compare with the raw call;
    and step() alone after the same backward ("red_*"), hvd off / on, no-comm, and a raw call
    then no-comm's step() ("red_raw"): (red_on - red_none) / (red_raw - red_none) is the
    reduction left after backward against the ideal one; and "after_*": raw / off / on from the
    last rank's end of backward to the end of the raw call or of synchronize()
    (median_after_last: the skew between the ranks' backward ends out). All alternate within
    each of `rounds` rounds.
    Median of the slowest rank per round; prints each round's ratios and one summary line
    ("optpath LABEL raw R sync_off .. sync_on .. step_none .. step_off .. step_on ..", medians)
    for scripts/bench-compare.sh. `only`: one case label."""
    import numpy as np
    from mpi4py import MPI
    from hvd import _core
    comm = MPI.COMM_WORLD
    for k, s, label in OPT_CASES:
        if only and label != only:
            continue
        raw_buf = np.ones(k * s, dtype=np.float32)
        x = torch.ones(k * s)
        fns = {}
        after = {}  # the reduction after the last rank's backward (median_after_last)
        views = 0
        for bv in (False, True):
            params = [nn.Parameter(torch.ones(s)) for _ in range(k)]
            opt = hvd.DistributedOptimizer(
                torch.optim.SGD(params, lr=0.0),
                named_parameters=[(f"optpath.{label}.{int(bv)}.{j}", p)
                                  for j, p in enumerate(params)],
                gradient_as_bucket_view=bv)
            # One real step: the hooks run and, with bucket views, the layout is learned.
            sum(p.sum() for p in params).backward()
            opt.step()

            def sync(opt=opt):
                opt.synchronize()
                _core.registry_consume(opt._hvd_owner, opt._hvd_entries)

            def backward(opt=opt, params=params):
                opt.zero_grad()
                torch.cat(params).dot(x).backward()

            def step(opt=opt, backward=backward):
                backward()
                opt.step()
            def reduce_then_step(opt=opt):
                """step() as synchronize(), then the update (what step() does); returns when
                the reduction completed (median_after_last; median_slowest ignores it)."""
                opt.synchronize()
                t = time.clock_gettime(time.CLOCK_MONOTONIC)
                with opt.skip_synchronize():
                    opt.step()
                return t
            v = "on" if bv else "off"
            fns["sync_" + v] = sync
            fns["step_" + v] = step
            fns["red_" + v] = after["after_" + v] = (reduce_then_step, backward)
            if bv:
                views = sum(1 for p in params if p.grad is not None and p.grad._base is not None)
        plain_params = [nn.Parameter(torch.ones(s)) for _ in range(k)]
        plain = torch.optim.SGD(plain_params, lr=0.0)

        def backward_none():
            plain.zero_grad()
            torch.cat(plain_params).dot(x).backward()

        def step_none():
            backward_none()
            plain.step()
        fns["step_none"] = step_none
        fns["red_none"] = (plain.step, backward_none)

        def raw_then_step():  # the ideal reduction after the same backward: one raw call
            comm.Allreduce(MPI.IN_PLACE, raw_buf)
            t = time.clock_gettime(time.CLOCK_MONOTONIC)  # the reduction's end, as above
            plain.step()
            return t
        fns["red_raw"] = after["after_raw"] = (raw_then_step, backward_none)

        class Grads(nn.Module):  # DDP's side: the same K parameters and backward
            def __init__(self):
                super().__init__()
                self.ps = nn.ParameterList([nn.Parameter(torch.ones(s)) for _ in range(k)])

            def forward(self, inp):
                return torch.cat(list(self.ps)).dot(inp)
        ddp = nn.parallel.DistributedDataParallel(Grads(), gradient_as_bucket_view=True)
        ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.0)

        def step_ddp():
            ddp_opt.zero_grad()
            ddp(x).backward()
            ddp_opt.step()
        fns["step_ddp"] = step_ddp
        order = ["raw", "sync_off", "sync_on", "step_none", "step_off", "step_on", "step_ddp",
                 "red_none", "red_raw", "red_off", "red_on"]
        rows = {n: [] for n in order + list(after)}
        for _ in range(rounds):
            rows["raw"].append(median_slowest(iters, lambda: comm.Allreduce(MPI.IN_PLACE,
                                                                            raw_buf)))
            for n in order[1:]:
                f = fns[n]
                rows[n].append(median_slowest(iters, *f) if isinstance(f, tuple)
                               else median_slowest(iters, f))
            for n, (f, prep) in after.items():
                rows[n].append(median_after_last(iters, f, prep))
        if hvd.rank() == 0:
            print(f"optimizer path {label} ({k} gradients, {k * s * 4 >> 10} KiB), np="
                  f"{hvd.size()}, {iters} iterations x {rounds} rounds, ms (median of the "
                  f"slowest rank); {views}/{k} gradients are views with the option on")
            for r in range(rounds):
                raw = rows["raw"][r]
                none = rows["step_none"][r]
                print(f"  round {r + 1}: raw {raw:.3f}  sync off {rows['sync_off'][r]:.3f} "
                      f"({rows['sync_off'][r] / raw:.2f}x)  on {rows['sync_on'][r]:.3f} "
                      f"({rows['sync_on'][r] / raw:.2f}x); step no-comm {none:.3f}  off "
                      f"{rows['step_off'][r]:.3f} ((step - no-comm) / raw "
                      f"{(rows['step_off'][r] - none) / raw:.2f}x)  on {rows['step_on'][r]:.3f} "
                      f"({(rows['step_on'][r] - none) / raw:.2f}x)  DDP (gloo, bucket views) "
                      f"{rows['step_ddp'][r]:.3f} ({(rows['step_ddp'][r] - none) / raw:.2f}x)")
                rn = rows["red_none"][r]
                rr = rows["red_raw"][r] - rn
                print(f"    step() after backward: no-comm {rn:.3f}  + raw MPI {rows['red_raw'][r]:.3f}"
                      f"  off {rows['red_off'][r]:.3f} ((- no-comm) / raw after backward "
                      f"{(rows['red_off'][r] - rn) / rr:.2f}x)  on {rows['red_on'][r]:.3f} "
                      f"({(rows['red_on'][r] - rn) / rr:.2f}x)")
                ar = rows["after_raw"][r]
                print(f"    after the last rank's backward (skew out): raw MPI {ar:.3f}  off "
                      f"{rows['after_off'][r]:.3f} ({rows['after_off'][r] / ar:.2f}x)  on "
                      f"{rows['after_on'][r]:.3f} ({rows['after_on'][r] / ar:.2f}x)")
            med = {n: statistics.median(v) for n, v in rows.items()}

            def spread(vals):
                vals = sorted(vals)
                return f"{statistics.median(vals):.2f} [{vals[0]:.2f}, {vals[-1]:.2f}]"
            print(f"  median: raw {med['raw']:.3f}  sync off {med['sync_off']:.3f}  on "
                  f"{med['sync_on']:.3f}; per-round x raw: off "
                  f"{spread([o / r for o, r in zip(rows['sync_off'], rows['raw'])])}  on "
                  f"{spread([o / r for o, r in zip(rows['sync_on'], rows['raw'])])}")
            share = {v: [(o - n) / r for o, n, r in
                         zip(rows["step_" + v], rows["step_none"], rows["raw"])]
                     for v in ("off", "on", "ddp")}
            print(f"  median: step no-comm {med['step_none']:.3f}  off {med['step_off']:.3f}  on "
                  f"{med['step_on']:.3f}  DDP {med['step_ddp']:.3f}; per-round (step - no-comm) / "
                  f"raw: off {spread(share['off'])}  on {spread(share['on'])}  DDP "
                  f"{spread(share['ddp'])}")
            red = {v: [(o - n) / (r - n) for o, n, r in
                       zip(rows["red_" + v], rows["red_none"], rows["red_raw"])]
                   for v in ("off", "on")}
            print(f"  median: step() after backward no-comm {med['red_none']:.3f}  raw MPI + "
                  f"no-comm {med['red_raw']:.3f}  off {med['red_off']:.3f}  on "
                  f"{med['red_on']:.3f}; per-round (step() - no-comm's) / (raw + no-comm's - "
                  f"no-comm's): off {spread(red['off'])}  on {spread(red['on'])}")
            aft = {v: [o / r for o, r in zip(rows["after_" + v], rows["after_raw"])]
                   for v in ("off", "on")}
            print(f"  median: the reduction after the last rank's backward (to the end of "
                  f"synchronize() or of the raw call) raw MPI {med['after_raw']:.3f}  off "
                  f"{med['after_off']:.3f}  on {med['after_on']:.3f}; per-round / raw: off "
                  f"{spread(aft['off'])}  on {spread(aft['on'])}")
            print(f"optpath {label} " + " ".join(f"{n} {med[n]:.4f}" for n in order), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpp", default="")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2,
                    help="training: rounds of (hvd, DDP, no-comm), every other one in the "
                    "reverse order; above 2 also prints the spread of the per-round ratios")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--only", choices=["train", "allreduce", "optpath"], default=None)
    ap.add_argument("--case", choices=[c[2] for c in CASES], default=None)
    ap.add_argument("--opt-case", choices=[c[2] for c in OPT_CASES], default=None,
                    help="--only optpath: this case alone")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--compression", choices=["none", "fp16"], default="none",
                    help="training: gradients sent as they are or as float16 (hvd's "
                    "Compression.fp16, DDP's fp16_compress_hook)")
    ap.add_argument("--bucket-view", choices=["off", "both"], default="off",
                    help="training: both also runs hvd.torch with gradient_as_bucket_view=True "
                    "(hvd-bv) in every round")
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated training models: " + ", ".join(MODELS))
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    for m in models:
        if m not in MODELS:
            ap.error(f"--models: unknown model '{m}' (known: {', '.join(MODELS)})")
    torch.set_num_threads(1)
    hvd.init()
    import mpi4py
    mpi4py.rc.initialize = mpi4py.rc.finalize = False  # hvd owns MPI's lifetime
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=hvd.rank(), world_size=hvd.size())
    if hvd.rank() == 0:
        print(f"torch {torch.__version__}, load average {os.getloadavg()[0]:.2f}\n")
    if a.case:
        bench_case(a.case, a.iters, a.repeat)
    else:
        if a.only in (None, "train"):
            bench_train(a.steps, models, a.rounds, a.compression, a.bucket_view == "both")
        if a.only in (None, "allreduce"):
            bench_allreduce(a.iters, read_cpp(a.cpp))
        if a.only == "optpath":
            bench_optpath(a.iters, max(a.rounds, 1), a.opt_case)
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
