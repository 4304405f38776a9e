"""Structured outputs through the official openai client against `coserve serve --demo`.

The demo model has random weights: whatever text it produces follows the schema, regex, choice or
grammar only because the grammar engine masks every other token. Every response that finishes
("stop") must parse and validate with the `jsonschema` package; responses cut off by max_tokens
("length") are only checked to be a prefix of valid output where that can be told."""
import concurrent.futures as cf
import json
import random
import re

import httpx
import jsonschema
import pytest


# ---- a generator of varied schemas ----------------------------------------------------------------

def bounded_string(rng):
    kind = rng.randrange(5)
    if kind == 0:
        return {"type": "string", "maxLength": rng.randint(1, 12)}
    if kind == 1:
        return {"type": "string", "minLength": 2, "maxLength": rng.randint(2, 8)}
    if kind == 2:
        return {"type": "string", "pattern": rng.choice(
            [r"^[a-z]{2,6}$", r"^[A-Z][0-9]{3}$", r"^(yes|no)-[0-9]+$", r"^\d{4}-\d{2}-\d{2}$", r"^[a-f0-9]{8}$"])}
    if kind == 3:
        return {"type": "string", "enum": rng.sample(["alpha", "beta", "gamma", "delta", "x y", "\u00e9t\u00e9", "q\"uote"],
                                                     rng.randint(1, 4))}
    return {"const": rng.choice(["fixed", "v1", "\u4e2d\u6587"])}


def number(rng):
    if rng.random() < 0.5:
        lo = rng.randint(-100, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 1000)}
    s = {"type": "number"}
    if rng.random() < 0.7:
        s["minimum"] = -rng.randint(0, 10)
        s["maximum"] = rng.randint(1, 100)
    return s


def leaf(rng):
    r = rng.random()
    if r < 0.35:
        return bounded_string(rng)
    if r < 0.7:
        return number(rng)
    if r < 0.8:
        return {"type": "boolean"}
    if r < 0.9:
        return {"type": ["integer", "null"], "minimum": 0, "maximum": 9}
    return {"enum": [1, 2, "three", None, True]}


def node(rng, depth):
    r = rng.random()
    if depth >= 3 or r < 0.45:
        return leaf(rng)
    if r < 0.65:
        return {"type": "array", "items": node(rng, depth + 1), "minItems": rng.randint(0, 1),
                "maxItems": rng.randint(1, 3)}
    if r < 0.75:
        return {"anyOf": [node(rng, depth + 1), node(rng, depth + 1)]}
    return obj(rng, depth + 1)


def obj(rng, depth):
    n = rng.randint(1, 4)
    names = rng.sample(["id", "name", "tags", "score", "meta", "child", "ok", "kind", "items", "when", "x_1"], n)
    props = {k: node(rng, depth) for k in names}
    required = [k for k in names if rng.random() < 0.8]
    s = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        s["required"] = required
    return s


def with_defs(rng):
    point = {"type": "object", "properties": {"x": number(rng), "y": number(rng)}, "required": ["x", "y"],
             "additionalProperties": False}
    return {"$defs": {"point": point, "label": bounded_string(rng)},
            "type": "object",
            "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"},
                           "label": {"$ref": "#/$defs/label"},
                           "path": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 2}},
            "required": ["start", "label"], "additionalProperties": False}


def schemas(count=56):
    rng = random.Random(20261124)
    out = []
    for i in range(count):
        if i % 8 == 0:
            out.append(with_defs(rng))
        elif i % 8 == 1:
            out.append({"type": "array", "items": obj(rng, 1), "minItems": 1, "maxItems": 2})
        elif i % 8 == 2:
            out.append({"anyOf": [obj(rng, 1), obj(rng, 1)]})
        elif i % 8 == 3:
            out.append({"type": "object", "properties": {"value": leaf(rng)}, "required": ["value"],
                        "additionalProperties": False})
        else:
            out.append(obj(rng, 0))
    return out


# ---- helpers ----------------------------------------------------------------------------------------

def chat(server, max_tokens=400, seed=0, **extra):
    c = server.client(timeout=120)
    r = c.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "Reply in JSON."}],
                                  max_tokens=max_tokens, seed=seed, **extra)
    return r.choices[0]


def post(server, path, body):
    return httpx.post(server.url + path, json={"model": server.model, **body}, timeout=60)


# ---- tests ------------------------------------------------------------------------------------------

def test_json_schema_over_varied_schemas(server):
    all_schemas = schemas()
    assert len(all_schemas) >= 50

    def one(i):
        fmt = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": all_schemas[i], "strict": True}}
        return chat(server, seed=i, response_format=fmt)

    with cf.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(len(all_schemas))))
    finished = 0
    for i, choice in enumerate(results):
        if choice.finish_reason != "stop":
            assert choice.finish_reason == "length"
            continue
        finished += 1
        value = json.loads(choice.message.content)  # raises: not JSON
        jsonschema.validate(value, all_schemas[i])  # raises: does not follow the schema
    # Most schemas bound their strings and arrays, so most outputs end before max_tokens.
    assert finished >= 0.7 * len(all_schemas), f"only {finished} of {len(all_schemas)} finished"


ONE_OF_SCHEMAS = [
    # Branches of different JSON types.
    {"type": "object", "properties": {"contact": {"oneOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]},
                                      "n": {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 9},
                                                      {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}]}},
     "required": ["contact", "n"], "additionalProperties": False},
    # Pydantic's tagged union: oneOf over $refs, told apart by a required const/enum tag.
    {"$defs": {"Cat": {"type": "object", "title": "Cat",
                       "properties": {"pet_type": {"const": "cat"}, "lives": {"type": "integer", "minimum": 1, "maximum": 9}},
                       "required": ["pet_type", "lives"], "additionalProperties": False},
               "Dog": {"type": "object", "title": "Dog",
                       "properties": {"pet_type": {"enum": ["dog"], "type": "string"}, "good": {"type": "boolean"}},
                       "required": ["pet_type", "good"], "additionalProperties": False}},
     "type": "object",
     "properties": {"pets": {"type": "array", "maxItems": 2, "items": {
         "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}], "discriminator": {"propertyName": "pet_type"}}}},
     "required": ["pets"], "additionalProperties": False},
    # Finite branches with no value in common.
    {"oneOf": [{"enum": ["red", "green"]}, {"const": 3}, {"enum": [None, [1, 2]]}]},
]


def test_one_of_with_disjoint_branches_is_enforced(server):
    def one(i):
        fmt = {"type": "json_schema", "json_schema": {"name": f"o{i % 3}", "schema": ONE_OF_SCHEMAS[i % 3]}}
        return chat(server, seed=i, response_format=fmt)

    with cf.ThreadPoolExecutor(6) as ex:
        results = list(ex.map(one, range(12)))
    finished = 0
    for i, choice in enumerate(results):
        if choice.finish_reason != "stop":
            continue
        finished += 1
        jsonschema.validate(json.loads(choice.message.content), ONE_OF_SCHEMAS[i % 3])  # exactly one branch
    assert finished >= 6, f"only {finished} of 12 finished"


FORMATS_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "properties": {f: {"type": "array", "items": {"type": "string", "format": f}, "minItems": 2, "maxItems": 2}
                   for f in ("date", "time", "date-time", "ipv4", "ipv6", "uuid")},
    "required": ["date", "time", "date-time", "ipv4", "ipv6", "uuid"]}


def test_string_formats_pass_jsonschemas_format_checker(server):
    # Random weights pick arbitrary digits: days past the month's end, February 29 of common years,
    # octets with leading zeros and leap seconds must be out of the grammar, not just unlikely.
    validator = jsonschema.Draft202012Validator(FORMATS_SCHEMA,
                                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)

    def one(seed):
        fmt = {"type": "json_schema", "json_schema": {"name": "formats", "schema": FORMATS_SCHEMA}}
        return chat(server, max_tokens=600, seed=seed, response_format=fmt)

    with cf.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(24)))
    finished = [c for c in results if c.finish_reason == "stop"]
    assert len(finished) >= 12, f"only {len(finished)} of 24 finished"
    for c in finished:
        validator.validate(json.loads(c.message.content))


def test_json_object_always_yields_an_object(server):
    def one(seed):
        return chat(server, max_tokens=500, seed=seed, response_format={"type": "json_object"})

    with cf.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(16)))
    finished = [c for c in results if c.finish_reason == "stop"]
    assert finished, "no json_object output finished within max_tokens"
    for c in finished:
        assert isinstance(json.loads(c.message.content), dict)
    for c in results:
        assert c.message.content.lstrip().startswith("{")


def test_regex_choice_grammar_and_aliases(server):
    pattern = r"[a-z]{3}-[0-9]{2,4}(\.[A-Z]{1,3})?"
    for seed in range(6):
        c = chat(server, seed=seed, extra_body={"structured_outputs": {"regex": pattern}})
        assert c.finish_reason == "stop"
        assert re.fullmatch(pattern, c.message.content)
        c = chat(server, seed=seed, extra_body={"guided_regex": pattern})
        assert re.fullmatch(pattern, c.message.content)
    choices = ["Positive", "Negative", "Neutral \u00e9", "mixed \"quotes\""]
    seen = set()
    for seed in range(12):
        c = chat(server, seed=seed, extra_body={"structured_outputs": {"choice": choices}})
        assert c.finish_reason == "stop" and c.message.content in choices
        seen.add(c.message.content)
        assert chat(server, seed=seed, extra_body={"guided_choice": choices}).message.content in choices
    assert len(seen) >= 2
    grammar = 'root ::= "(" num ("+" num)* ")"\nnum ::= [1-9] [0-9]?'
    for seed in range(4):
        for body in ({"structured_outputs": {"grammar": grammar}}, {"guided_grammar": grammar}):
            c = chat(server, seed=seed, extra_body=body)
            assert c.finish_reason == "stop"
            assert re.fullmatch(r"\([1-9][0-9]?(\+[1-9][0-9]?)*\)", c.message.content)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 5}},
              "required": ["n"], "additionalProperties": False}
    for body in ({"guided_json": schema}, {"structured_outputs": {"json": json.dumps(schema)}},
                 {"structured_outputs": {"json": schema, "disable_any_whitespace": True}}):
        c = chat(server, seed=1, extra_body=body)
        assert c.finish_reason == "stop"
        jsonschema.validate(json.loads(c.message.content), schema)
    compact = chat(server, seed=1, extra_body={"structured_outputs": {"json": schema, "disable_any_whitespace": True}})
    # No free whitespace: only xgrammar's fixed separators (", " and ": ").
    assert compact.message.content == json.dumps(json.loads(compact.message.content))


def test_completions_endpoint_and_streaming_match(server):
    c = server.client(timeout=120)
    pattern = r"[0-9]{3}-[a-z]{2,5}"
    r = c.completions.create(model=server.model, prompt="Code:", max_tokens=30, seed=4,
                             extra_body={"structured_outputs": {"regex": pattern}})
    assert r.choices[0].finish_reason == "stop" and re.fullmatch(pattern, r.choices[0].text)
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer", "minimum": 0,
                                                                                "maximum": 99}, "maxItems": 3},
                                               "b": {"enum": ["x", "y"]}},
              "required": ["a", "b"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "ab", "schema": schema}}
    whole = chat(server, seed=7, response_format=fmt)
    stream = c.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "Reply in JSON."}],
                                       max_tokens=400, seed=7, response_format=fmt, stream=True)
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == whole.finish_reason == "stop"
    assert text == whole.message.content
    jsonschema.validate(json.loads(text), schema)
    # n > 1: each sample has its own matcher.
    r = c.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "?"}], n=3, seed=2,
                                  max_tokens=20, extra_body={"structured_outputs": {"choice": ["a1", "b2", "c3"]}})
    assert len(r.choices) == 3 and all(ch.message.content in ("a1", "b2", "c3") for ch in r.choices)


@pytest.mark.parametrize("body,param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": "{not json"}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}},
     "response_format.json_schema.name"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"response_format": "json"}, "response_format"),
    ({"structured_outputs": {"regex": "[a-"}}, "structured_outputs.regex"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
    ({"structured_outputs": {"grammar": "root ::= missing_rule"}}, "structured_outputs.grammar"),
    ({"structured_outputs": {"bogus": 1}}, "structured_outputs.bogus"),
    ({"guided_json": {"type": "integer", "minimum": 5, "maximum": 1}}, "guided_json"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
    ({"guided_json": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}}, "guided_json"),
    ({"structured_outputs": {"json": {"if": {"type": "string"}, "then": {"maxLength": 2}}}}, "structured_outputs.json"),
    # Constraints the grammar engine would not apply (it reads one keyword per schema object).
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "integer", "enum": [1, "a"]}}}}, "response_format.json_schema.schema"),
    ({"guided_json": {"$defs": {"s": {"type": "string"}}, "type": "object",
                      "properties": {"p": {"$ref": "#/$defs/s", "maxLength": 2}}}}, "guided_json"),
    # oneOf whose branches overlap (every integer is a number): anyOf semantics would let an output
    # match both, so it is refused rather than enforced loosely.
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "oneOf": [{"type": "integer"}, {"type": "number"}]}}}}, "response_format.json_schema.schema"),
])
def test_invalid_structured_output_is_a_400_naming_the_field(server, body, param):
    for path, base in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/completions", {"prompt": "hi"})):
        for stream in (False, True):
            r = post(server, path, {**base, **body, "max_tokens": 5, "stream": stream})
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["param"] == param, err
            assert err["type"] == "BadRequestError" and err["message"]
    # The server is still up and serving.
    assert chat(server, max_tokens=3).finish_reason in ("stop", "length")


def test_grammar_metrics_count_compiles_and_cache_hits(server):
    schema = {"type": "object", "properties": {"k": {"enum": ["metrics-probe"]}}, "required": ["k"]}
    for _ in range(3):
        chat(server, max_tokens=50, extra_body={"guided_json": schema})
    text = httpx.get(server.url + "/metrics", timeout=10).text
    compiles = float(re.search(r"^coserve_grammar_compiles_total(?:\{[^}]*\})? (\S+)$", text, re.M).group(1))
    hits = float(re.search(r"^coserve_grammar_cache_hits_total(?:\{[^}]*\})? (\S+)$", text, re.M).group(1))
    assert compiles >= 1 and hits >= 2
