#!/usr/bin/env python3
"""The host cost of a decode step (`coserve bench pipeline`) of two builds, side by side.

Usage: tests/bench/pipeline_side_by_side.py BEFORE_BIN AFTER_BIN [--seqs 1,64,256,1024]
       [--steps 2000] [--rounds 5]

Runs `BIN bench pipeline --seqs N --steps S` for both binaries, alternating (before, after, before,
...), `--rounds` times per sequence count after one warm-up run each, and prints one JSON line per
run and, per sequence count, the medians of p50 and p99 and their ratios (after / before).
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(binary, seqs, steps):
    out = subprocess.run([binary, "bench", "pipeline", "--seqs", str(seqs), "--steps", str(steps)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--seqs", default="1,64,256,1024")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    summary = []
    for seqs in [int(x) for x in a.seqs.split(",")]:
        for b in (a.before, a.after):  # warm-up
            run(b, seqs, a.steps)
        got = {"before": [], "after": []}
        for r in range(a.rounds):
            for name, b in (("before", a.before), ("after", a.after)):
                j = run(b, seqs, a.steps)
                j.update(build=name, round=r)
                print(json.dumps(j), flush=True)
                got[name].append(j)
        row = {"seqs": seqs, "steps": a.steps, "rounds": a.rounds}
        for name in ("before", "after"):
            row[f"{name}_p50_us"] = statistics.median(x["us_per_step_p50"] for x in got[name])
            row[f"{name}_p99_us"] = statistics.median(x["us_per_step_p99"] for x in got[name])
        row["p50_ratio"] = round(row["after_p50_us"] / row["before_p50_us"], 3)
        row["p99_ratio"] = round(row["after_p99_us"] / row["before_p99_us"], 3)
        summary.append(row)
    for row in summary:
        print(json.dumps({"summary": row}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
