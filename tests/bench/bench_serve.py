#!/usr/bin/env python3
"""Serving benchmark: N concurrent streaming clients against `coserve serve`.

Starts the server (the demo model unless --url points at a running one), runs --clients concurrent
clients that each send --requests streaming completions, and prints one JSON object: requests/s,
streamed tokens/s, and TTFT / inter-token latency / end-to-end latency percentiles (ms). With
--plot FILE.png it draws their distributions (matplotlib).

  .venv/bin/python tests/bench/bench_serve.py --bin build/bin/coserve --clients 64 --requests 4 \
      --max-tokens 64 --plot docs/benchmarks/http.png

--url targets any running OpenAI-compatible server (e.g. llama-server); --model names the model
(default: the first id of /v1/models). With --prompt-tokens P every request's prompt is a list of
P random token ids (distinct per request, so no prefix is shared; --seed, --vocab-size), and the
completion token count comes from the final usage chunk (stream_options.include_usage) instead of
the number of chunks with text. --warmup N sends N requests before the timed run.
"""
import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import httpx


def start_server(binary, extra, model_args=("--demo",)):
    """Starts `coserve serve MODEL_ARGS --port 0 EXTRA`; returns (process, url) once /health is 200."""
    proc = subprocess.Popen([binary, "serve", *model_args, "--port", "0", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = []
    ready = threading.Event()

    def drain():
        for line in proc.stderr:
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port.append(int(m.group(1)))
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    ready.wait(600)
    if not port:
        proc.kill()
        sys.exit("server did not start")
    url = f"http://127.0.0.1:{port[0]}"
    # The listener opens before the model loads: /health answers 503 until the engine is ready.
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url + "/health", timeout=10) as r:
                if r.status == 200:
                    return proc, url
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    proc.kill()
    sys.exit("server did not become ready")


async def one_request(client, url, model, max_tokens, prompt):
    """One streaming completion. TTFT and inter-token latencies are taken at the chunks that carry
    text; "tokens" is the usage chunk's completion_tokens when the server sends one (requested
    for token-id prompts), else the number of chunks with text. A stream that ends with [DONE]
    but carried no text (the sampled tokens decode to nothing) is completed, without a TTFT."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "temperature": 0, "ignore_eos": True}
    if isinstance(prompt, list):
        body["stream_options"] = {"include_usage": True}
    for attempt in range(2):
        t0 = time.perf_counter()
        stamps = []
        usage_tokens = None
        done = False
        try:
            async with client.stream("POST", url + "/v1/completions", json=body) as r:
                if r.status_code != 200:
                    await r.aread()
                    return None
                async for line in r.aiter_lines():
                    if line == "data: [DONE]":
                        done = True
                        continue
                    if not line.startswith("data: "):
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("choices") and chunk["choices"][0].get("text"):
                        stamps.append(time.perf_counter())
                    if chunk.get("usage") and chunk["usage"].get("completion_tokens") is not None:
                        usage_tokens = chunk["usage"]["completion_tokens"]
            break
        except (httpx.RemoteProtocolError, httpx.ReadError):
            # A pooled keep-alive connection the server had closed (llama-server's HTTP library
            # sometimes closes one after a streamed response; the client sees a protocol error or
            # a reset): one retry on a new connection, timed from the retry.
            if attempt or stamps:
                raise
    if not stamps:
        if not done:
            return None
        return {"ttft": None, "itl": [], "e2e": time.perf_counter() - t0,
                "tokens": usage_tokens or 0, "retried": attempt}
    itl = [b - a for a, b in zip(stamps, stamps[1:])]
    tokens = usage_tokens if usage_tokens is not None else len(stamps)
    return {"ttft": stamps[0] - t0, "itl": itl, "e2e": time.perf_counter() - t0, "tokens": tokens,
            "retried": attempt}


def make_prompt(i, j, prompt_tokens, vocab_size, seed):
    """Client i's request j: text, or prompt_tokens random ids in [256, vocab_size - 1) (past the
    byte tokens of a byte-level BPE vocabulary, below its last id, often a special token)."""
    if not prompt_tokens:
        return f"Client {i} request {j}:"
    rng = random.Random(f"{seed}/{i}/{j}")
    return [rng.randrange(256, vocab_size - 1) for _ in range(prompt_tokens)]


async def run(url, model, clients, requests, max_tokens, prompt_tokens=0, vocab_size=50257, seed=0):
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        async def worker(i):
            out = []
            for j in range(requests):
                prompt = make_prompt(i, j, prompt_tokens, vocab_size, seed)
                out.append(await one_request(client, url, model, max_tokens, prompt))
            return out

        t0 = time.perf_counter()
        results = await asyncio.gather(*(worker(i) for i in range(clients)))
        wall = time.perf_counter() - t0
    flat = [r for rs in results for r in rs]
    return [r for r in flat if r], len(flat), wall


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summarize(ok, total, wall, clients, max_tokens):
    ttft = [r["ttft"] * 1e3 for r in ok if r["ttft"] is not None]
    itl = [x * 1e3 for r in ok for x in r["itl"]]
    e2e = [r["e2e"] * 1e3 for r in ok]
    tokens = sum(r["tokens"] for r in ok)
    out = {
        "bench": "serve", "clients": clients, "requests": total, "completed": len(ok),
        "max_tokens": max_tokens, "wall_s": round(wall, 3),
        "requests_per_s": round(len(ok) / wall, 2), "streamed_tokens_per_s": round(tokens / wall, 1),
        "reconnects": sum(r.get("retried", 0) for r in ok),
    }
    for name, xs in (("ttft_ms", ttft), ("itl_ms", itl), ("e2e_ms", e2e)):
        out[name] = {f"p{p}": (round(pct(xs, p), 3) if xs else None) for p in (50, 90, 99)}
    return out, ttft, itl, e2e


def bench(url, clients, requests, max_tokens, model=None, prompt_tokens=0, vocab_size=50257, seed=0,
          warmup=0):
    """Runs the clients against a running server at url; returns the summary dict."""
    if model is None:
        model = httpx.get(url + "/v1/models", timeout=60).json()["data"][0]["id"]
    if warmup:
        asyncio.run(run(url, model, 1, warmup, max_tokens, prompt_tokens, vocab_size, f"warmup-{seed}"))
    ok, total, wall = asyncio.run(run(url, model, clients, requests, max_tokens, prompt_tokens,
                                      vocab_size, seed))
    out = summarize(ok, total, wall, clients, max_tokens)[0]
    if prompt_tokens:
        out["prompt_tokens"] = prompt_tokens
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("COSERVE_BIN", "build/bin/coserve"))
    ap.add_argument("--url", help="benchmark a running server instead of starting one")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--plot", help="write a PNG of the latency distributions")
    ap.add_argument("--server-args", default="", help="extra `coserve serve` flags, space separated")
    ap.add_argument("--model", help="model name sent in requests (default: the first id of /v1/models)")
    ap.add_argument("--prompt-tokens", type=int, default=0,
                    help="prompts of this many random token ids (default: a short text prompt)")
    ap.add_argument("--vocab-size", type=int, default=50257, help="token ids are drawn below this")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random prompts")
    ap.add_argument("--warmup", type=int, default=0, help="untimed requests sent first, one at a time")
    a = ap.parse_args()

    proc = None
    url = a.url
    if not url:
        proc, url = start_server(a.bin, a.server_args.split())
    try:
        model = a.model or httpx.get(url + "/v1/models").json()["data"][0]["id"]
        if a.warmup:
            asyncio.run(run(url, model, 1, a.warmup, a.max_tokens, a.prompt_tokens, a.vocab_size,
                            f"warmup-{a.seed}"))
        ok, total, wall = asyncio.run(run(url, model, a.clients, a.requests, a.max_tokens,
                                          a.prompt_tokens, a.vocab_size, a.seed))
    finally:
        if proc:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    out, ttft, itl, e2e = summarize(ok, total, wall, a.clients, a.max_tokens)
    if a.prompt_tokens:
        out["prompt_tokens"] = a.prompt_tokens
    print(json.dumps(out))
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 3, figsize=(15, 4))
        for ax, (name, xs) in zip(axes, (("TTFT (ms)", ttft), ("inter-token latency (ms)", itl),
                                         ("end-to-end latency (ms)", e2e))):
            ax.hist(xs, bins=50)
            ax.set_title(name)
            ax.set_ylabel("count")
        fig.suptitle(f"coserve serve: {a.clients} concurrent streaming clients, {a.max_tokens} tokens each")
        fig.tight_layout()
        fig.savefig(a.plot, dpi=100)


if __name__ == "__main__":
    main()
