#!/usr/bin/env python3
"""Random Jinja templates rendered by coserve's interpreter and by jinja2 side by side.

Each case is one to three random statements (output expressions with literals, variables,
operators, filters, tests, str/dict/list methods, slices, conditionals; for loops with filters,
loop variables, break/continue and else; if/elif/else; set, namespace, macros, filter and set
blocks; whitespace control) over a fixed context. jinja2 renders with the environment transformers
uses for chat templates (tests/reference/make_chat_template_fixtures.py); coserve renders through
`coserve chat-template`. A case counts as matching when both outputs are equal or both raise.
Differences are printed; the known ones are listed in docs/agent-api.md ("Chat templates: how
close to jinja2").

usage: tests/reference/diff_jinja_vs_jinja2.py [--bin build/bin/coserve] [--seed S] [--cases N]
needs: jinja2 (PyPI); run from the project root.
"""
import argparse
import copy
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_chat_template_fixtures import make_env  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/bin/coserve")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--cases", type=int, default=500)
args = ap.parse_args()
R = random.Random(args.seed)
env = make_env()

STRS = ["'abc'", "'Hello World'", "' pad '", "'a,b,,c'", "''", "'x y  z'", "'日本語'", "'ǅx'", "'ß'", "'İi'",
        "'\\n line\\nnext\\n'", "'42'", "'-3'", "'3.5'", "'AbC'", "'{}-{}'", "'%s=%d'", "'a\\tb'", "'ﬁne'", "'Σσς'"]
NUMS = ["0", "1", "2", "-3", "7", "10", "2.5", "-0.5", "1e3", "0.1", "3.0", "100"]
VARS = ["s", "n", "f", "l", "d", "b", "msgs", "e", "nums", "u", "z", "t"]
FILT0 = ["length", "count", "upper", "lower", "title", "capitalize", "trim", "first", "last", "int", "float",
         "string", "list", "sort", "reverse", "unique", "tojson", "items", "dictsort", "abs", "round", "sum",
         "min", "max", "wordcount", "safe", "e", "escape", "lower|upper", "join", "center", "indent", "striptags",
         "length > 2", "float|round", "list|length", "map('upper')|list", "map('string')|join('-')",
         "selectattr('role', 'equalto', 'user')|list", "rejectattr('role', 'eq', 'user')|list",
         "map(attribute='role')|list", "map(attribute='content')|join", "select('odd')|list", "reject('even')|list",
         "selectattr('content')|list", "join(', ')", "join('|', attribute='role')", "default('D')",
         "default('D', true)", "replace('a', 'X')", "replace('', '-')", "round(1)", "round(1, 'floor')",
         "round(0, 'ceil')", "tojson(indent=2)", "tojson(indent=4)", "center(11)", "indent(2)", "indent(2, true)",
         "indent(3, first=true, blank=true)", "batch(2)|list", "slice(2)|list", "sort(reverse=true)",
         "sort(attribute='role')", "groupby('role')|list", "sum(start=10)", "first|upper", "truncate(5)",
         "trim('a')", "format(1, 2)", "int(7)", "float(0.5)", "string|length", "unique|list", "attr('role')",
         "dictsort(reverse=true)", "items|list", "list|first", "pprint", "wordwrap(5)", "urlencode", "xmlattr",
         "min(attribute='role')", "max(case_sensitive=true)", "random|length >= 0", "filesizeformat", "title|trim",
         "unique(case_sensitive=true)|list", "map('int')|sum", "map('abs')|list", "tojson|length", "lower|e",
         "split", "capitalize|replace('L', '_')", "reverse|join"]
METH = ["strip()", "lstrip()", "rstrip()", "strip('a')", "split()", "split(',')", "split(',', 1)", "rsplit(',', 1)",
        "startswith('a')", "endswith('c')", "startswith(('H', 'a'))", "replace('a', 'b')", "replace('l', 'L', 1)",
        "upper()", "lower()", "title()", "capitalize()", "find('b')", "count('a')", "isdigit()", "isalpha()",
        "isspace()", "isupper()", "islower()", "isalnum()", "splitlines()", "format(1, 2)", "zfill(5)", "center(9)",
        "ljust(6, '*')", "rjust(6)", "partition(',')", "rpartition(',')", "swapcase()", "casefold()", "index('b')",
        "removeprefix('a')", "removesuffix('c')", "join(['x', 'y'])", "expandtabs(4)", "istitle()", "isnumeric()",
        "isdecimal()", "isidentifier()", "encode()", "items()", "keys()", "values()", "get('k')", "get('k', 1)",
        "get('zz', 'none')", "copy()", "index(2)", "count(2)", "append(1)", "pop()", "update({})", "__class__",
        "splitlines(true)", "split(none, 1)", "lstrip('H ')", "title().split()", "strip().upper()"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable",
         "sequence", "odd", "even", "divisibleby(3)", "in([1, 2, 'abc'])", "eq(2)", "true", "false", "boolean",
         "lower", "upper", "sameas(none)", "callable", "escaped", "gt(1)", "ge(2)", "lt(3)", "ne('x')", "filter",
         "test", "le 5", "greaterthan(1)", "lessthan 3", "equalto 2"]
OPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in", "not in"]


def atom(d):
    r = R.random()
    if r < 0.25: return R.choice(STRS)
    if r < 0.4: return R.choice(NUMS)
    if r < 0.75:
        v = R.choice(VARS)
        r2 = R.random()
        if r2 < 0.1: return v + "[0]"
        if r2 < 0.15: return v + "[-1]"
        if r2 < 0.2: return v + R.choice(["[1:3]", "[::-1]", "[::2]", "[:-1]", "[2:]", "[-2:]"])
        if r2 < 0.25: return v + R.choice([".k", "['k']", ".role", "[0].role", "[0]['content']", ".items()", ".x"])
        return v
    if r < 0.8: return R.choice(["true", "false", "none", "True", "False", "None"])
    if r < 0.88: return "[" + ", ".join(expr(d + 1) for _ in range(R.randint(0, 3))) + "]"
    if r < 0.93: return "{" + ", ".join(f"{R.choice(STRS)}: {expr(d + 1)}" for _ in range(R.randint(0, 2))) + "}"
    if r < 0.96: return "(" + expr(d + 1) + ", " + expr(d + 1) + ")"
    return "range(" + R.choice(["3", "1, 4", "5, 0, -2", "n", "0"]) + ")"


def expr(d=0):
    if d > 2: return atom(d)
    r = R.random()
    if r < 0.3: return atom(d)
    if r < 0.5: return f"{atom(d)}|{R.choice(FILT0)}"
    if r < 0.62: return f"{atom(d)}.{R.choice(METH)}"
    if r < 0.72: return f"{atom(d)} {R.choice(OPS)} {expr(d + 1)}"
    if r < 0.8: return f"{atom(d)} is {R.choice(['', 'not '])}{R.choice(TESTS)}"
    if r < 0.85: return f"({expr(d + 1)}) if {expr(d + 1)} else ({expr(d + 1)})"
    if r < 0.9: return f"not {atom(d)}"
    if r < 0.93: return f"-{atom(d)}"
    if r < 0.96: return f"({expr(d + 1)})|{R.choice(FILT0)}"
    return f"{atom(d)} ~ {atom(d)}"


def stmt(d=0):
    r = R.random()
    if d > 1 or r < 0.45: return "{{ " + expr() + " }}" + R.choice(["", " ", "\n", ","])
    if r < 0.6:
        it = R.choice(["l", "msgs", "d", "d.items()", "s", "nums", "range(3)", "e", "u", "n", "d|dictsort"])
        var = R.choice(["x", "k, v"]) if "items" in it or "dictsort" in it else "x"
        body = "".join(stmt(d + 1) for _ in range(R.randint(1, 2)))
        extra = R.choice(["", "{{ loop.index }}", "{{ loop.index0 }}{{ loop.first }}", "{{ loop.last }}{{ loop.length }}",
                          "{{ loop.revindex }}", "{{ loop.previtem }}", "{{ loop.nextitem }}", "{{ loop.cycle('a','b') }}",
                          "{% if loop.index > 1 %}{% break %}{% endif %}", "{% if x == 2 %}{% continue %}{% endif %}",
                          "{{ loop.depth }}", "{{ loop.changed(x) }}"])
        cond = R.choice(["", "", f" if {expr(2)}"])
        els = R.choice(["", "", "{% else %}empty"])
        return f"{{%{R.choice(['', '-'])} for {var} in {it}{cond} %}}{body}{extra}{els}{{% endfor {R.choice(['', '-'])}%}}"
    if r < 0.72:
        out = f"{{% if {expr(1)} %}}{stmt(d + 1)}"
        if R.random() < 0.4: out += f"{{% elif {expr(1)} %}}{stmt(d + 1)}"
        if R.random() < 0.5: out += f"{{% else %}}{stmt(d + 1)}"
        return out + "{% endif %}"
    if r < 0.8: return f"{{% set q = {expr(1)} %}}{{{{ q }}}}"
    if r < 0.85: return "{% set ns = namespace(a=0, s='') %}{% for x in " + R.choice(["l", "nums", "s"]) + " %}{% set ns.a = ns.a + 1 %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.a }}{{ ns.s }}"
    if r < 0.9: return "{% macro m(a, b=2, c='z') %}[{{ a }}|{{ b }}|{{ c }}|{{ varargs }}|{{ kwargs }}]{% endmacro %}{{ m(" + R.choice(["1", "1, 3", "b=5, a=1", "1, 2, 3, 4", "c=none, a=s", "x=1, a=1", ""]) + ") }}"
    if r < 0.93: return "{% filter " + R.choice(["upper", "trim", "title", "indent(2)", "replace('a', 'b')"]) + " %} " + stmt(d + 1) + " {% endfilter %}"
    if r < 0.96: return "{% set blk %}" + stmt(d + 1) + "{% endset %}[{{ blk }}]{{ blk|length }}"
    return "{%- if true -%}\n  " + stmt(d + 1) + "\n{%- endif %}\n"


CTX = {"s": "Hello, abc", "n": 2, "f": 2.5, "l": [3, 1, "a", 2], "nums": [3, -1, 2, 7, 0.5], "b": True,
       "d": {"k": "v", "b": 2, "a": [1, 2]}, "e": [], "z": None, "t": "  Mixed Case\tText \n",
       "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None},
                {"role": "user", "content": "yo", "x": 1}]}


def main():
    same = both = bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        ctx_file = os.path.join(tmp, "ctx.json")
        with open(ctx_file, "w") as f:
            json.dump(CTX, f)
        tpl = os.path.join(tmp, "t.jinja")
        for _ in range(args.cases):
            src = "".join(stmt() for _ in range(R.randint(1, 3)))
            try:
                want, want_err = env.from_string(src).render(**copy.deepcopy(CTX)), None
            except Exception as ex:  # noqa: BLE001 - any jinja2 failure counts as "raised"
                want, want_err = None, f"{type(ex).__name__}: {ex}"
            with open(tpl, "w") as f:
                f.write(src)
            r = subprocess.run([args.bin, "chat-template", tpl, "--input", ctx_file, "--now", "0"],
                               capture_output=True, timeout=30)
            if r.returncode not in (0, 3):
                print("CRASH", r.returncode, repr(src), r.stderr.decode()[-300:])
                bad += 1
                continue
            got = r.stdout.decode() if r.returncode == 0 else None
            if want is None and got is None:
                both += 1
            elif want == got:
                same += 1
            else:
                bad += 1
                print("DIFF", repr(src))
                print("   jinja2: ", repr(want) if want is not None else want_err)
                print("   coserve:", repr(got) if got is not None else r.stderr.decode().strip()[:300])
    print(json.dumps({"cases": args.cases, "same": same, "both_raised": both, "different": bad}))


if __name__ == "__main__":
    main()
