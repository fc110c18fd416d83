#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""[unit] The C++ hvd::elastic::Sampler and Python's hvd.elastic.ElasticSampler give the same
indices: the same shuffle (torch's randperm, generator seeded seed + epoch), the same partition
over the ranks, the same remaining samples after recorded batches and a resize.

usage: sampler_order_test.py PROGRAM      (PROGRAM: hvd_sampler_order, test/torch/sampler_order.cc)"""
import subprocess
import sys

import torch

from hvd.common import basics
from hvd.torch.elastic import ElasticSampler

PROGRAM = sys.argv[1]
# (n, seed, epoch, ranks before, batches recorded, batch size, ranks after)
CASES = [(10, 0, 0, 1, 0, 1, 1), (64, 1, 0, 2, 0, 4, 2), (64, 1, 1, 2, 0, 4, 2),
         (64, 1, 1, 2, 3, 4, 3), (100, 42, 3, 4, 2, 5, 3), (7, 5, 2, 3, 1, 2, 2),
         (1000, 12345, 7, 8, 3, 16, 5), (33, 2**40, 1, 1, 0, 1, 4), (20, 9, 4, 1, 0, 1, 1)]


def python_indices(n, seed, epoch, before, batches, batch, after):
    world = {"size": before, "rank": 0}
    basics.is_initialized = lambda: True  # the sampler asks basics for its world: this one
    basics.size = lambda: world["size"]
    basics.rank = lambda: world["rank"]
    s = ElasticSampler(list(range(n)), shuffle=True, seed=seed)
    s.set_epoch(epoch)
    for b in range(batches):
        s.record_batch(b, batch)
    out = []
    for r in range(after):
        world.update(size=after, rank=r)
        s.reset()
        out.append(list(s.indices))
    return out


failures = 0
p = subprocess.run([PROGRAM, *(",".join(map(str, c)) for c in CASES)], capture_output=True,
                   text=True, check=True)
outputs = p.stdout.split("--\n")[:-1]
assert len(outputs) == len(CASES), p.stdout
for case, text in zip(CASES, outputs):
    cpp = [[int(w) for w in line.split()] for line in text.splitlines()]
    py = python_indices(*case)
    same = cpp == py
    failures += not same
    print(("ok: " if same else "FAIL: ") + f"(n, seed, epoch, before, batches, batch, after) = "
          f"{case}" + ("" if same else f"\n  C++    {cpp}\n  Python {py}"))
    if case[3] == case[6] == 1 and case[4] == 0:  # one rank, nothing recorded: torch's order
        g = torch.Generator()
        g.manual_seed(case[1] + case[2])
        want = torch.randperm(case[0], generator=g).tolist()
        failures += cpp != [want]
        print(("ok: " if cpp == [want] else "FAIL: ") + f"{case}: C++ gives torch.randperm's "
              "order")
sys.exit(1 if failures else 0)
