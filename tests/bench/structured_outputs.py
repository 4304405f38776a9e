"""Structured-output costs, side by side in one run:

1. decode tokens/s of `coserve serve --demo` on this machine's CPU with and without a JSON schema,
   at 1 and 32 concurrent streaming clients (same prompts, same seeds, ignore_eos so every request
   generates exactly --max-tokens tokens; the schema asks for at least 64 small objects - bounded
   strings, bounded integers, enums - so the grammar constrains every token of the run);
2. `coserve bench grammar` over the GPT-2 (50k) and Qwen2.5 (152k) vocabularies: compile time,
   cache hits, and the per-token mask time (fill + apply) p50/p99.

Prints one JSON object per line. Usage (from the project root, after scripts/test or a build):
  .venv/bin/python tests/bench/structured_outputs.py [--bin build/bin/coserve] [--max-tokens 128]
"""
import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(__file__))
from bench_serve import start_server  # noqa: E402

SCHEMA = {"type": "array", "minItems": 64, "items": {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8}, "qty": {"type": "integer", "minimum": 0, "maximum": 999},
    "unit": {"enum": ["kg", "g", "l", "pcs"]}}, "required": ["name", "qty", "unit"], "additionalProperties": False}}


async def one(client, url, model, max_tokens, seed, schema):
    body = {"model": model, "prompt": "List the items as JSON:", "max_tokens": max_tokens, "stream": True,
            "temperature": 1.0, "seed": seed, "ignore_eos": True, "stream_options": {"include_usage": True}}
    if schema:
        body["structured_outputs"] = {"json": SCHEMA}
    tokens, first, text = 0, None, ""
    t0 = time.perf_counter()
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                first = first or time.perf_counter()
                text += chunk["choices"][0]["text"]
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return tokens, (first or t0) - t0, text


async def run(url, model, clients, requests, max_tokens, schema):
    async with httpx.AsyncClient(timeout=600) as client:
        async def worker(i):
            return [await one(client, url, model, max_tokens, 1000 * i + j, schema) for j in range(requests)]
        t0 = time.perf_counter()
        res = await asyncio.gather(*(worker(i) for i in range(clients)))
        wall = time.perf_counter() - t0
    flat = [x for r in res for x in r]
    return sum(t for t, _, _ in flat) / wall, flat


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("COSERVE_BIN", "build/bin/coserve"))
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--walks", type=int, default=16, help="random walks per grammar in `bench grammar`")
    a = ap.parse_args()
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            machine["cpu"] = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    proc, url = start_server(a.bin, [])
    try:
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        asyncio.run(run(url, model, 1, 1, 16, True))  # warm-up (also compiles the schema once)
        asyncio.run(run(url, model, 1, 1, 16, False))
        for clients in (1, 32):
            plain, _ = asyncio.run(run(url, model, clients, a.requests, a.max_tokens, False))
            constrained, outs = asyncio.run(run(url, model, clients, a.requests, a.max_tokens, True))
            print(json.dumps({"bench": "structured_decode", "machine": machine, "clients": clients,
                              "max_tokens": a.max_tokens, "tokens_per_s_plain": round(plain, 1),
                              "tokens_per_s_schema": round(constrained, 1),
                              "schema_over_plain": round(constrained / plain, 3),
                              "sample_output": outs[0][2][:120]}), flush=True)
        metrics = httpx.get(url + "/metrics").text
        print(json.dumps({"bench": "grammar_metrics", "lines": [l for l in metrics.splitlines()
                                                                 if l.startswith("coserve_grammar_")]}), flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
    for name in ("gpt2", "qwen2.5"):
        path = os.path.join("..", "shared", "testdata", "tokenizers", name)
        if os.path.isdir(path):
            out = subprocess.run([a.bin, "bench", "grammar", path, "--walks", str(a.walks)], check=True,
                                 capture_output=True, text=True).stdout
            print(out.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
