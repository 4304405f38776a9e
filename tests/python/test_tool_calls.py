"""Tool calling through the official openai client against `coserve serve --demo` with
--enable-auto-tool-choice --tool-call-parser hermes.

The demo model has random weights: tool_choice "required" and named functions yield well-formed
calls only because the grammar engine forces them; their arguments must validate against each
tool's parameters schema (the `jsonschema` package). "auto" is exercised end to end by forcing the
model's text into the Hermes format with a regex, so the parser has real output to read."""
import json
import re

import httpx
import jsonschema
import pytest

from conftest import Server

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 12},
                          "unit": {"enum": ["celsius", "fahrenheit"]},
                          "days": {"type": "integer", "minimum": 1, "maximum": 14}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                                        "b": {"type": "number", "minimum": 0, "maximum": 1}},
       "required": ["a", "b"], "additionalProperties": False}
SEARCH = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^[a-z]{1,8}$"},
                                           "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2}},
          "required": ["q"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "parameters": ADD}},
         {"type": "function", "function": {"name": "search", "parameters": SEARCH}}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def tool_server():
    s = Server("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    yield s
    s.stop()


def create(server, **kw):
    c = server.client(timeout=120)
    return c.chat.completions.create(model=server.model, messages=kw.pop("messages", MESSAGES), tools=TOOLS,
                                     max_tokens=kw.pop("max_tokens", 300), **kw)


def stream_calls(server, **kw):
    """Streams a request; returns (content, calls by index, finish_reason, the first tool delta)."""
    content, calls, finish, first = "", {}, None, None
    for chunk in create(server, stream=True, **kw):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        content += ch.delta.content or ""
        for t in ch.delta.tool_calls or []:
            if first is None:
                first = t
            entry = calls.setdefault(t.index, {"id": None, "name": None, "arguments": ""})
            if t.id:
                entry["id"] = t.id
            if t.function and t.function.name:
                entry["name"] = t.function.name
            if t.function and t.function.arguments:
                entry["arguments"] += t.function.arguments
        finish = ch.finish_reason or finish
    return content, calls, finish, first


def check_call(name, arguments):
    assert name in SCHEMAS
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


@pytest.mark.parametrize("choice", ["required", "get_weather", "add", "search"])
def test_forced_tool_calls_are_valid_streamed_and_not(tool_server, choice):
    tool_choice = choice if choice == "required" else {"type": "function", "function": {"name": choice}}
    # One call per response: a random model rarely closes an open-ended array of parallel calls.
    extra = {"parallel_tool_calls": False} if choice == "required" else {}
    for seed in range(4):
        r = create(tool_server, tool_choice=tool_choice, seed=seed, **extra)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", ch
        assert ch.message.tool_calls, ch
        assert not ch.message.content
        for t in ch.message.tool_calls:
            assert t.type == "function" and t.id.startswith("chatcmpl-tool-")
            if choice != "required":
                assert t.function.name == choice
            check_call(t.function.name, t.function.arguments)
        content, calls, finish, first = stream_calls(tool_server, tool_choice=tool_choice, seed=seed, **extra)
        assert finish == "tool_calls" and not content
        # The first delta of a call carries its id, type and name.
        assert first.id and first.type == "function" and first.function.name
        streamed = [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)]
        whole = [(t.function.name, t.function.arguments) for t in ch.message.tool_calls]
        assert streamed == whole


def test_parallel_tool_calls(tool_server):
    for seed in range(4):
        r = create(tool_server, tool_choice="required", parallel_tool_calls=False, seed=seed)
        assert len(r.choices[0].message.tool_calls) == 1
    # With parallel calls the array is open-ended: each finished response's calls all validate; a
    # response cut by max_tokens holds the partial array as content and no calls.
    for seed in range(4):
        ch = create(tool_server, tool_choice="required", seed=seed, max_tokens=150).choices[0]
        if ch.finish_reason == "length":
            assert ch.message.tool_calls == [] and ch.message.content.startswith("[")
        else:
            assert ch.finish_reason == "tool_calls" and len(ch.message.tool_calls) >= 1
            for t in ch.message.tool_calls:
                check_call(t.function.name, t.function.arguments)


def test_auto_parses_hermes_output_streamed_and_not(tool_server):
    # The regex makes the random model write text, then a Hermes call with a valid argument.
    regex = (r'[A-Za-z]{2,8}\. <tool_call>\n\{"name": "get_weather", "arguments": \{"city": "[a-z]{2,6}", '
             r'"unit": "celsius"\}\}\n</tool_call>\n<tool_call>\n\{"name": "add", "arguments": '
             r'\{"a": [1-9][0-9]?, "b": 0\.5\}\}\n</tool_call>')
    for seed in range(3):
        r = create(tool_server, seed=seed, extra_body={"structured_outputs": {"regex": regex}})
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", ch
        assert ch.message.content.endswith(". ")
        assert [t.function.name for t in ch.message.tool_calls] == ["get_weather", "add"]
        for t in ch.message.tool_calls:
            check_call(t.function.name, t.function.arguments)
        assert ch.message.tool_calls[0].id != ch.message.tool_calls[1].id
        content, calls, finish, _ = stream_calls(tool_server, seed=seed,
                                                 extra_body={"structured_outputs": {"regex": regex}})
        assert finish == "tool_calls"
        assert content == ch.message.content
        assert [(c["name"], c["arguments"]) for c in calls.values()] == \
            [(t.function.name, t.function.arguments) for t in ch.message.tool_calls]
    # Free output of the random model holds no call: it is all content.
    r = create(tool_server, seed=1, max_tokens=20)
    assert r.choices[0].message.tool_calls == [] and r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content


def test_tool_choice_none_and_a_multi_turn_conversation(tool_server):
    r = create(tool_server, tool_choice="none", seed=1, max_tokens=10)
    assert r.choices[0].message.tool_calls == [] and r.choices[0].message.content
    messages = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}]
    r = create(tool_server, messages=messages, tool_choice="none", max_tokens=5)
    assert r.choices[0].finish_reason in ("stop", "length")
    ids = httpx.post(tool_server.url + "/tokenize", json={"model": tool_server.model, "messages": messages,
                                                          "tools": TOOLS}).json()
    assert ids["count"] > 0


def test_tool_errors_are_400_naming_the_field(server, tool_server):
    def post(srv, body):
        r = httpx.post(srv.url + "/v1/chat/completions",
                       json={"model": srv.model, "messages": MESSAGES, "max_tokens": 5, **body}, timeout=60)
        assert r.status_code == 400, r.text
        return r.json()["error"]

    assert post(tool_server, {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}})[
        "param"] == "tool_choice"
    assert post(tool_server, {"tool_choice": "required"})["param"] == "tool_choice"
    assert post(tool_server, {"tools": [{"type": "function", "function": {"parameters": {}}}]})["param"] == "tools"
    assert post(tool_server, {"tools": TOOLS, "tool_choice": "required",
                              "response_format": {"type": "json_object"}})["param"] == "tool_choice"
    # "auto" (the default with tools) needs --enable-auto-tool-choice, as in vLLM.
    err = post(server, {"tools": TOOLS})
    assert err["param"] == "tool_choice" and "--enable-auto-tool-choice" in err["message"]
    # Still serving.
    assert create(tool_server, tool_choice="none", max_tokens=2).choices[0].finish_reason == "length"


def test_tools_without_a_template_that_supports_them_is_a_400():
    s = Server("--chat-template", "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
    try:
        r = httpx.post(s.url + "/v1/chat/completions",
                       json={"model": s.model, "messages": MESSAGES, "tools": TOOLS, "tool_choice": "none",
                             "max_tokens": 3}, timeout=60)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "tools"
        ok = s.client().chat.completions.create(model=s.model, messages=MESSAGES, max_tokens=3)
        assert ok.choices[0].finish_reason == "length"
    finally:
        s.stop()


def test_reasoning_is_split_before_tool_parsing():
    s = Server("--reasoning-parser", "deepseek_r1", "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    try:
        c = s.client(timeout=120)
        # Thinking, then an answer holding a Hermes call: forced by a regex so the random model writes it.
        regex = (r'[a-z]{3,8} [a-z]{3,8}\.\n</think>\n\n[A-Z][a-z]{1,6}\. <tool_call>\n\{"name": "add", '
                 r'"arguments": \{"a": [1-9], "b": 0\.5\}\}\n</tool_call>')
        for seed in range(3):
            kw = dict(model=s.model, messages=MESSAGES, tools=TOOLS, max_tokens=200, seed=seed,
                      extra_body={"structured_outputs": {"regex": regex}})
            ch = c.chat.completions.create(**kw).choices[0]
            reasoning = ch.message.model_extra["reasoning_content"]
            assert re.fullmatch(r"[a-z]{3,8} [a-z]{3,8}\.\n", reasoning)
            assert re.fullmatch(r"\n\n[A-Z][a-z]{1,6}\. ", ch.message.content)
            assert ch.finish_reason == "tool_calls" and [t.function.name for t in ch.message.tool_calls] == ["add"]
            streamed_reasoning, content, names = "", "", []
            for chunk in c.chat.completions.create(stream=True, **kw):
                if not chunk.choices:
                    continue
                d = chunk.choices[0].delta
                streamed_reasoning += (d.model_extra or {}).get("reasoning_content") or ""
                content += d.content or ""
                names += [t.function.name for t in d.tool_calls or [] if t.function and t.function.name]
            assert streamed_reasoning == reasoning and content == ch.message.content and names == ["add"]
        # No </think> before max_tokens: everything is reasoning (the template opened <think>).
        ch = c.chat.completions.create(model=s.model, messages=MESSAGES, max_tokens=8, seed=1,
                                       tool_choice="none", tools=TOOLS).choices[0]
        assert ch.message.model_extra["reasoning_content"] and not ch.message.content
    finally:
        s.stop()
