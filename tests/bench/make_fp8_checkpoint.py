#!/usr/bin/env python3
"""Quantizes a bf16 / fp16 / fp32 Hugging Face Llama-family folder into an fp8 checkpoint the way
llm-compressor's FP8_DYNAMIC scheme stores it (compressed-tensors, float-quantized: E4M3 weights,
bf16 scales [rows, 1] per output channel, dynamic per-token activations, lm_head left as it is),
or with --block BR,BC the way Hugging Face fine-grained FP8 stores it (quant_method fp8,
`weight_scale_inv` per BR x BC block). For benchmarks of fp8 checkpoints against their bf16
originals on machines without the producers' own tools (they need torch and a GPU).

usage: make_fp8_checkpoint.py SRC DST [--block 128,128]
needs: numpy, ml_dtypes (PyPI); SRC with one model.safetensors file
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from safetensors_io import read_safetensors as read, write_safetensors as write  # noqa: E402

E4M3, BF16 = ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--block", default="")
    a = ap.parse_args()
    a.dst.mkdir(parents=True, exist_ok=True)
    for f in a.src.iterdir():
        if f.is_file() and f.name not in ("model.safetensors", "config.json"):
            shutil.copy(f, a.dst / f.name)
    t = read(a.src / "model.safetensors")
    out = {}
    for k, w in t.items():
        if not (k.endswith(".weight") and any(f".{m}." in k for m in LINEAR)):
            out[k] = w
            continue
        w = w.astype(np.float32)
        if a.block:
            br, bc = map(int, a.block.split(","))
            rows, cols = w.shape
            pr, pc = -rows % br, -cols % bc
            padded = np.pad(np.abs(w), ((0, pr), (0, pc)))
            s = padded.reshape(padded.shape[0] // br, br, padded.shape[1] // bc, bc).max(axis=(1, 3)) / 448
            s = np.maximum(s, 1e-12).astype(np.float32)
            full = np.repeat(np.repeat(s, br, 0), bc, 1)[:rows, :cols]
            out[k] = np.clip(w / full, -448, 448).astype(E4M3)
            out[k + "_scale_inv"] = s
        else:
            s = (np.maximum(np.abs(w).max(axis=1, keepdims=True), 1e-12) / 448).astype(BF16)
            out[k] = np.clip(w / s.astype(np.float32), -448, 448).astype(E4M3)
            out[k + "_scale"] = s
    write(a.dst / "model.safetensors", out)
    cfg = json.loads((a.src / "config.json").read_text())
    if a.block:
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                      "weight_block_size": [int(x) for x in a.block.split(",")]}
    else:
        cfg["quantization_config"] = {
            "quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"],
                                          "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                                                      "symmetric": True, "dynamic": False},
                                          "input_activations": {"num_bits": 8, "type": "float",
                                                                "strategy": "token", "dynamic": True}}}}
    (a.dst / "config.json").write_text(json.dumps(cfg, indent=2))
    print(f"{a.dst}: {sum(v.nbytes for v in out.values()) >> 20} MiB")


if __name__ == "__main__":
    main()
