#!/usr/bin/env python3
"""Encode throughput, single-threaded: coserve's tokenizer against Hugging Face `tokenizers`.

Both encode the same text (the whole file per call) with the same tokenizer.json, HF with
RAYON_NUM_THREADS=1 and `encode` (not the batch API). Prints one JSON line per tokenizer with both
MB/s figures and their ratio, and checks that both produce the same number of tokens.

Usage (from the project root):
  python tests/bench/tokenizer_vs_hf.py --coserve build/bin/coserve [--file TEXT] [--seconds 3] [--lines]
      [--tokenizers ../shared/testdata/tokenizers/gpt2 ...]
Without --file, a mixed text (English prose, C++ source, multilingual lines) is assembled from this
repository and written to /tmp/coserve-tokenizer-bench.txt.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402  (after the environment is set)

ROOT = Path(__file__).resolve().parents[2]


def make_text(path: Path, target_bytes: int = 1 << 20) -> None:
    parts = []
    sources = sorted(ROOT.glob("model/**/*.cpp")) + sorted(ROOT.glob("runtime/**/*.hpp")) + sorted(ROOT.glob("docs/**/*.md"))
    for p in sources:
        parts.append(p.read_text(encoding="utf-8", errors="replace"))
    fixtures = ROOT / "tests/reference/fixtures/tokenizer/gpt2.json"
    if fixtures.exists():
        parts += [c["text"] for c in json.loads(fixtures.read_text())["cases"]]
    for lic in ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"]:
        if os.path.exists(lic):
            parts.append(Path(lic).read_text())
    text = "\n".join(parts)
    while len(text.encode()) < target_bytes:
        text = text + "\n" + text
    path.write_text(text[: target_bytes])


def bench_hf(tok_path: str, text: str, seconds: float, by_lines: bool):
    p = Path(tok_path)
    tok = Tokenizer.from_file(str(p / "tokenizer.json" if p.is_dir() else p))
    inputs = [text]
    if by_lines:  # split exactly where the C++ side does: after each "\n" only
        parts = text.split("\n")
        inputs = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])

    def encode_all():
        return sum(len(tok.encode(x, add_special_tokens=False).ids) for x in inputs)

    n = encode_all()  # warm-up
    iters, start = 0, time.perf_counter()
    while True:
        encode_all()
        iters += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    return len(text.encode()) * iters / elapsed / 1e6, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--coserve", default=str(ROOT / "build/bin/coserve"))
    ap.add_argument("--file")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--lines", action="store_true", help="one encode call per line instead of the whole file")
    ap.add_argument("--tokenizers", nargs="*", default=[
        str(ROOT / "../shared/testdata/tokenizers" / n) for n in ["gpt2", "qwen2.5", "phi-3-mini", "roberta-base"]])
    args = ap.parse_args()
    path = Path(args.file) if args.file else Path("/tmp/coserve-tokenizer-bench.txt")
    if not args.file:
        make_text(path)
    with open(path, encoding="utf-8", newline="") as f:  # keep "\r\n" as the C++ side reads it
        text = f.read()
    for t in args.tokenizers:
        out = subprocess.run([args.coserve, "bench", "tokenizer", t, "--file", str(path), "--seconds", str(args.seconds)] + (["--lines"] if args.lines else []),
                             check=True, capture_output=True, text=True).stdout
        ours = json.loads(out.strip().splitlines()[-1])
        hf_mbs, hf_tokens = bench_hf(t, text, args.seconds, args.lines)
        print(json.dumps({
            "tokenizer": Path(t).name, "bytes": ours["bytes"], "mode": "lines" if args.lines else "whole file",
            "coserve_mb_per_s": round(ours["mb_per_s"], 2), "hf_mb_per_s": round(hf_mbs, 2),
            "ratio": round(ours["mb_per_s"] / hf_mbs, 2),
            "tokens_coserve": ours["tokens"], "tokens_hf": hf_tokens,
            "same_token_count": ours["tokens"] == hf_tokens}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
