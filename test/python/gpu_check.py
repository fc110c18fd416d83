# SPDX-License-Identifier: Apache-2.0
"""The Python binding on CUDA tensors, for the GPU check bundle (run.sh) or any GPU machine:

    PYTHONPATH=build/python mpiexec -np 1 python3 test/python/gpu_check.py

Plain Python (no pytest needed there). np = 1 (NCCL refuses two ranks on one GPU): every
collective must return its closed form on the device, with the tensor's dtype; a
DistributedOptimizer step on a CUDA model must equal plain SGD's. Exit 0 when all pass, 1 when
one fails, 3 when this machine has no torch with CUDA (nothing was checked).
"""
import glob
import os
import statistics
import sys
import time


def skip(why):
    print(f"gpu_check.py: skipped: {why}")
    sys.exit(3)


try:
    import torch
except ImportError:
    skip(f"no torch for {sys.executable}")
if not torch.cuda.is_available():
    skip(f"torch {torch.__version__} here has no CUDA device")
# The extension is built for one Python version: another one here is a skip, not a failure.
_tag = f"cpython-{sys.version_info[0]}{sys.version_info[1]}-"
_built = [os.path.basename(f) for p in sys.path
          for f in glob.glob(os.path.join(p, "hvd", "_core*.so"))]
if _built and not any(_tag in b for b in _built):
    skip(f"the binding was built for another Python ({_built[0]}), "
         f"this is {sys.version.split()[0]}")

import hvd.torch as hvd  # noqa: E402

failures = []


def check(label, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + label + (f": {detail}" if detail and not ok else ""))
    if not ok:
        failures.append(label)


def main():
    hvd.init()
    n = hvd.size()
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    check("nccl_built", bool(hvd.nccl_built()))
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
        x = torch.arange(12, device=dev).to(dtype)
        y = hvd.allreduce(x, op=hvd.Sum, name=f"ar.{dtype}")
        check(f"allreduce Sum {dtype}", y.device == dev and y.dtype == dtype and
              torch.equal(y.cpu(), (x * n).cpu()), str(y))
        z = x.clone()
        hvd.allreduce_(z, op=hvd.Average, name=f"ar_.{dtype}")
        check(f"allreduce_ Average {dtype}", torch.equal(z.cpu(), x.cpu()), str(z))
    g = hvd.allgather(torch.full((3, 2), 7.0, device=dev), name="ag")
    check("allgather", g.device == dev and g.shape == (3 * n, 2) and bool((g == 7).all()), str(g))
    b = hvd.broadcast(torch.arange(5.0, device=dev), root_rank=0, name="bc")
    check("broadcast", torch.equal(b.cpu(), torch.arange(5.0)), str(b))
    a = hvd.alltoall(torch.arange(4.0 * n, device=dev), name="a2a")
    check("alltoall", a.device == dev and a.numel() == 4 * n, str(a))
    r = hvd.reducescatter(torch.ones(2 * n, 3, device=dev), op=hvd.Sum, name="rs")
    check("reducescatter", r.device == dev and r.shape == (2, 3) and bool((r == n).all()), str(r))
    gs = hvd.grouped_allreduce([torch.ones(3, device=dev), torch.ones(4, device=dev) * 2],
                               op=hvd.Sum, name="gar")
    check("grouped_allreduce", bool((gs[0] == n).all() and (gs[1] == 2 * n).all()), str(gs))
    # Adasum on CUDA tensors: on one node the average of the ranks (as in Horovod), so the
    # same tensor on every rank comes back unchanged.
    for dtype in (torch.float32, torch.float16):
        x = torch.arange(1, 13, device=dev).to(dtype)
        ad = hvd.allreduce(x, op=hvd.Adasum, name=f"adasum.{dtype}")
        check(f"allreduce Adasum {dtype}", ad.device == dev and torch.equal(ad.cpu(), x.cpu()),
              str(ad))

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(dev)
    ref = torch.nn.Linear(8, 4).to(dev)
    ref.load_state_dict(model.state_dict())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(16, 8, device=dev)
    for m, o in ((model, opt), (ref, ref_opt)):
        o.zero_grad()
        m(x).pow(2).mean().backward()
        o.step()
    worst = max((p - q).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    check("DistributedOptimizer step on CUDA equals SGD", worst < 1e-6, f"difference {worst}")

    ts = [torch.ones(256, device=dev) for _ in range(1024)]
    times = []
    for i in range(13):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        hs = [hvd.allreduce_async_(t, name=f"p.{j}", op=hvd.Sum) for j, t in enumerate(ts)]
        for h in hs:
            hvd.synchronize(h)
        torch.cuda.synchronize()
        if i >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    print(f"1024 x 256 float32 per-tensor allreduce_async_ + synchronize on {dev}: median "
          f"{statistics.median(times):.3f} ms")
    hvd.shutdown()
    print(f"gpu_check.py: {len(failures)} failed" + (f": {failures}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
