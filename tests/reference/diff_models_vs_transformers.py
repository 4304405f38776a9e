#!/usr/bin/env python3
"""Random model shapes built by transformers, run by `coserve generate` and by transformers side by side.

Each case draws an architecture (llama, mistral, qwen2, qwen3, phi3, smollm3, mixtral, qwen2_moe, qwen3_moe) and a
config: head
counts with GQA / MQA, head sizes other than hidden / heads, tied embeddings, biases, RMSNorm eps,
rope theta, RoPE scaling (llama3, linear, yarn with its options; LongRoPE and partial rotary on
phi3), sliding windows (every layer on mistral / phi3, from max_window_layers on for qwen2 / qwen3),
SmolLM3's layers without RoPE, experts (count, top-k, width, renormalization, Qwen2/3-MoE's dense
layers by decoder_sparse_step and mlp_only_layers, Qwen2-MoE's shared expert). transformers builds the model with random weights, saves it as a
Hugging Face folder in f32, bf16 or f16, and decodes a random prompt greedily with its KV cache (as
generate() does); `coserve generate --dtype float32 --kv-cache-dtype fp32 --logits all` runs the same
folder. A case passes when every logits row before the first differing token is within 2e-4 of
transformers' (relative to the row's largest magnitude) and, when the greedy tokens differ, within
1e-5 (a near tie).

usage: tests/reference/diff_models_vs_transformers.py [--bin build/bin/coserve] [--seed S] [--cases N]
                                                     [--arch NAME]
needs: torch, transformers (PyPI); run from the project root.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import tempfile

import torch
import transformers

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/bin/coserve")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--cases", type=int, default=20)
ap.add_argument("--arch", choices=["llama", "mistral", "qwen2", "qwen3", "phi3", "smollm3", "mixtral", "qwen2_moe",
                                   "qwen3_moe"])
ap.add_argument("--wide", action="store_true",
                help="shapes of real checkpoints and odd sizes too: 3-16 heads (9/3, 14/2 as SmolLM and Qwen2.5), "
                     "head_dim 24-256, sizes no power of two divides, prompts up to 300 tokens")
args = ap.parse_args()
rng = random.Random(args.seed)

CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "mistral": ("MistralConfig", "MistralForCausalLM"),
           "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
           "phi3": ("Phi3Config", "Phi3ForCausalLM"), "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM"),
           "mixtral": ("MixtralConfig", "MixtralForCausalLM"), "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
           "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM")}
STEPS = 6


def random_config():
    arch = args.arch or rng.choice(list(CLASSES))
    heads = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 14, 16] if args.wide else [1, 2, 4, 6, 8])
    kv = rng.choice([d for d in range(1, heads + 1) if heads % d == 0])
    head_dim = rng.choice([8, 16, 24, 32, 40, 48, 64, 80, 96, 128, 256] if args.wide else [8, 16, 32, 64])
    hidden_choices = [heads * head_dim, 32, 48, 64, 96, 128] + ([40, 72, 136, 200, 264] if args.wide else [])
    hidden = heads * head_dim if arch == "phi3" else rng.choice(hidden_choices)
    inter_choices = [32, 64, 96, 176, 200] + ([37, 100, 129, 344, 500] if args.wide else [])
    vocab_choices = [256, 300, 512, 1000] + ([257, 1001, 2053] if args.wide else [])
    c = dict(vocab_size=rng.choice(vocab_choices), hidden_size=hidden,
             intermediate_size=rng.choice(inter_choices), num_hidden_layers=rng.choice([1, 2, 3]),
             num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=rng.choice([128, 512, 2048]),
             rms_norm_eps=rng.choice([1e-5, 1e-6, 1e-3]), rope_theta=rng.choice([10000.0, 500000.0, 1e6, 100.0]),
             tie_word_embeddings=rng.random() < 0.4, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if arch != "phi3":
        c["head_dim"] = head_dim
    if arch in ("mistral", "phi3", "mixtral") and rng.random() < 0.6:
        c["sliding_window"] = rng.choice([2, 3, 5, 8, 16])
    if arch in ("mixtral", "qwen2_moe", "qwen3_moe"):
        experts = rng.choice([2, 3, 4, 8, 16])
        c.update(num_local_experts=experts, num_experts_per_tok=rng.randint(1, min(experts, 8)))
    if arch == "qwen2_moe":
        c.update(moe_intermediate_size=rng.choice([16, 32, 48, 100]), norm_topk_prob=rng.random() < 0.5,
                 shared_expert_intermediate_size=rng.choice([16, 64, 100]), decoder_sparse_step=rng.choice([1, 1, 2]),
                 mlp_only_layers=[l for l in range(c["num_hidden_layers"]) if rng.random() < 0.3],
                 qkv_bias=rng.random() < 0.8)
        if rng.random() < 0.4:
            c.update(use_sliding_window=True, sliding_window=rng.choice([2, 4, 7]), max_window_layers=rng.choice([1, 2, 3]))
    if arch == "qwen3_moe":
        c.update(moe_intermediate_size=rng.choice([16, 32, 48, 100]), norm_topk_prob=rng.random() < 0.5,
                 decoder_sparse_step=rng.choice([1, 1, 2]),
                 mlp_only_layers=[l for l in range(c["num_hidden_layers"]) if rng.random() < 0.3])
        if rng.random() < 0.4:
            c.update(use_sliding_window=True, sliding_window=rng.choice([2, 4, 7]))
    if arch in ("qwen2", "qwen3") and rng.random() < 0.5:
        c.update(use_sliding_window=True, sliding_window=rng.choice([2, 4, 7]), max_window_layers=rng.choice([0, 1, 2]))
    if arch == "llama":
        c["attention_bias"] = rng.random() < 0.3
    if arch in ("qwen3", "qwen3_moe"):
        c["attention_bias"] = rng.random() < 0.2
    if arch == "smollm3":
        c["no_rope_layer_interval"] = rng.choice([2, 3, 4])
    r = rng.random()
    if arch == "phi3" and r < 0.7:
        rotated = head_dim
        if rng.random() < 0.5:
            factor = rng.choice([0.5, 0.75])
            if int(head_dim * factor) % 2 == 0:
                c["partial_rotary_factor"] = factor
                rotated = int(head_dim * factor)
        original = rng.choice([8, 16, 32, 4096])
        c["original_max_position_embeddings"] = original
        c["max_position_embeddings"] = original * rng.choice([1, 4, 32])
        c["rope_scaling"] = {"type": "longrope",
                             "short_factor": [round(rng.uniform(0.8, 3.0), 3) for _ in range(rotated // 2)],
                             "long_factor": [round(rng.uniform(1.0, 40.0), 3) for _ in range(rotated // 2)]}
    elif arch in ("llama", "qwen2", "mistral", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe") and r < 0.45:
        kind = rng.choice(["llama3", "linear", "yarn"])
        if kind == "llama3":
            rs = {"rope_type": "llama3", "factor": rng.choice([2.0, 8.0, 32.0]), "low_freq_factor": 1.0,
                  "high_freq_factor": rng.choice([2.0, 4.0]), "original_max_position_embeddings": rng.choice([16, 32, 64])}
        elif kind == "linear":
            rs = {"rope_type": "linear", "factor": rng.choice([2.0, 4.0, 0.5])}
        else:
            rs = {"rope_type": "yarn", "factor": rng.choice([2.0, 4.0, 8.0]),
                  "original_max_position_embeddings": rng.choice([32, 64, 256])}
            if rng.random() < 0.3:
                rs.update(beta_fast=16.0, beta_slow=2.0)
            if rng.random() < 0.3:
                rs.update(mscale=1.0, mscale_all_dim=0.5)
        c["rope_scaling"] = rs
    return arch, c


def main():
    ok = bad = skipped = 0
    for case in range(args.cases):
        arch, c = random_config()
        config_cls, model_cls = CLASSES[arch]
        try:
            config = getattr(transformers, config_cls)(**c)
        except Exception as e:  # noqa: BLE001 - transformers refuses some random shapes
            skipped += 1
            print("skipped (transformers refuses the config):", arch, e)
            continue
        torch.manual_seed(rng.randrange(1 << 30))
        model = getattr(transformers, model_cls)(config).eval()
        scale = rng.choice([0.02, 0.1, 0.3])
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in name else scale * torch.randn_like(p))
        dtype = rng.choice(["float32", "bfloat16", "float16"])
        folder = tempfile.mkdtemp(prefix="coserve-diff-model-")
        try:
            model.to(getattr(torch, dtype)).save_pretrained(folder)
            model = getattr(transformers, model_cls).from_pretrained(folder, dtype=torch.float32).eval()
            limit = 300 if args.wide else 40
            if "rope_scaling" in c and c["rope_scaling"].get("type") == "longrope":
                limit = min(limit, c["original_max_position_embeddings"]) if args.wide else c["original_max_position_embeddings"]
            prompt = [rng.randrange(c["vocab_size"]) for _ in range(rng.randint(1, max(1, min(limit, c["max_position_embeddings"] - STEPS))))]
            rows, want = [], []
            with torch.no_grad():
                out = model(torch.tensor([prompt]), use_cache=True)
                for _ in range(STEPS):
                    row = out.logits[0, -1].float()
                    rows.append(row)
                    want.append(int(row.argmax()))
                    out = model(torch.tensor([[want[-1]]]), past_key_values=out.past_key_values, use_cache=True)
            cmd = [args.bin, "generate", folder, "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", str(STEPS),
                   "--ignore-eos", "--logits", "all", "--json", "--dtype", "float32", "--kv-cache-dtype", "fp32",
                   "--threads", "2"]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            tag = f"#{case} {arch} {dtype} prompt {len(prompt)} {json.dumps(c)}"
            if p.returncode != 0:
                bad += 1
                print("FAIL (coserve exited", p.returncode, ")", tag, p.stderr[-400:])
                continue
            got = json.loads(p.stdout.strip().splitlines()[-1])
            same = 0
            while same < STEPS and got["output_ids"][same] == want[same]:
                same += 1
            errs = [float((rows[i] - torch.tensor(got["logits"][i])).abs().max() / max(1e-6, float(rows[i].abs().max())))
                    for i in range(min(same + 1, STEPS))]
            if max(errs) > 2e-4 or (same < STEPS and max(errs) > 1e-5):
                bad += 1
                print("FAIL", tag, "relative error per row", [f"{e:.1e}" for e in errs], f"tokens differ at {same}")
            else:
                ok += 1
                print("ok", arch, dtype, f"{max(errs):.1e}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({"cases": args.cases, "ok": ok, "failed": bad, "skipped": skipped}))


if __name__ == "__main__":
    main()
