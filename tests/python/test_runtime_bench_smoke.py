"""A short run of tests/bench/runtime_vs_caf.py (--smoke: n = 20000, one round): the runtime
benchmark, its --no-trace variant and the CAF anchor build and run, and the script prints a line
per workload. The speed itself is measured by the full run (docs/benchmarks/runtime.md), not here."""
import json
import os
import subprocess
import sys

from conftest import skip_or_fail_in_ci

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_runtime_vs_caf_smoke(coserve_bin):
    binary = coserve_bin
    if not os.path.exists("/usr/include/caf/all.hpp"):
        skip_or_fail_in_ci("CAF's headers are missing: run scripts/deps --bench")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests/bench/runtime_vs_caf.py"), "--coserve",
                        binary, "--smoke"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr[-5000:]
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert [l["workload"] for l in lines[:3]] == ["pingpong", "fanin", "pipeline"]
    for l in lines[:3]:
        assert set(l["per_second"]) == {"coserve", "coserve_no_trace", "caf"}
        assert all(v > 0 for v in l["per_second"].values())
    assert lines[3]["machine"]["n"] == 20000
