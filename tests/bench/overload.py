#!/usr/bin/env python3
# One file on purpose (~600 lines): its two phases share the server start-up, the health prober,
# the request generators and the JSON report; split, each would import the others.
"""Overload benchmark: how `coserve serve` behaves under huge prompts and past its admission limit.

Runs each --bin in turn (fresh server, identical settings, identical prompts) and prints one JSON
object with a section per binary; with two or more binaries it adds ratios of the headline numbers
against the first one ("B/A", "C/A", ...).

Phase "tokenize" (`serve --demo`):
  one streaming completion runs (restarted whenever it finishes) while a separate client probes
  GET /health every --health-interval-ms. After --baseline-s seconds of streaming, --big concurrent
  POST /v1/completions are sent, each with a --prompt-mib MiB prompt of varied ASCII words
  (max_tokens 1; whether the server accepts or rejects them for length does not matter, it has to
  tokenize them). Reported for the baseline window (first streamed chunk until the big requests
  are sent) and the overload window (big requests sent until all are answered): /health latency
  and inter-token latency (p50/p99/max, ms), plus status and time of each big request.

Phase "reject" (`serve --demo --max-num-seqs S --max-waiting-requests W`):
  S + W long streaming completions fill every admission slot (a stream that ends is started again),
  then --reject-requests non-streamed completions are sent one at a time, first with a short prompt,
  then with a --reject-prompt-mib MiB prompt. Reported per variant: count by status and the
  p50/p90/p99/max latency of the 429 answers. Then the streams are closed, the server gets SIGINT
  and its exit code is recorded.

Over 500 lines: one script, so that a single command reproduces the recorded numbers; its two
phases share the server start/stop, the probes and the percentile code.

  .venv/bin/python tests/bench/overload.py --bin old/bin/coserve --bin build/bin/coserve \\
      --prompt-mib 4 > overload.json
"""
import argparse
import asyncio
import json
import os
import platform
import random
import signal
import subprocess
import sys
import threading
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import start_server  # noqa: E402

MIB = 1 << 20
DEFAULT_MAX_BODY = 8 * MIB  # `coserve serve --max-body-bytes` default
JSON_HEADERS = {"content-type": "application/json"}


# ---------------------------------------------------------------------------------------------
# helpers

def pct_summary(xs_s):
    """Latencies in seconds -> count and p50/p90/p99/max in ms (nearest rank)."""
    if not xs_s:
        return {"count": 0}
    s = sorted(xs_s)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]
    return {"count": len(s), "p50_ms": round(pick(0.50) * 1e3, 2), "p90_ms": round(pick(0.90) * 1e3, 2),
            "p99_ms": round(pick(0.99) * 1e3, 2), "max_ms": round(s[-1] * 1e3, 2)}


def machine_info():
    model = None
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except (OSError, subprocess.SubprocessError):
        pass
    return {"cpu_count": os.cpu_count(), "processor": platform.processor() or None, "cpu_model": model,
            "platform": platform.platform(), "python": platform.python_version(),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def make_vocab(rng, n=20000):
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = []
    for _ in range(n):
        w = "".join(rng.choices(letters, k=rng.randint(1, 11)))
        r = rng.random()
        if r < 0.10:
            w = w.capitalize()
        elif r < 0.13:
            w = w.upper()
        elif r < 0.18:
            w = str(rng.randint(0, 99999))
        vocab.append(w)
    return vocab


def make_text(rng, vocab, nbytes):
    """ASCII text of exactly nbytes: random words from vocab, spaces, some punctuation and newlines."""
    parts, size = [], 0
    punct = [",", ".", ";", ":", "!", "?", " -", ")", "'s"]
    while size < nbytes:
        words = rng.choices(vocab, k=4096)
        for i, w in enumerate(words):
            r = rng.random()
            if r < 0.06:
                w += rng.choice(punct)
            elif r < 0.07:
                w += "\n"
            words[i] = w
        chunk = " ".join(words) + " "
        parts.append(chunk)
        size += len(chunk)
    return "".join(parts)[:nbytes]


def completion_body(model, prompt, max_tokens, stream=False, ignore_eos=False):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    if ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body).encode()


def server_info(url):
    out = {}
    try:
        r = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]
        out["model"], out["max_model_len"] = r["id"], r.get("max_model_len")
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as e:
        sys.exit(f"GET /v1/models failed: {e}")
    try:
        out["version"] = httpx.get(url + "/version", timeout=30).json()
    except (httpx.HTTPError, ValueError):
        out["version"] = None
    return out


def metrics(url, names=("coserve_num_requests_open", "coserve_num_requests_running", "coserve_num_requests_waiting",
                        "coserve_requests_rejected_total")):
    out = {}
    try:
        text = httpx.get(url + "/metrics", timeout=30).text
    except httpx.HTTPError:
        return out
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        parts = line.rsplit(" ", 1)
        if len(parts) == 2 and parts[0].split("{")[0] in names:
            try:
                out[parts[0]] = out.get(parts[0], 0) + float(parts[1])
            except ValueError:
                pass
    return out


def warm_up(url, model, n):
    with httpx.Client(timeout=120) as c:
        for i in range(n):
            c.post(url + "/v1/completions", content=completion_body(model, f"Warm-up request {i}:", 8),
                   headers=JSON_HEADERS)
            c.get(url + "/health")


def peak_rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


def stop_server(proc, timeout):
    peak = peak_rss_mib(proc.pid)
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = "killed after timeout"
    return {"exit_code": code, "seconds_to_exit": round(time.perf_counter() - t0, 3), "peak_rss_mib": peak}


# ---------------------------------------------------------------------------------------------
# phase 1: tokenize

class HealthProbe(threading.Thread):
    def __init__(self, url, interval_s):
        super().__init__(daemon=True)
        self.url, self.interval_s = url, interval_s
        self.samples = []  # (start, end, status or error name)
        self.stop = threading.Event()

    def run(self):
        with httpx.Client(timeout=600) as c:
            while not self.stop.is_set():
                t0 = time.perf_counter()
                try:
                    status = c.get(self.url + "/health").status_code
                except httpx.HTTPError as e:
                    status = type(e).__name__
                t1 = time.perf_counter()
                self.samples.append((t0, t1, status))
                self.stop.wait(max(0.0, t0 + self.interval_s - time.perf_counter()))


class Streamer(threading.Thread):
    """Streams completions back to back and records the time of every SSE chunk."""

    def __init__(self, url, model, max_tokens):
        super().__init__(daemon=True)
        self.url, self.model, self.max_tokens = url, model, max_tokens
        self.streams = []  # per stream: {"sent": t, "chunks": [t...], "status": s}
        self.first_chunk = threading.Event()
        self.stop = threading.Event()
        self.errors = []

    def run(self):
        with httpx.Client(timeout=600) as c:
            i = 0
            while not self.stop.is_set():
                body = completion_body(self.model, f"Stream {i}: once upon a time", self.max_tokens,
                                       stream=True, ignore_eos=True)
                rec = {"sent": time.perf_counter(), "chunks": [], "status": None}
                self.streams.append(rec)
                try:
                    with c.stream("POST", self.url + "/v1/completions", content=body, headers=JSON_HEADERS) as r:
                        rec["status"] = r.status_code
                        if r.status_code != 200:
                            r.read()
                            self.errors.append(f"stream {i}: status {r.status_code}")
                            time.sleep(0.05)
                        else:
                            for line in r.iter_lines():
                                if not line.startswith("data: ") or line == "data: [DONE]":
                                    continue
                                rec["chunks"].append(time.perf_counter())
                                self.first_chunk.set()
                                if self.stop.is_set():
                                    break
                except httpx.HTTPError as e:
                    self.errors.append(f"stream {i}: {type(e).__name__}: {e}")
                    time.sleep(0.05)
                i += 1


def big_request(url, body, barrier, out, idx, timeout):
    with httpx.Client(timeout=timeout) as c:
        barrier.wait()
        t0 = time.perf_counter()
        rec = {"index": idx}
        try:
            r = c.post(url + "/v1/completions", content=body, headers=JSON_HEADERS)
            rec["status"] = r.status_code
            try:
                err = r.json().get("error")
                if err:
                    rec["error"] = (err.get("message") or "")[:160]
            except ValueError:
                rec["error"] = r.text[:160]
        except httpx.HTTPError as e:
            rec["status"] = type(e).__name__
            rec["error"] = str(e)[:160]
        rec["t_done"] = time.perf_counter()
        rec["seconds"] = round(rec["t_done"] - t0, 3)
        out[idx] = rec


def window_stats(health, streams, w0, w1, closed_end=False):
    """/health latency and inter-token latency in the window [w0, w1].

    A probe or a gap between two chunks counts when it ends in the window; with closed_end it also
    counts when it starts in the window and ends after it (a stall still going at w1).
    """
    def inside(start, end):
        return w0 <= end < w1 or (closed_end and start <= w1 <= end)

    h, h_status = [], {}
    for t0, t1, s in health:
        if inside(t0, t1):
            h.append(t1 - t0)
            h_status[str(s)] = h_status.get(str(s), 0) + 1
    itl, restarts, chunks = [], [], 0
    prev_last = None
    for st in streams:
        ch = st["chunks"]
        chunks += sum(1 for t in ch if w0 <= t <= w1)
        itl += [b - a for a, b in zip(ch, ch[1:]) if inside(a, b)]
        # gap from the last chunk of one stream to the first chunk of the next one
        if ch and prev_last is not None and inside(prev_last, ch[0]):
            restarts.append(ch[0] - prev_last)
        if ch:
            prev_last = ch[-1]
    covered = any(st["chunks"] and st["chunks"][0] <= w0 for st in streams) and \
        any(st["chunks"] and st["chunks"][-1] >= w1 for st in streams)
    return {"seconds": round(w1 - w0, 3), "health": pct_summary(h), "health_status": h_status,
            "itl": pct_summary(itl), "stream_chunks": chunks, "stream_restarts": pct_summary(restarts),
            "streamed_throughout": covered}


def phase_tokenize(binary, a, prompts):
    flags = []
    need = max(len(p) for p in prompts) + 4096
    if need > DEFAULT_MAX_BODY:
        flags += ["--max-body-bytes", str(need)]
    proc, url = start_server(binary, flags)
    res = {"server_flags": ["--demo", *flags]}
    try:
        info = server_info(url)
        res["server"] = info
        model = info["model"]
        warm_up(url, model, a.warmup)
        bodies = [completion_body(model, p, 1) for p in prompts]
        res["big_body_bytes"] = [len(b) for b in bodies]

        health = HealthProbe(url, a.health_interval_ms / 1e3)
        streamer = Streamer(url, model, a.stream_tokens)
        streamer.start()
        if not streamer.first_chunk.wait(120):
            raise RuntimeError("the stream produced no chunk in 120 s: " + "; ".join(streamer.errors[:3]))
        health.start()
        t_first = streamer.streams[0]["chunks"][0] if streamer.streams[0]["chunks"] else time.perf_counter()
        time.sleep(a.baseline_s)

        barrier = threading.Barrier(len(bodies) + 1)
        out = [None] * len(bodies)
        threads = [threading.Thread(target=big_request, args=(url, b, barrier, out, i, a.timeout), daemon=True)
                   for i, b in enumerate(bodies)]
        for t in threads:
            t.start()
        barrier.wait()
        t_send = time.perf_counter()
        for t in threads:
            t.join(a.timeout + 60)
        t_end = max((r["t_done"] for r in out if r), default=time.perf_counter())
        # Let a stall still going at t_end finish, so its length is recorded.
        end = time.monotonic() + 30
        while time.monotonic() < end and not (
                any(t0 > t_end for t0, _, _ in health.samples[-3:])
                and any(st["chunks"] and st["chunks"][-1] > t_end for st in streamer.streams[-2:])):
            time.sleep(0.05)
        health.stop.set()
        streamer.stop.set()
        health.join(30)
        streamer.join(30)

        res["baseline"] = window_stats(health.samples, streamer.streams, max(t_first, t_send - a.baseline_s), t_send)
        res["overload"] = window_stats(health.samples, streamer.streams, t_send, t_end, closed_end=True)
        res["big_requests"] = [{"status": r["status"], "seconds": r["seconds"],
                                **({"error": r["error"]} if "error" in r else {})} if r else {"status": "not answered"}
                               for r in out]
        res["all_big_answered_s"] = round(t_end - t_send, 3)
        res["streams"] = len(streamer.streams)
        res["stream_errors"] = streamer.errors[:10]
    finally:
        res["shutdown"] = stop_server(proc, a.shutdown_wait)
    return res


# ---------------------------------------------------------------------------------------------
# phase 2: reject

class Saturator(threading.Thread):
    """Keeps `n` long streaming completions open on an asyncio loop; a stream that ends starts again."""

    def __init__(self, url, model, max_tokens):
        super().__init__(daemon=True)
        self.url, self.model, self.max_tokens = url, model, max_tokens
        self.loop = asyncio.new_event_loop()
        self.tasks = []
        self.started = 0        # stream requests sent
        self.rejected = 0       # stream requests answered with a non-200 status
        self.restarts = 0       # streams started again after one ended
        self.first_chunk = {}   # slot -> time of its first chunk
        self.errors = []
        self.client = None

    def run(self):
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _slot(self, i):
        n = 0
        while True:
            body = completion_body(self.model, f"Saturating stream {i}.{n}: the story goes", self.max_tokens,
                                   stream=True, ignore_eos=True)
            self.started += 1
            try:
                async with self.client.stream("POST", self.url + "/v1/completions", content=body,
                                              headers=JSON_HEADERS) as r:
                    if r.status_code != 200:
                        await r.aread()
                        self.rejected += 1
                        await asyncio.sleep(0.05)
                        continue
                    async for line in r.aiter_lines():
                        if line.startswith("data: ") and i not in self.first_chunk:
                            self.first_chunk[i] = time.perf_counter()
            except httpx.HTTPError as e:
                if len(self.errors) < 10:
                    self.errors.append(f"slot {i}: {type(e).__name__}: {e}")
                await asyncio.sleep(0.05)
            n += 1
            self.restarts += 1

    def add(self, n):
        async def go():
            if self.client is None:
                self.client = httpx.AsyncClient(timeout=httpx.Timeout(3600), limits=httpx.Limits(max_connections=None))
            base = len(self.tasks)
            for k in range(n):
                self.tasks.append(asyncio.ensure_future(self._slot(base + k)))
        asyncio.run_coroutine_threadsafe(go(), self.loop).result(30)

    def close(self):
        async def go():
            for t in self.tasks:
                t.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            if self.client is not None:
                await self.client.aclose()
        asyncio.run_coroutine_threadsafe(go(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.join(30)


def wait_metric(url, key, want, timeout):
    end = time.monotonic() + timeout
    m = {}
    while time.monotonic() < end:
        m = metrics(url)
        if m.get(key, -1) >= want:
            return True, m
        time.sleep(0.1)
    return False, m


def reject_variant(url, n, make_body, timeout, sat):
    """n sequential requests, body i from make_body(i)."""
    statuses, lat, body_bytes = {}, {}, 0
    restarts0 = sat.restarts
    t_start = time.perf_counter()
    with httpx.Client(timeout=timeout) as c:
        for i in range(n):
            body = make_body(i)
            body_bytes = max(body_bytes, len(body))
            t0 = time.perf_counter()
            try:
                s = c.post(url + "/v1/completions", content=body, headers=JSON_HEADERS).status_code
            except httpx.HTTPError as e:
                s = type(e).__name__
            dt = time.perf_counter() - t0
            statuses[str(s)] = statuses.get(str(s), 0) + 1
            lat.setdefault(str(s), []).append(dt)
    return {"requests": n, "body_bytes": body_bytes,
            "seconds": round(time.perf_counter() - t_start, 3), "status": statuses,
            "latency_429": pct_summary(lat.get("429", [])),
            "latency_all": pct_summary([x for v in lat.values() for x in v]),
            "latency_other": {k: pct_summary(v) for k, v in lat.items() if k != "429"},
            "saturating_stream_restarts": sat.restarts - restarts0}


def phase_reject(binary, a, corpus):
    flags = ["--max-num-seqs", str(a.reject_seqs), "--max-waiting-requests", str(a.reject_waiting)]
    need = a.reject_prompt_mib * MIB + 4096
    if need > DEFAULT_MAX_BODY:
        flags += ["--max-body-bytes", str(int(need))]
    proc, url = start_server(binary, flags)
    res = {"server_flags": ["--demo", *flags]}
    sat = None
    try:
        info = server_info(url)
        res["server"] = info
        model = info["model"]
        warm_up(url, model, a.warmup)
        max_len = info.get("max_model_len") or 2048
        sat = Saturator(url, model, max(16, max_len - 64))
        sat.start()
        # Running slots first, each until it streams, then the waiting ones.
        sat.add(a.reject_seqs)
        end = time.monotonic() + 120
        while len(sat.first_chunk) < a.reject_seqs and time.monotonic() < end:
            time.sleep(0.05)
        sat.add(a.reject_waiting)
        total = a.reject_seqs + a.reject_waiting
        ok, m = wait_metric(url, "coserve_num_requests_open", total, 60)
        res["saturation"] = {"streams": total, "reached": ok, "metrics": m}

        n = a.reject_requests
        res["short_prompt"] = reject_variant(
            url, n, lambda i: completion_body(model, f"Rejected request {i}: hello there", 1), a.reject_timeout, sat)
        res["metrics_after_short"] = metrics(url)

        size = int(a.reject_prompt_mib * MIB)
        step = max(1, (len(corpus) - size) // max(1, n))
        res["big_prompt"] = reject_variant(
            url, n, lambda i: completion_body(model, corpus[i * step:i * step + size], 1), a.reject_timeout, sat)
        res["big_prompt"]["prompt_mib"] = a.reject_prompt_mib
        res["metrics_after_big"] = metrics(url)
        res["saturator"] = {"stream_requests": sat.started, "stream_rejections": sat.rejected,
                            "stream_restarts": sat.restarts, "errors": sat.errors}
    finally:
        if sat is not None:
            sat.close()
        res["shutdown"] = stop_server(proc, a.shutdown_wait)
    return res


# ---------------------------------------------------------------------------------------------

HEADLINE = [
    ("tokenize", "overload", "health", "p50_ms"), ("tokenize", "overload", "health", "p99_ms"),
    ("tokenize", "overload", "health", "max_ms"), ("tokenize", "overload", "itl", "p50_ms"),
    ("tokenize", "overload", "itl", "p99_ms"), ("tokenize", "overload", "itl", "max_ms"),
    ("tokenize", "all_big_answered_s"),
    ("reject", "short_prompt", "latency_429", "p50_ms"), ("reject", "short_prompt", "latency_429", "p99_ms"),
    ("reject", "short_prompt", "latency_429", "max_ms"),
    ("reject", "big_prompt", "latency_429", "p50_ms"), ("reject", "big_prompt", "latency_429", "p99_ms"),
    ("reject", "big_prompt", "latency_429", "max_ms"),
    ("reject", "big_prompt", "latency_all", "p50_ms"), ("reject", "big_prompt", "latency_all", "p99_ms"),
]


def dig(d, path):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d if isinstance(d, (int, float)) and not isinstance(d, bool) else None


def headline(run):
    return {".".join(p): dig(run, p) for p in HEADLINE}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append", help="coserve binary; repeat to compare (default build/bin/coserve)")
    ap.add_argument("--phase", choices=["all", "tokenize", "reject"], default="all")
    ap.add_argument("--prompt-mib", type=float, default=4.0, help="size of each big prompt (MiB)")
    ap.add_argument("--big", type=int, default=4, help="concurrent big-prompt requests")
    ap.add_argument("--stream-tokens", type=int, default=200, help="max_tokens of the measured stream")
    ap.add_argument("--baseline-s", type=float, default=2.0, help="seconds of streaming before the big requests")
    ap.add_argument("--health-interval-ms", type=float, default=20.0)
    ap.add_argument("--timeout", type=float, default=600.0, help="per big request (s)")
    ap.add_argument("--reject-requests", type=int, default=200)
    ap.add_argument("--reject-prompt-mib", type=float, default=1.0, help="prompt size of the second reject variant")
    ap.add_argument("--reject-seqs", type=int, default=4, help="--max-num-seqs in the reject phase")
    ap.add_argument("--reject-waiting", type=int, default=4, help="--max-waiting-requests in the reject phase")
    ap.add_argument("--reject-timeout", type=float, default=120.0, help="per rejected request (s)")
    ap.add_argument("--warmup", type=int, default=3, help="small requests before measuring")
    ap.add_argument("--shutdown-wait", type=float, default=60.0, help="seconds to wait for exit after SIGINT")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    bins = a.bin or ["build/bin/coserve"]
    for b in bins:
        if not os.access(b, os.X_OK):
            sys.exit(f"not an executable: {b}")

    t_all = time.perf_counter()
    rng = random.Random(a.seed)
    vocab = make_vocab(rng)
    big_size = int(a.prompt_mib * MIB)
    prompts = [make_text(rng, vocab, big_size) for _ in range(a.big)] if a.phase in ("all", "tokenize") else []
    rsize = int(a.reject_prompt_mib * MIB)
    corpus = make_text(rng, vocab, rsize + 4096 * a.reject_requests) if a.phase in ("all", "reject") else ""

    out = {"bench": "overload", "machine": machine_info(),
           "args": {k: v for k, v in vars(a).items() if k != "bin"}, "binaries": []}
    labels = [chr(ord("A") + i) if i < 26 else f"bin{i}" for i in range(len(bins))]
    for label, b in zip(labels, bins):
        t0 = time.perf_counter()
        run = {"label": label, "bin": os.path.abspath(b), "loadavg_before": [round(x, 2) for x in os.getloadavg()]}
        if a.phase in ("all", "tokenize"):
            run["tokenize"] = phase_tokenize(b, a, prompts)
        if a.phase in ("all", "reject"):
            run["reject"] = phase_reject(b, a, corpus)
        run["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        run["wall_s"] = round(time.perf_counter() - t0, 1)
        run["headline"] = headline(run)
        out["binaries"].append(run)
        print(f"{label} done in {run['wall_s']} s", file=sys.stderr)
    if len(bins) > 1:
        base = out["binaries"][0]["headline"]
        out["ratios"] = {}
        for run in out["binaries"][1:]:
            r = {}
            for k, v in run["headline"].items():
                r[k] = round(v / base[k], 3) if v is not None and base.get(k) else None
            out["ratios"][f"{run['label']}/{labels[0]}"] = r
    out["wall_s"] = round(time.perf_counter() - t_all, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
