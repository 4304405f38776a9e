"""fp8 checkpoints through the real binary: the three layouts fp8 models ship in, loaded, generated
from and served with the official openai client; malformed ones refused with the tensor named.

The checkpoints are quantized here with ml_dtypes' float8_e4m3fn (the float8 type of JAX / numpy)
the way their producers quantize: scale = max|W| / 448 over the tensor (vLLM / AutoFP8 "fp8", static
activation scales), over each output channel (llm-compressor's compressed-tensors FP8_DYNAMIC,
bf16 scales [rows, 1]) or over each block (Hugging Face fine-grained FP8 / DeepSeek-V3,
`weight_scale_inv` per weight_block_size block). Per-tensor and per-channel checkpoints run on
their codes: compared with an fp32 folder of e4m3 value * scale (numpy), logits equal to fp32
rounding. Block-scaled ones are dequantized to bf16 at load: compared with a bf16 folder of
bf16(e4m3 value * scale), logits bit-identical.
"""
import json
import re
import subprocess

import numpy as np
import pytest

from conftest import Server, skip_or_fail_in_ci
from safetensors_io import read_safetensors, write_safetensors

ml_dtypes = pytest.importorskip("ml_dtypes")
E4M3 = ml_dtypes.float8_e4m3fn
BF16 = ml_dtypes.bfloat16
MATRICES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def quantize(w, layout, block=(32, 64)):
    """(fp8 codes, scale array, scale tensor suffix) the way each producer writes them."""
    w = w.astype(np.float32)
    if layout == "tensor":
        scale = np.array(np.abs(w).max() / 448, np.float32)  # shape []
        s_full = scale
    elif layout == "channel":
        scale = (np.abs(w).max(axis=1, keepdims=True) / 448).astype(BF16)  # [rows, 1], the model's dtype
        s_full = scale.astype(np.float32)
    else:
        br, bc = block
        rows, cols = w.shape
        scale = np.zeros(((rows + br - 1) // br, (cols + bc - 1) // bc), np.float32)
        for i in range(scale.shape[0]):
            for j in range(scale.shape[1]):
                scale[i, j] = np.abs(w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]).max() / 448
        s_full = np.repeat(np.repeat(scale, br, 0), bc, 1)[:rows, :cols]
    q = np.clip(w / s_full, -448, 448).astype(E4M3)
    deq = (q.astype(np.float32) * s_full).astype(np.float32)
    return q, scale, deq


QUANT_CONFIG = {
    "tensor": {"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]},
    "channel": {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
                "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"],
                                              "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                                                          "symmetric": True, "dynamic": False},
                                              "input_activations": {"num_bits": 8, "type": "float",
                                                                    "strategy": "token", "dynamic": True}}}},
    "block": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [32, 64]},
}


def make_pair(src, out, layout):
    """out/fp8-LAYOUT (the checkpoint), out/deq-LAYOUT (bf16 of its dequantized weights) and
    out/deq32-LAYOUT (the dequantized weights in fp32)."""
    cfg = json.loads((src / "config.json").read_text())
    t = read_safetensors(src / "model.safetensors")
    fp8, deq, deq32 = dict(t), dict(t), {k: v.astype(np.float32) for k, v in t.items()}
    for name in list(t):
        if not any(name.endswith(m + ".weight") for m in MATRICES):
            continue
        q, scale, d = quantize(t[name], layout)
        fp8[name] = q
        fp8[name + ("_scale_inv" if layout == "block" else "_scale")] = scale
        if layout == "tensor":
            fp8[name.replace(".weight", ".input_scale")] = np.array(0.02, np.float32)
        deq[name] = d.astype(BF16)
        deq32[name] = d
    folders = {}
    for kind, tensors in (("fp8", fp8), ("deq", deq), ("deq32", deq32)):
        d = out / f"{kind}-{layout}"
        d.mkdir()
        for f in src.iterdir():
            if f.name not in ("model.safetensors", "config.json"):
                (d / f.name).write_bytes(f.read_bytes())
        c = dict(cfg)
        if kind == "fp8":
            c["quantization_config"] = QUANT_CONFIG[layout]
        (d / "config.json").write_text(json.dumps(c))
        write_safetensors(d / "model.safetensors", tensors)
        folders[kind] = d
    return folders


@pytest.fixture(scope="module")
def demo(coserve_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("fp8")
    src = d / "src"
    p = subprocess.run([coserve_bin, "make-demo-model", str(src), "--hidden-size", "128", "--intermediate-size",
                        "352", "--num-layers", "2", "--num-heads", "4", "--num-kv-heads", "2", "--seed", "5"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        if "tokenizer" in p.stderr:
            skip_or_fail_in_ci("make-demo-model needs ../shared/testdata: " + p.stderr)
        raise AssertionError(p.stderr)
    return d, src


def generate(binary, model, extra=()):
    p = subprocess.run([binary, "generate", str(model), "--prompt-ids", "50256,464,2068,7586,21831,18045,625",
                        "--max-tokens", "12", "--ignore-eos", "--json", "--logits", "last", *extra],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr


@pytest.mark.parametrize("layout", ["tensor", "channel"])
def test_fp8_checkpoint_per_tensor_or_channel_runs_on_its_codes(coserve_bin, demo, layout):
    # Kept as fp8 codes with a scale per row: the kernels' sums over the codes times the scale
    # must match the fp32 products with the dequantized weights, to fp32 rounding.
    d, src = demo
    folders = make_pair(src, d, layout)
    exact = ("--dtype", "float32", "--kv-cache-dtype", "fp32")
    a, log = generate(coserve_bin, folders["fp8"], exact)
    b, _ = generate(coserve_bin, folders["deq32"], exact)
    method = QUANT_CONFIG[layout]["quant_method"]
    assert f"fp8 checkpoint ({method}, " in log and "14 matrices kept in fp8 with per-row scales" in log, log
    assert "dequantized" not in log
    assert ("input_scale tensors are not used" in log) == (layout == "tensor")
    assert a["output_ids"] == b["output_ids"]
    np.testing.assert_allclose(np.array(a["logits"][0]), np.array(b["logits"][0]), rtol=1e-4, atol=1e-4)
    # And the weights are really the fp8 ones: the original model's logits differ.
    c, _ = generate(coserve_bin, src, exact)
    assert np.abs(np.array(c["logits"][0]) - np.array(a["logits"][0])).max() > 1e-3
    # The default (bf16 activations for bf16 weights; fp8 ones take fp32 activations) runs too.
    e, _ = generate(coserve_bin, folders["fp8"])
    assert len(e["output_ids"]) == 12
    # Tensor parallelism cuts the codes and their per-row scales together (q/k/v and gate/up by
    # rows, o and down by columns).
    tp, _ = generate(coserve_bin, folders["fp8"], exact + ("--tensor-parallel-size", "2"))
    assert tp["output_ids"] == a["output_ids"]
    np.testing.assert_allclose(np.array(tp["logits"][0]), np.array(a["logits"][0]), rtol=1e-4, atol=1e-4)


def test_fp8_checkpoint_with_block_scales_loads_as_its_dequantized_weights(coserve_bin, demo):
    d, src = demo
    folders = make_pair(src, d, "block")
    a, log = generate(coserve_bin, folders["fp8"])
    b, _ = generate(coserve_bin, folders["deq"])
    assert "fp8 checkpoint (fp8, " in log and "14 matrices dequantized to bf16 at load" in log, log
    assert a["output_ids"] == b["output_ids"]
    np.testing.assert_array_equal(np.array(a["logits"][0]), np.array(b["logits"][0]))


def test_fp8_checkpoint_serves_the_openai_api(coserve_bin, demo, tmp_path):
    d, src = demo
    ckpt = make_pair(src, tmp_path, "channel")["fp8"]
    s = Server(model=ckpt)
    try:
        c = s.client()
        assert [m.id for m in c.models.list().data] == [s.model]
        r = c.completions.create(model=s.model, prompt="The quick brown", max_tokens=8, temperature=0)
        assert r.choices[0].finish_reason in ("length", "stop")
        assert r.usage.completion_tokens >= 1
        stream = c.completions.create(model=s.model, prompt="The quick brown", max_tokens=8, temperature=0,
                                      stream=True)
        assert "".join(ch.choices[0].text for ch in stream if ch.choices) == r.choices[0].text
    finally:
        assert s.stop() == 0
    assert any("fp8 checkpoint (compressed-tensors, " in line for line in s.log)


def refused(binary, model):
    p = subprocess.run([binary, "generate", str(model), "--prompt-ids", "1,2", "--max-tokens", "1"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode != 0
    return p.stderr


def test_malformed_fp8_checkpoints_are_refused_naming_the_tensor(coserve_bin, demo, tmp_path):
    d, src = demo
    folders = make_pair(src, tmp_path, "block")
    ckpt = folders["fp8"]
    t = read_safetensors(ckpt / "model.safetensors")
    st = ckpt / "model.safetensors"

    def with_tensors(tensors):
        write_safetensors(st, tensors)
        return refused(coserve_bin, ckpt)

    full = dict(t)
    victim = "model.layers.1.mlp.down_proj.weight"

    missing = dict(full)
    del missing[victim + "_scale_inv"]
    err = with_tensors(missing)
    assert victim in err and "_scale" in err, err

    wrong = dict(full)
    wrong[victim + "_scale_inv"] = np.ones((3, 3), np.float32)
    err = with_tensors(wrong)
    assert victim + "_scale_inv" in err and "[3, 3]" in err, err

    nan = dict(full)
    s = full[victim + "_scale_inv"].copy()
    s[0, 0] = np.nan
    nan[victim + "_scale_inv"] = s
    err = with_tensors(nan)
    assert victim in err and "NaN" in err, err

    write_safetensors(st, full)
    cfg = json.loads((ckpt / "config.json").read_text())
    for q, needle in (({"quant_method": "gptq", "bits": 4}, "'gptq' is not supported"),
                      ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}},
                       "pack-quantized")):
        (ckpt / "config.json").write_text(json.dumps({**cfg, "quantization_config": q}))
        err = refused(coserve_bin, ckpt)
        assert needle in err and "config.json" in err, err


def kv_blocks(server):
    for line in server.log:
        m = re.search(r"KV cache (\d+) blocks", line)
        if m:
            return int(m.group(1))
    raise AssertionError("no KV cache line in the startup log:\n" + "".join(server.log))


@pytest.mark.parametrize("kv", ["fp8", "fp8_e5m2"])
def test_fp8_kv_cache_holds_twice_the_blocks_and_serves(kv):
    # The same KV memory (--cpu-kv-cache-gib) holds twice the blocks at one byte per value; greedy
    # completions run through the official client on both.
    runs = {}
    for dtype in ("bf16", kv):
        s = Server("--kv-cache-dtype", dtype, "--cpu-kv-cache-gib", "0.01")
        try:
            c = s.client()
            r = c.completions.create(model=s.model, prompt="The quick brown fox", max_tokens=8, temperature=0)
            assert r.usage.completion_tokens == 8
            runs[dtype] = (kv_blocks(s), r.choices[0].text)
        finally:
            assert s.stop() == 0
    assert runs[kv][0] == 2 * runs["bf16"][0]
    assert any(f"kv F8_E{'4M3' if kv == 'fp8' else '5M2'}" in line for line in s.log)
