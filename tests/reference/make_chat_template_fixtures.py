#!/usr/bin/env python3
"""Renders every chat template in testdata (chat-templates/*.jinja and newer/*.jinja) over a set of
conversations with Python jinja2 configured as Hugging Face's apply_chat_template configures it, and
writes one small JSON fixture per template to tests/reference/fixtures/chat_template/ (the
contexts themselves go once to conversations.json there).

Usage: python3 tests/reference/make_chat_template_fixtures.py [TESTDATA_DIR]
(default ../shared/testdata relative to the project root; jinja2 3.1 required)."""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "reference", "fixtures", "chat_template")
FIXED_NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)


class RaisedError(Exception):
    pass


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: renders its body (as transformers does)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise RaisedError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
]

CONVERSATIONS = {
    "multi_turn_system": {"messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": True},
    "multi_turn_no_system": {"messages": [
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "First answer"},
        {"role": "user", "content": "Second question"},
        {"role": "assistant", "content": "Second answer"}], "add_generation_prompt": False},
    "single_user_no_prompt": {"messages": [
        {"role": "user", "content": "  padded text\nwith a newline  "}], "add_generation_prompt": False},
    "text_parts": {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "Describe"},
                                     {"type": "text", "text": " this."}]}],
        "add_generation_prompt": True},
    "unicode": {"messages": [
        {"role": "system", "content": "Réponds en français 🇫🇷"},
        {"role": "user", "content": "日本語で「こんにちは」は? \"quotes\" and 'single' \\ back"}],
        "add_generation_prompt": True},
    "tool_call": {"messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris and 2+3?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "abcDEF123", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather", "content": "{\"temp\": 21.5}"},
        {"role": "assistant", "content": "It is 21.5 C in Paris."},
        {"role": "user", "content": "Thanks"}],
        "tools": TOOLS, "add_generation_prompt": True},
    "parallel_tool_calls": {"messages": [
        {"role": "user", "content": "Weather in Paris and 2+3?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "abcDEF123", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "xyzUVW789", "type": "function",
             "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
        {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather", "content": "sunny"},
        {"role": "tool", "tool_call_id": "xyzUVW789", "name": "add", "content": "5"}],
        "tools": TOOLS, "add_generation_prompt": True},
    "tools_no_call": {"messages": [
        {"role": "user", "content": "What tools do you have?"}],
        "tools": TOOLS, "add_generation_prompt": True},
}

SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "testdata")
    base = os.path.join(data, "chat-templates")
    env = make_env()
    os.makedirs(OUT, exist_ok=True)
    contexts = {}
    for name, conv in CONVERSATIONS.items():
        contexts[name] = dict(SPECIAL)
        contexts[name].update(conv)
    with open(os.path.join(OUT, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump(contexts, f, ensure_ascii=False, indent=1)
        f.write("\n")
    paths = sorted(f for f in os.listdir(base) if f.endswith(".jinja"))
    paths += sorted("newer/" + f for f in os.listdir(os.path.join(base, "newer")) if f.endswith(".jinja"))
    for rel in paths:
        with open(os.path.join(base, rel), encoding="utf-8") as f:
            source = f.read()
        fixture = {"template": "chat-templates/" + rel, "jinja2": jinja2.__version__, "cases": []}
        try:
            template = env.from_string(source)
        except jinja2.TemplateSyntaxError as e:
            fixture["syntax_error"] = str(e)
            template = None
        if template is not None:
            for name, conv in CONVERSATIONS.items():
                context = contexts[name]
                case = {"name": name}
                try:
                    case["output"] = template.render(**context)
                    case["ok"] = True
                except RaisedError as e:
                    case["ok"] = False
                    case["raised"] = str(e)
                except Exception as e:  # other run-time errors: only the failure is asserted
                    case["ok"] = False
                    case["error"] = f"{type(e).__name__}: {e}"
                fixture["cases"].append(case)
        out = os.path.join(OUT, "t__" + rel.replace("/", "__").replace(".jinja", ".json"))
        with open(out, "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False, indent=1)
            f.write("\n")
    print(f"wrote {len(paths)} fixtures to {OUT}")


if __name__ == "__main__":
    main()
