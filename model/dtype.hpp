// Element types of weights on disk and their conversion to fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace coserve {

enum class dtype : uint8_t { f32, f16, bf16 };

std::string_view dtype_name(dtype t) noexcept;          // "F32", "F16", "BF16" (safetensors spelling)
bool parse_dtype(std::string_view name, dtype& out) noexcept;  // safetensors spelling
inline size_t dtype_size(dtype t) noexcept { return t == dtype::f32 ? 4 : 2; }

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
// "fp32"/"float32". False for any other name.
bool parse_kv_cache_dtype(std::string_view name, dtype& out) noexcept;

// --dtype (vLLM's flag), the precision of the activations multiplied with the weights:
// "auto" / "bfloat16" / "bf16" -> bf16_activations = true (products with bf16 weights take
// activations rounded to bf16; other weights keep fp32 activations), "float32" / "float" / "fp32"
// -> false (fp32 activations everywhere). Weights are never converted. False for any other name.
bool parse_compute_dtype(std::string_view name, bool& bf16_activations) noexcept;

float f16_to_f32(uint16_t h) noexcept;
uint16_t f32_to_f16(float f) noexcept;  // round to nearest even, overflow to inf

// Converts n elements of type t at src (unaligned allowed) to fp32.
void convert_to_f32(dtype t, const void* src, float* dst, size_t n) noexcept;

}  // namespace coserve
