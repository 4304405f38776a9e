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

UNIT_CASES = [
 # (template, context): interpreter features, one or a few per case
 ("{{ 'a' ~ 1 ~ none ~ true }}", {}),
 ("{{ [1, 'x', none, true, 1.5, {'k': 'v'}] }}", {}),
 ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 4 / 2 }}", {}),
 ("{{ 'abc'[::-1] }}{{ [1,2,3,4][1:3] }}{{ 'héllo'[1] }}{{ 'héllo'|length }}", {}),
 ("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}|{% endfor %}", {"xs": ["a","b"]}),
 ("{% for x in xs %}{{ loop.previtem|default('-') }}{{ loop.nextitem|default('-') }}{{ loop.cycle('o','e') }} {% endfor %}", {"xs": [1,2,3]}),
 ("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% else %}empty{% endfor %}", {"xs": [1,2,3,4,5]}),
 ("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", {}),
 ("{% for k, v in d|dictsort %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "A": 2, "c": 3}}),
 ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2}}),
 ("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}", {"xs": [1,2,3]}),
 ("{% set n = 0 %}{% for x in xs %}{% set n = n + x %}{% endfor %}{{ n }}", {"xs": [1,2,3]}),
 ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }}", {}),
 ("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
 ("{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}inner{% endcall %}", {}),
 ("{% set x %}block {{ 1 + 1 }}{% endset %}{{ x|upper }}", {}),
 ("{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
 ("a\n  {% if true %}\n  b\n  {% endif %}\nc", {}),
 ("a  {{- ' b ' -}}  c\n{%- if true %} d{% endif -%}\n  e", {}),
 ("{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}{{ 1 is number }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ true is boolean }}{{ 1 is integer }}{{ 1.0 is float }}", {"x": 1}),
 ("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is in [1,2] }}{{ 'a' is eq 'a' }}{{ x is not none }}{{ true is true }}{{ 0 is false }}", {"x": 0}),
 ("{{ xs|selectattr('on')|map(attribute='n')|join(',') }}|{{ xs|rejectattr('on')|map(attribute='n')|list }}|{{ xs|selectattr('n', 'equalto', 'b')|list|length }}", {"xs": [{"n":"a","on":True},{"n":"b","on":False}]}),
 ("{{ [3,1,2]|sort }}{{ ['b','A','a']|sort }}{{ [3,1,2]|sort(reverse=true) }}{{ ['a','A','b']|unique|list }}{{ [1,2]|reverse|list }}{{ xs|sort(attribute='k')|map(attribute='k')|list }}", {"xs": [{"k": 2}, {"k": 1}]}),
 ("{{ '  x  '|trim }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ 'aaa'|replace('a','b',2) }}|{{ 'x'|upper }}{{ 'Y'|lower }}", {}),
 ("{{ '3'|int + 1 }} {{ 'x'|int }} {{ '2.5'|float }} {{ 3|float }} {{ 2.7|int }} {{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }}", {}),
 ("{{ [1,2,3]|first }}{{ [1,2,3]|last }}{{ [1,2,3]|sum }}{{ [1,5,3]|max }}{{ [4,2,3]|min }}{{ 'a b  c'|wordcount }}{{ [1,2,3,4,5]|batch(2)|list }}", {}),
 ("{{ x|default('d') }}{{ ''|default('e', true) }}{{ none|default('n') }}{{ y|d('z') }}", {}),
 ("{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"'|tojson }}|{{ [1.0, 1e-7, none]|tojson }}", {"d": {"b": [1, {"c": None}], "a": "x"}}),
 ("{{ d|items|list }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.get('a') }}{{ d.get('z', 'no') }}{{ d['a'] }}{{ d.a }}{{ 'a' in d }}", {"d": {"a": 1}}),
 ("{{ ' a b '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x','c')) }}|{{ 'a{}b{}'.format(1, 2) }}|{{ 'ab'.upper() }}", {}),
 ("{{ 'yes' if x else 'no' }}{{ 'yes' if not x }}{{ 1 if x > 2 else 2 if x > 0 else 3 }}", {"x": 1}),
 ("{{ 'lo' in 'hello' }}{{ 3 not in [1,2] }}{{ 1 < 2 and 2 > 3 or 'z' }}{{ not none }}", {}),
 ("{{ '%s is %d years, %.2f' % ('Al', 30, 1.5) }}|{{ '%05.1f'|format(3.14159) }}", {}),
 ("{{ 'line1\nline2\n\nline3'|indent(2) }}|{{ 'a\nb'|indent(4, first=true) }}", {}),
 ("{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ dict(a=1, b=2) }}", {}),
 ("{{ raise_exception('boom ' ~ 42) }}", {}),
 ("{{ x.y.z }}", {}),
 ("{{ x.missing }}|{{ x.missing is defined }}", {"x": {}}),
 ("{{ strftime_now('%Y-%m-%d %d %b') }}", {}),
 ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
 ("{{ (1, 2) }}{{ (1,) }}{{ {'a': (1, 'b')} }}{{ 'it\\'s' }}{{ [\"it's\"] }}", {}),
 ("{{ xs.append(1) }}", {"xs": []}),
 ("{{ {1: 'a', 2: 'b'}[2] }}{% for k, v in {2: 'x', 1: 'y'}|dictsort %}{{ k + 1 }}{{ v }}{% endfor %}", {}),
 ("{{ xs|map('upper')|join('-') }}{{ xs|select('equalto', 'a')|list }}{{ [0, 1, '', 'x']|select|list }}{{ [0, 1]|reject|list }}", {"xs": ["a", "b"]}),
 ("{{ 'a' + 1 }}", {}),
 ("{% for x in [1,2] %}{% if loop.first %}{% set y = 5 %}{% endif %}{{ y }},{% endfor %}", {}),
 ("{% set y = 1 %}{% for x in [1,2] %}{{ y }}{% set y = 5 %}{{ y }},{% endfor %}{{ y }}", {}),
 ("{{ [1,2]|reverse|length }}", {}),
 ("{{ 'héllo wörld'|upper }} {{ 'ÉCOLE Ω'|lower }}", {}),
 # Python's Unicode rules in string methods and filters: whitespace (NBSP, ideographic space,
 # line separators, \x1c-\x1f), strip chars by code point, title/capitalize per code point.
 ("[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ s|trim }}]{{ s.split()|join('|') }}{{ s.split(none, 1)|length }}",
  {"s": "\u00a0\u3000 héllo\u2028wörld \x1c\u2009x\u202f\u0085"}),
 ("{{ s.strip('é~') }}|{{ s.lstrip('~é') }}|{{ s.rstrip('é') }}", {"s": "é~éabcé~é"}),
 ("{{ s.isspace() }}{{ t.isspace() }}{{ ''.isspace() }}{{ u.isspace() }}",
  {"s": "\u00a0\u2003\t\n", "t": "\u200b", "u": "\x1e\x1f"}),
 ("{{ 'élan vital'.title() }}|{{ 'ǆemal 2nd x'.title() }}|{{ 'they\\'re ÉTÉ'.title() }}|{{ 'ßa'.title() }}", {}),
 ("{{ 'éCOLE'.capitalize() }}|{{ 'ǆx'.capitalize() }}|{{ 'ÀB'|capitalize }}|{{ 'émile zola'|title }}", {}),
 ("{{ 'straße ﬁx ŉ'|upper }}|{{ 'İstanbul'|lower|length }}|{{ 'ﬂow'.title() }}|{{ 'STRAẞE'.lower() }}", {}),
 ("{{ 'ΟΔΟΣ ΣΑΣ Σ'|lower }}|{{ 'ΑΣ.'.lower() }}|{{ s.lower() }}|{{ 'ΑΣ\\'Β'.lower() }}", {"s": "Α\u0301Σ ΑΣ\u0301"}),
 ("{{ 'Ωmega'.isalpha() }}{{ '١٢٣'.isdigit() }}{{ 'x١'.isalnum() }}{{ 'ⅫⅢ'.isnumeric() }}{{ 'a b'.isalpha() }}", {}),
 ("{{ '²³'.isdigit() }}{{ '²³'.isdecimal() }}{{ '①⑩'.isdigit() }}{{ '一二三'.isnumeric() }}{{ '一'.isdigit() }}"
  "{{ '½'.isnumeric() }}{{ '½'.isdigit() }}{{ 'x²'.isalnum() }}{{ '万'.isalnum() }}", {}),
 # repr() of strings inside lists and dicts: Python escapes what str.isprintable() rejects
 # (Cc, Cf, Cs, Co, Cn, Zl, Zp, Zs other than the space) as \xhh, \uhhhh or \Uhhhhhhhh.
 ("{{ [s] }}|{{ {'k': s} }}|{{ '%r'|format(s) }}|{{ [t, u] }}",
  {"s": "\u00a0a\u200bb\x85\u2028\u2029\ufeff\u00ad\U0001F600é\U000e0001\ue000\U0010fffd\u3000 \x7f",
   "t": "it's \"q\" \\", "u": "\u0378\u0301ǅ\U0001D400"}),
 # Brackets inside a tag: `}}` closing nested dict literals does not end `{{ ... }}`.
 ("{{ {'a': {'b': [1, {'c': 2}]}} }}|{{ {'n': {'x': 1}}|tojson }}|{{ {'a': 1}}}", {}),
 # Chained comparisons as in Python; str % with a list or Undefined; round of ints.
 ("{{ 3 > 2 > 1 }}{{ 1 < 3 > 2 }}{{ 1 < 0 < x }}{{ 'a' in 'ab' in 'xabx' }}|{{ 'v%s' % [1] }}{{ 'w' % [] }}{{ 'u%s' % y }}"
  "|{{ 7|round(1) }} {{ 25|round(-1) }} {{ 7|round(1, 'floor') }} {{ 2 % 0.1 }} {{ -7.5 // 2 }}", {"x": 5}),
 # for/else: the else block runs when no iteration reached the end of its body.
 ("{% for x in xs %}{% if x %}{% continue %}{% endif %}{% else %}A{% endfor %}|"
  "{% for x in xs %}{% break %}{% else %}B{% endfor %}|{% for x in xs %}{{ x }}{% else %}C{% endfor %}|"
  "{% for x in xs if x > 1 %}{{ loop.changed(x % 2) }}{% endfor %}|{% for x in xs if x if y else 0 %}!{% endfor %}",
  {"xs": [1, 2, 3, 4]}),
 ("{% if a if b else c %}x{% endif %}", {}),
 # More str methods and the filters' own rules (title: upper() of each word's first letter).
 ("{{ 'a b  '.split(none, 1) }}{{ '  a b c '.rsplit(none, 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ 'x\r\ny\u2028z\n'.splitlines() }}"
  "{{ 'ab\ncd'.splitlines(true) }}|{{ 'ab'.center(7, '*') }}{{ 'ab'.ljust(4) }}|{{ 'ab'.rjust(4, '.') }}{{ '-42'.zfill(6) }}"
  "|{{ 'a=b=c'.partition('=') }}{{ 'a=b=c'.rpartition('=') }}{{ 'xy'.partition('#') }}|{{ 'ǅa Ss'.swapcase() }}"
  "{{ 'Straße'.casefold() }}|{{ 'pre_x'.removeprefix('pre_') }}{{ 'x.py'.removesuffix('.py') }}"
  "|{{ 'a\tbc\td'.expandtabs(4) }}|{{ 'abcb'.rindex('b') }}{{ 'Hi There'.istitle() }}{{ 'Hi there'.istitle() }}", {}),
 ("{{ 'ﬁne day'|title }}|{{ 'ǆx-yZ (ab'|title }}|{{ '-3' is upper }}{{ 'AB1' is upper }}{{ 3 is lower }}|"
  "{{ [1, 2, 3, 4, 5]|slice(2)|list }}{{ 'abc'|slice(2, 'x')|list }}|{{ 'upper' is filter }}{{ 'nope' is filter }}"
  "|{{ [x] }}{{ x is sequence }}{{ x is callable }}{{ xs.copy() }}|{{ 'a\u2028b'|indent(2) }}", {"xs": [1]}),
 ("{% macro m(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3) }}{{ m(1) }}", {}),
 # {% raw %}: the text between is output as it is, with the whitespace rules around it.
 ("a{% raw %}{{ x }}{% if %}{% endraw %}b|{%- raw -%} {{ y }} {%- endraw -%} |x\n  {% raw %}\n  {{ a }}\n  {% endraw %}\n  y", {}),
 ("{% raw %}never closed", {}),
 # {% with %}, recursive loops, groupby.
 ("{% set a = 5 %}{% with a = a + 1, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}|"
  "{% for x in [[1, [2]], [3]] recursive %}<{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{{ loop.depth }}{% endif %}>{% endfor %}|"
  "{% for g in ms|groupby('role') %}{{ g.grouper }}={{ g.list|map(attribute='c')|join(',') }};{% endfor %}"
  "{% for r, l in ms|groupby('role') %}{{ r }}{{ l|length }}{% endfor %}{{ ms|groupby('x', default='-')|list|length }}",
  {"ms": [{"role": "user", "c": "a"}, {"role": "system", "c": "b"}, {"role": "User", "c": "d"}]}),
 # striptags, filesizeformat, urlencode, xmlattr; str.isidentifier; odd/even of floats; ceil and
 # floor never give -0.0.
 ("{{ s|striptags }}|{{ '<!-- open'|striptags }}|{{ 3|striptags }}|{{ 0|filesizeformat }} {{ 1|filesizeformat }} "
  "{{ 999|filesizeformat }} {{ 1500000|filesizeformat }} {{ 1024|filesizeformat(true) }} {{ (-5.5)|filesizeformat }} "
  "{{ ' 2048 '|filesizeformat(binary=true) }} {{ 1e300|filesizeformat }}|{{ 'a b/c?d=é&~'|urlencode }} {{ d|urlencode }} "
  "{{ [('k&', 'v/='), ['a', 'b c']]|urlencode }} {{ 42|urlencode }}|<x{{ d|xmlattr }}><y{{ d|xmlattr(false) }}><z{{ {}|xmlattr }}>",
  {"s": "Hello <b>World</b> &amp; &lt;x&gt; &#65;&#x42; <!-- c <i> --> end  \n tail",
   "d": {"class": "a b", "id": 3, "n": None, "q": "x\"<y>&'"}}),
 ("{{ 'abc'.isidentifier() }}{{ '_x1'.isidentifier() }}{{ '1x'.isidentifier() }}{{ ''.isidentifier() }}"
  "{{ 'a-b'.isidentifier() }}{{ 'e\u0301'.isidentifier() }}{{ 'Ⅻ'.isidentifier() }}|{{ 2.5 is even }}{{ 0.1 is even }}"
  "{{ 3.0 is odd }}{{ 4.0 is even }}{{ -3.0 is odd }}{{ 3.5 is odd }}|{{ -0.5|round(0, 'ceil') }} {{ -0.4|round }} "
  "{{ -0.5|round(0, 'floor') }} {{ -0.04|round(1, 'ceil') }}", {}),
 ("{{ {'a b': 1}|xmlattr }}", {}),
 # str.format's mini-language and %-formatting beyond %s/%d.
 ("{{ '{:.2f}|{:>6}|{:*^9}|{:=+8}|{:08.3f}|{:,}|{:_x}|{:#b}|{:.3}|{:.3}|{:e}|{:.1%}|{!r:>6}|{:c}'.format("
  "x, s, s, n, x, 1234567, 65535, 5, 100.0, x, 1234.5, 0.256, s, 9731) }}|{{ '{0}{1}{0}'.format('a', 'b') }}"
  "|{{ '{a[0]}-{b.k}-{b[k]}'.format(a=l, b=d) }}|{{ '{:{w}.{p}f}'.format(x, w=9, p=1) }}|{{ '{!a}'.format(u) }}"
  "|{{ '%(k)s=%(k)05.1f' % d2 }}|{{ '%c%c|%5.2s|%+d|% d|%#x|%#o|%E|%G|%.0f|%d|%*d|%-*d|' % (65, 'é', u, 5, 5, 255, 8, "
  "12345.678, 1e-10, 2.5, 3.9, 4, 7, 3, 2) }}{{ '%10s|%-6s|%a|%r' % (u, s, u, u) }}",
  {"x": 3.14159, "s": "ab", "n": 42, "l": [1, 2], "d": {"k": "v"}, "d2": {"k": 2.25}, "u": "日本語"}),
 ("{{ '{:d}'.format('x') }}", {}),
 ("{{ '{}{}'.format(1) }}", {}),
 ("{{ '{0}{}'.format(1, 2) }}", {}),
 ("{{ '%d' % 'x' }}", {}),
 ("{{ '%(a)s %s' % {'a': 1} }}", {}),
 ("{{ 'x'|filesizeformat }}", {}),
 ("{{ x|int }}", {}),
 ("{{ 5|indent(2) }}", {}),
 ("{{ 'a' % 'b' }}", {}),
 ("{{ none.x }}", {}),
 ("{% if %}", {}),
 ("{% for x in xs %}{{ x }}", {"xs": [1]}),
]


def write_units(env):
    """units.json: small templates exercising one feature each, rendered by jinja2."""
    out = []
    for source, context in UNIT_CASES:
        case = {"template": source, "context": context}
        try:
            case["output"] = env.from_string(source).render(**context)
            case["ok"] = True
        except RaisedError as e:
            case.update(ok=False, raised=str(e))
        except jinja2.TemplateSyntaxError as e:
            case.update(ok=False, syntax_error=str(e))
        except Exception as e:
            case.update(ok=False, error=f"{type(e).__name__}: {e}")
        out.append(case)
    with open(os.path.join(OUT, "units.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


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
    write_units(env)
    print(f"wrote {len(paths)} template fixtures and {len(UNIT_CASES)} unit cases to {OUT}")


if __name__ == "__main__":
    main()
