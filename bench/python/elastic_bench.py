# SPDX-License-Identifier: Apache-2.0
"""The body of bench/elastic_bench.sh: resume time after a SIGKILL, split into phases.

Each repetition runs test/elastic/train_elastic.py under `hvdrun -v --min-np NP`, with rank 1
SIGKILLed after backward() queued its allreduces at a step drawn at random; hvdrun's stderr
lines are timestamped as they arrive, the ranks log their own times. Phases (medians):
  detection  the kill -> hvdrun reports the failed rank
  teardown   -> hvdrun starts the next generation (every rank and mpirun gone)
  launch     -> the last rank's Python runs its first line (mpirun, wrapper, interpreter)
  import     -> the last rank imported torch and hvd
  init       -> the last rank finished hvd.init()
  restore    -> the snapshot agreed on, broadcast and restored (reset callbacks ran)
  step       -> the first training step after the restore completed
usage: elastic_bench.py HVDRUN PYTHON NP KILLS"""
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HVDRUN, PYTHON, NP, KILLS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "elastic",
                      "train_elastic.py")
STEPS = 2 * 64 // (4 * NP)
PHASES = ["detection", "teardown", "launch", "import", "init", "restore", "step", "total"]


def one(tmp, i, fail_step):
    out = os.path.join(tmp, f"run{i}")
    cmd = [HVDRUN, "--verbose", "-np", str(NP), "--min-np", str(NP), PYTHON, SCRIPT, "--out", out,
           "--fail", "kill-allreduce", "--fail-step", str(fail_step)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []

    def read():
        for line in p.stderr:
            lines.append((time.time(), line))

    t = threading.Thread(target=read)
    t.start()
    p.wait(timeout=300)
    t.join()
    if p.returncode != 0:
        sys.exit(f"run {i} failed ({p.returncode}):\n" + "".join(l for _, l in lines[-30:]))
    ev = [line.split(" ", 3) for line in open(out + ".log").read().splitlines()]
    gen1 = [(float(t), r, text) for t, g, r, text in ev if g == "gen1"]
    kill = min(float(t) for t, g, r, text in ev if text.startswith("failing"))
    detect = min(t for t, l in lines if "failed (" in l or "lost contact" in l)
    launch = min(t for t, l in lines if l.startswith("hvdrun: elastic: generation 1:"))
    timing = [text.split() for _, _, text in gen1 if text.startswith("timing")]
    started = max(float(x[2]) for x in timing)
    imported = max(float(x[4]) for x in timing)
    initialized = max(float(x[6]) for x in timing)
    reset = max(t for t, _, text in gen1 if text.startswith("reset at"))
    first = max(t for t, _, text in gen1 if text.startswith("first step done"))
    marks = [kill, detect, launch, started, imported, initialized, reset, first]
    return [b - a for a, b in zip(marks, marks[1:])] + [first - kill]


random.seed(1)
rows = []
with tempfile.TemporaryDirectory() as tmp:
    for i in range(KILLS):
        row = one(tmp, i, random.randrange(4, STEPS - 1))
        rows.append(row)
        print(f"kill {i + 1}/{KILLS}: " + "  ".join(f"{n} {v:.2f}" for n, v in zip(PHASES, row)),
              flush=True)
med = [statistics.median(c) for c in zip(*rows)]
print(f"elastic resume, np {NP}, median of {KILLS} SIGKILLs (s): " +
      "  ".join(f"{n} {v:.2f}" for n, v in zip(PHASES, med)))
