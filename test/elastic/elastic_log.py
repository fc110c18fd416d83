# SPDX-License-Identifier: Apache-2.0
"""What the elastic tests share: check() records a failed expectation (with the job's output and
log), parse() and events() read the event lines that the training programs (train_elastic.py,
test/torch/elastic_train.cc) append to their --out.log, one `TIME genG rankR TEXT` a line."""

import re

failures = []  # the failed checks' descriptions, in order


def check(cond, what, p=None, log=""):
    """Prints `ok: what` or `FAIL: what` (then p's output tails and the log) and records a
    failure; p is a finished subprocess.run/Popen result with text stdout and stderr."""
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)
        if p is not None:
            print(p.stdout[-3000:], p.stderr[-3000:], log, sep="\n")


def parse(log):
    """[(time, gen, rank, text)] of every event line, in time order."""
    out = []
    for line in log.splitlines():
        m = re.match(r"(\S+) gen(\d+) rank(\d+) (.*)", line)
        if m:
            out.append((float(m[1]), int(m[2]), int(m[3]), m[4]))
    return sorted(out)


def events(log, word):
    """[(time, "genG rankR", text)] of the events whose text holds `word`, in time order."""
    return [(t, f"gen{g} rank{r}", text) for t, g, r, text in parse(log) if word in text]
