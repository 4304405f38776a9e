"""LoRA adapters through the server (--enable-lora --lora-modules): a demo model rebuilt from a peft
fixture's make-demo-model flags (tests/reference/fixtures/lora), the fixture's adapter served under
a name; a greedy completion naming the adapter gives peft's greedy tokens, naming the base model
gives other tokens, and the two interleaved in one batch each keep their own; /v1/models lists the
adapter with its parent; the prefix cache never shares blocks between the adapter and the base;
chat, messages and responses take the adapter as completions do; bad adapters are clear startup
errors."""
import concurrent.futures as cf
import json
import pathlib
import subprocess

import httpx
import pytest

from conftest import Server, coserve_binary, metric_value

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "reference" / "fixtures" / "lora"
CASE = "llama_attention_r4"


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory):
    fx = json.loads((FIXTURES / (CASE + ".json")).read_text())
    model = tmp_path_factory.mktemp("lora-base")
    subprocess.run([coserve_binary(), "make-demo-model", str(model), *fx["make_demo_model_args"]],
                   check=True, capture_output=True)
    s = Server("--enable-lora", "--lora-modules", f"tuned={FIXTURES / CASE}",
               "--served-model-name", "base", "--dtype", "float32", "--kv-cache-dtype", "fp32",
               model=model)
    s.fixture = fx
    yield s
    s.stop()


def greedy(server, model, prompt, n):
    r = httpx.post(server.url + "/v1/completions", timeout=60, json={
        "model": model, "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
        "logprobs": 0, "return_tokens_as_token_ids": True})
    assert r.status_code == 200, r.text
    return [int(t.split(":")[1]) for t in r.json()["choices"][0]["logprobs"]["tokens"]]


def test_adapter_tokens_equal_peft_and_differ_from_the_base(lora_server):
    s, fx = lora_server, lora_server.fixture
    assert greedy(s, "tuned", fx["prompt"], len(fx["greedy"])) == fx["greedy"]
    assert greedy(s, "base", fx["prompt"], len(fx["greedy"])) != fx["greedy"]
    # Mixed in flight: eight requests alternating adapter and base, each as it is alone.
    alone = {m: greedy(s, m, fx["prompt"], len(fx["greedy"])) for m in ("tuned", "base")}
    with cf.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: (i, greedy(s, ["tuned", "base"][i % 2], fx["prompt"], len(fx["greedy"]))),
                            range(8)))
    for i, toks in got:
        assert toks == alone[["tuned", "base"][i % 2]], i


def test_models_list_the_adapter_with_its_parent(lora_server):
    data = httpx.get(lora_server.url + "/v1/models").json()["data"]
    cards = {m["id"]: m for m in data}
    assert cards["tuned"]["parent"] == "base"
    assert cards["tuned"]["root"] == str(FIXTURES / CASE)
    assert cards["base"]["parent"] is None
    assert httpx.get(lora_server.url + "/v1/models/tuned").json()["parent"] == "base"
    r = httpx.post(lora_server.url + "/v1/completions", json={"model": "nope", "prompt": [1, 2], "max_tokens": 1})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_adapter_and_base_never_share_prefix_cache_blocks(lora_server):
    s = lora_server
    prompt = list(range(3, 3 + 64))

    def hits_after(model):
        before = metric_value(httpx.get(s.url + "/metrics").text, "coserve_prefix_cache_hits_total")
        greedy(s, model, prompt, 1)
        return metric_value(httpx.get(s.url + "/metrics").text, "coserve_prefix_cache_hits_total") - before

    assert hits_after("tuned") == 0
    assert hits_after("base") == 0  # the same tokens, but not the adapter's K/V
    assert hits_after("tuned") > 0
    assert hits_after("base") > 0


@pytest.mark.parametrize("args,message", [
    (["--lora-modules", "x=/nonexistent"], "--lora-modules needs --enable-lora"),
    (["--enable-lora", "--lora-modules", "x=/nonexistent"], "adapter_config.json not found"),
    (["--enable-lora", "--lora-modules", "noequals"], "expected name=path or a JSON object"),
    (["--enable-lora", "--lora-modules", f"a={FIXTURES / CASE}", f"a={FIXTURES / CASE}"], "'a' is already taken"),
    (["--enable-lora", "--max-lora-rank", "2", "--lora-modules", f"a={FIXTURES / CASE}"],
     "r is 4, above --max-lora-rank 2"),
])
def test_bad_adapters_are_clear_startup_errors(args, message, tmp_path):
    fx = json.loads((FIXTURES / (CASE + ".json")).read_text())
    subprocess.run([coserve_binary(), "make-demo-model", str(tmp_path), *fx["make_demo_model_args"]],
                   check=True, capture_output=True)
    p = subprocess.run([coserve_binary(), "serve", str(tmp_path), "--port", "0", *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr[-2000:]


def test_an_adapter_for_another_base_model_is_refused(tmp_path):
    # The Mistral fixture's adapter (8 heads, 1 KV head) on the Llama fixture's model: shapes differ.
    fx = json.loads((FIXTURES / (CASE + ".json")).read_text())
    subprocess.run([coserve_binary(), "make-demo-model", str(tmp_path), *fx["make_demo_model_args"]],
                   check=True, capture_output=True)
    p = subprocess.run([coserve_binary(), "serve", str(tmp_path), "--port", "0", "--enable-lora",
                        "--lora-modules", f"m={FIXTURES / 'mistral_all_linear_r16'}"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "--lora-modules m: LoRA adapter" in p.stderr, p.stderr[-2000:]


def test_every_generation_route_takes_the_adapter(tmp_path):
    """The same base shapes with a tokenizer (the adapter targets attention only, so the vocabulary
    may differ): chat, Anthropic messages and responses name the adapter as their model and get
    what completions get for the same rendered prompt; the base model's name gets other text."""
    fx = json.loads((FIXTURES / (CASE + ".json")).read_text())
    args = list(fx["make_demo_model_args"])
    i = args.index("--vocab-size")
    del args[i:i + 2]
    args.remove("--no-tokenizer")
    subprocess.run([coserve_binary(), "make-demo-model", str(tmp_path), *args], check=True, capture_output=True)
    s = Server("--enable-lora", "--lora-modules", f"tuned={FIXTURES / CASE}", "--served-model-name", "base",
               "--chat-template", "{% for m in messages %}{{ m['content'] }}{% endfor %}", model=tmp_path)
    try:
        def text(path, model):
            body = {"model": model, "temperature": 0, "max_tokens": 8}
            if path == "/v1/completions":
                body["prompt"] = "hi there"
            elif path == "/v1/responses":
                body = {"model": model, "temperature": 0, "max_output_tokens": 8, "input": "hi there"}
            else:
                body["messages"] = [{"role": "user", "content": "hi there"}]
            r = httpx.post(s.url + path, json=body, timeout=60)
            assert r.status_code == 200, r.text
            j = r.json()
            if path == "/v1/completions":
                return j["choices"][0]["text"]
            if path == "/v1/chat/completions":
                return j["choices"][0]["message"]["content"]
            if path == "/v1/messages":
                return j["content"][0]["text"]
            return j["output"][0]["content"][0]["text"]

        for model in ("tuned", "base"):
            want = text("/v1/completions", model)
            for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses"):
                assert text(path, model) == want, (path, model)
        assert text("/v1/completions", "tuned") != text("/v1/completions", "base")
    finally:
        s.stop()


def test_lora_requests_info_names_the_running_adapter(lora_server):
    """vLLM's vllm:lora_requests_info: max_lora and the adapters of running requests, read by
    prometheus_client while a long adapter stream runs, and empty lists once it ends."""
    from prometheus_client.parser import text_string_to_metric_families
    s, fx = lora_server, lora_server.fixture

    def labels():
        for fam in text_string_to_metric_families(httpx.get(s.url + "/metrics").text):
            for sample in fam.samples:
                if sample.name == "vllm:lora_requests_info":
                    return sample.labels
        return None

    seen = []
    with cf.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(greedy, s, "tuned", fx["prompt"], 400)
        while not fut.done():
            seen.append(labels())
        fut.result()
    assert any(l["running_lora_adapters"] == "tuned" for l in seen), seen[-3:]
    final = labels()
    assert final["max_lora"] == "1" and final["model_name"] == "base"
    assert final["running_lora_adapters"] == "" and final["waiting_lora_adapters"] == ""
