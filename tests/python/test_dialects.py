"""/v1/responses through the official openai client and /v1/messages through the official anthropic
client, against `coserve serve --demo` (random weights: forced tool calls and schemas are well-formed
only because of the grammar engine)."""
import json

import anthropic
import httpx
import jsonschema
import pytest

from conftest import Server

KEY = "k-dialects"
ADD = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                        "op": {"enum": ["plus", "minus"]}},
       "required": ["a", "op"], "additionalProperties": False}


@pytest.fixture(scope="module")
def srv():
    s = Server("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--api-key", KEY)
    yield s
    s.stop()


def oai(s):
    return s.client(api_key=KEY, timeout=120)


def claude(s, key=KEY):
    return anthropic.Anthropic(base_url=s.url, api_key=key, max_retries=0, timeout=120)


# ---- Responses ------------------------------------------------------------------------------------

def test_responses_text_streamed_and_not(srv):
    c = oai(srv)
    r = c.responses.create(model=srv.model, input="Hello there", instructions="Be brief.", max_output_tokens=12,
                           temperature=0)
    assert r.object == "response" and r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].type == "message" and r.output_text
    assert r.usage.output_tokens == 12 and r.usage.input_tokens > 0
    with c.responses.stream(model=srv.model, input="Hello there", instructions="Be brief.", max_output_tokens=12,
                            temperature=0) as st:
        deltas = [e.delta for e in st if e.type == "response.output_text.delta"]
        final = st.get_final_response()
    assert "".join(deltas) == final.output_text == r.output_text


def test_responses_function_tools_and_text_format(srv):
    c = oai(srv)
    tools = [{"type": "function", "name": "calc", "description": "calculator", "parameters": ADD}]
    for choice in ("required", {"type": "function", "name": "calc"}):
        r = c.responses.create(model=srv.model, input=[{"role": "user", "content": "add 2"}], tools=tools,
                               tool_choice=choice, parallel_tool_calls=False, max_output_tokens=60)
        calls = [o for o in r.output if o.type == "function_call"]
        assert r.status == "completed" and len(calls) == 1
        assert calls[0].name == "calc" and calls[0].call_id
        jsonschema.validate(json.loads(calls[0].arguments), ADD)
        events = list(c.responses.create(model=srv.model, input="add 2", tools=tools, tool_choice=choice,
                                         parallel_tool_calls=False, max_output_tokens=60, stream=True))
        types = [e.type for e in events]
        assert types[0] == "response.created" and types[-1] == "response.completed"
        done = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert len(done) == 1
        jsonschema.validate(json.loads(done[0].arguments), ADD)
    schema = {"type": "object", "properties": {"k": {"enum": ["a", "b"]}, "n": {"type": "integer", "minimum": 1,
                                                                              "maximum": 3}},
              "required": ["k", "n"], "additionalProperties": False}
    r = c.responses.create(model=srv.model, input="json please", max_output_tokens=100,
                           text={"format": {"type": "json_schema", "name": "kn", "schema": schema, "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), schema)
    # A conversation carrying an earlier call and its output renders and runs.
    r = c.responses.create(model=srv.model, max_output_tokens=4, tools=tools, tool_choice="none", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "add 2"}]},
        {"type": "function_call", "call_id": "call_1", "name": "calc", "arguments": "{\"a\": 2, \"op\": \"plus\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "4"}])
    assert r.status == "incomplete" and r.output_text


@pytest.mark.parametrize("body,param", [
    ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({}, "input"),
    ({"input": [{"type": "image_generation_call"}]}, "input"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "nope"}}}},
     "text.format.schema"),
])
def test_responses_errors(srv, body, param):
    r = httpx.post(srv.url + "/v1/responses", json={"model": srv.model, **body},
                   headers={"Authorization": "Bearer " + KEY}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


# ---- Anthropic Messages ---------------------------------------------------------------------------

def test_messages_text_streamed_and_not(srv):
    a = claude(srv)
    kw = dict(model=srv.model, max_tokens=10, system="You are terse.", extra_body={"temperature": 0},
              messages=[{"role": "user", "content": "hi"}])
    m = a.messages.create(**kw)
    assert m.type == "message" and m.role == "assistant" and m.stop_reason == "max_tokens"
    assert m.content[0].type == "text" and m.content[0].text
    assert m.usage.output_tokens == 10 and m.usage.input_tokens > 0
    with a.messages.stream(**kw) as st:
        text = "".join(st.text_stream)
        final = st.get_final_message()
    assert text == m.content[0].text == final.content[0].text
    assert final.stop_reason == "max_tokens"


def test_messages_stop_sequence(srv):
    a = claude(srv)
    m = a.messages.create(model=srv.model, max_tokens=200, extra_body={"temperature": 0},
                          messages=[{"role": "user", "content": "go"}])
    words = m.content[0].text.split()
    assert len(words) > 3
    stop = words[2]
    s = a.messages.create(model=srv.model, max_tokens=200, extra_body={"temperature": 0}, stop_sequences=[stop],
                          messages=[{"role": "user", "content": "go"}])
    assert s.stop_reason == "stop_sequence" and s.stop_sequence == stop
    assert stop not in s.content[0].text


def test_messages_tool_use_forced_and_multi_turn(srv):
    a = claude(srv)
    tools = [{"name": "calc", "description": "calculator", "input_schema": ADD}]
    for choice in ({"type": "any", "disable_parallel_tool_use": True}, {"type": "tool", "name": "calc"}):
        m = a.messages.create(model=srv.model, max_tokens=80, tools=tools, tool_choice=choice,
                              messages=[{"role": "user", "content": "add"}])
        uses = [b for b in m.content if b.type == "tool_use"]
        assert m.stop_reason == "tool_use" and len(uses) == 1
        assert uses[0].name == "calc" and uses[0].id.startswith("toolu_")
        jsonschema.validate(uses[0].input, ADD)
        with a.messages.stream(model=srv.model, max_tokens=80, tools=tools, tool_choice=choice,
                               messages=[{"role": "user", "content": "add"}]) as st:
            final = st.get_final_message()
        assert final.stop_reason == "tool_use"
        jsonschema.validate([b for b in final.content if b.type == "tool_use"][0].input, ADD)
    m = a.messages.create(model=srv.model, max_tokens=3, tools=tools, tool_choice={"type": "none"}, messages=[
        {"role": "user", "content": "add 2"},
        {"role": "assistant", "content": [{"type": "text", "text": "Calling."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "calc",
                                           "input": {"a": 2, "op": "plus"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "4"}]}])
    assert m.stop_reason == "max_tokens"


def test_messages_errors_and_auth(srv):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude(srv).messages.create(model=srv.model, max_tokens=5, messages=[
            {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": ""}}]}])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"
    r = httpx.post(srv.url + "/v1/messages", json={"model": srv.model, "messages": [{"role": "user", "content": "x"}]},
                   headers={"x-api-key": KEY}, timeout=60)
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
    with pytest.raises(anthropic.AuthenticationError):
        claude(srv, key="wrong").messages.create(model=srv.model, max_tokens=5,
                                                 messages=[{"role": "user", "content": "x"}])
    # X-Api-Key is accepted on the OpenAI routes too.
    r = httpx.get(srv.url + "/v1/models", headers={"X-Api-Key": KEY})
    assert r.status_code == 200


# ---- Counting input tokens ------------------------------------------------------------------------

def test_messages_count_tokens_matches_the_billed_input(srv):
    """client.messages.count_tokens: the input tokens a /v1/messages call with the same system,
    messages and tools reports in its usage (template, tool definitions and system text included)."""
    a = claude(srv)
    tools = [{"name": "calc", "description": "calculator", "input_schema": ADD}]
    convs = [
        dict(messages=[{"role": "user", "content": "hi"}]),
        dict(system="You are terse.", messages=[{"role": "user", "content": "héllo — wörld"}]),
        dict(tools=tools, messages=[
            {"role": "user", "content": "add 2"},
            {"role": "assistant", "content": [{"type": "text", "text": "Calling."},
                                              {"type": "tool_use", "id": "toolu_1", "name": "calc",
                                               "input": {"a": 2, "op": "plus"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "4"}]}]),
    ]
    counts = []
    for kw in convs:
        n = a.messages.count_tokens(model=srv.model, **kw).input_tokens
        m = a.messages.create(model=srv.model, max_tokens=1, **kw)
        assert n == m.usage.input_tokens > 0
        counts.append(n)
    assert len(set(counts)) == 3
    # Errors in Anthropic's shape, the server's own checks included.
    with pytest.raises(anthropic.BadRequestError) as e:
        a.messages.count_tokens(model=srv.model, messages=[])
    assert e.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError):
        a.messages.count_tokens(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.AuthenticationError):
        claude(srv, key="wrong").messages.count_tokens(model=srv.model, messages=[{"role": "user", "content": "x"}])
    r = httpx.get(srv.url + "/v1/messages/count_tokens", headers={"x-api-key": KEY})
    assert r.status_code == 405


def test_responses_input_tokens_matches_the_billed_input(srv):
    """client.responses.input_tokens.count: the input tokens /v1/responses reports in its usage."""
    c = oai(srv)
    tools = [{"type": "function", "name": "calc", "description": "calculator", "parameters": ADD}]
    for kw in (dict(input="Hello there"), dict(input="Hello there", instructions="Be brief."),
               dict(input=[{"role": "user", "content": "add 2"}], tools=tools)):
        n = c.responses.input_tokens.count(model=srv.model, **kw)
        assert n.object == "response.input_tokens"
        r = c.responses.create(model=srv.model, max_output_tokens=1, **kw)
        assert n.input_tokens == r.usage.input_tokens > 0
    r = httpx.post(srv.url + "/v1/responses/input_tokens", json={"model": srv.model},
                   headers={"Authorization": "Bearer " + KEY}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"


# ---- Continuing the final message (assistant prefill) ----------------------------------------------

PREFILL = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "My favourite colour is"}]


def test_continue_final_message_continues_the_prefill(srv):
    # The rendered prompt ends inside the assistant message (no end of turn, no new turn) ...
    h = {"Authorization": f"Bearer {KEY}"}
    tok = httpx.post(srv.url + "/tokenize", headers=h, timeout=60, json={
        "model": srv.model, "messages": PREFILL, "continue_final_message": True, "add_generation_prompt": False})
    assert tok.status_code == 200, tok.text
    ids = tok.json()["tokens"]
    prompt = httpx.post(srv.url + "/detokenize", headers=h, timeout=60,
                        json={"model": srv.model, "tokens": ids}).json()["prompt"]
    assert prompt.endswith("My favourite colour is")
    # ... and the chat reply is what a completion of exactly that prompt gives (greedy).
    c = oai(srv)
    chat = c.chat.completions.create(model=srv.model, messages=PREFILL, max_tokens=8, temperature=0,
                                     extra_body={"continue_final_message": True, "add_generation_prompt": False})
    comp = c.completions.create(model=srv.model, prompt=ids, max_tokens=8, temperature=0)
    assert chat.choices[0].message.content == comp.choices[0].text
    assert chat.usage.prompt_tokens == len(ids)
    # vLLM's chat `echo`: the prefill leads the reply, streamed (its own delta) and not.
    kw = dict(model=srv.model, messages=PREFILL, max_tokens=8, temperature=0,
              extra_body={"continue_final_message": True, "add_generation_prompt": False, "echo": True})
    echoed = c.chat.completions.create(**kw)
    assert echoed.choices[0].message.content == PREFILL[-1]["content"] + comp.choices[0].text
    streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(stream=True, **kw)
                       if ch.choices)
    assert streamed == echoed.choices[0].message.content
    # The Anthropic dialect treats a final assistant message as a prefill the same way.
    m = claude(srv).messages.create(model=srv.model, max_tokens=8, messages=PREFILL,
                                    extra_body={"temperature": 0})
    assert m.content[0].text == comp.choices[0].text
    assert m.usage.input_tokens == len(ids)


# ---- Template switches from the dialects' own fields ----------------------------------------------

SWITCH_TEMPLATE = ("{% if enable_thinking is defined %}[thinking {{ 'on one two three' if enable_thinking else 'off' }}]"
                   "{% endif %}{% if reasoning_effort is defined %}[effort {{ reasoning_effort }}"
                   "{{ ' very very very hard' if reasoning_effort == 'high' }}]{% endif %}"
                   "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:")


@pytest.fixture(scope="module")
def switch_srv():
    s = Server("--chat-template", SWITCH_TEMPLATE)
    yield s
    s.stop()


def test_anthropic_thinking_and_responses_reasoning_reach_the_template(switch_srv):
    """Anthropic's thinking {type} sets enable_thinking and the Responses API's reasoning.effort sets
    reasoning_effort (unless chat_template_kwargs sets them): each render differs, as the counts show."""
    a = anthropic.Anthropic(base_url=switch_srv.url, api_key="x", max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": "hi"}]
    plain = a.messages.count_tokens(model=switch_srv.model, messages=msgs).input_tokens
    on = a.messages.count_tokens(model=switch_srv.model, messages=msgs,
                                 thinking={"type": "enabled", "budget_tokens": 1024}).input_tokens
    off = a.messages.count_tokens(model=switch_srv.model, messages=msgs, thinking={"type": "disabled"}).input_tokens
    assert plain < off < on
    # chat_template_kwargs wins over thinking.
    over = a.messages.count_tokens(model=switch_srv.model, messages=msgs, thinking={"type": "enabled", "budget_tokens": 1024},
                                   extra_body={"chat_template_kwargs": {"enable_thinking": False}}).input_tokens
    assert over == off
    m = a.messages.create(model=switch_srv.model, max_tokens=2, messages=msgs, thinking={"type": "disabled"})
    assert m.usage.input_tokens == off
    with pytest.raises(anthropic.BadRequestError) as e:
        a.messages.count_tokens(model=switch_srv.model, messages=msgs, thinking={"type": "sometimes"})
    assert "thinking" in e.value.body["error"]["message"]

    c = switch_srv.client(timeout=120)
    low = c.responses.input_tokens.count(model=switch_srv.model, input="hi", reasoning={"effort": "low"}).input_tokens
    high = c.responses.input_tokens.count(model=switch_srv.model, input="hi", reasoning={"effort": "high"}).input_tokens
    none = c.responses.input_tokens.count(model=switch_srv.model, input="hi").input_tokens
    assert none < low < high
    r = c.responses.create(model=switch_srv.model, input="hi", reasoning={"effort": "high"}, max_output_tokens=2)
    assert r.usage.input_tokens == high
    bad = httpx.post(switch_srv.url + "/v1/responses", json={"model": switch_srv.model, "input": "hi",
                                                              "reasoning": {"effort": "extreme"}}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "reasoning.effort"
