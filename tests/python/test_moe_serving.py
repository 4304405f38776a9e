"""A mixture-of-experts model (Qwen3-MoE layout) served through the official openai client: every
request's greedy tokens are the same whether it runs alone or batched with others (each token is
routed by its own router probabilities, whatever else is in the step), streaming matches
non-streaming, and the KV blocks all come back."""
import asyncio
import subprocess

import httpx
import pytest

from conftest import Server, coserve_binary, skip_or_fail_in_ci


@pytest.fixture(scope="module")
def moe_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("moe") / "qwen3moe"
    p = subprocess.run([coserve_binary(), "make-demo-model", str(folder), "--architecture", "qwen3_moe",
                        "--hidden-size", "128", "--intermediate-size", "256", "--moe-intermediate-size", "64",
                        "--num-layers", "3", "--num-heads", "4", "--num-kv-heads", "2", "--num-experts", "8",
                        "--num-experts-per-tok", "2", "--norm-topk-prob", "--decoder-sparse-step", "1"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        skip_or_fail_in_ci("make-demo-model needs ../shared/testdata: " + p.stderr)
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
    s = Server("--dtype", "float32", "--kv-cache-dtype", "fp32", model=folder)
    yield s
    assert s.stop() == 0


def test_moe_batched_greedy_equals_alone(moe_server):
    s = moe_server
    prompts = [f"Request {i}: the experts route" + " word" * i for i in range(12)]
    kw = dict(model=s.model, max_tokens=10, temperature=0, logprobs=1, extra_body={"ignore_eos": True})
    c = s.client()
    alone = [c.completions.create(prompt=p, **kw) for p in prompts]

    async def main():
        ac = s.async_client()
        return await asyncio.gather(*(ac.completions.create(prompt=p, **kw) for p in prompts))

    together = asyncio.run(main())
    for a, b in zip(alone, together):
        assert a.usage.completion_tokens == b.usage.completion_tokens == 10
        assert a.choices[0].logprobs.tokens == b.choices[0].logprobs.tokens
        assert a.choices[0].text == b.choices[0].text


def test_moe_chat_streams_and_frees_blocks(moe_server):
    s = moe_server
    c = s.client()
    msgs = [{"role": "user", "content": "Which expert answers?"}]
    r = c.chat.completions.create(model=s.model, messages=msgs, max_tokens=12, temperature=0)
    chunks = list(c.chat.completions.create(model=s.model, messages=msgs, max_tokens=12, temperature=0, stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == r.choices[0].message.content
    assert r.usage.completion_tokens >= 1
    kv = httpx.get(s.url + "/api/status", timeout=10).json()["kv_blocks"]
    assert kv["used"] == 0, kv  # every finished request's blocks are back (free or prefix-cached)
