#!/usr/bin/env python3
"""The runtime's message rate side by side with CAF 0.17: runs `coserve bench runtime` (tracing on,
its default, and with --no-trace), the CAF anchor (../shared/bench/caf_anchor.cpp, same workload
shapes) and any baseline builds of earlier commits, alternating them round by round on this
machine, and prints one JSON line per workload with the medians and the ratios:

  {"workload": "pingpong", "per_second": {"coserve": ..., "coserve_no_trace": ..., "caf": ...,
   "440979a": ...}, "ratio_vs_caf": {"coserve": ..., "coserve_no_trace": ..., "440979a": ...},
   "ratio_vs_baseline": {"440979a": ...}, "samples": {...}}

then a line describing the machine. Higher is better; a ratio above 1.0 means faster than CAF (or
than the baseline build).

usage: tests/bench/runtime_vs_caf.py [--coserve build/bin/coserve] [--n 1000000] [--rounds 5]
                                     [--baseline COMMIT]... [--min-ratio R] [--smoke]

  --baseline COMMIT  also build and run the runtime benchmark as it was at COMMIT (its runtime/,
                     base/ and cli/bench_runtime.cpp, compiled with the flags of a RelWithDebInfo
                     build: -O3 -g -DNDEBUG); repeatable
  --min-ratio R      exit 1 when a workload's median with tracing on is below R times CAF's, or
                     below a baseline's (the regression guard); default: report only
  --smoke            n = 20000, one round: checks that everything builds and runs, not the speed

Needs libcaf-dev (scripts/deps --bench), g++ and Asio's headers; a baseline needs git.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKLOADS = ("pingpong", "fanin", "pipeline")
CXXFLAGS = ["-std=c++20", "-O3", "-g", "-DNDEBUG", "-DASIO_STANDALONE", "-DASIO_NO_DEPRECATED",
            "-DASIO_HAS_STD_ALIGNED_ALLOC=1"]
# A main for a baseline's cli/bench_runtime.cpp, called as `BIN bench runtime FLAGS...`.
DRIVER = """namespace coserve::cli { int bench_runtime(int argc, char** argv); }
int main(int argc, char** argv) { return coserve::cli::bench_runtime(argc - 2, argv + 2); }
"""


def log(msg):
    print(f"[runtime_vs_caf] {msg}", file=sys.stderr, flush=True)


def run_lines(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def build_anchor(src, workdir):
    anchor = os.path.join(workdir, "caf_anchor")
    if not os.path.exists("/usr/include/caf/all.hpp"):
        sys.exit("runtime_vs_caf: CAF's headers are missing (/usr/include/caf): run scripts/deps --bench")
    log(f"building the CAF anchor from {src}")
    subprocess.run(["g++", "-std=c++17", "-O2", src, "-lcaf_core", "-lpthread", "-o", anchor], check=True)
    return anchor


def build_baseline(commit, workdir):
    """Builds the runtime benchmark of `commit` on its own (no other part of the project)."""
    src = os.path.join(workdir, f"src-{commit}")
    os.makedirs(src)
    tracked = subprocess.run(["git", "-C", ROOT, "ls-tree", "-r", "--name-only", commit],
                             check=True, capture_output=True, text=True).stdout.split()
    wanted = [p for p in ("runtime", "base", "cli/bench_runtime.cpp")
              if any(t == p or t.startswith(p + "/") for t in tracked)]
    archive = subprocess.run(["git", "-C", ROOT, "archive", commit, *wanted], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    with open(os.path.join(src, "driver.cpp"), "w") as f:
        f.write(DRIVER)
    sources = [os.path.join(src, "runtime", n) for n in sorted(os.listdir(os.path.join(src, "runtime")))
               if n.endswith(".cpp")]
    sources += [os.path.join(src, "cli", "bench_runtime.cpp"), os.path.join(src, "driver.cpp")]
    binary = os.path.join(workdir, f"bench-{commit}")
    log(f"building the runtime benchmark of {commit}")
    subprocess.run(["g++", *CXXFLAGS, "-I", src, *sources, "-lpthread", "-o", binary], check=True)
    return binary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coserve", default=os.path.join(ROOT, "build", "bin", "coserve"))
    ap.add_argument("--anchor-src", default=os.path.join(ROOT, "..", "shared", "bench", "caf_anchor.cpp"))
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", action="append", default=[])
    ap.add_argument("--min-ratio", type=float, default=None)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.rounds = 20000, 1
    if not os.access(args.coserve, os.X_OK):
        sys.exit(f"runtime_vs_caf: no coserve binary at {args.coserve} (--coserve)")

    workdir = tempfile.mkdtemp(prefix="coserve-runtime-bench-")
    try:
        variants = {"coserve": [args.coserve, "bench", "runtime", "--n", str(args.n)],
                    "coserve_no_trace": [args.coserve, "bench", "runtime", "--n", str(args.n), "--no-trace"],
                    "caf": [build_anchor(args.anchor_src, workdir), str(args.n)]}
        for commit in args.baseline:
            variants[commit] = [build_baseline(commit, workdir), "bench", "runtime", "--n", str(args.n)]
        samples = {name: {w: [] for w in WORKLOADS} for name in variants}
        for r in range(args.rounds):
            # Alternate the order too, so no variant always runs first after a quiet spell.
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in order:
                for rec in run_lines(variants[name]):
                    samples[name][rec["workload"]].append(rec["per_second"])
            log(f"round {r + 1}/{args.rounds} done")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    failed = []
    for w in WORKLOADS:
        med = {name: statistics.median(samples[name][w]) for name in variants}
        line = {"workload": w, "per_second": {k: round(v) for k, v in med.items()},
                "ratio_vs_caf": {k: round(v / med["caf"], 2) for k, v in med.items() if k != "caf"},
                "ratio_vs_baseline": {b: round(med["coserve"] / med[b], 2) for b in args.baseline},
                "samples": {k: [round(x) for x in samples[k][w]] for k in variants}}
        print(json.dumps(line), flush=True)
        if args.min_ratio is not None:
            if med["coserve"] < args.min_ratio * med["caf"]:
                failed.append(f"{w}: {line['ratio_vs_caf']['coserve']}x CAF < {args.min_ratio}x")
            failed += [f"{w}: slower than {b} ({line['ratio_vs_baseline'][b]}x)"
                       for b in args.baseline if med["coserve"] < med[b]]
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(json.dumps({"machine": {"cpu": cpu, "cores": os.cpu_count(), "rounds": args.rounds, "n": args.n,
                                  "load_average": os.getloadavg()[0]}}), flush=True)
    if failed:
        print("runtime_vs_caf: " + "; ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
