"""Hard edges: disconnect aborts, overload, metrics, API key, graceful shutdown."""
import asyncio
import socket
import subprocess
import time

import httpx
import openai
import pytest

from conftest import Server, coserve_binary, metric_value, wait_for


def test_metrics_parse(server):
    server.client().completions.create(model=server.model, prompt="warm up", max_tokens=3)
    text = httpx.get(server.url + "/metrics").text
    from prometheus_client.parser import text_string_to_metric_families
    names = {f.name for f in text_string_to_metric_families(text)}
    for n in ["coserve_num_requests_running", "coserve_num_requests_waiting", "coserve_kv_blocks_free",
              "coserve_kv_blocks_total", "coserve_kv_cache_usage_perc", "coserve_prefix_cache_queries",
              "coserve_prefix_cache_hits", "coserve_prompt_tokens", "coserve_generation_tokens",
              "coserve_time_to_first_token_seconds", "coserve_inter_token_latency_seconds",
              "coserve_e2e_request_latency_seconds", "coserve_request_queue_time_seconds",
              "coserve_request_success", "coserve_num_requests_open", "coserve_engine_steps",
              "coserve_actor_mailbox_depth", "coserve_grammar_compiles", "coserve_grammar_cache_hits"]:
        assert n in names, n
    depth = {f.samples[i].labels["actor"] for f in text_string_to_metric_families(text)
             if f.name == "coserve_actor_mailbox_depth" for i in range(len(f.samples))}
    assert depth == {"intake", "tokenizer", "grammar", "scheduler", "kv_allocator", "executor", "streamer"}
    assert metric_value(text, "coserve_generation_tokens_total") >= 3
    assert metric_value(text, "coserve_time_to_first_token_seconds_count") >= 1


def test_fleet_metrics_carry_model_name_and_vllm_names_move_under_load():
    """Every sample has model_name (the served name); the Gateway API Inference Extension's
    families (vLLM's names) are present, read as prometheus_client reads them, and move with the
    load as coserve's own do."""
    from prometheus_client.parser import text_string_to_metric_families
    s = Server("--served-model-name", "fleet-a", "fleet-b", "--max-num-seqs", "1", "--block-size", "16")
    try:
        def scrape():
            return list(text_string_to_metric_families(httpx.get(s.url + "/metrics").text))

        idle = scrape()
        for fam in idle:
            for sample in fam.samples:
                assert sample.labels.get("model_name") == "fleet-a", (fam.name, sample)
        names = {f.name for f in idle}
        for n in ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                  "vllm:lora_requests_info", "vllm:cache_config_info"]:
            assert n in names, n
        cfg = next(f for f in idle if f.name == "vllm:cache_config_info").samples[0]
        assert cfg.value == 1 and cfg.labels["block_size"] == "16"
        assert int(cfg.labels["num_gpu_blocks"]) == metric_value(httpx.get(s.url + "/metrics").text,
                                                                 "coserve_kv_blocks_total")
        lora = next(f for f in idle if f.name == "vllm:lora_requests_info").samples[0]
        assert lora.labels["max_lora"] == "0" and lora.labels["running_lora_adapters"] == ""
        text = httpx.get(s.url + "/metrics").text
        assert metric_value(text, "vllm:num_requests_running") == 0
        assert metric_value(text, "vllm:kv_cache_usage_perc") == 0
        # Two long streams with one running slot: one runs, one waits, KV blocks held.
        c = s.client()
        streams = [c.completions.create(model="fleet-b", prompt="load " * 20, max_tokens=400, stream=True,
                                        extra_body={"ignore_eos": True}) for _ in range(2)]
        next(iter(streams[0]))

        def loaded():
            t = httpx.get(s.url + "/metrics").text
            return (metric_value(t, "vllm:num_requests_running") == 1
                    and metric_value(t, "vllm:num_requests_waiting") == 1
                    and metric_value(t, "vllm:kv_cache_usage_perc") > 0
                    and metric_value(t, "vllm:kv_cache_usage_perc") == metric_value(t, "coserve_kv_cache_usage_perc")
                    and metric_value(t, "coserve_num_requests_running") == 1)
        assert wait_for(loaded, timeout=30), httpx.get(s.url + "/metrics").text
        for st in streams:
            st.close()
        assert wait_for(lambda: metric_value(httpx.get(s.url + "/metrics").text, "vllm:num_requests_running") == 0,
                        timeout=30)
    finally:
        s.stop()


def test_disconnect_aborts_within_one_second(server):
    def aborted():
        return metric_value(httpx.get(server.url + "/metrics").text, "coserve_request_success_total",
                            {"finished_reason": "abort"}) or 0

    before = aborted()
    max_len = httpx.get(server.url + "/v1/models").json()["data"][0]["max_model_len"]
    body = (b'{"model":"%s","prompt":"Tell a long story","max_tokens":%d,"ignore_eos":true,"stream":true}'
            % (server.model.encode(), max_len - 32))
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    s.close()
    assert wait_for(lambda: aborted() > before, timeout=1.0)
    text = httpx.get(server.url + "/metrics").text
    assert wait_for(lambda: metric_value(httpx.get(server.url + "/metrics").text,
                                         "coserve_num_requests_running") == 0, timeout=2.0)
    assert metric_value(text, "coserve_http_client_disconnects_total") >= 1


def test_overload_answers_fast_and_accepted_complete():
    s = Server("--max-num-seqs", "1", "--max-waiting-requests", "1")
    try:
        async def one(client):
            try:
                r = await client.completions.create(model=s.model, prompt="overload", max_tokens=32,
                                                    temperature=0, extra_body={"ignore_eos": True})
                return ("ok", r.usage.completion_tokens)
            except openai.RateLimitError:
                return ("429", 0)
            except openai.InternalServerError as e:
                return (str(e.status_code), 0)

        async def main():
            client = s.async_client()
            t0 = time.monotonic()
            res = await asyncio.gather(*(one(client) for _ in range(16)))
            return res, time.monotonic() - t0

        res, _ = asyncio.run(main())
        kinds = [k for k, _ in res]
        assert kinds.count("ok") >= 1
        assert any(k in ("429", "503") for k in kinds)
        assert all(n == 32 for k, n in res if k == "ok")
    finally:
        assert s.stop() == 0


def test_api_key_and_sigint_exit_zero():
    s = Server("--api-key", "k123")
    try:
        r = httpx.post(s.url + "/v1/completions", json={"model": s.model, "prompt": "x", "max_tokens": 1})
        assert r.status_code == 401
        assert r.json()["error"]["message"]
        with pytest.raises(openai.AuthenticationError):
            s.client(api_key="wrong").completions.create(model=s.model, prompt="x", max_tokens=1)
        ok = s.client(api_key="k123").completions.create(model=s.model, prompt="x", max_tokens=2)
        assert ok.usage.completion_tokens >= 1
        assert httpx.get(s.url + "/health").status_code == 200
    finally:
        assert s.stop() == 0


def test_sse_keepalive_while_queued_and_the_openai_client_reads_through_it():
    """A stream waiting in the queue gets `: keep-alive` comment lines; the official client skips
    them and reads the stream as usual."""
    import json
    import threading

    s = Server("--max-num-seqs", "1", "--max-waiting-requests", "4", "--sse-keepalive-s", "1")
    try:
        max_len = httpx.get(s.url + "/v1/models").json()["data"][0]["max_model_len"]
        long_body = {"model": s.model, "prompt": "Occupy the only slot", "max_tokens": max_len - 32,
                     "ignore_eos": True, "stream": True}

        def occupy(started, release):
            with httpx.stream("POST", s.url + "/v1/completions", json=long_body, timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        started.set()
                    if release.is_set():
                        return  # closing the connection aborts the request and frees the slot

        # Raw bytes: comments come before the first event while the request waits.
        started, release = threading.Event(), threading.Event()
        t = threading.Thread(target=occupy, args=(started, release), daemon=True)
        t.start()
        assert started.wait(30)
        lines, events = [], []
        body = {"model": s.model, "prompt": "Queued", "max_tokens": 4, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", s.url + "/v1/completions", json=body, timeout=60) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                lines.append(line)
                if line == ": keep-alive":
                    release.set()
                elif line.startswith("data: "):
                    events.append(line[6:])
        t.join(10)
        first_data = next(i for i, l in enumerate(lines) if l.startswith("data: "))
        assert ": keep-alive" in lines[:first_data]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"

        # The official client over the same kind of wait.
        started, release = threading.Event(), threading.Event()
        t = threading.Thread(target=occupy, args=(started, release), daemon=True)
        t.start()
        assert started.wait(30)
        threading.Timer(2.5, release.set).start()
        stream = s.client().completions.create(model=s.model, prompt="Queued too", max_tokens=4, stream=True,
                                               extra_body={"ignore_eos": True})
        got = list(stream)
        t.join(10)
        assert got and got[-1].choices[0].finish_reason == "length"
        assert sum(1 for c in got if c.choices and c.choices[0].text) >= 1
    finally:
        s.stop()


def test_cors_as_vllm_serves_it(server):
    """A browser page of another origin: its preflight is answered (no API key needed), and every
    answer, streamed or not, carries Access-Control-Allow-Origin. Listed origins refuse others."""
    origin = {"Origin": "http://app.example"}
    pre = httpx.options(server.url + "/v1/chat/completions", headers={
        **origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"})
    assert pre.status_code == 200
    assert pre.headers["access-control-allow-origin"] == "*"
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert pre.headers["access-control-allow-headers"] == "authorization,content-type"
    body = {"model": server.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, headers=origin)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    with httpx.stream("POST", server.url + "/v1/chat/completions", json={**body, "stream": True}, headers=origin) as s:
        assert s.headers["access-control-allow-origin"] == "*"
        assert "[DONE]" in "".join(s.iter_text())
    bad = httpx.post(server.url + "/v1/chat/completions", json={**body, "n": 0}, headers=origin)
    assert bad.status_code == 400 and bad.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-origin" not in httpx.get(server.url + "/v1/models").headers  # no Origin

    s = Server("--api-key", "k", "--allowed-origins", '["http://app.example"]', "--allowed-credentials")
    try:
        ok = httpx.options(s.url + "/v1/models", headers={**origin, "Access-Control-Request-Method": "GET"})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == "http://app.example"
        assert ok.headers["access-control-allow-credentials"] == "true"
        no = httpx.options(s.url + "/v1/models", headers={"Origin": "http://evil.example",
                                                          "Access-Control-Request-Method": "GET"})
        assert no.status_code == 400 and "origin" in no.text
        r = httpx.get(s.url + "/v1/models", headers={**origin, "Authorization": "Bearer k"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://app.example"
        assert "access-control-allow-origin" not in httpx.get(
            s.url + "/v1/models", headers={"Origin": "http://evil.example", "Authorization": "Bearer k"}).headers
    finally:
        s.stop()
    p = subprocess.run([coserve_binary(), "serve", "--demo", "--allowed-origins", "http://a"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "JSON array" in p.stderr


def test_cache_salt_keeps_prefix_cache_blocks_apart(server):
    """vLLM's cache_salt: a prompt's blocks are reused only by requests with the same salt; two
    salts, or a salt and none, never share one (the prefix-cache hit counter does not move)."""
    prompt = "salted prefix caching keeps tenants apart " * 12
    c = server.client()

    def hits_after(**extra):
        before = metric_value(httpx.get(server.url + "/metrics").text, "coserve_prefix_cache_hits_total")
        c.completions.create(model=server.model, prompt=prompt, max_tokens=1, extra_body=extra)
        return metric_value(httpx.get(server.url + "/metrics").text, "coserve_prefix_cache_hits_total") - before

    assert hits_after(cache_salt="tenant-a") == 0
    assert hits_after(cache_salt="tenant-a") > 0
    assert hits_after(cache_salt="tenant-b") == 0
    assert hits_after(cache_salt="tenant-b") > 0
    unsalted = hits_after()
    assert hits_after() > unsalted  # the unsalted prompt shares with itself only from here on
    assert hits_after(cache_salt="tenant-c") == 0
    # Chat requests take the field too.
    r = httpx.post(server.url + "/v1/chat/completions",
                   json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "cache_salt": "t"})
    assert r.status_code == 200, r.text
    for bad in ["", 3, ["x"]]:
        r = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1, "cache_salt": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "cache_salt", r.text
