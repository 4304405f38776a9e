#!/usr/bin/env python3
"""8B-shaped decode/prefill throughput: coserve's CUDA executor vs Hugging Face transformers, same
device, same run, same shapes (Llama-3-8B dims, random bf16 weights, prompt 128, 64 new tokens).

    python3 tests/bench/gpu_vs_hf.py --bench build-gpu/bench/bench_gpu_executor --hbm-tbps 4.8

Prints one JSON object per line: coserve's (from bench_gpu_executor) then transformers' for each
batch size, with tokens/s and the fraction of the HBM roofline: the bytes a decode step reads (every
weight but the gathered embedding table, plus the KV cache at the middle of the decode) over the
bandwidth. Both sides warm up before each timed phase (prefill and decode).
"""
import argparse
import json
import subprocess
import time


def hf_rows(batches, prompt, steps, hbm_tbps):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rms_norm_eps=1e-5, rope_theta=500000.0, torch_dtype="bfloat16",
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).eval()
    embed = model.get_input_embeddings().weight
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) - embed.numel() * embed.element_size()
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    for b in batches:
        kv_bytes = 2 * 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * b * (prompt + steps // 2)
        bound_ms = (weight_bytes + kv_bytes) / (hbm_tbps * 1e12) * 1e3
        ids = torch.randint(3, cfg.vocab_size, (b, prompt), device="cuda")
        mask = torch.ones_like(ids)
        with torch.no_grad():
            model(ids, attention_mask=mask)  # warm-up: prefill, then a short decode
            model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=4, min_new_tokens=4,
                           pad_token_id=0)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(ids, attention_mask=mask)  # prefill only
            torch.cuda.synchronize()
            prefill_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=steps,
                           min_new_tokens=steps, pad_token_id=0)
            torch.cuda.synchronize()
            total_s = time.perf_counter() - t0
        step_ms = max(total_s - prefill_s, 1e-9) / (steps - 1) * 1e3
        yield {"impl": "transformers", "batch": b, "prefill_tokens_per_s": round(b * prompt / prefill_s, 1),
               "step_ms": round(step_ms, 3), "tokens_per_s": round(b * 1e3 / step_ms, 1),
               "bytes_read_per_step": weight_bytes + kv_bytes, "roofline_fraction": round(bound_ms / step_ms, 3),
               "device": torch.cuda.get_device_name()}
        del ids, mask
        torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build-gpu/bench/bench_gpu_executor")
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--hbm-tbps", type=float, default=3.35)
    args = ap.parse_args()
    out = subprocess.run([args.bench, "--batches", args.batches, "--prompt", str(args.prompt), "--steps",
                          str(args.steps), "--hbm-tbps", str(args.hbm_tbps)], check=True, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        row = json.loads(line)
        row["impl"] = "coserve"
        print(json.dumps(row))
    batches = [int(x) for x in args.batches.split(",")]
    for row in hf_rows(batches, args.prompt, args.steps, args.hbm_tbps):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
