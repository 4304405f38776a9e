#!/usr/bin/env python3
"""Runs `coserve bench runtime` and the CAF 0.17 anchor alternately on this machine and prints,
as JSON lines, the median of each workload and the ratio coserve / CAF (>= 1.0: coserve faster).

usage: tests/bench/runtime_vs_caf.py [--coserve build/bin/coserve] [--n 1000000] [--rounds 5]
Needs libcaf-dev (scripts/deps --bench) and g++; builds the anchor from ../shared/bench.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_lines(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--coserve", default=os.path.join(ROOT, "build", "bin", "coserve"))
    ap.add_argument("--anchor-src", default=os.path.join(ROOT, "..", "shared", "bench", "caf_anchor.cpp"))
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    anchor = "/tmp/coserve_caf_anchor"
    subprocess.run(["g++", "-std=c++17", "-O2", args.anchor_src, "-lcaf_core", "-lpthread",
                    "-o", anchor], check=True)
    samples = {"coserve": {}, "caf": {}}
    for _ in range(args.rounds):
        for name, cmd in (("coserve", [args.coserve, "bench", "runtime", "--n", str(args.n)]),
                          ("caf", [anchor, str(args.n)])):
            for rec in run_lines(cmd):
                samples[name].setdefault(rec["workload"], []).append(rec["per_second"])
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "rounds": args.rounds, "n": args.n}
    for workload in ("pingpong", "fanin", "pipeline"):
        ours = statistics.median(samples["coserve"][workload])
        theirs = statistics.median(samples["caf"][workload])
        print(json.dumps({"workload": workload, "coserve_per_second": round(ours),
                          "caf_per_second": round(theirs), "ratio": round(ours / theirs, 2),
                          "machine": machine}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
