#!/usr/bin/env python3
"""Writes tests/reference/fixtures/fp8/codec.json: the fp8 codes of ml_dtypes (the float8 library of
JAX and the numpy ecosystem) as the reference for model/dtype.cpp's E4M3 / E5M2 conversions.

  decode_e4m3, decode_e5m2: the value of each of the 256 codes (null for NaN, "inf" / "-inf"), from
      ml_dtypes.float8_e4m3fn / float8_e5m2 cast to float32.
  encode_e4m3: [float32 bits, code] pairs: every representable value, the midpoints between
      neighbours (ties round to even) and their float32 neighbours on both sides, the subnormal
      range, random values over the whole range, and values past 448 (clamped to +-448 first, as
      vLLM and torch clamp before casting; ml_dtypes alone would give NaN).
  encode_e5m2: the same for E5M2 (largest finite 57344, clamped to it first).

usage: make_fp8_fixtures.py [--out tests/reference/fixtures/fp8/codec.json]
needs: numpy, ml_dtypes (PyPI)
"""
import argparse
import json
import math

import ml_dtypes
import numpy as np


def decode(t):
    vals = np.arange(256, dtype=np.uint8).view(t).astype(np.float32)
    return [None if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else float(v) for v in vals]


def encode_cases(t):
    """[float32 bits, code] for the values of t, their midpoints and neighbours, random and large values."""
    finite = np.array([v for v in decode(t) if isinstance(v, float)], np.float32)
    pos = np.unique(finite[finite >= 0])
    top = float(pos[-1])
    mids = ((pos[:-1].astype(np.float64) + pos[1:]) / 2).astype(np.float32)
    rng = np.random.default_rng(7)
    smallest_normal = float(pos[pos > 0][0]) * (8 if t == ml_dtypes.float8_e4m3fn else 4)
    xs = [pos, mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf)),
          np.linspace(0, smallest_normal, 97, dtype=np.float32),
          (rng.standard_normal(2000) * np.exp2(rng.integers(-18, 16, 2000))).astype(np.float32),
          np.array([top, top + 1, top * 1.03, top * 1.07, top * 1.2, 1e6, 3.0e38, np.inf], np.float32)]
    x = np.concatenate(xs).astype(np.float32)
    x = np.concatenate([x, -x])
    codes = np.clip(x, -top, top).astype(t).view(np.uint8)
    return [[int(b), int(c)] for b, c in zip(x.view(np.uint32), codes)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/reference/fixtures/fp8/codec.json")
    args = ap.parse_args()

    out = {
        "generator": "tests/reference/make_fp8_fixtures.py, ml_dtypes " + ml_dtypes.__version__,
        "decode_e4m3": decode(ml_dtypes.float8_e4m3fn),
        "decode_e5m2": decode(ml_dtypes.float8_e5m2),
        "encode_e4m3": encode_cases(ml_dtypes.float8_e4m3fn),
        "encode_e5m2": encode_cases(ml_dtypes.float8_e5m2),
    }
    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"{args.out}: {len(out['encode_e4m3'])} + {len(out['encode_e5m2'])} encodings")


if __name__ == "__main__":
    main()
