# SPDX-License-Identifier: Apache-2.0
"""scaling_fit: checks the ring-allreduce model of docs/performance.md ("Scaling") on this machine.

The model: one allreduce of n bytes over N ranks takes T(N, n) = 2(N-1) a + 2(N-1)/N n b, with
a the latency of one step and b the inverse bandwidth (s/byte). The driver fits (a, b) to hvd's
allreduce at np 2 (T = 2a + n b; least squares in relative error over messages of 4 B to 1 KiB
and of 16 and 64 MiB), predicts np 3..8 from the formula and prints predicted against measured,
in %, and against a one-host variant in which every rank's bytes cross one memory system.
Raw MPI_Allreduce of the same bytes is measured and fitted alongside, so that hvd's own overhead
and Open MPI's are told apart. --model prints the paper model's table for ResNet-50.

    python3 bench/scaling_fit.py [--build build] [--nps 2,3,4,6,8] [--rounds 5] [--ring]
        [--json FILE] [--from-json FILE]
    python3 bench/scaling_fit.py --model [--alpha-us 5] [--compute-ms 170] [--allreduces 2]
        [--round-cpu-us 4.0] [--grad-bytes 102228128]

Each round launches `mpirun -np N` once per N (N in the order given, every round), so the np
values are interleaved in time; inside one launch, hvd and raw MPI alternate per size and per
iteration. A launch prints, per size, the median over iterations of the slowest rank's time;
the driver prints the median over rounds. np above the core count runs oversubscribed.
--ring forces Open MPI's ring allreduce (coll_tuned algorithm 4) for hvd and raw MPI alike.
The ranks run with glibc's mmap threshold raised (MALLOC_MMAP_THRESHOLD_) and one malloc arena
(MALLOC_ARENA_MAX=1, so that the threshold also holds in hvd's background thread, whose own
arena could not hold the block), so that Open MPI's temporary buffer of a large allreduce is
reused from the heap rather than mapped and faulted in on every call (by default glibc maps any
block of 32 MiB or more; page faults are slow on this VM and would be measured instead of the
transfer); --cold-malloc leaves glibc's defaults.

The worker (`--worker`, under mpirun) uses hvd.numpy for hvd's path and calls MPI_Allreduce
through ctypes on Open MPI's libmpi (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM are its exported
objects), so that nothing beyond numpy and the binding is needed.
"""

import argparse
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import time

SIZES = [4, 64, 1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
# The fit's points: latency-bound messages and messages larger than the caches (a step's
# gradients are ~100 MB); the sizes between run from the caches and are only predicted.
FIT_SIZES = [4, 64, 1 << 10, 16 << 20, 64 << 20]


def iterations(nbytes, base):
    """Iterations at one size: `base` for small messages, fewer as the bytes grow."""
    if nbytes >= 64 << 20:
        return max(5, base // 5)
    if nbytes >= 16 << 20:
        return max(5, base // 3)
    if nbytes >= 4 << 20:
        return max(5, base // 2)
    return base


def label(nbytes):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


class RawMpi:
    """MPI_Allreduce, MPI_Barrier and a max-reduction of doubles on MPI_COMM_WORLD via ctypes
    (Open MPI's ABI: the predefined handles are addresses of exported objects)."""

    def __init__(self):
        lib = None
        for name in ("libmpi.so.40", "libmpi.so"):
            try:
                lib = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue
        if lib is None:
            sys.exit("scaling_fit: cannot load libmpi.so.40 or libmpi.so; the worker calls Open "
                     "MPI's MPI_Allreduce directly: run it with Open MPI's mpirun")
        self.lib = lib

        def addr(sym):
            return ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(lib, sym)))

        self.comm = addr("ompi_mpi_comm_world")
        self.float = addr("ompi_mpi_float")
        self.double = addr("ompi_mpi_double")
        self.sum = addr("ompi_mpi_op_sum")
        self.max = addr("ompi_mpi_op_max")
        self.in_place = ctypes.c_void_p(1)  # Open MPI's MPI_IN_PLACE
        lib.MPI_Allreduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.MPI_Barrier.argtypes = [ctypes.c_void_p]

    def allreduce_floats(self, arr):
        rc = self.lib.MPI_Allreduce(self.in_place, ctypes.c_void_p(arr.ctypes.data), arr.size,
                                    self.float, self.sum, self.comm)
        if rc != 0:
            sys.exit(f"scaling_fit: MPI_Allreduce of {arr.nbytes} bytes returned {rc}")

    def max_doubles(self, arr):
        rc = self.lib.MPI_Allreduce(self.in_place, ctypes.c_void_p(arr.ctypes.data), arr.size,
                                    self.double, self.max, self.comm)
        if rc != 0:
            sys.exit(f"scaling_fit: MPI_Allreduce (max) returned {rc}")

    def barrier(self):
        self.lib.MPI_Barrier(self.comm)


def worker(base_iters):
    """Under mpirun: per size, alternate hvd's allreduce and raw MPI's; print rank 0's medians of
    the slowest rank's times (seconds) as one JSON line."""
    import numpy as np
    import hvd.numpy as hvd

    hvd.init()
    mpi = RawMpi()
    n = hvd.size()
    out = {"np": n, "hvd": {}, "raw": {}}
    for nbytes in SIZES:
        arr = np.ones(max(1, nbytes // 4), np.float32)
        iters = iterations(nbytes, base_iters)
        name = f"fit.{nbytes}"
        for _ in range(2):  # warm-up: negotiation of the name, MPI's connections and buffers
            hvd.allreduce_(arr, name=name, op=hvd.Sum)
            mpi.allreduce_floats(arr)
        times = np.zeros(2 * iters)
        for i in range(iters):
            mpi.barrier()
            t0 = time.perf_counter()
            hvd.allreduce_(arr, name=name, op=hvd.Sum)
            times[2 * i] = time.perf_counter() - t0
            mpi.barrier()
            t0 = time.perf_counter()
            mpi.allreduce_floats(arr)
            times[2 * i + 1] = time.perf_counter() - t0
        mpi.max_doubles(times)  # the slowest rank per iteration
        out["hvd"][str(nbytes)] = float(np.median(times[0::2]))
        out["raw"][str(nbytes)] = float(np.median(times[1::2]))
    if hvd.rank() == 0:
        print("SCALING_FIT " + json.dumps(out), flush=True)
    hvd.shutdown()


def fit(points, n_ranks):
    """(a, b) minimising the relative error of T = 2(N-1) a + 2(N-1)/N n b over (n, T) points
    (weights 1/T^2: sizes span seven orders of magnitude)."""
    s_xx = s_x1 = s_11 = s_xy = s_1y = 0.0
    for nbytes, t in points:
        w = 1.0 / (t * t)
        x1 = 2.0 * (n_ranks - 1)
        xx = 2.0 * (n_ranks - 1) / n_ranks * nbytes
        s_11 += w * x1 * x1
        s_x1 += w * x1 * xx
        s_xx += w * xx * xx
        s_1y += w * x1 * t
        s_xy += w * xx * t
    det = s_11 * s_xx - s_x1 * s_x1
    a = (s_1y * s_xx - s_xy * s_x1) / det
    b = (s_11 * s_xy - s_x1 * s_1y) / det
    return a, b


def predict(a, b, n_ranks, nbytes):
    return 2.0 * (n_ranks - 1) * a + 2.0 * (n_ranks - 1) / n_ranks * nbytes * b


# The paper model of docs/performance.md ("Scaling"): ResNet-50's gradients (torchvision's
# resnet50: 161 tensors, 25,557,032 float32 parameters; 29 tensors of 1 MiB or more hold
# 95,748,096 of the bytes) on links of 25, 100 and 400 Gb/s.
RESNET50_BYTES = 102_228_128
LINKS_GBPS = (25, 100, 400)
MODEL_NS = (8, 64, 512)


def model(alpha, compute_ms, allreduces, round_cpu_us, grad_bytes):
    """Prints, per N and link, the terms of one step's communication (ms) and the scaling
    efficiency C / T_step with no overlap (T = C + comm) and with the backward pass (2/3 of C)
    fully overlapped (T = C/3 + max(2C/3, comm)). comm = bandwidth term 2(N-1)/N S/B + latency
    term m 2(N-1) a + controller term m (round_cpu + ceil(log2 N) a): one negotiation round per
    allreduce, each rank 0's CPU for a cached round plus the AND-allreduce of the bit words
    (recursive doubling: log2 N steps)."""
    print(f"gradients S = {grad_bytes / 1e6:.1f} MB, a = {alpha * 1e6:g} us, "
          f"m = {allreduces} allreduces per step, rank 0's CPU {round_cpu_us:g} us per round, "
          f"compute C = {compute_ms:g} ms per step\n")
    print("| N | link | bandwidth | latency | controller | comm | E, no overlap | "
          "E, backward overlapped |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in MODEL_NS:
        for gbps in LINKS_GBPS:
            bw = 2.0 * (n - 1) / n * grad_bytes / (gbps * 1e9 / 8) * 1e3
            lat = allreduces * 2.0 * (n - 1) * alpha * 1e3
            ctl = allreduces * (round_cpu_us * 1e-6 + math.ceil(math.log2(n)) * alpha) * 1e3
            comm = bw + lat + ctl
            e_none = compute_ms / (compute_ms + comm)
            e_over = compute_ms / (compute_ms / 3 + max(2 * compute_ms / 3, comm))
            print(f"| {n} | {gbps} Gb/s | {bw:.1f} | {lat:.2f} | {ctl:.2f} | {comm:.1f} | "
                  f"{100 * e_none:.0f}% | {100 * e_over:.0f}% |")


def launch(args, n_ranks):
    env = dict(os.environ)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1",
                "PYTHONPATH": os.path.join(args.build, "python"), "PYTHONDONTWRITEBYTECODE": "1"})
    if not args.cold_malloc:
        env.update({"MALLOC_MMAP_THRESHOLD_": str(1 << 32), "MALLOC_TRIM_THRESHOLD_": str(1 << 32),
                    "MALLOC_ARENA_MAX": "1"})
    if args.ring:
        env.update({"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                    "OMPI_MCA_coll_tuned_allreduce_algorithm": "4"})
    cmd = ["mpirun", "-np", str(n_ranks), "--bind-to", "none", sys.executable,
           os.path.abspath(__file__), "--worker", "--iters", str(args.iters)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("SCALING_FIT "):
            return json.loads(line[len("SCALING_FIT "):])
    sys.exit(f"scaling_fit: np {n_ranks} printed no result (exit {proc.returncode}):\n"
             f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def us(seconds):
    return f"{seconds * 1e6:,.0f}" if seconds >= 1e-4 else f"{seconds * 1e6:.1f}"


def report(results, nps):
    """Medians over rounds, the fit at the smallest np, and predicted vs measured per np."""
    med = {path: {n: {s: statistics.median(r[path][str(s)] for r in results[n]) for s in SIZES}
                  for n in nps} for path in ("hvd", "raw")}
    n0 = nps[0]
    for path in ("hvd", "raw"):
        a, b = fit([(s, med[path][n0][s]) for s in FIT_SIZES], n0)
        points = ", ".join(label(s) for s in FIT_SIZES)
        print(f"\n### {path}: fit at np {n0} ({points}): a = {a * 1e6:.2f} us, "
              f"b = {b * 1e9:.4f} ns/B (1/b = {1 / b / 1e9:.2f} GB/s)")
        print("\nmeasured us (median over rounds of each launch's median of the slowest rank) / "
              "ring model's prediction: measured/predicted - 1; last column: the same against "
              "one shared host, T = 2(N-1) a + (N-1) n b (every rank's bytes through one memory "
              "system: N/2 times the ring's bandwidth term)\n")
        print("| size | " + " | ".join(f"np {n}" for n in nps) + " | shared host, np "
              + ", ".join(str(n) for n in nps[1:]) + " |")
        print("| ---: | " + " | ".join("---:" for _ in nps) + " | ---: |")
        for s in SIZES:
            cells, shared = [], []
            for n in nps:
                m = med[path][n][s]
                p = predict(a, b, n, s)
                cells.append(f"{us(m)} / {us(p)}: {100 * (m / p - 1):+.0f}%")
                if n != n0:
                    q = 2.0 * (n - 1) * a + (n - 1) * s * b
                    shared.append(f"{100 * (m / q - 1):+.0f}%")
            print(f"| {label(s)} | " + " | ".join(cells) + " | " + ", ".join(shared) + " |")
    print("\nhvd / raw MPI (median times):\n")
    print("| size | " + " | ".join(f"np {n}" for n in nps) + " |")
    print("| ---: | " + " | ".join("---:" for _ in nps) + " |")
    for s in SIZES:
        print(f"| {label(s)} | "
              + " | ".join(f"{med['hvd'][n][s] / med['raw'][n][s]:.2f}" for n in nps) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", action="store_true", help="internal: the timed ranks")
    p.add_argument("--build", default="build", help="build directory (its python/ holds hvd)")
    p.add_argument("--nps", default="2,3,4,6,8", help="rank counts; the first is fitted")
    p.add_argument("--rounds", type=int, default=5, help="launches per np, interleaved")
    p.add_argument("--iters", type=int, default=30, help="timed iterations per size (fewer "
                   "from 4 MiB up)")
    p.add_argument("--ring", action="store_true", help="force Open MPI's ring allreduce")
    p.add_argument("--cold-malloc", action="store_true", help="leave glibc's mmap threshold "
                   "alone (Open MPI's temporary buffers of 32 MiB and more are then mapped and "
                   "faulted in on every call)")
    p.add_argument("--model", action="store_true", help="print the paper model's table and "
                   "exit (--alpha-us, --compute-ms, --allreduces, --round-cpu-us)")
    p.add_argument("--alpha-us", type=float, default=5.0, help="model: latency per ring step")
    p.add_argument("--compute-ms", type=float, default=170.0, help="model: compute per step")
    p.add_argument("--allreduces", type=int, default=2, help="model: allreduce calls per step")
    p.add_argument("--grad-bytes", type=int, default=RESNET50_BYTES, help="model: gradient "
                   "bytes per step (ResNet-101: 178196640)")
    p.add_argument("--round-cpu-us", type=float, default=4.0, help="model: rank 0's CPU per "
                   "cached negotiation round (hvd_control_plane_bench)")
    p.add_argument("--json", help="also write the per-launch results here")
    p.add_argument("--from-json", help="report the results --json wrote, without measuring")
    args = p.parse_args()
    if args.worker:
        worker(args.iters)
        return
    if args.model:
        model(args.alpha_us * 1e-6, args.compute_ms, args.allreduces, args.round_cpu_us,
              args.grad_bytes)
        return
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        report({int(n): v for n, v in saved.items()}, [int(n) for n in saved])
        return
    nps = [int(x) for x in args.nps.split(",")]
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"scaling_fit: np {args.nps}, {args.rounds} rounds, {args.iters} iterations, "
          f"{'forced ring' if args.ring else 'Open MPI default algorithms'}, "
          f"{'cold' if args.cold_malloc else 'warm'} malloc, "
          f"{os.cpu_count()} CPUs, load average {load}", flush=True)
    results = {n: [] for n in nps}
    for r in range(args.rounds):
        for n in nps:
            t0 = time.time()
            results[n].append(launch(args, n))
            print(f"round {r + 1} np {n}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(n): v for n, v in results.items()}, f)
    report(results, nps)


if __name__ == "__main__":
    main()
