"""Tokenizers read from GGUF metadata (tokenizer.ggml.*) against outside references.

1. llama.cpp's vocabulary-only GGUF files (made by its converter; scripts/deps unpacks them from the
   llama-cpp-python sdist) with their .inp strings and .out ids (Hugging Face tokenizers'
   ids, add_special_tokens=False): `coserve tokenize FILE.gguf` must give every .out line.
2. The same GGUF files against the testdata tokenizer.json of the same model: the tokenizer fixture
   strings (tests/reference/fixtures/tokenizer, ids from Hugging Face tokenizers) give the same
   ids, and the same decoded text.
3. The chat template: a GGUF carrying a testdata model's template renders every golden
   conversation exactly as the model folder does.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import skip_or_fail_in_ci

REPO = Path(__file__).resolve().parents[2]
TESTDATA = REPO.parent / "shared" / "testdata"
FIXTURES = REPO / "tests" / "reference" / "fixtures" / "tokenizer"
SEPARATOR = "\n__ggml_vocab_test__\n"
VOCABS = ["gpt-2", "llama-bpe", "qwen2", "llama-spm", "phi-3", "mpt", "starcoder", "refact", "deepseek-coder",
          "deepseek-llm", "command-r", "qwen35", "bert-bge"]
# llama.cpp vocabulary file -> the testdata tokenizer of the same model.
SAME_MODEL = {"gpt-2": "gpt2", "qwen2": "qwen2", "phi-3": "phi-3-mini"}


def vocab_dir():
    cache = Path(os.environ.get("COSERVE_CACHE", Path.home() / ".cache" / "coserve"))
    d = cache / "deps" / "llama-vocab-0.3.36"
    if not (d / ".complete").exists():
        skip_or_fail_in_ci(f"{d} not found (scripts/deps unpacks llama.cpp's vocabulary files there)")
    return d


def run_lines(binary, cmd, path, lines, *flags):
    p = subprocess.run([binary, cmd, str(path), *flags], input="".join(json.dumps(x) + "\n" for x in lines),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(out) == len(lines)
    return out


def read_cases(path):
    text = (path.parent / (path.name + ".inp")).read_text(encoding="utf-8")
    if text.endswith(SEPARATOR):
        text = text[: -len(SEPARATOR)]
    inputs = text.split(SEPARATOR)
    outputs = (path.parent / (path.name + ".out")).read_text(encoding="utf-8").split("\n")
    outputs = [[int(x) for x in line.split()] for line in outputs[: len(inputs)]]
    assert len(outputs) == len(inputs)
    return inputs, outputs


@pytest.mark.parametrize("vocab", VOCABS)
def test_llama_cpp_vocab_cases(coserve_bin, vocab):
    path = vocab_dir() / f"ggml-vocab-{vocab}.gguf"
    inputs, expected = read_cases(path)
    got = run_lines(coserve_bin, "tokenize", path, inputs)
    bad = [(s, g, e) for s, g, e in zip(inputs, got, expected) if g != e]
    assert not bad, f"{len(bad)} of {len(inputs)} differ; first: {bad[0]!r}"


@pytest.mark.parametrize("vocab", sorted(SAME_MODEL))
def test_gguf_matches_tokenizer_json(coserve_bin, vocab):
    name = SAME_MODEL[vocab]
    folder = TESTDATA / "tokenizers" / name
    if not folder.is_dir():
        skip_or_fail_in_ci(f"{folder} not found")
    path = vocab_dir() / f"ggml-vocab-{vocab}.gguf"
    cases = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))["cases"]
    texts = [c["text"] for c in cases]
    from_gguf = run_lines(coserve_bin, "tokenize", path, texts)
    from_json = run_lines(coserve_bin, "tokenize", folder, texts)
    for c, g, j in zip(cases, from_gguf, from_json):
        assert g == c["ids"], f"{c['text']!r}: GGUF {g} vs Hugging Face {c['ids']}"
        assert j == g
    decoded = run_lines(coserve_bin, "detokenize", path, [c["ids"] for c in cases])
    for c, d in zip(cases, decoded):
        assert d == c["decode"], f"{c['ids']}: GGUF decodes {d!r}, Hugging Face {c['decode']!r}"


def test_gguf_special_tokens_split_out(coserve_bin):
    # Control tokens of the GGUF (token type 3) are matched as whole tokens, as in Hugging Face.
    path = vocab_dir() / "ggml-vocab-qwen2.gguf"
    [ids] = run_lines(coserve_bin, "tokenize", path, ["<|im_start|>user\nhi<|im_end|>"])
    assert ids[0] == 151644 and ids[-1] == 151645, ids


def gguf_with_template(tmp_path, template):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "template.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_chat_template_renders_as_folder(coserve_bin, tmp_path):
    goldens = TESTDATA / "chat-templates" / "goldens"
    if not goldens.is_dir():
        skip_or_fail_in_ci(f"{goldens} not found")
    folder = TESTDATA / "tokenizers" / "qwen2.5"
    template = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))["chat_template"]
    path = gguf_with_template(tmp_path, template)
    inputs = json.loads((goldens / "inputs.json").read_text(encoding="utf-8"))
    rendered = 0
    for key, conv in inputs["conversations"].items():
        variables = {"messages": conv, "add_generation_prompt": True}
        if key == "tools":
            variables["tools"] = inputs["tools"]
        inp = tmp_path / f"in-{rendered}.json"
        inp.write_text(json.dumps(variables), encoding="utf-8")
        a = subprocess.run([coserve_bin, "chat-template", str(path), "--input", str(inp), "--now", "0"],
                           capture_output=True, text=True, timeout=60)
        b = subprocess.run([coserve_bin, "chat-template", str(folder), "--input", str(inp), "--now", "0"],
                           capture_output=True, text=True, timeout=60)
        assert (a.returncode, a.stdout) == (b.returncode, b.stdout), key
        rendered += a.returncode == 0
    assert rendered >= 3
