#!/usr/bin/env python3
"""Soak test: a long mixed load against `coserve serve`, then a burst far over its admission limit.

Starts `coserve serve --demo` with a small admission limit (--max-num-seqs, --max-waiting-requests;
or uses --url), then:
  1. sends --requests mixed requests from --concurrency clients: completions and chat, streamed or
     not, n=1 or 2, with and without stop strings; --drop of the streamed ones close the
     connection after a few chunks. The server's resident memory (VmRSS) is sampled meanwhile.
  2. sends --burst non-streamed requests from --burst-concurrency clients at once, far over
     max-num-seqs + max-waiting-requests, and records the latency of each 429 / 503 answer.
  3. waits for the server to go idle and reads /metrics.

Checks (the exit status is 1 when one fails): no 5xx answer; every request answered in full within
--timeout (a dropped stream counts as answered when the client closed it) and every answer
well-formed; the server's coserve_http_requests_total grew by the number of requests sent; no
request open and KV blocks free == total afterwards; with at least --rss-min-requests requests,
RSS after warm-up (first 20% of phase 1) grows by at most --rss-tolerance-mib. Prints one JSON
summary.

  .venv/bin/python tests/bench/soak.py --bin build/bin/coserve --requests 10000
"""
import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import start_server  # noqa: E402

WORDS = ("the quick brown fox jumps over a lazy dog while seven bright stars watch quietly "
         "from far above the sleeping town and every river sings").split()
STOPS = [" the", ".", "\n", " a", "er"]


def percentiles(xs):
    if not xs:
        return {"count": 0}
    s = sorted(xs)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]
    return {"count": len(s), "p50_ms": round(pick(0.50) * 1e3, 2), "p90_ms": round(pick(0.90) * 1e3, 2),
            "p99_ms": round(pick(0.99) * 1e3, 2), "max_ms": round(s[-1] * 1e3, 2)}


SCRAPES = [0]  # /metrics calls made; each one is counted in coserve_http_requests_total by the next


def metrics(url):
    from prometheus_client.parser import text_string_to_metric_families
    SCRAPES[0] += 1
    out = {}
    text = httpx.get(url + "/metrics", timeout=10).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = {k: v for k, v in s.labels.items() if k != "model_name"}  # on every sample
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}" if labels else "")
            out[key] = s.value
    return out


def http_total(m):
    return sum(v for k, v in m.items() if k.startswith("coserve_http_requests_total{"))


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Tally:
    def __init__(self):
        self.status = {}        # status -> count
        self.errors = []        # first few problems, for the report
        self.problems = 0       # malformed answers, transport errors, timeouts
        self.dropped = 0        # streams the client closed on purpose
        self.completed = 0      # answered in full
        self.latency = {}       # status -> [seconds]

    def problem(self, what):
        self.problems += 1
        if len(self.errors) < 10:
            self.errors.append(what)


def make_request(rng, model, drop_fraction):
    chat = rng.random() < 0.5
    stream = rng.random() < 0.5
    n = 2 if rng.random() < 0.3 else 1
    words = rng.choices(WORDS, k=rng.randint(3, 40))
    prefix = rng.choice(["Once upon a time", "In the beginning", "Dear reader"])  # prefix-cache hits
    text = prefix + " " + " ".join(words)
    body = {"model": model, "max_tokens": rng.randint(4, 24), "n": n, "stream": stream,
            "temperature": rng.choice([0.0, 0.7, 1.0]), "seed": rng.randint(0, 1 << 30)}
    if rng.random() < 0.3:
        body["stop"] = rng.sample(STOPS, rng.randint(1, 2))
    if chat:
        body["messages"] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
    else:
        body["prompt"] = text
    if stream and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    drop_after = rng.randint(1, 3) if stream and rng.random() < drop_fraction else None
    return ("/v1/chat/completions" if chat else "/v1/completions"), body, drop_after


def check_body(path, body, data, t):
    n = body.get("n", 1)
    if len(data.get("choices", [])) != n:
        t.problem(f"{path}: {len(data.get('choices', []))} choices for n={n}")
        return
    for c in data["choices"]:
        if c.get("finish_reason") not in ("stop", "length"):
            t.problem(f"{path}: finish_reason {c.get('finish_reason')!r}")
    u = data.get("usage") or {}
    if u.get("total_tokens") != u.get("prompt_tokens", -1) + u.get("completion_tokens", -1):
        t.problem(f"{path}: usage {u}")


async def one(client, url, path, body, drop_after, t):
    t0 = time.perf_counter()
    try:
        if not body.get("stream"):
            r = await client.post(url + path, json=body)
            dt = time.perf_counter() - t0
            t.status[r.status_code] = t.status.get(r.status_code, 0) + 1
            t.latency.setdefault(r.status_code, []).append(dt)
            if r.status_code == 200:
                check_body(path, body, r.json(), t)
            elif "error" not in r.json():
                t.problem(f"{path}: {r.status_code} without an error body")
            t.completed += 1
            return
        async with client.stream("POST", url + path, json=body) as r:
            t.status[r.status_code] = t.status.get(r.status_code, 0) + 1
            if r.status_code != 200:
                await r.aread()
                t.latency.setdefault(r.status_code, []).append(time.perf_counter() - t0)
                t.completed += 1
                return
            chunks, done, finished = 0, False, set()
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    t.problem(f"{path}: error event {chunk['error']}")
                for c in chunk.get("choices", []):
                    if c.get("finish_reason"):
                        finished.add(c["index"])
                chunks += 1
                if drop_after is not None and chunks >= drop_after:
                    t.dropped += 1
                    return  # leaving the block closes the connection mid-stream
            t.latency.setdefault(200, []).append(time.perf_counter() - t0)
            if not done or len(finished) != body.get("n", 1):
                t.problem(f"{path}: stream ended without [DONE] or a finish for each choice")
            t.completed += 1
    except (httpx.HTTPError, json.JSONDecodeError, ValueError) as e:
        t.problem(f"{path}: {type(e).__name__}: {e}")


async def run_phase(url, jobs, concurrency, timeout, progress):
    t = Tally()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout), limits=limits) as client:
        queue = list(reversed(jobs))

        async def worker():
            while queue:
                path, body, drop_after = queue.pop()
                await one(client, url, path, body, drop_after, t)
                progress[0] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return t


async def sample_rss(pid, samples, stop, progress):
    while not stop.is_set():
        kib = rss_kib(pid)
        if kib is not None:
            samples.append((time.monotonic(), progress[0], kib))
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except asyncio.TimeoutError:
            pass


async def main_async(args, url, pid, model):
    rng = random.Random(args.seed)
    jobs = [make_request(rng, model, args.drop) for _ in range(args.requests)]
    samples, stop, progress = [], asyncio.Event(), [0]
    sampler = asyncio.create_task(sample_rss(pid, samples, stop, progress)) if pid else None
    t0 = time.perf_counter()
    t1 = await run_phase(url, jobs, args.concurrency, args.timeout, progress)
    phase1_s = time.perf_counter() - t0
    stop.set()
    if sampler:
        await sampler

    burst_jobs = []
    for _ in range(args.burst):
        path, body, _ = make_request(rng, model, 0.0)
        body["stream"] = False
        body.pop("stream_options", None)
        burst_jobs.append((path, body, None))
    t0 = time.perf_counter()
    t2 = await run_phase(url, burst_jobs, args.burst_concurrency, args.timeout, [0])
    burst_s = time.perf_counter() - t0
    return t1, phase1_s, samples, t2, burst_s


def rss_report(samples, requests):
    if not samples:
        return {"sampled": False}
    warm = [kib for _, done, kib in samples if requests * 0.2 <= done <= requests * 0.4]
    tail = [kib for _, done, kib in samples if done >= requests * 0.8]
    if not warm or not tail:
        return {"sampled": True, "samples": len(samples)}
    return {"sampled": True, "samples": len(samples), "start_mib": round(samples[0][2] / 1024, 1),
            "after_warmup_mib": round(statistics.median(warm) / 1024, 1),
            "end_mib": round(statistics.median(tail) / 1024, 1),
            "max_mib": round(max(k for _, _, k in samples) / 1024, 1),
            "growth_after_warmup_mib": round((statistics.median(tail) - statistics.median(warm)) / 1024, 1)}


def wait_idle(url, timeout):
    end = time.monotonic() + timeout
    while True:
        m = metrics(url)
        idle = (m.get("coserve_num_requests_open", 0) == 0 and m.get("coserve_num_requests_running", 0) == 0
                and m.get("coserve_num_requests_waiting", 0) == 0
                and m.get("coserve_kv_blocks_free") == m.get("coserve_kv_blocks_total"))
        if idle or time.monotonic() > end:
            return m
        time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build/bin/coserve")
    ap.add_argument("--url", help="a running server (no RSS sampling unless --pid)")
    ap.add_argument("--pid", type=int, help="the running server's pid, for RSS sampling with --url")
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--drop", type=float, default=0.3, help="fraction of streamed requests dropped mid-stream")
    ap.add_argument("--burst", type=int, default=2000)
    ap.add_argument("--burst-concurrency", type=int, default=500)
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--max-waiting-requests", type=int, default=24)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per request before it counts as lost")
    ap.add_argument("--rss-min-requests", type=int, default=2000)
    ap.add_argument("--rss-tolerance-mib", type=float, default=16.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    proc = None
    if args.url:
        url, pid = args.url.rstrip("/"), args.pid
    else:
        proc, url = start_server(args.bin, ["--max-num-seqs", str(args.max_num_seqs),
                                            "--max-waiting-requests", str(args.max_waiting_requests)])
        pid = proc.pid
    try:
        model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
        before = metrics(url)
        scrapes_before = SCRAPES[0]
        t1, phase1_s, samples, t2, burst_s = asyncio.run(main_async(args, url, pid, model))
        after = wait_idle(url, 30)
    finally:
        exit_code = None
        if proc:
            proc.send_signal(signal.SIGINT)
            try:
                exit_code = proc.wait(60)
            except Exception:
                proc.kill()

    sent = args.requests + args.burst
    # Less the /metrics scrapes from `before` on, all but the last (a scrape is counted after it renders).
    server_answers = http_total(after) - http_total(before) - (SCRAPES[0] - scrapes_before)
    five = {s: n for t in (t1, t2) for s, n in t.status.items() if s >= 500}
    rss = rss_report(samples, args.requests)
    checks = {
        "no_5xx": not five,
        "no_lost_or_malformed": t1.problems == 0 and t2.problems == 0,
        "all_answered": t1.completed + t1.dropped == args.requests and t2.completed == args.burst,
        "server_counted_every_request": server_answers == sent,
        "burst_rejected_some_429": t2.status.get(429, 0) > 0,
        "no_request_open_after": after.get("coserve_num_requests_open", -1) == 0,
        "kv_free_equals_total": after.get("coserve_kv_blocks_free") == after.get("coserve_kv_blocks_total"),
        "server_exit_0": proc is None or exit_code == 0,
    }
    if pid and args.requests >= args.rss_min_requests and "growth_after_warmup_mib" in rss:
        checks["rss_flat_after_warmup"] = rss["growth_after_warmup_mib"] <= args.rss_tolerance_mib
    summary = {
        "requests": args.requests, "concurrency": args.concurrency, "burst_requests": args.burst,
        "burst_concurrency": args.burst_concurrency,
        "server_flags": None if args.url else {"max_num_seqs": args.max_num_seqs,
                                               "max_waiting_requests": args.max_waiting_requests},
        "phase1": {"seconds": round(phase1_s, 1), "requests_per_s": round(args.requests / phase1_s, 1),
                   "status": {str(k): v for k, v in sorted(t1.status.items())}, "dropped_mid_stream": t1.dropped,
                   "completed": t1.completed, "problems": t1.problems,
                   "latency_200": percentiles(t1.latency.get(200, []))},
        "burst": {"seconds": round(burst_s, 1), "status": {str(k): v for k, v in sorted(t2.status.items())},
                  "problems": t2.problems, "latency_200": percentiles(t2.latency.get(200, [])),
                  "latency_429": percentiles(t2.latency.get(429, [])),
                  "latency_503": percentiles(t2.latency.get(503, []))},
        "server_http_answers": server_answers,
        "client_disconnects": after.get("coserve_http_client_disconnects_total", 0)
                              - before.get("coserve_http_client_disconnects_total", 0),
        "kv_blocks": {"free": after.get("coserve_kv_blocks_free"), "total": after.get("coserve_kv_blocks_total")},
        "rss": rss,
        "errors": t1.errors + t2.errors,
        "checks": checks,
        "passed": all(checks.values()),
    }
    print(json.dumps(summary, indent=2))
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
