"""A short run of tests/bench/soak.py (the full run is 10,000 requests; see
docs/benchmarks/reliability.md): mixed requests with dropped streams, then a burst over the
admission limit; the script exits non-zero when a check fails."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_soak_smoke():
    binary = os.environ.get("COSERVE_BIN", os.path.join(ROOT, "build/bin/coserve"))
    if not os.access(binary, os.X_OK):
        pytest.skip(f"coserve binary not found at {binary} (set COSERVE_BIN)")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests/bench/soak.py"), "--bin", binary,
                        "--requests", "300", "--burst", "300", "--burst-concurrency", "200", "--timeout", "60"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr[-5000:]
    summary = json.loads(p.stdout)
    assert summary["passed"]
    assert summary["phase1"]["dropped_mid_stream"] > 0
    assert summary["burst"]["status"].get("429", 0) > 0
    assert summary["kv_blocks"]["free"] == summary["kv_blocks"]["total"]
