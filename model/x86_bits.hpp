// Bit and byte helpers of the x86 integer kernels (model/quant_kernels.cpp, model/quant_gemm.cpp).
// Callers are compiled for AVX2 or better.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace coserve::x86 {

// 32 bytes, 0 or 0xFF: byte i set where bit i of the little-endian 32 bits at p is (the fifth
// bits of a Q5_0 / Q5_1 block; ggml's bytes_from_bits_32). Each byte of the word is spread over 8
// lanes, every bit but lane % 8's set, and the lanes that are then all ones kept.
__attribute__((target("avx2"))) inline __m256i bits_to_bytes(const uint8_t* p) {
  uint32_t x;
  std::memcpy(&x, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(x)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  return _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
                           _mm256_set1_epi64x(-1));
}

}  // namespace coserve::x86

#endif
