# SPDX-License-Identifier: Apache-2.0
"""[elastic] The failure-free replay of an elastic job's committed steps, shared by
elastic_hosts_test.py (train_elastic.py) and test/slurm/slurm_test.sh (test/torch/
elastic_train.cc): both trainers, with their batch logging on, log from rank 0
  "<time> gen<G> rank0 batch step S epoch E np N [[i, ...], ...]"  (every rank's samples)
  "<time> gen<G> rank<R> reset at commit C step S"                 (where a generation resumed)
and write the final "steps N" and parameters (float64 hex) to OUT.

As a program: replay.py OUT MAX_NP [--model-seed S]   checks OUT against OUT.log's replay
(the job's parameters equal the replay's, the committed steps follow each other, every epoch
covered every sample), prints PASS/FAIL lines, exit 0 or 1."""
import re
import sys

import torch

from elastic_log import parse  # noqa: I100 (this directory)

N, EPOCHS = 64, 2


def replay(evs, model_seed=None):
    """The parameters of a failure-free run of the committed steps: each generation's steps
    after the commit it resumed from and up to the commit the next one resumed from; one SGD
    step per batch, the gradient of the mean over ranks of each rank's mean loss (what
    DistributedOptimizer's average computes). The model is initialized right after the data
    (train_elastic.py) or after torch.manual_seed(model_seed) (elastic_train.cc: rank 0's
    seed). Also returns {epoch: [sample, ...]} and the replayed steps."""
    resume = {0: 0}
    batches = {}
    for _, g, r, text in evs:
        m = re.match(r"reset at commit \d+ step (\d+)", text)
        if m and r == 0:
            resume[g] = int(m[1])
        m = re.match(r"batch step (\d+) epoch (\d+) np \d+ (.*)", text)
        if m:
            batches.setdefault(g, {})[int(m[1])] = (int(m[2]), eval(m[3]))
    steps, limit = {}, None
    for g in sorted(batches, reverse=True):
        for s, b in batches[g].items():
            if s > resume.get(g, 0) and (limit is None or s <= limit) and s not in steps:
                steps[s] = b
        limit = resume.get(g, 0)
    torch.manual_seed(0)
    X = torch.randn(N, 4, dtype=torch.float64)
    Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]], dtype=torch.float64) + 0.1
    if model_seed is not None:
        torch.manual_seed(model_seed)
    model = torch.nn.Linear(4, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    seen = {}
    for s in sorted(steps):
        epoch, per_rank = steps[s]
        opt.zero_grad()
        loss = sum(((model(X[idx]) - Y[idx]) ** 2).mean() for idx in per_rank) / len(per_rank)
        loss.backward()
        opt.step()
        for idx in per_rank:
            seen.setdefault(epoch, []).extend(idx)
    lines = [f"steps {max(steps) if steps else 0}"]
    for name, t in model.state_dict().items():
        lines.append(name + " " + " ".join(float(v).hex() for v in t.flatten().tolist()))
    return lines, seen, sorted(steps)


def close(got, ref):
    """Same step count and parameters within 1e-9 (the allreduce sums in another order)."""
    if got is None or got[0] != ref[0]:
        return False
    for a, b in zip(got[1:], ref[1:]):
        va = [float.fromhex(w) for w in a.split()[1:]]
        vb = [float.fromhex(w) for w in b.split()[1:]]
        if len(va) != len(vb) or any(abs(x - y) > 1e-9 * max(1, abs(y)) for x, y in zip(va, vb)):
            return False
    return True


def check_replay(out, max_np, check, model_seed=None, detail=""):
    """check(cond, what, detail) for each claim; returns the events and the log."""
    try:
        log = open(out + ".log").read()
    except FileNotFoundError:
        log = ""
    try:
        got = open(out).read().split("\n")[:3]
    except FileNotFoundError:
        got = None
    evs = parse(log)
    ref, seen, steps = replay(evs, model_seed)
    check(steps == list(range(1, len(steps) + 1)), "the committed steps follow each other")
    check(close(got, ref), "the final parameters equal the failure-free replay of the committed "
          f"steps ({got} vs {ref})", detail + log)
    for e in range(EPOCHS):
        s = seen.get(e, [])
        check(set(s) == set(range(N)) and len(s) - N < max_np,
              f"epoch {e} covered every sample once ({len(s)} with padding)")
    return evs, log


def main():
    out, max_np = sys.argv[1], int(sys.argv[2])
    seed = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--model-seed" else None
    failed = []

    def check(cond, what, detail=""):
        print(("PASS: " if cond else "FAIL: ") + what)
        if not cond:
            failed.append(what)
            if detail:
                print(detail[-6000:])

    check_replay(out, max_np, check, seed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
