"""Completions and chat through the official openai client against `coserve serve --demo`."""
import asyncio

import httpx
import openai
import pytest


def test_models_and_health(server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == [server.model]
    assert httpx.get(server.url + "/health").status_code == 200
    assert "version" in httpx.get(server.url + "/version").json()


def test_completion_non_streaming(server):
    r = server.client().completions.create(model=server.model, prompt="Hello, my name is", max_tokens=8,
                                           temperature=0)
    assert r.id.startswith("cmpl-")
    assert r.object == "text_completion"
    assert len(r.choices) == 1
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.completion_tokens == 8 or r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens > 0


def test_completion_streaming_matches_non_streaming(server):
    c = server.client()
    full = c.completions.create(model=server.model, prompt="The sky is", max_tokens=10, temperature=0)
    chunks = list(c.completions.create(model=server.model, prompt="The sky is", max_tokens=10, temperature=0,
                                       stream=True))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == full.choices[0].text
    assert chunks[-1].choices[0].finish_reason == full.choices[0].finish_reason


def test_token_id_prompts_and_batches(server):
    c = server.client()
    ids = httpx.post(server.url + "/tokenize", json={"prompt": "one two three"}).json()["tokens"]
    a = c.completions.create(model=server.model, prompt=ids, max_tokens=4, temperature=0)
    b = c.completions.create(model=server.model, prompt="one two three", max_tokens=4, temperature=0)
    assert a.choices[0].text == b.choices[0].text
    batch = c.completions.create(model=server.model, prompt=["a b", "c d"], max_tokens=3, temperature=0)
    assert sorted(ch.index for ch in batch.choices) == [0, 1]
    back = httpx.post(server.url + "/detokenize", json={"tokens": ids}).json()["prompt"]
    assert "one two three" in back


def test_chat_non_streaming_and_streaming(server):
    c = server.client()
    msgs = [{"role": "user", "content": "Say hi"}]
    r = c.chat.completions.create(model=server.model, messages=msgs, max_tokens=6, temperature=0)
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    stream = list(c.chat.completions.create(model=server.model, messages=msgs, max_tokens=6, temperature=0,
                                            stream=True))
    assert stream[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert text == r.choices[0].message.content
    assert stream[-1].choices[0].finish_reason == r.choices[0].finish_reason


def test_chat_content_parts(server):
    c = server.client()
    a = c.chat.completions.create(model=server.model, max_tokens=4, temperature=0,
                                  messages=[{"role": "user", "content": [{"type": "text", "text": "hello"}]}])
    b = c.chat.completions.create(model=server.model, max_tokens=4, temperature=0,
                                  messages=[{"role": "user", "content": "hello"}])
    assert a.choices[0].message.content == b.choices[0].message.content


def test_developer_role_is_the_demo_templates_system_turn(server):
    """OpenAI's `developer` messages (what the official client sends for instructions) are accepted;
    the demo template renders them as its system turn, so the two prompts are the same tokens."""
    c = server.client()
    common = dict(model=server.model, max_tokens=4, temperature=0)
    dev = c.chat.completions.create(messages=[{"role": "developer", "content": "Be brief."},
                                              {"role": "user", "content": "hello"}], **common)
    sys_ = c.chat.completions.create(messages=[{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": "hello"}], **common)
    assert dev.usage.prompt_tokens == sys_.usage.prompt_tokens
    assert dev.choices[0].message.content == sys_.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as bogus:
        c.chat.completions.create(messages=[{"role": "narrator", "content": "x"}], **common)
    assert "Unknown role: narrator" in str(bogus.value)


def test_n2(server):
    r = server.client().completions.create(model=server.model, prompt="Once upon", max_tokens=5, n=2,
                                           temperature=1.0, seed=3)
    assert sorted(ch.index for ch in r.choices) == [0, 1]
    assert r.usage.completion_tokens == sum(5 for _ in r.choices) or any(ch.finish_reason == "stop" for ch in r.choices)


def test_stop_string(server):
    c = server.client()
    free = c.completions.create(model=server.model, prompt="Count: 1 2 3", max_tokens=12, temperature=0)
    text = free.choices[0].text
    if len(text) < 4:
        return
    stop = text[2:4]
    r = c.completions.create(model=server.model, prompt="Count: 1 2 3", max_tokens=12, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert stop not in r.choices[0].text
    assert text.startswith(r.choices[0].text)


def test_logprobs(server):
    c = server.client()
    r = c.completions.create(model=server.model, prompt="A B C", max_tokens=4, temperature=0, logprobs=3,
                             extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert all(x <= 0 for x in lp.token_logprobs)
    assert all(len(t) >= 1 for t in lp.top_logprobs)
    if not any("\ufffd" in t for t in lp.tokens):  # whole characters: the token strings spell the text
        assert "".join(lp.tokens) == r.choices[0].text
    chat = c.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "x"}], max_tokens=3,
                                     temperature=0, logprobs=True, top_logprobs=2,
                                     extra_body={"ignore_eos": True})
    content = chat.choices[0].logprobs.content
    assert len(content) == 3
    assert all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in content)


def test_usage_in_last_stream_chunk(server):
    chunks = list(server.client().chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True,
        stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.choices == []
    assert last.usage.completion_tokens == 5 or chunks[-2].choices[0].finish_reason == "stop"
    assert all(ch.usage is None for ch in chunks[:-1])


def test_raw_sse_bytes(server):
    body = {"model": server.model, "prompt": "x", "max_tokens": 2, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(r.iter_raw())
    events = raw.split(b"\n\n")
    assert events[-1] == b""
    assert events[-2] == b"data: [DONE]"
    assert all(e.startswith(b"data: ") for e in events[:-1])


def test_seed_reproducibility(server):
    c = server.client()
    kw = dict(model=server.model, prompt="Random words:", max_tokens=12, temperature=1.0, seed=1234)
    a = c.completions.create(**kw).choices[0].text
    b = c.completions.create(**kw).choices[0].text
    assert a == b


def test_64_concurrent_streams(server):
    async def one(client, i):
        text, finish = "", None
        stream = await client.completions.create(model=server.model, prompt=f"Stream {i}:", max_tokens=8,
                                                 temperature=0, stream=True)
        async for ch in stream:
            if ch.choices:
                text += ch.choices[0].text
                finish = ch.choices[0].finish_reason or finish
        return text, finish

    async def main():
        client = server.async_client()
        return await asyncio.gather(*(one(client, i) for i in range(64)))

    results = asyncio.run(main())
    assert len(results) == 64
    assert all(f in ("length", "stop") for _, f in results)


def test_echo_of_token_id_prompt_is_its_text(server):
    ids = httpx.post(server.url + "/tokenize", json={"prompt": "Echo this back", "add_special_tokens": False},
                     timeout=30).json()["tokens"]
    r = server.client().completions.create(model=server.model, prompt=ids, max_tokens=2, temperature=0, echo=True)
    assert r.choices[0].text.startswith("Echo this back")


def test_continuous_usage_stats(server):
    """vLLM's stream_options.continuous_usage_stats: every chunk carries its choice's usage so far,
    counting up to what the final usage chunk reports."""
    for chat in (False, True):
        c = server.client()
        kw = dict(model=server.model, max_tokens=6, stream=True, temperature=0, extra_body={"ignore_eos": True},
                  stream_options={"include_usage": True, "continuous_usage_stats": True})
        chunks = list(c.chat.completions.create(messages=[{"role": "user", "content": "hi"}], **kw) if chat
                      else c.completions.create(prompt="Count:", **kw))
        final = chunks[-1]
        assert final.choices == [] and final.usage.completion_tokens == 6
        body = chunks[:-1]
        assert all(ch.usage is not None for ch in body)
        assert all(ch.usage.prompt_tokens == final.usage.prompt_tokens for ch in body)
        counts = [ch.usage.completion_tokens for ch in body]
        assert counts == sorted(counts) and counts[-1] == 6
        assert all(ch.usage.total_tokens == ch.usage.prompt_tokens + ch.usage.completion_tokens for ch in body)
    # Without include_usage it changes nothing (vLLM): no usage at all until the end, which has none.
    chunks = list(server.client().completions.create(model=server.model, prompt="x", max_tokens=2, stream=True,
                                                     stream_options={"continuous_usage_stats": True}))
    assert all(ch.usage is None for ch in chunks)


def test_truncate_prompt_tokens(server):
    """vLLM's truncate_prompt_tokens keeps the prompt's last k tokens: the output equals that of the
    truncated prompt given as ids; above max_model_len it is a 400 naming the field."""
    c = server.client()
    ids = httpx.post(server.url + "/tokenize", json={"prompt": "one two three four five six seven eight"}).json()["tokens"]
    assert len(ids) > 4
    kw = dict(model=server.model, max_tokens=5, temperature=0)
    cut = c.completions.create(prompt=ids, extra_body={"truncate_prompt_tokens": 4}, **kw)
    last4 = c.completions.create(prompt=ids[-4:], **kw)
    assert cut.usage.prompt_tokens == 4
    assert cut.choices[0].text == last4.choices[0].text
    text_cut = c.completions.create(prompt="one two three four five six seven eight",
                                    extra_body={"truncate_prompt_tokens": 4}, **kw)
    assert text_cut.usage.prompt_tokens == 4 and text_cut.choices[0].text == last4.choices[0].text
    chat = c.chat.completions.create(messages=[{"role": "user", "content": "a long message " * 20}],
                                     extra_body={"truncate_prompt_tokens": 7}, **kw)
    assert chat.usage.prompt_tokens == 7
    whole = c.completions.create(prompt=ids, extra_body={"truncate_prompt_tokens": 1000}, **kw)
    assert whole.usage.prompt_tokens == len(ids)
    for bad in (0, -2, 1.5, "4", 10**9):
        r = httpx.post(server.url + "/v1/completions", json={"model": server.model, "prompt": "x",
                                                             "truncate_prompt_tokens": bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["param"] == "truncate_prompt_tokens"


def test_allowed_token_ids(server):
    """vLLM's allowed_token_ids: only those ids are sampled (greedy and random, chat and completions,
    streamed too); the logprobs are over them alone; out-of-vocabulary or empty lists are 400s."""
    allowed = [11, 262, 290, 1110, 4000]
    texts = {httpx.post(server.url + "/detokenize", json={"tokens": [t]}).json()["prompt"] for t in allowed}
    assert len(texts) == len(allowed)
    c = server.client()
    for temp in (0.0, 1.5):
        r = c.completions.create(model=server.model, prompt="Hello", max_tokens=12, temperature=temp, seed=3,
                                 logprobs=3, extra_body={"allowed_token_ids": allowed, "ignore_eos": True})
        lp = r.choices[0].logprobs
        assert r.usage.completion_tokens == 12 and len(lp.tokens) == 12
        assert set(lp.tokens) <= texts
        assert all(set(t) <= texts for t in lp.top_logprobs)
        assert "".join(lp.tokens) == r.choices[0].text
    chat = c.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                     stream=True, logprobs=True, temperature=1.0, seed=5,
                                     extra_body={"allowed_token_ids": allowed, "ignore_eos": True})
    tokens = [e.token for ch in chat if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert len(tokens) == 8 and set(tokens) <= texts
    for bad in ([], [10**9], [-1], ["x"], 5):
        r = httpx.post(server.url + "/v1/completions", json={"model": server.model, "prompt": "x", "allowed_token_ids": bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["param"] == "allowed_token_ids"


def test_return_tokens_as_token_ids(server):
    """vLLM's return_tokens_as_token_ids: logprob tokens (and top_logprobs keys) named "token_id:N",
    the ids the text came from; chat too, streamed and not."""
    c = server.client()
    kw = dict(model=server.model, prompt="Hello there", max_tokens=6, temperature=0, logprobs=2)
    named = c.completions.create(extra_body={"return_tokens_as_token_ids": True}, **kw)
    plain = c.completions.create(**kw)
    lp = named.choices[0].logprobs
    assert all(t.startswith("token_id:") for t in lp.tokens)
    ids = [int(t.split(":")[1]) for t in lp.tokens]
    assert httpx.post(server.url + "/detokenize", json={"tokens": ids}).json()["prompt"] == plain.choices[0].text
    assert lp.token_logprobs == plain.choices[0].logprobs.token_logprobs
    assert all(all(k.startswith("token_id:") for k in top) for top in lp.top_logprobs)
    ch = c.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                   logprobs=True, top_logprobs=2, stream=True,
                                   extra_body={"return_tokens_as_token_ids": True})
    entries = [e for x in ch if x.choices and x.choices[0].logprobs for e in x.choices[0].logprobs.content]
    assert len(entries) == 4 and all(e.token.startswith("token_id:") for e in entries)
    assert all(t.token.startswith("token_id:") for e in entries for t in e.top_logprobs)
    r = httpx.post(server.url + "/v1/completions", json={"model": server.model, "prompt": "x",
                                                         "return_tokens_as_token_ids": "yes"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "return_tokens_as_token_ids"


def test_vllm_fields_not_implemented_are_refused(server):
    """bad_words and beam search change what is generated: asked for, they are a 400 naming the
    field rather than an answer without them; their empty / off values pass."""
    for field, value in (("bad_words", ["hello"]), ("use_beam_search", True)):
        r = httpx.post(server.url + "/v1/completions", json={"model": server.model, "prompt": "x", field: value})
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    for field, value in (("bad_words", []), ("use_beam_search", False)):
        r = httpx.post(server.url + "/v1/completions", json={"model": server.model, "prompt": "x", "max_tokens": 1,
                                                             field: value})
        assert r.status_code == 200, r.text


def test_generation_config_sets_the_defaults_requests_leave_out(tmp_path):
    """vLLM's --generation-config auto: a model folder's generation_config.json (make-demo-model
    writes temperature 0.8, top_p 0.95) and --override-generation-config fill what a request leaves
    out; the request's own fields win; --generation-config vllm, and --demo, keep the API's."""
    import subprocess
    from conftest import Server, coserve_binary, skip_or_fail_in_ci
    folder = tmp_path / "m"
    p = subprocess.run([coserve_binary(), "make-demo-model", str(folder), "--num-layers", "1"], capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        skip_or_fail_in_ci("make-demo-model needs ../shared/testdata: " + p.stderr)
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    msgs = [{"role": "user", "content": "Tell me a story"}]
    s = Server(model=folder)
    try:
        assert any("temperature=0.8, top_p=0.95" in line for line in s.log), "".join(s.log)
    finally:
        s.stop()
    s = Server("--override-generation-config", '{"temperature": 0, "max_new_tokens": 5}', model=folder)
    try:
        assert any("temperature=0, top_p=0.95, max_tokens=5" in line for line in s.log), "".join(s.log)
        c = s.client()
        default = [c.chat.completions.create(model=s.model, messages=msgs) for _ in range(2)]
        greedy = c.chat.completions.create(model=s.model, messages=msgs, temperature=0, max_tokens=5)
        assert default[0].choices[0].message.content == default[1].choices[0].message.content == \
            greedy.choices[0].message.content  # temperature 0 by default: greedy
        assert default[0].usage.completion_tokens == 5 and default[0].choices[0].finish_reason == "length"
        longer = c.chat.completions.create(model=s.model, messages=msgs, max_tokens=9)  # the request wins
        assert longer.usage.completion_tokens == 9
        seeded = {c.chat.completions.create(model=s.model, messages=msgs, temperature=1.0, seed=k, max_tokens=8)
                  .choices[0].message.content for k in range(4)}
        assert len(seeded) > 1  # temperature given: sampled
        comp = c.completions.create(model=s.model, prompt="Once")  # completions keep OpenAI's 16
        assert comp.usage.completion_tokens == 16 or comp.choices[0].finish_reason == "stop"
    finally:
        s.stop()
    for args in (["--generation-config", "vllm"], []):
        s = Server(*args, model=folder) if args else Server()  # the second: --demo
        try:
            assert not any("default sampling parameters" in line for line in s.log)
        finally:
            s.stop()
    for flags, part in [(["--override-generation-config", '{"top_p": 0}'], "top_p"),
                        (["--override-generation-config", "[1]"], "override-generation-config"),
                        (["--generation-config", "/nonexistent"], "generation_config.json")]:
        p = subprocess.run([coserve_binary(), "serve", str(folder), "--port", "0", *flags], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode != 0 and part in p.stderr, p.stderr
