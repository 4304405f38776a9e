"""Lifecycle of the real server process: drain on SIGTERM (health and new requests 503, in-flight
streams finish), abort after --shutdown-timeout (finish_reason "abort", then [DONE]), exit status
0 soon after the last stream ends, and a second signal forcing the exit."""
import json
import signal
import threading
import time

import httpx
import pytest

from conftest import Server


def start_stream(srv, max_tokens, out):
    """Streams one completion in a thread; `out` gets the chunks' finish reasons and [DONE]."""
    def run():
        body = {"model": srv.model, "prompt": "The", "max_tokens": max_tokens, "stream": True,
                "ignore_eos": True, "temperature": 0}
        try:
            with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=120) as r:
                out["status"] = r.status_code
                for line in r.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[len("data: "):]
                    if data == "[DONE]":
                        out["done"] = True
                        out["ended_at"] = time.monotonic()
                        continue
                    chunk = json.loads(data)
                    out.setdefault("chunks", 0)
                    out["chunks"] += 1
                    for c in chunk.get("choices", []):
                        if c.get("finish_reason"):
                            out["finish"] = c["finish_reason"]
        except httpx.HTTPError as e:
            out["error"] = repr(e)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def wait_chunks(out, n, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end and out.get("chunks", 0) < n:
        time.sleep(0.01)
    assert out.get("chunks", 0) >= n, out


def test_sigterm_drains_then_exits_zero():
    srv = Server("--shutdown-timeout", "60")
    out = {}
    t = start_stream(srv, 300, out)
    wait_chunks(out, 3)
    srv.proc.send_signal(signal.SIGTERM)
    # While draining: health and new generation requests answer 503 (with Retry-After).
    deadline = time.monotonic() + 5
    health = None
    while time.monotonic() < deadline:
        health = httpx.get(srv.url + "/health", timeout=5)
        if health.status_code == 503:
            break
        time.sleep(0.01)
    assert health.status_code == 503 and health.json()["status"] == "draining"
    r = httpx.post(srv.url + "/v1/completions", json={"model": srv.model, "prompt": "x", "max_tokens": 2}, timeout=5)
    assert r.status_code == 503
    assert r.headers.get("retry-after")
    assert r.json()["error"]["type"] == "ServiceUnavailableError"
    t.join(120)
    assert out.get("finish") == "length" and out.get("done"), out  # the in-flight stream finished
    rc = srv.proc.wait(10)
    assert rc == 0
    assert time.monotonic() - out["ended_at"] < 3.0  # exits soon after the last stream ended


def test_shutdown_timeout_zero_aborts_streams_with_done():
    srv = Server("--shutdown-timeout", "0")
    out = {}
    t = start_stream(srv, 1500, out)
    wait_chunks(out, 3)
    sent = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    t.join(30)
    assert out.get("finish") == "abort", out
    assert out.get("done"), out
    assert out["ended_at"] - sent < 3.0
    assert srv.proc.wait(10) == 0
    assert any("aborted" in line for line in srv.log)


def test_second_signal_forces_exit():
    srv = Server("--shutdown-timeout", "120")
    out = {}
    start_stream(srv, 1500, out)
    wait_chunks(out, 3)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert srv.proc.poll() is None  # still draining the stream
    sent = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    rc = srv.proc.wait(10)
    assert rc == 1
    assert time.monotonic() - sent < 3.0


def test_health_200_when_ready_and_sigint_exits_zero_when_idle():
    srv = Server()
    assert httpx.get(srv.url + "/health", timeout=5).status_code == 200
    t0 = time.monotonic()
    assert srv.stop() == 0
    assert time.monotonic() - t0 < 3.0
