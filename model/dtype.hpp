// Element types of weights on disk and their conversion to fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace coserve {

// f32, f16, bf16: one element per value (safetensors, GGUF, KV caches). f8_e4m3 / f8_e5m2: the
// one-byte floats of fp8 checkpoints (OCP FP8: E4M3 "fn" without infinities, max 448; E5M2 as the
// top byte of an f16); they need their checkpoint's scales and are dequantized at load
// (model/fp8.hpp), so no kernel sees them. The others are GGUF's block-quantized weight types
// (ggml's layouts, model/quant.hpp): a block of dtype_block_elems values takes dtype_block_bytes
// bytes; a row holds whole blocks.
enum class dtype : uint8_t {
  f32,
  f16,
  bf16,
  f8_e4m3,
  f8_e5m2,
  q8_0,
  q4_0,
  q4_k,
  q5_k,
  q6_k,
  q4_1,
  q5_0,
  q5_1,
  q2_k,
  q3_k,
  iq4_nl,
  iq4_xs
};

// "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2" (safetensors spelling), "Q8_0", "Q4_0", "Q4_K",
// "Q5_K", "Q6_K", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS" (ggml's).
std::string_view dtype_name(dtype t) noexcept;
bool parse_dtype(std::string_view name,
                 dtype& out) noexcept;  // safetensors spelling (float types only)
inline bool dtype_is_quantized(dtype t) noexcept { return t >= dtype::q8_0; }
inline bool dtype_is_fp8(dtype t) noexcept { return t == dtype::f8_e4m3 || t == dtype::f8_e5m2; }
// Bytes per element of a float type; quantized types have no element size.
inline size_t dtype_size(dtype t) noexcept { return t == dtype::f32 ? 4 : dtype_is_fp8(t) ? 1 : 2; }
int64_t dtype_block_elems(dtype t) noexcept;  // 1 for float types, 32 (Q8_0, Q4_0/1, Q5_0/1,
                                              // IQ4_NL) or 256 (K types, IQ4_XS)
size_t dtype_block_bytes(
    dtype t) noexcept;  // bytes of one block (the element size for float types)
// Bytes of `n` values of `t`; n must be a multiple of dtype_block_elems(t).
inline size_t dtype_bytes(dtype t, int64_t n) noexcept {
  return size_t(n / dtype_block_elems(t)) * dtype_block_bytes(t);
}

inline float bf16_to_f32(uint16_t h) noexcept {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) noexcept {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// --kv-cache-dtype (vLLM's flag): "auto" (bf16 on the CPU), "bf16"/"bfloat16", "fp16"/"float16",
// "fp32"/"float32", "fp8"/"fp8_e4m3" (E4M3), "fp8_e5m2". False for any other name. fp8 caches hold
// the values unscaled (vLLM's default k/v scale of 1.0), saturated at the format's largest value.
bool parse_kv_cache_dtype(std::string_view name, dtype& out) noexcept;

// --dtype (vLLM's flag), the precision of the activations multiplied with the weights:
// "auto" / "bfloat16" / "bf16" -> bf16_activations = true (products with bf16 weights take
// activations rounded to bf16; other weights keep fp32 activations), "float32" / "float" / "fp32"
// -> false (fp32 activations everywhere). Weights are never converted. False for any other name.
bool parse_compute_dtype(std::string_view name, bool& bf16_activations) noexcept;

float f16_to_f32(uint16_t h) noexcept;
// E4M3 ("fn": no infinities, 0x7f / 0xff NaN, largest finite 448) and E5M2 bytes to fp32, exactly.
inline float e4m3_to_f32(uint8_t c) noexcept {
  const uint32_t exp = (c >> 3) & 0xfu, mant = c & 7u;
  float v;
  if (exp == 0) {
    v = float(mant) * (1.0f / 512.0f);  // subnormal: mant * 2^-9
  } else if (exp == 15 && mant == 7) {
    v = __builtin_nanf("");
  } else {
    const uint32_t bits = ((exp + 120u) << 23) | (mant << 20);  // rebias 7 -> 127
    std::memcpy(&v, &bits, 4);
  }
  return (c & 0x80u) ? -v : v;
}
float e5m2_to_f32(uint8_t c) noexcept;
// fp32 to E4M3, round to nearest even, saturating: magnitudes beyond 448 (infinities included)
// give +-448, as vLLM's and torch's fp8 quantizers clamp before the cast; NaN stays NaN.
uint8_t f32_to_e4m3(float f) noexcept;
// fp32 to E5M2, round to nearest even, saturating at +-57344 (infinities included); NaN stays NaN.
uint8_t f32_to_e5m2(float f) noexcept;
uint16_t f32_to_f16(float f) noexcept;  // round to nearest even, overflow to inf

// Converts n elements of type t at src (unaligned allowed) to fp32; quantized types are
// dequantized as ggml does (n a multiple of the block size); fp8 types give their unscaled values.
void convert_to_f32(dtype t, const void* src, float* dst, size_t n) noexcept;

}  // namespace coserve
