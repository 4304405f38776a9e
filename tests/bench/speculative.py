#!/usr/bin/env python3
"""Speculative decoding (n-gram lookup) against plain decoding at batch 1 on the CPU, side by side.

Starts two servers on the same model folder (or --demo), one plain and one with
--speculative-config, and alternates single requests between them (warm-up first; only one server
works at a time). Two workloads, each over the same prompts on both servers:

- repetitive: greedy decoding with a prompt of code repeated twice (the text the lookup finds),
  ignore_eos, --max-tokens tokens. Greedy outputs are identical on both servers (checked);
  whether the output repeats what it has seen is the model's own behaviour.
- non-repetitive: sampling at temperature 1 (seeded), where the lookup seldom finds a match and
  the back-off keeps the cost of trying low.

Prints one JSON object: decode tokens/s of each server, the ratio (speculative / plain), and the
proposals made and accepted (from /metrics). Example:

  .venv/bin/python tests/bench/speculative.py --bin build/bin/coserve --demo --rounds 6
"""
import argparse
import json
import os
import re
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import start_server  # noqa: E402

CODE = '''def merge(a, b):
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i]); i += 1
        else:
            out.append(b[j]); j += 1
    out.extend(a[i:]); out.extend(b[j:])
    return out

CONFIG = {"name": "merge", "inputs": [[1, 3, 5], [2, 4, 6]], "expected": [1, 2, 3, 4, 5, 6]}
'''


def spec_counters(url):
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {}
    for name in ("drafts", "draft_tokens", "accepted_tokens"):
        m = re.search(rf"^coserve_spec_decode_num_{name}_total (\S+)$", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


def one(url, model, body):
    t = time.perf_counter()
    r = httpx.post(url + "/v1/completions", json=dict(body, model=model), timeout=600)
    r.raise_for_status()
    j = r.json()
    return time.perf_counter() - t, j["usage"]["completion_tokens"], j["choices"][0]["text"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin/coserve")
    ap.add_argument("--model", help="a model folder (default: --demo)")
    ap.add_argument("--demo", action="store_true")
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--cpu-threads", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the CUDA executor verifies n-gram proposals)")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="an extra argument for both servers (repeat), e.g. --server-arg=--load-format=dummy")
    ap.add_argument("--spec", default='{"method":"ngram","num_speculative_tokens":4,'
                                      '"prompt_lookup_min":2,"prompt_lookup_max":4}')
    a = ap.parse_args()
    model_args = [a.model] if a.model else ["--demo"]
    common = ["--cpu-threads", str(a.cpu_threads)] if a.cpu_threads else []
    common += ["--device", a.device] + a.server_arg
    plain, plain_url = start_server(a.bin, common, model_args)
    spec, spec_url = start_server(a.bin, common + ["--speculative-config", a.spec], model_args)
    try:
        model = httpx.get(plain_url + "/v1/models").json()["data"][0]["id"]
        prompt = "Repeat this file exactly.\n\n" + CODE + "\n" + CODE
        workloads = {
            "repetitive": {"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0, "ignore_eos": True},
            "non_repetitive": {"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 1.0, "top_p": 1.0,
                               "ignore_eos": True},
        }
        results = {}
        for name, body in workloads.items():
            for url in (plain_url, spec_url):  # warm-up
                one(url, model, dict(body, max_tokens=16, seed=999))
            before = spec_counters(spec_url)
            t = {"plain": [0.0, 0], "speculative": [0.0, 0]}
            identical = True
            for r in range(a.rounds):
                b = dict(body, seed=r)
                order = [("plain", plain_url), ("speculative", spec_url)]
                if r % 2:
                    order.reverse()
                texts = {}
                for label, url in order:
                    dt, n, text = one(url, model, b)
                    t[label][0] += dt
                    t[label][1] += n
                    texts[label] = text
                if body["temperature"] == 0:
                    identical &= texts["plain"] == texts["speculative"]
            after = spec_counters(spec_url)
            tps = {k: v[1] / v[0] for k, v in t.items()}
            d = {k: after[k] - before[k] for k in after}
            results[name] = {
                "plain_tokens_per_s": round(tps["plain"], 2),
                "speculative_tokens_per_s": round(tps["speculative"], 2),
                "ratio": round(tps["speculative"] / tps["plain"], 3),
                "proposals": int(d["drafts"]),
                "proposed_tokens": int(d["draft_tokens"]),
                "accepted_tokens": int(d["accepted_tokens"]),
                "acceptance_rate": round(d["accepted_tokens"] / d["draft_tokens"], 3) if d["draft_tokens"] else None,
            }
            if body["temperature"] == 0:
                results[name]["greedy_outputs_identical"] = identical
        print(json.dumps({"model": a.model or "demo", "spec": json.loads(a.spec), "max_tokens": a.max_tokens,
                          "rounds": a.rounds, "results": results}, indent=2))
    finally:
        for p in (plain, spec):
            p.terminate()
            p.wait(30)


if __name__ == "__main__":
    main()
