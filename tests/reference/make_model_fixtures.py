#!/usr/bin/env python3
"""Writes the model reference fixtures: expected logits and greedy tokens from Hugging Face
transformers for demo models made by `coserve make-demo-model`.

Each fixture records the exact make-demo-model flags, so the C++ test (tests/model/
test_reference_logits.cpp) rebuilds the same model without Python and compares:
  - the logits of the last prompt position (the recorded columns; all of them for small vocabularies)
  - greedy continuations (argmax, no eos stop) and, per greedy step, the logits at step_columns
    (every 8th recorded column, to keep the fixtures small).

usage: make_model_fixtures.py [--coserve build-model/bin/coserve] [--out tests/reference/fixtures/model]
                              [--only NAME ...]
needs: torch, transformers, safetensors (PyPI); run from the project root.
"""
import argparse
import json
import os
import random
import subprocess
import tempfile

import torch
import transformers

SMALL = ["--no-tokenizer", "--vocab-size", "512", "--dtype", "f32"]

MODELS = {
    # Llama with GQA (4 query heads over 2 KV heads) and llama3 rope scaling whose three
    # frequency bands (kept, smoothed, divided) are all present at head_dim 16.
    "llama_gqa_llama3": SMALL + ["--architecture", "llama", "--seed", "11", "--hidden-size", "64",
                                 "--intermediate-size", "160", "--num-layers", "2", "--num-heads", "4",
                                 "--num-kv-heads", "2", "--rope-scaling", "llama3",
                                 "--rope-original-max-position-embeddings", "32"],
    # Qwen2: q/k/v biases, tied embeddings, head_dim given and != hidden / heads.
    "qwen2_bias_tied": SMALL + ["--architecture", "qwen2", "--seed", "12", "--hidden-size", "48",
                                "--intermediate-size", "128", "--num-layers", "2", "--num-heads", "4",
                                "--num-kv-heads", "2", "--head-dim", "16", "--tie-embeddings",
                                "--rope-theta", "1000000"],
    # Mistral: multi-query attention (1 KV head), larger rope theta, three layers.
    "mistral_mqa": SMALL + ["--architecture", "mistral", "--seed", "13", "--hidden-size", "64",
                            "--intermediate-size", "96", "--num-layers", "3", "--num-heads", "8",
                            "--num-kv-heads", "1", "--rope-theta", "500000"],
    # Qwen3: an RMSNorm over each q and k head before RoPE, head_dim given and != hidden / heads,
    # tied embeddings, no biases.
    "qwen3_qk_norm": SMALL + ["--architecture", "qwen3", "--seed", "16", "--hidden-size", "48",
                              "--intermediate-size", "128", "--num-layers", "2", "--num-heads", "4",
                              "--num-kv-heads", "2", "--head-dim", "16", "--tie-embeddings",
                              "--rope-theta", "1000000"],
    # YaRN as Qwen2.5 configures it for long contexts: factor 4 over 256 original positions, so the
    # ramp between interpolated and kept frequencies spans dimensions 0-4 at head_dim 16, and cos/sin
    # carry the attention factor 0.1 ln 4 + 1.
    "qwen2_yarn": SMALL + ["--architecture", "qwen2", "--seed", "17", "--hidden-size", "64",
                           "--intermediate-size", "128", "--num-layers", "2", "--num-heads", "4",
                           "--num-kv-heads", "2", "--rope-scaling", "yarn", "--rope-factor", "4",
                           "--rope-original-max-position-embeddings", "256"],
    # Phi-3: q/k/v rows in one qkv_proj tensor, gate and up halves in one gate_up_proj, GQA.
    "phi3_fused": SMALL + ["--architecture", "phi3", "--seed", "19", "--hidden-size", "64",
                           "--intermediate-size", "96", "--num-layers", "2", "--num-heads", "4",
                           "--num-kv-heads", "2"],
    # Phi-4-mini's RoPE: partial_rotary_factor 0.75 (12 of 16 dimensions rotate) and LongRoPE
    # with original_max_position_embeddings 44, so the 40-token prompt's greedy steps cross into
    # the long factors; cos and sin carry the attention factor sqrt(1 + ln(256 / 44) / ln 44).
    "phi3_longrope_partial": SMALL + ["--architecture", "phi3", "--seed", "21", "--hidden-size", "64",
                                      "--intermediate-size", "96", "--num-layers", "2", "--num-heads", "4",
                                      "--num-kv-heads", "2", "--rope-scaling", "longrope",
                                      "--rope-original-max-position-embeddings", "44",
                                      "--partial-rotary-factor", "0.75", "--max-position-embeddings", "256"],
    # Sliding-window attention over 5 positions on every layer (Mistral's kind), the prompts up to 40
    # tokens long, and Qwen2's: windowed (3 positions) from layer 1 on, layer 0 full.
    "mistral_sliding": SMALL + ["--architecture", "mistral", "--seed", "22", "--hidden-size", "64",
                                "--intermediate-size", "96", "--num-layers", "2", "--num-heads", "4",
                                "--num-kv-heads", "2", "--sliding-window", "5"],
    "qwen2_sliding_layers": SMALL + ["--architecture", "qwen2", "--seed", "23", "--hidden-size", "64",
                                     "--intermediate-size", "96", "--num-layers", "2", "--num-heads", "4",
                                     "--num-kv-heads", "2", "--sliding-window", "3", "--max-window-layers", "1"],
    # SmolLM3: layer 3 of 4 without RoPE (no_rope_layers [1, 1, 1, 0]), tied embeddings.
    "smollm3_nope": SMALL + ["--architecture", "smollm3", "--seed", "20", "--hidden-size", "64",
                             "--intermediate-size", "96", "--num-layers", "4", "--num-heads", "4",
                             "--num-kv-heads", "2", "--tie-embeddings"],
    # Mixtral: every layer's MLP 8 experts, each token routed to 2 (top-2 probabilities
    # renormalized), a sliding window of 12 positions.
    "mixtral_moe": SMALL + ["--architecture", "mixtral", "--seed", "24", "--hidden-size", "64",
                            "--intermediate-size", "48", "--num-layers", "2", "--num-heads", "4",
                            "--num-kv-heads", "2", "--num-experts", "8", "--num-experts-per-tok", "2",
                            "--sliding-window", "12"],
    # Qwen3-MoE: q/k norms, layers 1 and 3 sparse (decoder_sparse_step 2: 6 experts of width 32,
    # top-3, the probabilities not renormalized), layers 0 and 2 dense (width 96).
    "qwen3_moe_sparse_step": SMALL + ["--architecture", "qwen3_moe", "--seed", "25", "--hidden-size", "48",
                                      "--intermediate-size", "96", "--moe-intermediate-size", "32",
                                      "--num-layers", "4", "--num-heads", "4", "--num-kv-heads", "2",
                                      "--head-dim", "16", "--num-experts", "6", "--num-experts-per-tok", "3",
                                      "--decoder-sparse-step", "2", "--tie-embeddings"],
    # Qwen2-MoE: q/k/v biases, 5 experts of width 32 (top 2, not renormalized) beside a shared
    # expert of width 80 behind its sigmoid gate, on both layers.
    "qwen2_moe_shared": SMALL + ["--architecture", "qwen2_moe", "--seed", "26", "--hidden-size", "64",
                                 "--intermediate-size", "96", "--moe-intermediate-size", "32",
                                 "--shared-expert-intermediate-size", "80", "--num-layers", "2",
                                 "--num-heads", "4", "--num-kv-heads", "2", "--num-experts", "5",
                                 "--num-experts-per-tok", "2"],
    # Linear (position interpolation) scaling.
    "llama_linear": SMALL + ["--architecture", "llama", "--seed", "18", "--hidden-size", "64",
                             "--intermediate-size", "128", "--num-layers", "2", "--num-heads", "4",
                             "--num-kv-heads", "2", "--rope-scaling", "linear", "--rope-factor", "2.5"],
    # bf16 and f16 weights on disk (computed in fp32 on both sides).
    "llama_bf16": ["--no-tokenizer", "--vocab-size", "512", "--dtype", "bf16", "--seed", "14",
                   "--hidden-size", "64", "--intermediate-size", "128", "--num-layers", "2",
                   "--num-heads", "4", "--num-kv-heads", "4"],
    "llama_f16_qkv_bias": ["--no-tokenizer", "--vocab-size", "512", "--dtype", "f16", "--seed", "15",
                           "--hidden-size", "64", "--intermediate-size", "128", "--num-layers", "2",
                           "--num-heads", "4", "--num-kv-heads", "2", "--qkv-bias"],  # Llama attention_bias: q/k/v and o biases
}

PROMPT_LENGTHS = [1, 6, 17, 40]
GREEDY_STEPS = 8
MAX_COLUMNS = 1024


def columns_for(vocab):
    if vocab <= MAX_COLUMNS:
        return list(range(vocab))
    step = vocab // 256
    return list(range(0, vocab, step))


def rounded(xs):
    return [float(f"{x:.7g}") for x in xs]


@torch.no_grad()
def fixture(coserve, name, args):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([coserve, "make-demo-model", tmp] + args, check=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        model.eval()
        vocab = model.config.vocab_size
        cols = columns_for(vocab)
        step_cols = cols[::8]
        rng = random.Random(name)
        prompts = []
        for n in PROMPT_LENGTHS:
            ids = [rng.randrange(vocab) for _ in range(n)]
            # Greedy decoding with the KV cache, as generate() runs it (LongRoPE switches to its
            # long factors per forward pass, so recomputing the whole sequence would differ).
            out = model(torch.tensor([ids]), use_cache=True)
            logits = out.logits[0, -1]
            row = logits
            greedy, step_logits = [], []
            for _ in range(GREEDY_STEPS):
                tok = int(torch.argmax(row))
                step_logits.append(rounded(row[step_cols].tolist()))
                greedy.append(tok)
                out = model(torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
                row = out.logits[0, -1]
            prompts.append({
                "ids": ids,
                "last_logits": rounded(logits[cols].tolist()),
                "argmax": int(torch.argmax(logits)),
                "greedy": greedy,
                "greedy_step_logits": step_logits,
            })
    return {
        "name": name,
        "make_demo_model_args": args,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "vocab_size": vocab,
        "columns": cols,
        "step_columns": step_cols,
        "prompts": prompts,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--coserve", default="build-model/bin/coserve")
    ap.add_argument("--out", default="tests/reference/fixtures/model")
    ap.add_argument("--only", nargs="*", help="write only these fixtures (names of MODELS)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    for name, args in MODELS.items():
        if a.only and name not in a.only:
            continue
        data = fixture(a.coserve, name, args)
        path = os.path.join(a.out, name + ".json")
        with open(path, "w") as f:
            json.dump(data, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
