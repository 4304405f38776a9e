#!/usr/bin/env python3
"""GPU executor vs Hugging Face transformers on a Llama-shaped model with random weights.

Run where torch + transformers are installed (a GPU, or `--device cpu` anywhere; the folder it
writes can then be copied to the GPU machine):

    python3 tests/reference/gpu_vs_hf.py --out /tmp/coserve_hf_llama
    python3 tests/reference/gpu_vs_hf.py --out /tmp/coserve_hf_llama_bf16 --compute-dtype bfloat16
    COSERVE_GPU_HF_DIR=/tmp/coserve_hf_llama build-gpu/tests/test_gpu_executor "[hf]"

The script saves a random bf16 LlamaForCausalLM (safetensors, llama3 RoPE scaling, GQA 4) and
  - `hf_greedy.txt`: one line per prompt: the prompt ids, " | ", then the 32 ids transformers
    greedy-decodes (by default in float32 over the same bf16 weights, so the reference carries no
    bf16 rounding; `--compute-dtype bfloat16` decodes in bf16);
  - `hf_logits.bin`: the raw logits of every greedy step (the scores generate() saw), for vLLM's
    check_logprobs_close teacher-forced on those ids: "CSHL", then uint32 prompts, steps, vocab,
    then float32 [prompts][steps][vocab], little-endian;
  - `hf_reference.json`: how it was made (compute dtype, device, torch and transformers versions).
The C++ tests load the same folder into the CUDA executor (and the CPU executor) and compare the
greedy ids, and the GPU's teacher-forced logits with these by the logprobs-close criterion.
"""
import argparse
import json
import os
import random
import struct


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--compute-dtype", choices=["float32", "bfloat16"], default="float32",
                    help="dtype transformers decodes in; the saved weights are bf16 either way")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    args = ap.parse_args()

    import numpy as np
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    torch.manual_seed(args.seed)
    cfg = LlamaConfig(
        vocab_size=4096, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 1024},
        torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # larger init than HF's 0.02 so logits have a spread of a few units
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
    model = model.to(torch.bfloat16).eval()
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    # Decode with the model as saved, reloaded from disk: the in-memory model need not equal the
    # files (its greedy output was seen to differ from a reload's on the first token).
    del model
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.float32 if args.compute_dtype == "float32" else torch.bfloat16
    # float32: the same bf16 weights upcast, the reference without bf16 rounding; eager attention
    # (fused SDPA kernels may use TF32 tensor cores for fp32 inputs).
    model = LlamaForCausalLM.from_pretrained(args.out, torch_dtype=dtype, attn_implementation="eager").to(device).eval()

    rng = random.Random(args.seed)
    lines = []
    logits = []
    for i in range(args.prompts):
        prompt = [rng.randrange(3, cfg.vocab_size) for _ in range(rng.randrange(4, 200))]
        ids = torch.tensor([prompt], device=device)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                 eos_token_id=None, pad_token_id=0, output_logits=True,
                                 return_dict_in_generate=True)
        gen = out.sequences[0, len(prompt):].tolist()
        lines.append(" ".join(map(str, prompt)) + " | " + " ".join(map(str, gen)))
        # step k: the logits that chose gen[k] (prompt + gen[:k] seen), as float32
        logits.append(np.stack([row[0].float().cpu().numpy() for row in out.logits]))
    with open(os.path.join(args.out, "hf_greedy.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "hf_logits.bin"), "wb") as f:
        f.write(b"CSHL" + struct.pack("<III", args.prompts, args.new_tokens, cfg.vocab_size))
        f.write(np.ascontiguousarray(np.stack(logits), dtype="<f4").tobytes())
    where = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    with open(os.path.join(args.out, "hf_reference.json"), "w") as f:
        json.dump({"compute_dtype": args.compute_dtype, "device": where, "torch": torch.__version__,
                   "transformers": transformers.__version__, "prompts": args.prompts,
                   "new_tokens": args.new_tokens, "seed": args.seed}, f, indent=1)
    print(f"wrote {args.out} ({args.prompts} prompts, transformers greedy, bf16 weights, "
          f"{args.compute_dtype} compute, {where})")


if __name__ == "__main__":
    main()
