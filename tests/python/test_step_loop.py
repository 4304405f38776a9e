"""The executor's step loop over real HTTP: streaming clients served with step N+1 launched behind
step N (coserve_engine_steps_launched_ahead_total counts them), and `coserve bench steps`, which
serves the same requests launched ahead and one step at a time, side by side."""
import asyncio
import json
import subprocess

import httpx

from conftest import coserve_binary, metric_value, skip_or_fail_in_ci


def test_concurrent_streams_run_with_steps_launched_ahead(server):
    before = metric_value(httpx.get(server.url + "/metrics").text, "coserve_engine_steps_launched_ahead_total")

    async def one(client, i):
        stream = await client.completions.create(model=server.model, prompt=f"count {i}:", max_tokens=12,
                                                 temperature=0, stream=True)
        return "".join([c.choices[0].text async for c in stream])

    async def main():
        client = server.async_client()
        return await asyncio.gather(*(one(client, i) for i in range(8)))

    texts = asyncio.run(main())
    assert all(isinstance(t, str) for t in texts)
    after = metric_value(httpx.get(server.url + "/metrics").text, "coserve_engine_steps_launched_ahead_total")
    assert after > before


def test_bench_steps_smoke(tmp_path):
    binary = coserve_binary()
    folder = tmp_path / "model"
    p = subprocess.run([binary, "make-demo-model", str(folder), "--num-layers", "2"], capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        skip_or_fail_in_ci("make-demo-model needs ../shared/testdata: " + p.stderr)
    r = subprocess.run([binary, "bench", "steps", str(folder), "--requests", "3", "--prompt", "8", "--max-tokens",
                        "6", "--rounds", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [d.get("mode") for d in lines[:2]] == ["launched_ahead", "one_at_a_time"]
    assert lines[0]["steps_launched_ahead"] > 0
    assert lines[1]["steps_launched_ahead"] == 0
    assert all(d["tokens_per_s"] > 0 for d in lines[:2])
    assert lines[2]["ratio_launched_ahead_over_one_at_a_time"] > 0
