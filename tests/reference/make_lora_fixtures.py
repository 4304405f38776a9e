#!/usr/bin/env python3
"""Writes the LoRA reference fixtures: random PEFT adapters over demo models made by
`coserve make-demo-model`, with the logits and greedy tokens peft + transformers compute in fp32.

For each case: tests/reference/fixtures/lora/NAME/ holds the adapter as peft saves it
(adapter_config.json, adapter_model.safetensors) and NAME.json the make-demo-model flags, the
prompt, the last position's logits (every column: vocabularies of 512) and 8 greedy tokens.
The C++ test (tests/model/test_lora_reference.cpp) rebuilds the base model from the flags, loads
the adapter folder and compares.

usage: make_lora_fixtures.py [--coserve build/bin/coserve] [--out tests/reference/fixtures/lora]
needs: torch, transformers, peft, safetensors (PyPI); run from the project root.
"""
import argparse
import json
import os
import random
import subprocess
import tempfile

import peft
import torch
import transformers

from make_model_fixtures import MODELS

CASES = {
    # name: (base model fixture, LoraConfig arguments)
    "llama_attention_r4": ("llama_gqa_llama3", dict(r=4, lora_alpha=8,
                                                    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])),
    "qwen2_mlp_rslora_r8": ("qwen2_bias_tied", dict(r=8, lora_alpha=16, use_rslora=True,
                                                    target_modules=["gate_proj", "up_proj", "down_proj"])),
    "phi3_fused_r2": ("phi3_fused", dict(r=2, lora_alpha=4,
                                         target_modules=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"])),
    "mistral_all_linear_r16": ("mistral_mqa", dict(r=16, lora_alpha=8, target_modules="all-linear")),
}
PROMPT_LENGTH = 21
GREEDY_STEPS = 8


def rounded(xs):
    return [float(f"{x:.7g}") for x in xs]


@torch.no_grad()
def fixture(coserve, name, base, lora_args, out_dir):
    args = MODELS[base]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([coserve, "make-demo-model", tmp] + args, check=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        torch.manual_seed(sum(map(ord, name)))
        # init_lora_weights=False: B random as well as A (peft's default makes B zero, a no-op).
        config = peft.LoraConfig(init_lora_weights=False, lora_dropout=0.0, bias="none", **lora_args)
        model = peft.get_peft_model(model, config)
        with torch.no_grad():  # factors of a size that moves the logits without swamping them
            for n, p in model.named_parameters():
                if "lora_" in n:
                    p.mul_(0.3)
        model.eval()
        adapter_dir = os.path.join(out_dir, name)
        model.save_pretrained(adapter_dir)  # safetensors
        os.remove(os.path.join(adapter_dir, "README.md"))  # peft's model card template
        cfg_path = os.path.join(adapter_dir, "adapter_config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["base_model_name_or_path"] = "coserve-demo:" + base  # not the temporary folder
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
        vocab = model.config.vocab_size
        rng = random.Random(name)
        ids = [rng.randrange(vocab) for _ in range(PROMPT_LENGTH)]
        out = model(input_ids=torch.tensor([ids]), use_cache=True)
        logits = out.logits[0, -1]
        greedy, row = [], logits
        for _ in range(GREEDY_STEPS):
            tok = int(torch.argmax(row))
            greedy.append(tok)
            out = model(input_ids=torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
            row = out.logits[0, -1]
        base_logits = None
        with model.disable_adapter():
            base_logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
    return {
        "name": name,
        "make_demo_model_args": args,
        "adapter": name,
        "lora_config": {k: v for k, v in lora_args.items()},
        "peft_version": peft.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "prompt": ids,
        "last_logits": rounded(logits.tolist()),
        "max_abs_change_from_base": float((logits - base_logits).abs().max()),
        "greedy": greedy,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--coserve", default="build/bin/coserve")
    ap.add_argument("--out", default="tests/reference/fixtures/lora")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name, (base, lora_args) in CASES.items():
        fx = fixture(a.coserve, name, base, lora_args, a.out)
        with open(os.path.join(a.out, name + ".json"), "w") as f:
            json.dump(fx, f, indent=1)
        print(name, "max |logits - base logits|", round(fx["max_abs_change_from_base"], 4))


if __name__ == "__main__":
    main()
