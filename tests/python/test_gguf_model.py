"""GGUF model files through the real binary: generate, serve with the official openai client, refuse
malformed files.

The files are written with gguf-py (llama.cpp's own GGUF library, from PyPI) the way llama.cpp's
convert_hf_to_gguf.py writes a Llama model: its tensor names, Q/K rows permuted to interleaved
RoPE pairs, norms in F32, the tokenizer metadata of llama.cpp's GPT-2 vocabulary file (the demo
model's tokenizer is GPT-2's), and Q8_0 / Q4_0 blocks from gguf-py's quantizer (bit-exact with
ggml's reference quantizer; Q4_1 / Q5_0 / Q5_1 as well). tests/bench/vs_llamacpp.py runs llama.cpp's converter and quantizer
themselves on the same model.
"""
import functools
import json
import math
import subprocess
import zlib

import numpy as np
import pytest

from conftest import Server, skip_or_fail_in_ci
from safetensors_io import read_safetensors
from test_gguf_tokenizer import vocab_dir

gguf = pytest.importorskip("gguf")


# The block types gguf-py quantizes (bit-exact with ggml's reference quantizers).
QUANTIZED = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
# Types gguf-py only dequantizes: their files hold random blocks (the byte offsets of each block's
# f16 scales are listed), scaled so that the weights spread as the model's did. The weights differ
# from the folder's, so these files are compared only with their own dequantized copies; files of
# these types made by llama-quantize itself run in tests/bench/vs_llamacpp.py.
RANDOM_BLOCKS = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_NL": (0,),
                 "IQ4_XS": (0,)}


def random_blocks(name, qtype, shape, target_std):
    """Random raw blocks of `qtype` for a tensor `shape`, seeded by its name; every f16 scale field
    the same positive value, chosen so that the dequantized values have standard deviation
    target_std."""
    q = getattr(gguf.GGMLQuantizationType, qtype)
    block, size = gguf.constants.GGML_QUANT_SIZES[q]
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    raw = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)

    def with_scale(v):
        for off in RANDOM_BLOCKS[qtype]:
            raw[:, off:off + 2] = np.full(len(raw), v, np.float16).view(np.uint8).reshape(-1, 2)
        return raw.reshape(*shape[:-1], cols // block * size)

    unit = float(gguf.quants.dequantize(with_scale(1.0), q).std())
    return with_scale(target_std / unit)

CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def permute(w, n_head):
    # convert_hf_to_gguf.py LlamaModel.permute: rows of each head to interleaved RoPE pairs.
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def string_array(field):
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


@functools.lru_cache(maxsize=1)
def gpt2_vocab():
    """llama.cpp's GPT-2 vocabulary file as (tokens, token types, merges), read once per process:
    reading it took most of each write_gguf call."""
    f = gguf.GGUFReader(str(vocab_dir() / "ggml-vocab-gpt-2.gguf")).fields
    return (string_array(f["tokenizer.ggml.tokens"]),
            [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data],
            string_array(f["tokenizer.ggml.merges"]))


def write_gguf(model_dir, out, qtype, dequantized=False):
    """dequantized: the matrices as F32 holding the quantized values (the same weights as the
    quantized file, without quantizing the activations)."""
    cfg = json.loads((model_dir / "config.json").read_text())
    t = read_safetensors(model_dir / "model.safetensors", as_f32=True)
    own_arch = cfg["model_type"] in ("qwen2", "qwen3", "phi3", "qwen2_moe", "qwen3_moe")
    fused = cfg["model_type"] == "phi3"  # attn_qkv, and ffn_up holding gate then up (Phi3MiniModel)
    # llama.cpp's converter permutes Q/K only for its llama architecture (the others rotate halves).
    perm = (lambda x, n: x) if own_arch else permute
    # Mixtral is llama with expert_count; Qwen2-MoE / Qwen3-MoE are qwen2moe / qwen3moe
    # (Qwen2MoeModel's fields).
    arch = {"qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe"}.get(cfg["model_type"], cfg["model_type"]) if own_arch \
        else "llama"
    experts = cfg.get("num_local_experts") or cfg.get("num_experts")
    w = gguf.GGUFWriter(str(out), arch)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        if "moe_intermediate_size" in cfg:
            w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        if "shared_expert_intermediate_size" in cfg:
            w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    w.add_name("coserve demo")
    h, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(h)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    head_dim = cfg.get("head_dim") or h // heads
    # Phi3MiniModel: int(partial_rotary_factor * hidden) // heads rotated dimensions.
    w.add_rope_dimension_count(int(cfg.get("partial_rotary_factor", 1.0) * h) // heads if fused else head_dim)
    if head_dim != h // heads:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_vocab_size(cfg["vocab_size"])
    tokens, token_types, merges = gpt2_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(token_types)
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_chat_template(CHAT_TEMPLATE)

    def matrix(name, arr):
        if qtype == "F32":
            w.add_tensor(name, arr.astype(np.float32))
        elif qtype == "F16" or arr.shape[-1] % gguf.constants.GGML_QUANT_SIZES[
                getattr(gguf.GGMLQuantizationType, qtype)][0] != 0:  # partial blocks: F16
            w.add_tensor(name, arr.astype(np.float16))
        elif qtype in RANDOM_BLOCKS:
            q = getattr(gguf.GGMLQuantizationType, qtype)
            blocks = random_blocks(name, qtype, arr.shape, float(arr.std()))
            if dequantized:
                w.add_tensor(name, gguf.quants.dequantize(blocks, q).astype(np.float32))
            else:
                w.add_tensor(name, blocks, raw_dtype=q)
        else:
            q = getattr(gguf.GGMLQuantizationType, qtype)
            blocks = gguf.quants.quantize(arr.astype(np.float32), q)
            if dequantized:
                w.add_tensor(name, gguf.quants.dequantize(blocks, q).astype(np.float32))
            else:
                w.add_tensor(name, blocks, raw_dtype=q)

    matrix("token_embd.weight", t["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", t["model.norm.weight"].astype(np.float32))
    if "lm_head.weight" in t and not cfg.get("tie_word_embeddings"):
        matrix("output.weight", t["lm_head.weight"])
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type") == "linear":  # convert_hf_to_gguf.py: type and factor
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rs["factor"])
    if rs.get("rope_type") == "yarn":  # type, factor and the original context length
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rs["factor"])
        w.add_rope_scaling_orig_ctx_len(rs["original_max_position_embeddings"])
    if rs.get("type") == "longrope":  # Phi3MiniModel: original context, attention factor, factor tensors
        orig = cfg["original_max_position_embeddings"]
        scale = cfg["max_position_embeddings"] / orig
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
        w.add_tensor("rope_factors_long.weight", np.array(rs["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rs["short_factor"], dtype=np.float32))
    if rs.get("rope_type") == "llama3":
        # convert_hf_to_gguf.py LlamaModel.generate_extra_tensors: per-frequency divisors.
        freqs = 1.0 / (cfg["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        factors = []
        for f_ in freqs:
            wavelen = 2 * math.pi / f_
            if wavelen < old / high:
                factors.append(1.0)
            elif wavelen > old / low:
                factors.append(factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                factors.append(1 / ((1 - smooth) / factor + smooth))
        w.add_tensor("rope_freqs.weight", np.array(factors, dtype=np.float32))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", t[p + "input_layernorm.weight"].astype(np.float32))
        if fused:
            matrix(b + "attn_qkv.weight", t[p + "self_attn.qkv_proj.weight"])
            matrix(b + "attn_output.weight", t[p + "self_attn.o_proj.weight"])
            w.add_tensor(b + "ffn_norm.weight", t[p + "post_attention_layernorm.weight"].astype(np.float32))
            matrix(b + "ffn_up.weight", t[p + "mlp.gate_up_proj.weight"])
            matrix(b + "ffn_down.weight", t[p + "mlp.down_proj.weight"])
            continue
        matrix(b + "attn_q.weight", perm(t[p + "self_attn.q_proj.weight"], heads))
        matrix(b + "attn_k.weight", perm(t[p + "self_attn.k_proj.weight"], kv))
        if p + "self_attn.q_proj.bias" in t:
            w.add_tensor(b + "attn_q.bias", perm(t[p + "self_attn.q_proj.bias"], heads).astype(np.float32))
            w.add_tensor(b + "attn_k.bias", perm(t[p + "self_attn.k_proj.bias"], kv).astype(np.float32))
            w.add_tensor(b + "attn_v.bias", t[p + "self_attn.v_proj.bias"].astype(np.float32))
        if p + "self_attn.o_proj.bias" in t:
            w.add_tensor(b + "attn_output.bias", t[p + "self_attn.o_proj.bias"].astype(np.float32))
        if p + "self_attn.q_norm.weight" in t:  # qwen3 (convert_hf_to_gguf.py: attn_q_norm / attn_k_norm)
            w.add_tensor(b + "attn_q_norm.weight", t[p + "self_attn.q_norm.weight"].astype(np.float32))
            w.add_tensor(b + "attn_k_norm.weight", t[p + "self_attn.k_norm.weight"].astype(np.float32))
        matrix(b + "attn_v.weight", t[p + "self_attn.v_proj.weight"])
        matrix(b + "attn_output.weight", t[p + "self_attn.o_proj.weight"])
        w.add_tensor(b + "ffn_norm.weight", t[p + "post_attention_layernorm.weight"].astype(np.float32))
        moe = p + ("block_sparse_moe." if cfg["model_type"] == "mixtral" else "mlp.")
        if moe + "gate.weight" in t:
            # The experts stacked into [experts, rows, cols] tensors, the router as ffn_gate_inp
            # (F32, as llama.cpp's quantizer leaves it).
            names = ("w1", "w3", "w2") if cfg["model_type"] == "mixtral" else ("gate_proj", "up_proj", "down_proj")
            w.add_tensor(b + "ffn_gate_inp.weight", t[moe + "gate.weight"].astype(np.float32))
            for gg, hf in zip(("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"), names):
                matrix(b + gg + ".weight", np.stack([t[f"{moe}experts.{j}.{hf}.weight"] for j in range(experts)]))
            if moe + "shared_expert_gate.weight" in t:  # qwen2moe: the gate as a [hidden] vector
                w.add_tensor(b + "ffn_gate_inp_shexp.weight", t[moe + "shared_expert_gate.weight"].reshape(-1)
                             .astype(np.float32))
                for gg, hf in zip(("ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"),
                                  ("gate_proj", "up_proj", "down_proj")):
                    matrix(b + gg + ".weight", t[f"{moe}shared_expert.{hf}.weight"])
            continue
        matrix(b + "ffn_gate.weight", t[p + "mlp.gate_proj.weight"])
        matrix(b + "ffn_up.weight", t[p + "mlp.up_proj.weight"])
        matrix(b + "ffn_down.weight", t[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


@pytest.fixture(scope="module")
def demo(coserve_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    folder = d / "demo"
    p = subprocess.run([coserve_bin, "make-demo-model", str(folder)], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        if "tokenizer" in p.stderr:
            skip_or_fail_in_ci("make-demo-model needs ../shared/testdata: " + p.stderr)
        raise AssertionError(p.stderr)
    files = {q: write_gguf(folder, d / f"demo-{q.lower()}.gguf", q) for q in ("F32",) + QUANTIZED + tuple(RANDOM_BLOCKS)}
    for q in QUANTIZED + tuple(RANDOM_BLOCKS):
        files["dequantized " + q] = write_gguf(folder, d / f"demo-{q.lower()}-as-f32.gguf", q, dequantized=True)
    return folder, files


def generate(binary, model, prompt_ids, n=16, extra=()):
    p = subprocess.run([binary, "generate", str(model), "--prompt-ids", ",".join(map(str, prompt_ids)),
                        "--max-tokens", str(n), "--ignore-eos", "--json", "--logits", "last", "--kv-cache-dtype", "fp32",
                        "--dtype", "float32", *extra], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def test_f32_gguf_matches_the_folder(coserve_bin, demo):
    # Same weights in both files: the interleaved-pair RoPE of the GGUF layout must give the
    # folder's greedy tokens and logits.
    folder, files = demo
    for prompt in ([50256, 464, 2068, 7586, 21831], list(range(100, 140))):
        a = generate(coserve_bin, folder, prompt)
        b = generate(coserve_bin, files["F32"], prompt)
        assert a["output_ids"] == b["output_ids"]
        np.testing.assert_allclose(a["logits"][0], b["logits"][0], atol=2e-4)


@pytest.mark.parametrize("variant", [
    ["--architecture", "qwen2", "--tie-embeddings"],
    ["--rope-scaling", "llama3", "--qkv-bias", "--head-dim", "48"],
    ["--architecture", "qwen3", "--tie-embeddings", "--head-dim", "48"],
    ["--architecture", "qwen2", "--rope-scaling", "yarn", "--rope-factor", "4",
     "--rope-original-max-position-embeddings", "16"],
    ["--rope-scaling", "linear", "--rope-factor", "3"],
    ["--architecture", "phi3"],
    ["--architecture", "phi3", "--rope-scaling", "longrope", "--rope-original-max-position-embeddings", "24",
     "--partial-rotary-factor", "0.75", "--max-position-embeddings", "256"],
    ["--architecture", "mixtral", "--num-experts", "4", "--num-experts-per-tok", "2", "--intermediate-size", "128"],
    ["--architecture", "qwen3_moe", "--num-experts", "6", "--num-experts-per-tok", "3", "--moe-intermediate-size", "64",
     "--norm-topk-prob", "--decoder-sparse-step", "2", "--head-dim", "48"],
    ["--architecture", "qwen2_moe", "--num-experts", "5", "--num-experts-per-tok", "2", "--moe-intermediate-size", "64",
     "--shared-expert-intermediate-size", "96"],
], ids=["qwen2-tied-bias", "llama3-rope-bias-head48", "qwen3-qk-norm-head48", "qwen2-yarn", "llama-linear", "phi3-fused",
        "phi3-longrope-partial", "mixtral-experts", "qwen3-moe-dense-and-sparse", "qwen2-moe-shared-expert"])
def test_f32_gguf_variants_match_the_folder(coserve_bin, tmp_path, variant):
    # The other layouts the loader reads: qwen2 (q/k/v biases, halves rotated, no permutation) with
    # tied embeddings; llama with Llama 3.1 frequency scaling (rope_freqs.weight), biases and a
    # head size other than hidden / heads (attention.key_length); qwen3 (attn_q_norm / attn_k_norm);
    # YaRN and linear rope scaling (rope.scaling.*); phi3 (attn_qkv, ffn_up holding gate and up), and
    # phi3 with LongRoPE (rope_factors_long/short.weight) over 24 of 32 dimensions per head
    # (rope.dimension_count), the 40-token prompt crossing the original context of 24; Mixtral
    # (llama with expert_count: ffn_gate_inp and the stacked ffn_*_exps tensors), Qwen3-MoE
    # (qwen3moe, expert_feed_forward_length; layer 0 dense, layer 1 sparse) and Qwen2-MoE
    # (qwen2moe: the shared expert's ffn_*_shexp tensors and its gate ffn_gate_inp_shexp).
    folder = tmp_path / "model"
    p = subprocess.run([coserve_bin, "make-demo-model", str(folder), "--num-layers", "2", *variant],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    path = write_gguf(folder, tmp_path / "model.gguf", "F32")
    prompt = list(range(300, 340))
    a = generate(coserve_bin, folder, prompt)
    b = generate(coserve_bin, path, prompt)
    assert a["output_ids"] == b["output_ids"]
    np.testing.assert_allclose(a["logits"][0], b["logits"][0], atol=2e-4)


@pytest.mark.parametrize("q", QUANTIZED + tuple(RANDOM_BLOCKS))
def test_quantized_gguf_logprobs_close(coserve_bin, demo, q):
    # The integer kernels against the same weights held as F32 (gguf-py's dequantization): only the
    # activations' int8 quantization differs. Measured max |d logprob| over the top 10: 0.02-0.14,
    # and 0.12-0.17 for the random IQ4_XS blocks (random 6-bit sub-block scales times the
    # non-linear grid: the widest spread of weights here), hence 0.25 for the random-block files.
    folder, files = demo
    for prompt in (list(range(200, 232)), [50256, 464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290]):
        ref = log_softmax(generate(coserve_bin, files["dequantized " + q], prompt, 1)["logits"][0])
        top = np.argsort(-ref)[:10]
        got = log_softmax(generate(coserve_bin, files[q], prompt, 1)["logits"][0])
        diff = np.abs(got[top] - ref[top]).max()
        print(q, "max |dlogprob| vs dequantized weights", diff)
        assert diff < (0.25 if q in RANDOM_BLOCKS else 0.15), (q, diff)


def dlogprob_vs_dequantized(binary, tmp_path, name, make_args, q, extras=((),)):
    """Max |d logprob| over the top 10 of a demo model's `q` GGUF file against the same weights
    held as F32, for each tuple of extra generate flags in `extras`."""
    folder = tmp_path / name
    if not folder.exists():
        p = subprocess.run([binary, "make-demo-model", str(folder), "--num-layers", "2", *make_args],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
    prompt = list(range(200, 232))
    ref = log_softmax(generate(binary, write_gguf(folder, tmp_path / f"{name}-{q}-f32.gguf", q, dequantized=True),
                               prompt, 1)["logits"][0])
    top = np.argsort(-ref)[:10]
    path = write_gguf(folder, tmp_path / f"{name}-{q}.gguf", q)
    diffs = []
    for extra in extras:
        got = log_softmax(generate(binary, path, prompt, 1, extra)["logits"][0])
        diffs.append(float(np.abs(got[top] - ref[top]).max()))
        print(name, q, extra, "max |dlogprob| vs dequantized weights", diffs[-1])
    return diffs


def test_quantized_phi3_rows_of_fused_tensors(coserve_bin, tmp_path):
    # Phi-3's q/k/v and gate/up are row ranges of one quantized tensor each (Q4_0 repacked per
    # range): log-probabilities within the bound above of the same weights held as F32.
    for q in ("Q8_0", "Q4_0"):
        assert max(dlogprob_vs_dequantized(coserve_bin, tmp_path, "phi3", ["--architecture", "phi3"], q)) < 0.15, q


def test_quantized_moe_experts(coserve_bin, tmp_path):
    # Each expert is a row range of its layer's stacked quantized tensor: Q8_0 and Q4_0 (repacked
    # per expert) against the same weights held as F32, and tensor parallel (each rank a slice of
    # every expert). The int8 activations can move a token's second and third router
    # probabilities past each other, sending it to another expert: measured 0.05-0.11 on most
    # prompts, 0.22 on one where a token's routing flips (with every expert used, no flip: at most
    # 0.11); wrong expert rows give differences of several units.
    args = ["--architecture", "mixtral", "--num-experts", "4", "--intermediate-size", "128"]
    for q in ("Q8_0", "Q4_0"):
        diffs = dlogprob_vs_dequantized(coserve_bin, tmp_path, "mixtral", args, q,
                                        ((), ("--tensor-parallel-size", "2")))
        assert max(diffs) < 0.3, (q, diffs)


def test_gguf_tensor_parallel(coserve_bin, demo):
    # The GGUF layout sharded: llama's interleaved q/k rows split by head, token_embd replicated,
    # output.weight by vocabulary rows. F32 file: TP 2 and 4 give TP 1's tokens, logits within 1e-4.
    _, files = demo
    prompt = [50256, 464, 2068, 7586, 21831, 18045, 625, 262]
    want = generate(coserve_bin, files["F32"], prompt, 12)
    for tp in (2, 4):
        got = generate(coserve_bin, files["F32"], prompt, 12, ("--tensor-parallel-size", str(tp)))
        assert got["output_ids"] == want["output_ids"], tp
        np.testing.assert_allclose(got["logits"][0], want["logits"][0], atol=1e-4)
    # Q8_0 (down_proj stays F32 in this file: 688 columns are not whole blocks): the int8
    # activations are re-quantized after each all-reduce, so TP 2's log-probabilities move within
    # the quantization noise (the bound of test_quantized_gguf_logprobs_close) of TP 1's.
    # Q4_0 the same way: each rank repacks its own rows into 16-row tiles.
    for q in ("Q8_0", "Q4_0"):
        ref = log_softmax(generate(coserve_bin, files[q], prompt, 1)["logits"][0])
        top = np.argsort(-ref)[:10]
        got = log_softmax(generate(coserve_bin, files[q], prompt, 1, ("--tensor-parallel-size", "2"))["logits"][0])
        assert np.abs(got[top] - ref[top]).max() < 0.15, q


def test_q8_0_gguf_serves_openai_api(demo):
    _, files = demo
    s = Server(model=files["Q8_0"])
    try:
        assert s.model == "demo-q8_0.gguf"
        c = s.client()
        r = c.chat.completions.create(model=s.model, messages=[{"role": "user", "content": "Hello"}], max_tokens=8,
                                      temperature=0)
        assert r.choices[0].finish_reason in ("stop", "length")
        assert r.usage.completion_tokens >= 1
        chunks = list(c.chat.completions.create(model=s.model, messages=[{"role": "user", "content": "Hello"}],
                                                max_tokens=8, temperature=0, stream=True))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert text == r.choices[0].message.content
        comp = c.completions.create(model=s.model, prompt="The quick brown fox", max_tokens=5, temperature=0,
                                    logprobs=2)
        assert len(comp.choices[0].logprobs.tokens) == comp.usage.completion_tokens
    finally:
        assert s.stop() == 0


def run_serve_fails(binary, path):
    p = subprocess.run([binary, "serve", str(path), "--port", "0"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    return p.stderr


def test_malformed_gguf_refused(coserve_bin, demo, tmp_path):
    _, files = demo
    data = files["Q8_0"].read_bytes()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(data[: len(data) // 2])
    err = run_serve_fails(coserve_bin, truncated)
    assert "truncated.gguf" in err and "past the end" in err, err
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(data[:100])
    err = run_serve_fails(coserve_bin, header_only)
    assert "header.gguf" in err and ("truncated" in err or "exceeds the file" in err), err
    # An architecture the forward pass does not implement: named in the error.
    other = tmp_path / "gpt2-arch.gguf"
    w = gguf.GGUFWriter(str(other), "gpt2")
    w.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    err = run_serve_fails(coserve_bin, other)
    assert "general.architecture 'gpt2'" in err, err
