#include "model/dtype.hpp"

#include <cmath>
#include <limits>

#include "model/quant.hpp"

namespace coserve {

std::string_view dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::f32:
      return "F32";
    case dtype::f16:
      return "F16";
    case dtype::bf16:
      return "BF16";
    case dtype::f8_e4m3:
      return "F8_E4M3";
    case dtype::f8_e5m2:
      return "F8_E5M2";
    case dtype::q8_0:
      return "Q8_0";
    case dtype::q4_0:
      return "Q4_0";
    case dtype::q4_k:
      return "Q4_K";
    case dtype::q5_k:
      return "Q5_K";
    case dtype::q6_k:
      return "Q6_K";
    case dtype::q4_1:
      return "Q4_1";
    case dtype::q5_0:
      return "Q5_0";
    case dtype::q5_1:
      return "Q5_1";
    case dtype::q2_k:
      return "Q2_K";
    case dtype::q3_k:
      return "Q3_K";
    case dtype::iq4_nl:
      return "IQ4_NL";
    case dtype::iq4_xs:
      return "IQ4_XS";
  }
  return "?";
}

int64_t dtype_block_elems(dtype t) noexcept {
  switch (t) {
    case dtype::f32:
    case dtype::f16:
    case dtype::bf16:
    case dtype::f8_e4m3:
    case dtype::f8_e5m2:
      return 1;
    case dtype::q8_0:
    case dtype::q4_0:
    case dtype::q4_1:
    case dtype::q5_0:
    case dtype::q5_1:
    case dtype::iq4_nl:
      return 32;
    case dtype::q4_k:
    case dtype::q5_k:
    case dtype::q6_k:
    case dtype::q2_k:
    case dtype::q3_k:
    case dtype::iq4_xs:
      return 256;
  }
  return 1;
}

size_t dtype_block_bytes(dtype t) noexcept {
  switch (t) {
    case dtype::f32:
      return 4;
    case dtype::f16:
    case dtype::bf16:
      return 2;
    case dtype::f8_e4m3:
    case dtype::f8_e5m2:
      return 1;
    case dtype::q8_0:
      return 34;  // f16 scale + 32 int8
    case dtype::q4_0:
      return 18;  // f16 scale + 16 bytes of nibbles
    case dtype::q4_k:
      return 144;  // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
    case dtype::q5_k:
      return 176;  // as Q4_K + 32 bytes of high bits
    case dtype::q6_k:
      return 210;  // 128 low nibbles, 64 high 2-bit pairs, 16 int8 scales, f16 d
    case dtype::q4_1:
      return 20;  // f16 scale, f16 min, 16 bytes of nibbles
    case dtype::q5_0:
      return 22;  // f16 scale, 32 high bits, 16 bytes of nibbles
    case dtype::q5_1:
      return 24;  // f16 scale, f16 min, 32 high bits, 16 bytes of nibbles
    case dtype::q2_k:
      return 84;  // 16 scale/min nibble pairs, 64 bytes of 2-bit values, f16 d, f16 dmin
    case dtype::q3_k:
      return 110;  // 32 bytes of high bits, 64 bytes of 2-bit values, 12 bytes of 6-bit scales, f16
                   // d
    case dtype::iq4_nl:
      return 18;  // f16 scale, 16 bytes of table indices
    case dtype::iq4_xs:
      return 136;  // f16 d, u16 high scale bits, 4 bytes of low scale nibbles, 128 bytes of indices
  }
  return 4;
}

bool parse_dtype(std::string_view name, dtype& out) noexcept {
  if (name == "F32")
    out = dtype::f32;
  else if (name == "F16")
    out = dtype::f16;
  else if (name == "BF16")
    out = dtype::bf16;
  else if (name == "F8_E4M3")
    out = dtype::f8_e4m3;
  else if (name == "F8_E5M2")
    out = dtype::f8_e5m2;
  else
    return false;
  return true;
}

float f16_to_f32(uint16_t h) noexcept {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(float(mant), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float e5m2_to_f32(uint8_t c) noexcept { return f16_to_f32(uint16_t(uint16_t(c) << 8)); }

namespace {

// fp32 to a one-byte float of E exponent bits (bias 2^(E-1) - 1) and M mantissa bits, round to
// nearest even; magnitudes from the largest finite value (f32 bits `max_bits`, code `max_code`)
// up saturate to it; NaN gives 0x7f (a NaN in both formats).
template <int E, int M>
uint8_t f32_to_fp8(float f, uint32_t max_bits, uint8_t max_code) noexcept {
  constexpr uint32_t bias = (1u << (E - 1)) - 1, shift = 23 - M;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint8_t(sign | 0x7fu);
  if (abs >= max_bits) return uint8_t(sign | max_code);
  if (abs < ((128 - bias)
             << 23)) {  // below the smallest normal: multiples of 2^(1 - bias - M), ties to even
    float a;
    std::memcpy(&a, &abs, 4);
    return uint8_t(sign | uint8_t(std::nearbyint(a * float(1u << (bias - 1 + M)))));
  }
  abs += ((1u << (shift - 1)) - 1) + ((abs >> shift) & 1u);  // round to nearest even at bit `shift`
  return uint8_t(sign | uint8_t((abs >> shift) - ((127 - bias) << M)));  // rebias the exponent
}

}  // namespace

uint8_t f32_to_e4m3(float f) noexcept { return f32_to_fp8<4, 3>(f, 0x43e00000u, 0x7e); }  // 448

uint8_t f32_to_e5m2(float f) noexcept { return f32_to_fp8<5, 2>(f, 0x47600000u, 0x7b); }  // 57344

uint16_t f32_to_f16(float f) noexcept {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal f16: subnormal or zero
    float a;
    std::memcpy(&a, &abs, 4);
    return uint16_t(sign | uint16_t(std::nearbyint(a * 16777216.0f)));  // a / 2^-24, ties to even
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even at bit 13
  return uint16_t(sign | uint16_t((r - 0x38000000u) >> 13));
}

bool parse_compute_dtype(std::string_view name, bool& bf16_activations) noexcept {
  if (name == "auto" || name == "bfloat16" || name == "bf16") {
    bf16_activations = true;
  } else if (name == "float32" || name == "float" || name == "fp32") {
    bf16_activations = false;
  } else {
    return false;
  }
  return true;
}

bool parse_kv_cache_dtype(std::string_view name, dtype& out) noexcept {
  if (name == "auto" || name == "bf16" || name == "bfloat16") {
    out = dtype::bf16;
  } else if (name == "fp16" || name == "float16") {
    out = dtype::f16;
  } else if (name == "fp32" || name == "float32") {
    out = dtype::f32;
  } else if (name == "fp8" || name == "fp8_e4m3") {
    out = dtype::f8_e4m3;
  } else if (name == "fp8_e5m2") {
    out = dtype::f8_e5m2;
  } else {
    return false;
  }
  return true;
}

void convert_to_f32(dtype t, const void* src, float* dst, size_t n) noexcept {
  const auto* p = static_cast<const unsigned char*>(src);
  switch (t) {
    case dtype::f32:
      std::memcpy(dst, p, n * 4);
      break;
    case dtype::bf16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      break;
    case dtype::f16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      break;
    case dtype::f8_e4m3:
      for (size_t i = 0; i < n; ++i) dst[i] = e4m3_to_f32(p[i]);
      break;
    case dtype::f8_e5m2:
      for (size_t i = 0; i < n; ++i) dst[i] = e5m2_to_f32(p[i]);
      break;
    default:  // the block-quantized types
      dequantize(t, src, dst, n);
      break;
  }
}

}  // namespace coserve
