# SPDX-License-Identifier: Apache-2.0
"""What the elastic tests share: check() records a failed expectation (with the job's output and
log), events() reads the event lines that the training programs (train_elastic.py,
test/torch/elastic_train.cc) append to their --out.log, one `TIME genG rankR TEXT` a line."""

failures = []  # the failed checks' descriptions, in order


def check(cond, what, p=None, log=""):
    """Prints `ok: what` or `FAIL: what` (then p's output tails and the log) and records a
    failure; p is a finished subprocess.run/Popen result with text stdout and stderr."""
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)
        if p is not None:
            print(p.stdout[-3000:], p.stderr[-3000:], log, sep="\n")


def events(log, word):
    """[(time, "genG rankR", text)] of the lines holding `word`, in time order."""
    out = []
    for line in log.splitlines():
        if word in line:
            t, g, r, text = line.split(" ", 3)
            out.append((float(t), g + " " + r, text))
    return sorted(out)
