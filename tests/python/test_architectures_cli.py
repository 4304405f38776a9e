"""`coserve architectures`: the registry's list, docs/models.md's table, and the --help lists of
`serve` and `make-demo-model` that are generated from it."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(binary, *args):
    p = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def registry(binary):
    """(model type, architectures name, GGUF name or None, executors) of each architecture; a GGUF
    name "llama+experts" is a llama file with expert_count."""
    lines = run(binary, "architectures").splitlines()
    assert lines[0].split()[:4] == ["type", "architectures", "GGUF", "executors"]
    rows = []
    for line in lines[1:]:
        name, hf, gguf, executors = line.split()[:4]
        rows.append((name, hf, None if gguf == "-" else gguf, executors))
    return rows


def test_the_docs_table_is_the_registrys(coserve_bin):
    table = run(coserve_bin, "architectures", "--markdown")
    with open(os.path.join(ROOT, "docs", "models.md"), encoding="utf-8") as f:
        doc = f.read()
    assert table in doc, "scripts/models-table rewrites docs/models.md's table"
    rows = registry(coserve_bin)
    assert len(table.strip().splitlines()) == len(rows) + 2
    for name, hf, gguf, executors in rows:
        assert f"| `{hf}` |" in table
        assert executors in ("cpu", "cpu,cuda")


def test_help_lists_every_architecture(coserve_bin):
    serve = run(coserve_bin, "serve", "--help")
    demo = run(coserve_bin, "make-demo-model", "--help")
    for name, hf, gguf, executors in registry(coserve_bin):
        assert hf in serve
        if gguf:
            assert gguf.removesuffix("+experts") in serve
        if executors == "cpu":  # in the list of those served on the CPU only
            words = " ".join(serve.split())
            assert hf in words.split(" on --device cpu;")[0].split(";")[-1]
        assert any(line.split()[:1] == [name] for line in demo.splitlines()), name
    for text in (serve, demo):
        for placeholder in ("{architectures}", "{gguf_architectures}", "{demo_architectures}"):
            assert placeholder not in text


def test_each_demo_architecture_is_written(coserve_bin, tmp_path):
    for name, hf, _, _ in registry(coserve_bin):
        out = tmp_path / name
        run(coserve_bin, "make-demo-model", str(out), "--architecture", name, "--no-tokenizer",
            "--vocab-size", "64", "--hidden-size", "32", "--intermediate-size", "32", "--num-layers",
            "2", "--num-heads", "4", "--num-kv-heads", "2", "--num-experts", "2")
        config = (out / "config.json").read_text()
        assert f'"architectures": ["{hf}"]' in config and f'"model_type": "{name}"' in config
