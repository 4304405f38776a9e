#!/usr/bin/env python3
"""Embeddings per second of a BERT-base-shaped model: `coserve serve` against sentence-transformers,
side by side on the same number of threads.

Usage: tests/bench/embeddings_vs_sentence_transformers.py [--coserve build/bin/coserve]
       [--threads 2] [--batch 32] [--rounds 5] [--lengths mixed|equal] [--model DIR]

The model: 12 layers, hidden 768, 12 heads, MLP 3072 (BERT-base's shape), random weights (seeded),
mean pooling and Normalize, saved as a sentence-transformers folder (the synthetic WordPiece
tokenizer of the tokenizer fixtures; its small vocabulary changes nothing but the embedding table).
The texts: `--batch` of them, word counts spread over 4..100 (`mixed`, what a retrieval corpus looks
like) or all 50 words (`equal`, no padding in sentence-transformers' batch).

Each round runs sentence-transformers' encode(batch_size=batch) in this process
(torch.set_num_threads(threads)) and one /v1/embeddings request with the whole batch to a server
started with --cpu-threads threads and pinned to as many cores (taskset), alternating, after one
warm-up each; it prints one JSON line per run and the medians and their ratio (coserve / ST).
Needs torch, transformers, sentence-transformers, httpx (PyPI).
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "..", "reference", "fixtures", "tokenizer", "synthetic-wordpiece.tokenizer.json")


def make_model(folder):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=TOKENIZER, unk_token="[UNK]", cls_token="[CLS]",
                                  sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]",
                                  model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    torch.manual_seed(7)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=3072, max_position_embeddings=512)
    with tempfile.TemporaryDirectory() as tmp:
        BertModel(cfg).save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        t = Transformer(tmp, max_seq_length=512)
        st = SentenceTransformer(modules=[t, Pooling(768, pooling_mode="mean"), Normalize()], device="cpu")
        st.save(folder)


def texts_of(batch, lengths):
    rng = random.Random(3)
    words = ["retrieval", "vector", "query", "document", "the", "of", "model", "search", "index",
             "similar", "meaning", "close", "together", "server", "batch", "token", "encoder"]
    counts = [50] * batch if lengths == "equal" else [rng.randint(4, 100) for _ in range(batch)]
    return [" ".join(rng.choice(words) for _ in range(n)) for n in counts]


class Server:
    def __init__(self, binary, model, threads):
        cores = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:threads])
        self.proc = subprocess.Popen(["taskset", "-c", cores, binary, "serve", model, "--port", "0",
                                      "--cpu-threads", str(threads), "--no-webui"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = []
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m:
                    port.append(int(m.group(1)))
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        ready.wait(120)
        self.url = f"http://127.0.0.1:{port[0]}"
        for _ in range(600):
            try:
                if httpx.get(self.url + "/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--coserve", default="build/bin/coserve")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lengths", choices=["mixed", "equal"], default="mixed")
    ap.add_argument("--model", help="an existing model folder (default: made in a temp folder)")
    args = ap.parse_args()
    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)
    tmp = None
    model = args.model
    if model is None:
        tmp = tempfile.TemporaryDirectory()
        model = tmp.name
    if not os.path.exists(os.path.join(model, "modules.json")):
        make_model(model)
    texts = texts_of(args.batch, args.lengths)
    st = SentenceTransformer(model, device="cpu")
    server = Server(args.coserve, model, args.threads)
    tokens = sum(len(ids) for ids in st.tokenizer(texts)["input_ids"])

    def run_st():
        t0 = time.perf_counter()
        with torch.no_grad():
            st.encode(texts, batch_size=args.batch, convert_to_numpy=True)
        return time.perf_counter() - t0

    def run_coserve():
        t0 = time.perf_counter()
        r = httpx.post(server.url + "/v1/embeddings", json={"input": texts}, timeout=600)
        r.raise_for_status()
        return time.perf_counter() - t0

    try:
        run_st()
        run_coserve()
        rates = {"sentence-transformers": [], "coserve": []}
        for i in range(args.rounds):
            for name, fn in [("sentence-transformers", run_st), ("coserve", run_coserve)]:
                s = fn()
                rates[name].append(args.batch / s)
                print(json.dumps({"round": i, "runner": name, "seconds": round(s, 4),
                                  "embeddings_per_s": round(args.batch / s, 2)}), flush=True)
    finally:
        server.stop()
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(json.dumps({"threads": args.threads, "batch": args.batch, "lengths": args.lengths,
                      "tokens": tokens, "median_embeddings_per_s": {k: round(v, 2) for k, v in med.items()},
                      "ratio_coserve_over_st": round(med["coserve"] / med["sentence-transformers"], 3),
                      "torch": torch.__version__, "cpu": platform_cpu()}))


def platform_cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


if __name__ == "__main__":
    sys.exit(main())
