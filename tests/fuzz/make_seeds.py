#!/usr/bin/env python3
"""Writes the fuzz seed corpora into OUT/<target>/: files from ../shared/testdata (chat templates,
small JSON files, conversations, tokenizer.json files cut down to a small vocabulary, token-id test
texts) plus small hand-made inputs. Usage: make_seeds.py OUT TESTDATA"""
import hashlib
import json
import struct
import sys
from pathlib import Path

out_root, testdata = Path(sys.argv[1]), Path(sys.argv[2])


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = out_root / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def small_json_files():
    for p in sorted(testdata.rglob("*.json")):
        if p.stat().st_size <= 64 * 1024 and p.name != "tokenizer.json":
            yield p


# json: small JSON files from the test data and edge cases.
for p in small_json_files():
    put("json", p.read_bytes())
for s in ['{}', '[]', '0', '-0.0', '1e308', '123456789012345678901234567890', '"\\ud83d\\ude00\\u0000"',
          '{"a":[1,2.5,true,false,null,{"b":"c"}],"a":2}', '[[[[[[[[[[]]]]]]]]]]', '"\xc3\xa9\\n\\t"']:
    put("json", s)

# jinja: real chat templates and llama.cpp's inline cases.
for p in sorted(testdata.glob("chat-templates/**/*.jinja")):
    put("jinja", p.read_bytes())
for p in sorted(testdata.glob("chat-templates/llama.cpp-inline-cases*.json")):
    try:
        cases = json.loads(p.read_text())
    except ValueError:
        continue
    for c in cases if isinstance(cases, list) else cases.get("cases", []):
        t = c.get("template") if isinstance(c, dict) else None
        if isinstance(t, str):
            put("jinja", t)
for s in ["{% for m in messages %}{{ m.role ~ ': ' ~ m.content | trim }}\n{% endfor %}",
          "{% macro f(x, y=2) %}{{ x * y }}{{ caller() if caller is defined }}{% endmacro %}"
          "{% call f(3) %}c{% endcall %}{{ range(5) | join(',') }}",
          "{% set ns = namespace(a=0) %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}",
          "{{ (tools | tojson(indent=2))[:40] }}{{ 'x' * 3 }}{{ 2 ** 10 // 3 % 5 }}{{ messages[-1]['content'][::-1] }}",
          "{%- if add_generation_prompt -%}{{ bos_token }}<|assistant|>{%- endif -%}{{ raise_exception('no') }}"]:
    put("jinja", s)

# openai_request: first byte = (prompt tokens << 1) | chat.
chat_bodies, completion_bodies = [], [
    {"model": "fuzz-model", "prompt": "Hello", "max_tokens": 8, "temperature": 0.5, "stop": ["\n"]},
    {"prompt": [[1, 2, 3], [4]], "n": 2, "logprobs": 3, "echo": True, "seed": -1, "logit_bias": {"7": -100}},
    {"prompt": [1, 2, 999], "stream": True, "stream_options": {"include_usage": True}, "top_k": 5, "min_p": 0.1},
]
inputs = testdata / "chat-templates/goldens/inputs.json"
if inputs.exists():
    try:
        doc = json.loads(inputs.read_text())
    except ValueError:
        doc = {}
    convs = doc.get("conversations", doc) if isinstance(doc, dict) else {}
    for conv in (convs.values() if isinstance(convs, dict) else convs):
        msgs = conv.get("messages") if isinstance(conv, dict) else conv
        if isinstance(msgs, list):
            chat_bodies.append({"model": "fuzz-model", "messages": msgs, "max_completion_tokens": 4})
chat_bodies.append({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                    "logprobs": True, "top_logprobs": 2, "tools": [], "chat_template_kwargs": {"x": 1},
                    "add_generation_prompt": False, "stop_token_ids": [2], "user": "u"})
for b in completion_bodies:
    put("openai_request", bytes([4 << 1]) + json.dumps(b).encode())
for b in chat_bodies:
    put("openai_request", bytes([(8 << 1) | 1]) + json.dumps(b).encode())

# http_request: first byte = chunk size - 1.
for req in [b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n"
            b"{\"prompt\":\"hi\"}\r\n",
            b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
            b"4\r\n{\"a\"\r\n3;x=1\r\n:1}\r\n0\r\n\r\n",
            b"GET /v1/models?x=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n"]:
    put("http_request", bytes([0xff]) + req)
    put("http_request", bytes([6]) + req)


# tokenizer_load: each tokenizer.json cut down to its first 200 tokens and the merges among them
# (Unigram: its first 200 pieces; a Precompiled map, hundreds of KB, left out).
def shrink(tok):
    model = tok.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, list):
        model["vocab"] = vocab[:200]
    norm = tok.get("normalizer") or {}
    if norm.get("type") == "Sequence":
        norm["normalizers"] = [n for n in norm["normalizers"] if n.get("type") != "Precompiled"]
    if isinstance(vocab, dict):
        keep = dict(sorted(vocab.items(), key=lambda kv: kv[1])[:200])
        model["vocab"] = keep
        merges = []
        for m in model.get("merges") or []:
            a, b = m.split(" ", 1) if isinstance(m, str) else (m + ["", ""])[:2]
            if a in keep and b in keep and a + b in keep:
                merges.append(m)
        model["merges"] = merges[:100]
    tok["added_tokens"] = (tok.get("added_tokens") or [])[:8]
    return tok


fixtures = Path(__file__).resolve().parents[1] / "reference" / "fixtures" / "tokenizer"
for p in sorted(testdata.glob("tokenizers/*/tokenizer.json")) + sorted(fixtures.glob("synthetic-*.tokenizer.json")):
    try:
        put("tokenizer_load", json.dumps(shrink(json.loads(p.read_text())), ensure_ascii=False))
    except (ValueError, AttributeError, TypeError):
        continue

# tokenizer_encode: test texts; first byte selects tokenizer and flags (see the target).
texts = ["Hello world", " leading and  double  spaces\n\n\ttabs", "ŝŭpëŕ ĉåŝë 漢字 😀 \u200b", "<|im_start|>user<|im_end|>", "   "]
for p in sorted(testdata.glob("vocab-vectors/*.json")):
    try:
        cases = json.loads(p.read_text()).get("cases", [])
    except ValueError:
        continue
    texts += [c["text"] for c in cases[:20] if isinstance(c, dict) and isinstance(c.get("text"), str)]
for i, t in enumerate(texts):
    put("tokenizer_encode", bytes([i % 128]) + t.encode())
put("tokenizer_encode", bytes([32]) + struct.pack("<8H", 15496, 995, 0, 50256, 65535, 1, 32000, 13))


# safetensors: small valid files (F32, F16, BF16, metadata, empty tensor) and broken headers.
def st(header, data=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", st({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16)))
put("safetensors", st({"__metadata__": {"format": "pt"}, "a": {"dtype": "F16", "shape": [3], "data_offsets": [0, 6]},
                       "b": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [6, 10]},
                       "e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [10, 10]}}, bytes(10)))
put("safetensors", st({"x": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8)))
put("safetensors", st({"x": {"dtype": "F32", "shape": [4], "data_offsets": [8, 4]}}, bytes(16)))
put("safetensors", struct.pack("<Q", 1 << 40) + b"{}")


# gguf: small valid GGUF files (header, metadata of every kind incl. string arrays, tiny tensors of
# several ggml types, default and custom alignment, version 2 and 3) and a few broken ones.
GGUF_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, value):
    if vtype == 8:
        return gguf_str(value)
    if vtype == 9:
        elem, items = value
        out = struct.pack("<IQ", elem, len(items))
        return out + b"".join(gguf_value(elem, x) for x in items)
    return struct.pack("<" + GGUF_SCALAR[vtype], value)


def gguf_file(kvs, tensors, alignment=32, version=3):
    """kvs: [(key, value type, value)]; tensors: [(name, ggml type, dims (contiguous first), bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, value in kvs:
        out += gguf_str(key) + struct.pack("<I", vtype) + gguf_value(vtype, value)
    data = b""
    for name, gtype, dims, raw in tensors:
        offset = -(-len(data) // alignment) * alignment
        data = data.ljust(offset, b"\0") + raw
        out += gguf_str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}q", *dims)
        out += struct.pack("<IQ", gtype, offset)
    if tensors:
        out = out.ljust(-(-len(out) // alignment) * alignment, b"\0")
    return out + data


def f16(x):
    return struct.pack("<e", x)


def gguf_block(gtype, seed):
    """One block of ggml type gtype with a finite f16 scale (and min) and varied quants."""
    body = bytes((seed * 31 + 7 * i) & 0xFF for i in range(256))
    if gtype == 8:  # Q8_0
        return f16(0.125) + body[:32]
    if gtype == 2:  # Q4_0
        return f16(-0.5) + body[:16]
    if gtype == 12:  # Q4_K: d, dmin, scales[12], qs[128]
        return f16(0.25) + f16(0.0625) + body[:12] + body[12:140]
    if gtype == 13:  # Q5_K: d, dmin, scales[12], qh[32], qs[128]
        return f16(0.25) + f16(0.0625) + body[:12] + body[12:44] + body[44:172]
    if gtype == 14:  # Q6_K: ql[128], qh[64], scales[16], d
        return body[:128] + body[128:192] + body[192:208] + f16(0.5)
    raise ValueError(gtype)


GGUF_KVS = [("general.architecture", 8, "llama"), ("general.name", 8, "fuzz seed"),
            ("llama.block_count", 4, 2), ("llama.context_length", 4, 4096), ("llama.embedding_length", 4, 64),
            ("llama.rope.freq_base", 6, 10000.0), ("llama.attention.layer_norm_rms_epsilon", 6, 1e-5),
            ("t.u8", 0, 255), ("t.i8", 1, -128), ("t.u16", 2, 65535), ("t.i16", 3, -32768), ("t.i32", 5, -7),
            ("t.bool", 7, True), ("t.u64", 10, 2**64 - 1), ("t.i64", 11, -(2**63)), ("t.f64", 12, 3.5),
            ("tokenizer.ggml.model", 8, "gpt2"),
            ("tokenizer.ggml.tokens", 9, (8, ["<s>", "</s>", "a", "b", "ab", " ", "\u00e9", ""])),
            ("tokenizer.ggml.scores", 9, (6, [0.0, -1.0, -2.5, 3.0])),
            ("tokenizer.ggml.token_type", 9, (5, [3, 3, 1, 1, 1, 1, 1, 4])),
            ("tokenizer.ggml.merges", 9, (8, ["a b"])),
            ("t.empty_array", 9, (4, [])), ("t.bools", 9, (7, [True, False]))]
GGUF_TENSORS = [("token_embd.weight", 0, [4, 2], struct.pack("<8f", *[0.5 * i - 1 for i in range(8)])),
                ("blk.0.attn_q.weight", 8, [32, 2], gguf_block(8, 1) + gguf_block(8, 2)),
                ("blk.0.ffn_down.weight", 12, [256], gguf_block(12, 3))]
put("gguf", gguf_file(GGUF_KVS, GGUF_TENSORS))
put("gguf", gguf_file([("general.architecture", 8, "llama"), ("general.alignment", 4, 64)], GGUF_TENSORS,
                      alignment=64, version=2))
put("gguf", gguf_file(GGUF_KVS[:3] + GGUF_KVS[17:21], []))
put("gguf", gguf_file([("general.alignment", 4, 8)],
                      [("f16", 1, [3], f16(1.0) + f16(-2.0) + f16(65504.0)),
                       ("bf16", 30, [2, 1, 1], b"\x80\x3f\x00\xc0"),
                       ("q4_0", 2, [32], gguf_block(2, 4)),
                       ("q5_k", 13, [256], gguf_block(13, 5)),
                       ("q6_k", 14, [256, 1], gguf_block(14, 6))], alignment=8))
put("gguf", gguf_file([], [("q2_k", 10, [256], bytes(84))]))  # unsupported tensor type
put("gguf", gguf_file([("k", 4, 1), ("k", 4, 2)], []))  # duplicate key
put("gguf", gguf_file([], [("a", 0, [8], bytes(32)), ("a", 0, [8], bytes(32))]))  # duplicate tensor
put("gguf", gguf_file([], [("q8", 8, [33], bytes(34))]))  # not a whole number of blocks
put("gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_str("nested") + struct.pack("<IIQ", 9, 9, 1))
