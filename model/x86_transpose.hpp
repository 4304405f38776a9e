// In-register transposes of 32-bit lanes on x86 (v[r] lane i -> v[i] lane r), the unpack / shuffle
// networks BLAS packing routines use: 16 x 16 with AVX-512 (64 shuffles for 256 values) and 8 x 8
// with AVX (24 for 64). The CPU GEMMs pack weight panels with them: fp32 lanes for the broadcast
// kernel (model/cpu_kernels.cpp), 4-byte groups of quantized values for the integer lane kernels
// (model/quant_gemm.cpp). Callers are compiled for the instruction set named.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

namespace coserve::x86 {

__attribute__((target("avx512f"))) inline void transpose16(__m512* v) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
  }
  // u[4g + e], 128-bit block l: rows 4g .. 4g+3 at column 4l + e.
  for (int g = 0; g < 4; ++g) {
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // Blocks gathered across registers: column 4l + e takes block l of u[e], u[4+e], u[8+e], u[12+e].
  for (int e = 0; e < 4; ++e) {
    const __m512 p = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88),
                 q = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xdd);
    const __m512 r = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
    const __m512 s = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xdd);
    v[e] = _mm512_shuffle_f32x4(p, r, 0x88);
    v[8 + e] = _mm512_shuffle_f32x4(p, r, 0xdd);
    v[4 + e] = _mm512_shuffle_f32x4(q, s, 0x88);
    v[12 + e] = _mm512_shuffle_f32x4(q, s, 0xdd);
  }
}

__attribute__((target("avx"))) inline void transpose8(__m256* v) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
  }
  for (int g = 0; g < 2; ++g) {
    const __m256d a = _mm256_castps_pd(t[4 * g]), b = _mm256_castps_pd(t[4 * g + 1]);
    const __m256d c = _mm256_castps_pd(t[4 * g + 2]), d = _mm256_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, c));
    u[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, c));
    u[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(b, d));
    u[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(b, d));
  }
  for (int e = 0; e < 4; ++e) {
    v[e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x20);
    v[4 + e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x31);
  }
}

}  // namespace coserve::x86
#endif
