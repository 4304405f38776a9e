"""`coserve gguf` against gguf-py (llama.cpp's own Python GGUF package) as the oracle.

Dequantization: for each tensor type the runtime reads, a GGUF file written by gguf.GGUFWriter
holds random raw blocks (every f16 scale a finite value); `coserve gguf FILE --tensor NAME
--dequantize OUT` must write exactly the fp32 bits gguf.quants.dequantize computes, bit for bit.
Listing: `coserve gguf FILE --json` reports the metadata keys, types and values, tensor names,
types, shapes and offsets gguf.GGUFReader reads from the same file."""
import json
import subprocess

import gguf  # tests/python/requirements.txt: a missing package fails the tests, never skips them
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.constants import GGML_QUANT_SIZES

# Byte offsets of the f16 scale fields inside one block, per type (ggml's layouts).
SCALE_FIELDS = {
    Q.Q8_0: [0],       # d, int8 q[32]
    Q.Q4_0: [0],       # d, u8 qs[16]
    Q.Q4_1: [0, 2],    # d, m, u8 qs[16]
    Q.Q5_0: [0],       # d, u32 qh, u8 qs[16]
    Q.Q5_1: [0, 2],    # d, m, u32 qh, u8 qs[16]
    Q.Q2_K: [80, 82],  # scales[16], qs[64], d, dmin
    Q.Q3_K: [108],     # hmask[32], qs[64], scales[12], d
    Q.IQ4_NL: [0],     # d, u8 qs[16]
    Q.IQ4_XS: [0],     # d, u16 scales_h, u8 scales_l[4], qs[128]
    Q.Q4_K: [0, 2],    # d, dmin, scales[12], qs[128]
    Q.Q5_K: [0, 2],    # d, dmin, scales[12], qh[32], qs[128]
    Q.Q6_K: [208],     # ql[128], qh[64], scales[16], d
}
TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K,
         Q.IQ4_NL, Q.IQ4_XS]


def random_raw(rng, qtype, shape):
    """Random raw bytes of a tensor of `shape` (numpy order, last = contiguous) of type qtype: any
    finite value for the float types; random blocks with finite f16 scales for the quantized ones."""
    block, size = GGML_QUANT_SIZES[qtype]
    *outer, cols = shape
    assert cols % block == 0
    n = int(np.prod(shape))
    if qtype == Q.F32:
        bits = rng.integers(0, 2**32, n, dtype=np.uint32)
        exp_all_ones = (bits & 0x7F800000) == 0x7F800000  # inf / NaN: flip the exponent's top bit
        bits[exp_all_ones] ^= 0x40000000
        raw = bits.view(np.uint8)
    elif qtype in (Q.F16, Q.BF16):
        mask = 0x7C00 if qtype == Q.F16 else 0x7F80
        bits = rng.integers(0, 2**16, n, dtype=np.uint16)
        top = 0x4000
        bits[(bits & mask) == mask] ^= top
        raw = bits.view(np.uint8)
    else:
        n_blocks = n // block
        blocks = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
        for off in SCALE_FIELDS[qtype]:
            # magnitudes 1e-6 .. 10 (the smallest are f16 subnormals), either sign
            mag = 10.0 ** rng.uniform(-6, 1, n_blocks)
            sign = np.where(rng.random(n_blocks) < 0.5, -1.0, 1.0)
            scales = (sign * mag).astype(np.float16)
            assert np.isfinite(scales).all()
            blocks[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
        raw = blocks
    return np.ascontiguousarray(raw.reshape(-1)).reshape(*outer, cols // block * size)


def write_gguf(path, tensors, alignment=None, metadata=()):
    """tensors: [(name, raw uint8 array, qtype)]; metadata: [(adder name, key, value)]."""
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for adder, key, value in metadata:
        getattr(w, adder)(key, value)
    for name, raw, qtype in tensors:
        w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run_coserve(binary, *args):
    return subprocess.run([binary, "gguf", *map(str, args)], capture_output=True, timeout=120)


def first_mismatch(got, want, raw, qtype):
    """A message naming the first differing value: index, block, block bytes, both values."""
    i = int(np.flatnonzero(got != want)[0])
    block, size = GGML_QUANT_SIZES[qtype]
    b = i // block
    block_bytes = raw.reshape(-1)[b * size:(b + 1) * size]
    g, w = got[i:i + 1].view(np.float32)[0], want[i:i + 1].view(np.float32)[0]
    return (f"{qtype.name}: {int((got != want).sum())} of {got.size} values differ; first at index {i} "
            f"(block {b}, value {i % block} in it): coserve {g!r} (0x{int(got[i]):08x}), "
            f"gguf-py {w!r} (0x{int(want[i]):08x}); block bytes {bytes(block_bytes).hex()}")


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_dequantize_matches_gguf_py_bit_for_bit(coserve_bin, tmp_path, qtype):
    rng = np.random.default_rng(1234 + int(qtype))
    block, _ = GGML_QUANT_SIZES[qtype]
    cols = 512 if block == 256 else 64 if block == 32 else 1024
    tensors = [("blk.0.w", random_raw(rng, qtype, (3, cols)), qtype),
               ("blk.0.w3", random_raw(rng, qtype, (2, 3, cols)), qtype)]  # three dimensions, second tensor
    path = tmp_path / f"{qtype.name}.gguf"
    write_gguf(path, tensors)
    for name, raw, _ in tensors:
        out = tmp_path / f"{name}.f32"
        r = run_coserve(coserve_bin, path, "--tensor", name, "--dequantize", out)
        assert r.returncode == 0, r.stderr.decode()
        got = np.fromfile(out, dtype="<u4")
        want = np.ascontiguousarray(gguf.quants.dequantize(raw, qtype), dtype=np.float32).reshape(-1).view(np.uint32)
        assert want.size == raw.size // GGML_QUANT_SIZES[qtype][1] * block
        assert got.size == want.size, f"{name}: {got.size} values written, {want.size} expected"
        if not np.array_equal(got, want):
            pytest.fail(first_mismatch(got, want, raw, qtype))


METADATA = [
    ("add_uint8", "test.u8", 200), ("add_int8", "test.i8", -100), ("add_uint16", "test.u16", 60000),
    ("add_int16", "test.i16", -30000), ("add_uint32", "test.u32", 4000000000), ("add_int32", "test.i32", -2000000000),
    ("add_uint64", "test.u64", 2**64 - 1), ("add_int64", "test.i64", -(2**62)), ("add_float32", "test.f32", 0.1),
    ("add_float64", "test.f64", 1e-300), ("add_bool", "test.bool", True), ("add_bool", "test.false", False),
    ("add_string", "test.string", "héllo \"world\"\n" + "x" * 100),
    ("add_array", "tokenizer.ggml.tokens", [f"<tok{i}>" for i in range(40)] + ["é", "\t"]),
    ("add_array", "tokenizer.ggml.scores", [float(i) / 3 for i in range(20)]),
    ("add_array", "tokenizer.ggml.token_type", list(range(-5, 30))),
    ("add_array", "test.bools", [True, False, True]),
]


@pytest.mark.parametrize("alignment", [None, 64], ids=["default_alignment", "alignment_64"])
def test_json_listing_matches_gguf_reader(coserve_bin, tmp_path, alignment):
    rng = np.random.default_rng(7)
    tensors = [("token_embd.weight", random_raw(rng, Q.Q4_K, (4, 256)), Q.Q4_K),
               ("output_norm.weight", random_raw(rng, Q.F32, (1, 3)), Q.F32),
               ("blk.0.attn_q.weight", random_raw(rng, Q.Q8_0, (2, 2, 64)), Q.Q8_0),
               ("blk.0.ffn_down.weight", random_raw(rng, Q.BF16, (5, 7)), Q.BF16),
               ("blk.0.ffn_up.weight", random_raw(rng, Q.Q6_K, (1, 512)), Q.Q6_K)]
    path = tmp_path / "model.gguf"
    write_gguf(path, tensors, alignment, METADATA)
    r = run_coserve(coserve_bin, path, "--json")
    assert r.returncode == 0, r.stderr.decode()
    doc = json.loads(r.stdout)

    reader = gguf.GGUFReader(str(path))
    assert doc["version"] == int(reader.fields["GGUF.version"].contents())
    assert doc["alignment"] == reader.alignment == (alignment or 32)
    assert doc["file_size"] == path.stat().st_size
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert sorted(doc["metadata"]) == sorted(fields)
    for key, field in fields.items():
        got = doc["metadata"][key]
        assert got["type"] == field.types[0].name, key
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            values = field.contents()
            assert got["element_type"] == field.types[-1].name, key
            assert got["count"] == len(values), key
            assert got["head"] == list(values[:16]), key
        else:
            assert got["value"] == field.contents(), key

    assert [t["name"] for t in doc["tensors"]] == [t.name for t in reader.tensors]
    for got, t in zip(doc["tensors"], reader.tensors):
        assert got["type"] == t.tensor_type.name, t.name
        assert got["ggml_type"] == int(t.tensor_type), t.name
        assert got["dims"] == [int(d) for d in t.shape], t.name
        assert got["elements"] == t.n_elements, t.name
        assert got["bytes"] == t.n_bytes, t.name
        assert got["offset"] == t.data_offset - reader.data_offset, t.name
        assert got["offset"] % doc["alignment"] == 0, t.name

    # The text listing names every key and tensor; --tensor narrows it to one.
    r = run_coserve(coserve_bin, path)
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode()
    assert f"GGUF version {doc['version']}, alignment {doc['alignment']}" in text
    for key in fields:
        assert f"| {key} = " in text
    for t in reader.tensors:
        assert t.name in text
    r = run_coserve(coserve_bin, path, "--json", "--tensor", "output_norm.weight")
    assert r.returncode == 0, r.stderr.decode()
    assert [t["name"] for t in json.loads(r.stdout)["tensors"]] == ["output_norm.weight"]


def test_errors_go_to_stderr_with_status_1(coserve_bin, tmp_path):
    path = tmp_path / "one.gguf"
    write_gguf(path, [("w", random_raw(np.random.default_rng(1), Q.Q8_0, (1, 32)), Q.Q8_0)])
    r = run_coserve(coserve_bin, path, "--tensor", "missing", "--dequantize", tmp_path / "out.f32")
    assert r.returncode == 1 and b"missing" in r.stderr and not r.stdout
    assert not (tmp_path / "out.f32").exists()

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(40))  # version 0
    r = run_coserve(coserve_bin, bad)
    assert r.returncode == 1 and b"version" in r.stderr and not r.stdout

    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(path.read_bytes()[:60])
    r = run_coserve(coserve_bin, truncated, "--json")
    assert r.returncode == 1 and b"truncated.gguf" in r.stderr and not r.stdout

    r = run_coserve(coserve_bin, tmp_path / "absent.gguf")
    assert r.returncode == 1 and b"absent.gguf" in r.stderr

    r = run_coserve(coserve_bin, path, "--dequantize", tmp_path / "x")  # no --tensor
    assert r.returncode == 2
    r = run_coserve(coserve_bin, "--help")
    assert r.returncode == 0
    for flag in ("--json", "--tensor", "--dequantize"):
        assert flag.encode() in r.stdout
