#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""[unit] hvd-timeline on a checked-in two-step trace: every number against a hand count
(sample_trace.json: step 0 = two fused tensors, rank 1 late, 1 ms; step 1 = the same names
through the cache, 0.25 ms), the text report and the SVG chart."""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

TOOL, SAMPLE = sys.argv[1], sys.argv[2]


def run(*args):
    p = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def close(a, b):
    assert abs(a - b) < 1e-9, (a, b)


def main():
    got = json.loads(run(SAMPLE, "--json"))
    s0, s1 = got["steps"]
    expected0 = {"duration_ms": 1.0, "tensors": 2, "negotiation_ms": 0.05, "waiting_ms": 0.15,
                 "copies_ms": 0.04, "collectives_ms": 0.1, "exposed_ms": 0.27,
                 "exposed_fraction": 0.27}
    expected1 = {"duration_ms": 0.25, "tensors": 2, "negotiation_ms": 0.02, "waiting_ms": 0.1,
                 "copies_ms": 0.0, "collectives_ms": 0.2, "exposed_ms": 0.15,
                 "exposed_fraction": 0.6}
    for s, exp in ((s0, expected0), (s1, expected1)):
        for k, v in exp.items():
            close(s[k], v)
    close(got["median"]["exposed_fraction"], 0.6)  # step 0 left out of the medians
    waits = got["longest_waits"]
    assert [(w["name"], w["step"], w["late_ranks"]) for w in waits[:2]] == [
        ("g.a", 0, [1]), ("g.b", 0, [1])], waits
    close(waits[0]["wait_ms"], 0.15)
    close(waits[1]["wait_ms"], 0.13)
    text = run(SAMPLE)
    assert "2 steps, 4 collectives" in text, text
    assert "late: ranks 1" in text, text
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "chart.svg")
        run(SAMPLE, "--svg", out)
        root = ET.parse(out).getroot()  # well-formed XML
        assert root.tag.endswith("svg")
        rects = [r for r in root.iter() if r.tag.endswith("rect")]
        # background + 5 legend boxes + step 0: 1 negotiation, 2 waits, 4 copies, 2 collectives,
        # 1 exposed; step 1: 2 negotiation, 2 waits, 2 collectives, 1 exposed.
        assert len(rects) == 1 + 5 + 10 + 7, len(rects)
    bad = subprocess.run([sys.executable, TOOL, "/nonexistent.json"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "cannot read" in bad.stderr
    print("hvd-timeline tool test: ok")


if __name__ == "__main__":
    main()
