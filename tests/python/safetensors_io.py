"""Minimal safetensors reader and writer for the tests and bench scripts (numpy arrays).

read_safetensors(path) returns each tensor in its stored type (BF16 and F8 through ml_dtypes);
with as_f32=True every tensor is widened to float32 (BF16 by shifting its bits, so ml_dtypes is
not needed for BF16/F16/F32 files). write_safetensors(path, tensors) writes F32, F16, BF16 and
F8_E4M3 / F8_E5M2 arrays with an 8-byte-aligned header.
"""
import json
import struct
from pathlib import Path

import numpy as np


def _ml_dtypes():
    import ml_dtypes  # only files with BF16 / F8 tensors read in their own type need it
    return ml_dtypes


def _stored_types():
    m = _ml_dtypes()
    return {"F32": np.float32, "F16": np.float16, "BF16": m.bfloat16, "F8_E4M3": m.float8_e4m3fn,
            "F8_E5M2": m.float8_e5m2}


def read_safetensors(path, as_f32=False):
    data = Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw, kind = data[8 + n + b:8 + n + e], info["dtype"]
        if as_f32 and kind == "BF16":
            arr = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif as_f32 and kind in ("F32", "F16"):
            arr = np.frombuffer(raw, np.float32 if kind == "F32" else np.float16).astype(np.float32)
        else:
            arr = np.frombuffer(raw, _stored_types()[kind])
            if as_f32:
                arr = arr.astype(np.float32)
        out[name] = arr.reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    names = {np.dtype(t): k for k, t in _stored_types().items()}
    header, offset, blobs = {}, 0, []
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": names[arr.dtype], "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
