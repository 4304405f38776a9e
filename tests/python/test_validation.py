"""Every invalid request is a 4xx with {"error":{message,type,param,code}} naming the field."""
import httpx
import openai
import pytest


def post(server, path, body=None, content=None, headers=None):
    return httpx.post(server.url + path, json=body, content=content, headers=headers, timeout=30)


def check_error(r, status, param=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    assert err["message"]
    if param is not None:
        assert err["param"] == param, err


BAD_FIELDS = [
    ({"temperature": 2.5}, "temperature"),
    ({"min_tokens": 9, "max_tokens": 8}, "min_tokens"),
    ({"min_tokens": 17, "max_tokens": None}, "min_tokens"),  # above completions' default of 16
    ({"temperature": -1}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"n": 0}, "n"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": "ten"}, "max_tokens"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"frequency_penalty": -2.5}, "frequency_penalty"),
    ({"seed": 2 ** 64}, "seed"),
    ({"seed": "s"}, "seed"),
    ({"logprobs": 50}, "logprobs"),
    ({"stop": [1, 2]}, "stop"),
    ({"stop_token_ids": [10 ** 9]}, "stop_token_ids"),
    ({"logit_bias": {"999999999": 1}}, "logit_bias"),
    ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"stream": "yes"}, "stream"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": [10 ** 9]}, "prompt"),
    ({"prompt": 3}, "prompt"),
    ({"prompt": []}, "prompt"),
    # Asked for, not implemented: a 400 naming the field rather than an answer without it.
    ({"echo": True, "logprobs": 1, "stream": True}, "logprobs"),
    ({"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    ({"prompt_logprobs": "x"}, "prompt_logprobs"),
    ({"prompt_logprobs": 21}, "prompt_logprobs"),
    ({"suffix": "end"}, "suffix"),
    ({"suffix": 5}, "suffix"),
    ({"best_of": 2, "stream": True}, "best_of"),
    ({"best_of": 1, "n": 2}, "best_of"),
    ({"best_of": "x"}, "best_of"),
]


@pytest.mark.parametrize("fields,param", BAD_FIELDS)
def test_completions_bad_fields(server, fields, param):
    body = {"model": server.model, "prompt": "hi", "max_tokens": 4, **fields}
    check_error(post(server, "/v1/completions", body), 400, param)


@pytest.mark.parametrize("fields,param", [
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"content": "no role"}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 99}, "top_logprobs"),
    ({"max_completion_tokens": -1}, "max_completion_tokens"),
    ({"continue_final_message": True}, "continue_final_message"),  # add_generation_prompt defaults to true
    ({"continue_final_message": "yes", "add_generation_prompt": False}, "continue_final_message"),
    ({"continue_final_message": True, "add_generation_prompt": False,
      "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}]}, "messages"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"reasoning_effort": 3}, "reasoning_effort"),
    ({"prompt_logprobs": -1}, "prompt_logprobs"),
    ({"structured_outputs": {}}, "structured_outputs"),
])
def test_chat_bad_fields(server, fields, param):
    body = {"model": server.model, "messages": [{"role": "user", "content": "hi"}], **fields}
    check_error(post(server, "/v1/chat/completions", body), 400, param)


def test_body_shape_errors(server):
    check_error(post(server, "/v1/completions", content=b"{not json"), 400)
    check_error(post(server, "/v1/completions", content=b"[1,2,3]"), 400)
    check_error(post(server, "/v1/completions", content=b'"just a string"'), 400)


def test_context_overflow(server):
    max_len = httpx.get(server.url + "/v1/models").json()["data"][0]["max_model_len"]
    check_error(post(server, "/v1/completions", {"model": server.model, "prompt": "hi", "max_tokens": max_len}),
                400, "max_tokens")
    check_error(post(server, "/v1/completions", {"model": server.model, "prompt": [1] * (max_len + 1)}), 400, "prompt")


def test_unknown_model_route_method(server):
    check_error(post(server, "/v1/completions", {"model": "no-such-model", "prompt": "hi"}), 404, "model")
    check_error(httpx.get(server.url + "/v1/nothing"), 404)
    check_error(httpx.get(server.url + "/v1/completions"), 405)
    check_error(httpx.delete(server.url + "/v1/models"), 405)


def test_body_too_large(server):
    big = b'{"prompt":"' + b"a" * (9 * 1024 * 1024) + b'"}'
    try:
        r = post(server, "/v1/completions", content=big)
    except httpx.HTTPError:
        pytest.skip("server closed before the client finished sending (allowed after a 413)")
    check_error(r, 413)


def test_openai_client_raises_typed_errors(server):
    c = server.client()
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=server.model, prompt="x", temperature=5)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="missing", prompt="x")


def test_template_exception_is_400_with_its_message(server):
    r = post(server, "/v1/chat/completions",
             {"model": server.model, "messages": [{"role": "wizard", "content": "hi"}], "max_tokens": 2})
    check_error(r, 400)
    assert "wizard" in r.json()["error"]["message"]


def test_errors_from_the_tokenizer_pool_name_their_field(server):
    """Templating, encoding and the context rule run in the tokenizer actors; their 400s still
    name the field at fault."""
    max_len = httpx.get(server.url + "/v1/models").json()["data"][0]["max_model_len"]
    msgs = [{"role": "user", "content": "hi"}]
    check_error(post(server, "/v1/chat/completions",
                     {"model": server.model, "messages": msgs, "max_completion_tokens": max_len}),
                400, "max_completion_tokens")
    long_msgs = [{"role": "user", "content": "word " * (2 * max_len)}]
    check_error(post(server, "/v1/chat/completions", {"model": server.model, "messages": long_msgs}),
                400, "messages")
    check_error(post(server, "/v1/chat/completions",
                     {"model": server.model, "messages": [{"role": "wizard", "content": "hi"}]}),
                400, "messages")
    check_error(post(server, "/tokenize", {"messages": [{"role": "wizard", "content": "hi"}]}), 400, "messages")
    check_error(post(server, "/detokenize", {"tokens": [1, -3]}), 400, "tokens")
    # The tokenizer pool's /tokenize and /detokenize agree with each other.
    ids = post(server, "/tokenize", {"prompt": "The quick brown fox", "add_special_tokens": False}).json()["tokens"]
    assert post(server, "/detokenize", {"tokens": ids}).json()["prompt"] == "The quick brown fox"


def test_completion_top_logprobs_always_hold_the_sampled_token(server):
    # OpenAI's legacy completions: up to logprobs + 1 entries, the sampled token always among them.
    body = {"model": server.model, "prompt": "Once upon", "max_tokens": 6, "logprobs": 1, "temperature": 1.5, "seed": 7}
    r = post(server, "/v1/completions", body)
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 6
    for tok, tok_lp, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert 1 <= len(top) <= 2
        assert top[tok] == pytest.approx(tok_lp)
    body["logprobs"] = 0
    lp = post(server, "/v1/completions", body).json()["choices"][0]["logprobs"]
    assert all(top == {tok: p} for tok, p, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]))


def test_best_of_returns_the_samples_with_the_best_logprob_per_token(server):
    # best_of 4, n 2: the same four seeded samples as n 4, the two with the highest mean token
    # logprob returned, best first; usage counts every sample generated.
    base = {"model": server.model, "prompt": "The weather", "max_tokens": 5, "seed": 42, "temperature": 1.2}
    every = post(server, "/v1/completions", {**base, "n": 4, "logprobs": 0}).json()["choices"]
    def mean(c):
        return sum(c["logprobs"]["token_logprobs"]) / len(c["logprobs"]["token_logprobs"])
    ranked = sorted(every, key=lambda c: (-mean(c), c["index"]))
    r = post(server, "/v1/completions", {**base, "n": 2, "best_of": 4})
    assert r.status_code == 200, r.text
    best = r.json()
    assert [c["text"] for c in best["choices"]] == [c["text"] for c in ranked[:2]]
    assert [c["index"] for c in best["choices"]] == [0, 1]
    assert all(c["logprobs"] is None for c in best["choices"])  # ranked on logprobs not asked for
    assert best["usage"]["completion_tokens"] == sum(len(c["logprobs"]["tokens"]) for c in every)


def test_models_retrieve_through_the_openai_client(server):
    """OpenAI's retrieveModel: the served model's object, an unknown id a 404 naming `model`."""
    c = server.client()
    listed = c.models.list().data
    assert [m.id for m in listed] == [server.model]
    got = c.models.retrieve(server.model)
    assert got.id == server.model and got.object == "model"
    assert got.model_dump() == listed[0].model_dump()
    with pytest.raises(openai.NotFoundError) as e:
        c.models.retrieve("no-such-model")
    assert e.value.body["code"] == "model_not_found"
    # Ids with "/" (Hugging Face repo names) reach the route encoded or not; a malformed escape is not an id.
    for path in ["/v1/models/org/" + server.model, "/v1/models/org%2F" + server.model, "/v1/models/%zz"]:
        r = httpx.get(server.url + path)
        check_error(r, 404)
    r = httpx.post(server.url + "/v1/models/" + server.model)
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize("field,param", [("chat_template", "chat_template"), ("chat_template_kwargs", "chat_template_kwargs")])
def test_request_chat_template_is_refused_unless_trusted(server, field, param):
    tmpl = "{{ messages[0].content }}"
    extra = {"chat_template": tmpl} if field == "chat_template" else {"chat_template_kwargs": {"chat_template": tmpl}}
    body = {"model": server.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **extra}
    for path in ["/v1/chat/completions", "/tokenize"]:
        r = post(server, path, body)
        check_error(r, 400, param)
        assert "--trust-request-chat-template" in r.json()["error"]["message"]


def test_request_chat_template_is_used_when_trusted_and_bounded():
    """vLLM's --trust-request-chat-template: the request's template renders the prompt (the same ids as
    its text); a runaway one is a 400 naming chat_template within seconds, and the server serves on."""
    import time
    from conftest import Server
    s = Server("--trust-request-chat-template")
    try:
        msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
        tmpl = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}>{% endif %}"
        text = "<system>be brief<user>hi there>"
        want = httpx.post(s.url + "/tokenize", json={"prompt": text, "add_special_tokens": False}).json()["tokens"]
        for extra in ({"chat_template": tmpl}, {"chat_template_kwargs": {"chat_template": tmpl, "unused": 1}}):
            got = httpx.post(s.url + "/tokenize", json={"messages": msgs, **extra}).json()
            assert got["tokens"] == want
            r = s.client().chat.completions.create(model=s.model, messages=msgs, max_tokens=2, extra_body=extra)
            assert r.usage.prompt_tokens == len(want)
        for bad, part in [("{% for %}", "chat_template"), ("{{ raise_exception('no') }}", "no"),
                          ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"),
                          ("{% for i in range(1000) %}{{ 'x' * 100000 }}{% endfor %}", "limit"),
                          ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursion")]:
            t0 = time.monotonic()
            r = httpx.post(s.url + "/v1/chat/completions", timeout=60,
                           json={"messages": msgs, "max_tokens": 2, "chat_template": bad})
            check_error(r, 400, "chat_template")
            assert part in r.json()["error"]["message"]
            assert time.monotonic() - t0 < 10
        assert s.client().chat.completions.create(model=s.model, messages=msgs, max_tokens=2).choices[0].message
    finally:
        s.stop()
