// Integer products of ggml-quantized weight rows with int8-quantized activations, compiled once per
// SIMD target by Highway (foreach_target re-includes this file) and dispatched at run time with the
// same chosen target as cpu_kernels.cpp. Each block's weights are unpacked to int8 in 128-bit
// vectors, multiplied with the activations' int8 as int16 pairs summed into int32 lanes, and the
// block's integer sums are scaled into fp32 accumulators; one horizontal sum per output.
// matmul_quantized hands batches of several activation rows to quant_gemm.cpp first, on the x86
// targets that have its kernels.
// Over 500 lines: Highway compiles the whole file once per target and HWY_EXPORT names the entry
// points of every target compiled from it, so the generic kernels, the x86 ones and the
// activation quantizer they share live in one translation unit.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/quant_kernels.cpp"
// clang-format off: foreach_target.h comes first (it includes this file again once per target)
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format on
#include <hwy/highway.h>

#if HWY_ARCH_X86
#include <immintrin.h>

#include "model/x86_bits.hpp"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/cpu_kernels.hpp"
#include "model/quant.hpp"

HWY_BEFORE_NAMESPACE();
namespace coserve {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR  // 128-bit vectors; the scalar target uses vec_dot_ref

using D8 = hn::FixedTag<int8_t, 16>;
using DU8 = hn::FixedTag<uint8_t, 16>;
using D16 = hn::FixedTag<int16_t, 8>;
using D32 = hn::FixedTag<int32_t, 4>;
using DF4 = hn::FixedTag<float, 4>;
using V8 = hn::Vec<D8>;
using VU8 = hn::Vec<DU8>;
using V32 = hn::Vec<D32>;
using VF4 = hn::Vec<DF4>;

HWY_INLINE float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// sum + the pairwise products of 16 int8 weights and 16 int8 activations, in int32 lanes.
HWY_INLINE V32 dot16(V8 w, V8 a, V32 sum) {
  const D8 d8;
  const D16 d16;
  const D32 d32;
  const hn::Half<D8> dh;
  V32 s1 = hn::Zero(d32);
  sum = hn::ReorderWidenMulAccumulate(d32, hn::PromoteTo(d16, hn::LowerHalf(dh, w)),
                                      hn::PromoteTo(d16, hn::LowerHalf(dh, a)), sum, s1);
  sum = hn::ReorderWidenMulAccumulate(d32, hn::PromoteTo(d16, hn::UpperHalf(dh, w)),
                                      hn::PromoteTo(d16, hn::UpperHalf(dh, a)), sum, s1);
  (void)d8;
  return hn::Add(sum, s1);
}

HWY_INLINE V8 load8(const int8_t* p) { return hn::LoadU(D8(), p); }
HWY_INLINE VU8 loadu8(const uint8_t* p) { return hn::LoadU(DU8(), p); }
HWY_INLINE V8 as_i8(VU8 v) { return hn::BitCast(D8(), v); }

HWY_INLINE float reduce(VF4 v) { return hn::GetLane(hn::SumOfLanes(DF4(), v)); }

float dot_q8_0(const uint8_t* w, const q8_block* a, size_t nb) {
  const D32 d32;
  const DF4 df;
  VF4 acc = hn::Zero(df);
  for (size_t b = 0; b < nb; ++b, w += 34) {
    const auto* q = reinterpret_cast<const int8_t*>(w + 2);
    V32 s = hn::Zero(d32);
    s = dot16(load8(q), load8(a[b].q), s);
    s = dot16(load8(q + 16), load8(a[b].q + 16), s);
    acc = hn::MulAdd(hn::ConvertTo(df, s), hn::Set(df, f16_at(w) * a[b].d), acc);
  }
  return reduce(acc);
}

// Q4_0 (nibble - 8) and IQ4_NL (kGrid: the nibbles looked up in the non-linear grid), int8
// values multiplied as Q8_0's.
template <bool kGrid>
float dot_nibbles(const uint8_t* w, const q8_block* a, size_t nb) {
  const D32 d32;
  const DF4 df;
  const DU8 du8;
  const VU8 mask = hn::Set(du8, uint8_t(15));
  const V8 eight = hn::Set(D8(), int8_t(8));
  const V8 grid = hn::LoadU(D8(), k_iq4nl_values);
  VF4 acc = hn::Zero(df);
  for (size_t b = 0; b < nb; ++b, w += 18) {
    const VU8 qs = loadu8(w + 2);
    const V8 lo = kGrid ? hn::TableLookupBytes(grid, as_i8(hn::And(qs, mask)))
                        : hn::Sub(as_i8(hn::And(qs, mask)), eight);
    const V8 hi = kGrid ? hn::TableLookupBytes(grid, as_i8(hn::ShiftRight<4>(qs)))
                        : hn::Sub(as_i8(hn::ShiftRight<4>(qs)), eight);
    V32 s = hn::Zero(d32);
    s = dot16(lo, load8(a[b].q), s);
    s = dot16(hi, load8(a[b].q + 16), s);
    acc = hn::MulAdd(hn::ConvertTo(df, s), hn::Set(df, f16_at(w) * a[b].d), acc);
  }
  return reduce(acc);
}

// The 32 values of a Q4_1 / Q5_0 / Q5_1 block as int8 in two vectors (values 0..15, 16..31):
// the nibbles, the fifth bit from the 32 bits at qh (kFive), less the offset (Q5_0's 16).
template <bool kFive>
HWY_INLINE void block32_values(const uint8_t* qh, const uint8_t* qs, uint8_t offset, V8& lo,
                               V8& hi) {
  const DU8 du8;
  const VU8 mask = hn::Set(du8, uint8_t(15));
  const VU8 raw = loadu8(qs);
  VU8 l = hn::And(raw, mask), h = hn::ShiftRight<4>(raw);
  if constexpr (kFive) {
    // Byte j of the 4 qh bytes spread over 8 lanes, then bit (lane % 8) tested.
    alignas(16) static constexpr uint8_t kIdxLo[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                                       1, 1, 1, 1, 1, 1, 1, 1};
    alignas(16) static constexpr uint8_t kIdxHi[16] = {2, 2, 2, 2, 2, 2, 2, 2,
                                                       3, 3, 3, 3, 3, 3, 3, 3};
    alignas(16) static constexpr uint8_t kBits[16] = {1, 2, 4, 8, 16, 32, 64, 128,
                                                      1, 2, 4, 8, 16, 32, 64, 128};
    uint8_t hb[16] = {};
    std::memcpy(hb, qh, 4);
    const VU8 hv = hn::LoadU(du8, hb), bits = hn::Load(du8, kBits),
              sixteen = hn::Set(du8, uint8_t(16));
    l = hn::Or(l, hn::IfThenElseZero(
                      hn::TestBit(hn::TableLookupBytes(hv, hn::Load(du8, kIdxLo)), bits), sixteen));
    h = hn::Or(h, hn::IfThenElseZero(
                      hn::TestBit(hn::TableLookupBytes(hv, hn::Load(du8, kIdxHi)), bits), sixteen));
  }
  lo = hn::Sub(as_i8(l), hn::Set(D8(), int8_t(offset)));
  hi = hn::Sub(as_i8(h), hn::Set(D8(), int8_t(offset)));
}

// Q4_1 / Q5_0 / Q5_1 (ggml layouts at qh_at / qs_at bytes into a block of bb bytes; kMin: the
// block's f16 minimum at byte 2 times the activations' block sum).
template <bool kFive, bool kMin>
float dot_block32(const uint8_t* w, const q8_block* a, size_t nb) {
  const D32 d32;
  const DF4 df;
  constexpr size_t bb = kFive ? (kMin ? 24 : 22) : 20;
  constexpr size_t qh_at = kMin ? 4 : 2, qs_at = kFive ? qh_at + 4 : 4;
  constexpr uint8_t offset = kFive && !kMin ? 16 : 0;
  VF4 acc = hn::Zero(df);
  float mins = 0;
  for (size_t b = 0; b < nb; ++b, w += bb) {
    V8 lo, hi;
    block32_values<kFive>(w + qh_at, w + qs_at, offset, lo, hi);
    V32 s = hn::Zero(d32);
    s = dot16(lo, load8(a[b].q), s);
    s = dot16(hi, load8(a[b].q + 16), s);
    acc = hn::MulAdd(hn::ConvertTo(df, s), hn::Set(df, f16_at(w) * a[b].d), acc);
    if constexpr (kMin) mins += f16_at(w + 2) * (a[b].d * float(a[b].s));
  }
  return reduce(acc) + mins;
}

// IQ4_XS: per 32-value sub-block j, (ls_j - 32) * (grid values . a).
float dot_iq4_xs(const uint8_t* w, const q8k_block* a, size_t nb) {
  const D32 d32;
  const DF4 df;
  const DU8 du8;
  const V8 grid = hn::LoadU(D8(), k_iq4nl_values);
  const VU8 mask = hn::Set(du8, uint8_t(15));
  VF4 acc = hn::Zero(df);
  for (size_t b = 0; b < nb; ++b, w += 136) {
    V32 isum = hn::Zero(d32);
    for (int j = 0; j < 8; ++j) {
      const VU8 qs = loadu8(w + 8 + 16 * j);
      const V8 lo = hn::TableLookupBytes(grid, as_i8(hn::And(qs, mask)));
      const V8 hi = hn::TableLookupBytes(grid, as_i8(hn::ShiftRight<4>(qs)));
      V32 d = dot16(lo, load8(a[b].q + 32 * j), hn::Zero(d32));
      d = dot16(hi, load8(a[b].q + 32 * j + 16), d);
      isum = hn::Add(isum, hn::Mul(d, hn::Set(d32, int32_t(iq4xs_scale(w, j) - 32))));
    }
    acc = hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, f16_at(w) * a[b].d), acc);
  }
  return reduce(acc);
}

// The 2-bit values of chunk c (0..3: bits 2c, 2c + 1) of 16 bytes.
HWY_INLINE VU8 bits2(VU8 v, int c) {
  switch (c) {
    case 1:
      v = hn::ShiftRight<2>(v);
      break;
    case 2:
      v = hn::ShiftRight<4>(v);
      break;
    case 3:
      v = hn::ShiftRight<6>(v);
      break;
    default:
      break;
  }
  return hn::And(v, hn::Set(DU8(), uint8_t(3)));
}

// Q2_K (d * sc * q - dmin * m per 16 values) and Q3_K (kThree: d * (sc - 32) * (q - 4 * !hbit)).
template <bool kThree>
float dot_q23k(const uint8_t* w, const q8k_block* a, size_t nb) {
  const D32 d32;
  const DF4 df;
  const DU8 du8;
  constexpr size_t bb = kThree ? 110 : 84;
  VF4 acc = hn::Zero(df);
  float mins = 0;
  for (size_t b = 0; b < nb; ++b, w += bb) {
    const uint8_t* qs = kThree ? w + 32 : w + 16;
    const int8_t* q8 = a[b].q;
    const VU8 hm[2] = {loadu8(w), loadu8(w + 16)};  // Q3_K's hmask
    V32 isum = hn::Zero(d32);
    int msum = 0;
    for (int hh = 0; hh < 2; ++hh) {
      const VU8 l[2] = {loadu8(qs + 32 * hh), loadu8(qs + 32 * hh + 16)};
      for (int c = 0; c < 4; ++c) {
        for (int part = 0; part < 2; ++part) {
          const int v0 = 128 * hh + 32 * c + 16 * part, g = v0 / 16;
          V8 q = as_i8(bits2(l[part], c));
          int scale;
          if constexpr (kThree) {
            const VU8 bit = hn::Set(du8, uint8_t(1u << (4 * hh + c)));
            q = hn::Sub(
                q, as_i8(hn::IfThenZeroElse(hn::TestBit(hm[part], bit), hn::Set(du8, uint8_t(4)))));
            scale = q3k_scale(w + 96, g) - 32;
          } else {
            scale = w[g] & 15;
            msum += (w[g] >> 4) * a[b].bsums[g];
          }
          const V32 d = dot16(q, load8(q8 + v0), hn::Zero(d32));
          isum = hn::Add(isum, hn::Mul(d, hn::Set(d32, int32_t(scale))));
        }
      }
    }
    const float d = f16_at(kThree ? w + 108 : w + 80);
    acc = hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, d * a[b].d), acc);
    if constexpr (!kThree) mins += f16_at(w + 82) * a[b].d * float(msum);
  }
  return reduce(acc) - mins;
}

// Q4_K and Q5_K (kFive): per sub-block s of 32 values, sc[s] * sum(q * a); the mins come from the
// activations' 16-value sums.
template <bool kFive>
float dot_k45(const uint8_t* w, const q8k_block* a, size_t nb) {
  const D32 d32;
  const DF4 df;
  const DU8 du8;
  const VU8 mask = hn::Set(du8, uint8_t(15));
  const VU8 sixteen = hn::Set(du8, uint8_t(16));
  constexpr size_t bb = kFive ? 176 : 144;
  VF4 acc = hn::Zero(df);
  float mins = 0;
  for (size_t b = 0; b < nb; ++b, w += bb) {
    const uint8_t* scales = w + 4;
    const uint8_t* qh = w + 16;
    const uint8_t* qs = kFive ? w + 48 : w + 16;
    const int8_t* q8 = a[b].q;
    uint8_t sc[8], mn[8];
    for (int s = 0; s < 8; ++s) k_scale_min(scales, s, sc[s], mn[s]);
    VU8 h0 = hn::Zero(du8), h1 = hn::Zero(du8);
    if constexpr (kFive) {
      h0 = loadu8(qh);
      h1 = loadu8(qh + 16);
    }
    V32 isum = hn::Zero(d32);
    for (int c = 0; c < 4; ++c) {
      const VU8 b0 = loadu8(qs + 32 * c), b1 = loadu8(qs + 32 * c + 16);
      for (int half = 0; half < 2; ++half) {
        const int s = 2 * c + half;
        VU8 v0 = half ? hn::ShiftRight<4>(b0) : hn::And(b0, mask);
        VU8 v1 = half ? hn::ShiftRight<4>(b1) : hn::And(b1, mask);
        if constexpr (kFive) {
          const VU8 bit = hn::Set(du8, uint8_t(1u << s));
          v0 = hn::Or(v0, hn::IfThenElseZero(hn::TestBit(h0, bit), sixteen));
          v1 = hn::Or(v1, hn::IfThenElseZero(hn::TestBit(h1, bit), sixteen));
        }
        V32 d = hn::Zero(d32);
        d = dot16(as_i8(v0), load8(q8 + 32 * s), d);
        d = dot16(as_i8(v1), load8(q8 + 32 * s + 16), d);
        isum = hn::Add(isum, hn::Mul(d, hn::Set(d32, int32_t(sc[s]))));
      }
    }
    int msum = 0;
    for (int s = 0; s < 8; ++s) msum += int(mn[s]) * (a[b].bsums[2 * s] + a[b].bsums[2 * s + 1]);
    acc = hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, f16_at(w) * a[b].d), acc);
    mins += f16_at(w + 2) * a[b].d * float(msum);
  }
  return reduce(acc) - mins;
}

float dot_q6_k(const uint8_t* w, const q8k_block* a, size_t nb) {
  const D32 d32;
  const DF4 df;
  const DU8 du8;
  const VU8 mask4 = hn::Set(du8, uint8_t(15));
  const VU8 mask2 = hn::Set(du8, uint8_t(3));
  const V8 k32 = hn::Set(D8(), int8_t(32));
  VF4 acc = hn::Zero(df);
  for (size_t b = 0; b < nb; ++b, w += 210) {
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
    const int8_t* q8 = a[b].q;
    V32 isum = hn::Zero(d32);
    for (int hh = 0; hh < 2; ++hh) {
      const VU8 h[2] = {loadu8(qh + 32 * hh), loadu8(qh + 32 * hh + 16)};
      const VU8 l[4] = {loadu8(ql + 64 * hh), loadu8(ql + 64 * hh + 16), loadu8(ql + 64 * hh + 32),
                        loadu8(ql + 64 * hh + 48)};
      for (int s = 0; s < 4; ++s) {
        for (int part = 0; part < 2; ++part) {  // values 16 * part .. of the 32-value chunk
          VU8 low = l[2 * (s & 1) + part];
          low = (s >> 1) ? hn::ShiftRight<4>(low) : hn::And(low, mask4);
          VU8 high = h[part];
          switch (s) {
            case 1:
              high = hn::ShiftRight<2>(high);
              break;
            case 2:
              high = hn::ShiftRight<4>(high);
              break;
            case 3:
              high = hn::ShiftRight<6>(high);
              break;
            default:
              break;
          }
          high = hn::And(high, mask2);
          const V8 q = hn::Sub(as_i8(hn::Or(low, hn::ShiftLeft<4>(high))), k32);
          const int v0 = 128 * hh + 32 * s + 16 * part;
          const V32 d = dot16(q, load8(q8 + v0), hn::Zero(d32));
          isum = hn::Add(isum, hn::Mul(d, hn::Set(d32, int32_t(sc[v0 / 16]))));
        }
      }
    }
    acc = hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, f16_at(w + 208) * a[b].d), acc);
  }
  return reduce(acc);
}

float row_dot(dtype t, const uint8_t* w, const void* act, size_t nb) {
  switch (t) {
    case dtype::q8_0:
      return dot_q8_0(w, static_cast<const q8_block*>(act), nb);
    case dtype::q4_0:
      return dot_nibbles<false>(w, static_cast<const q8_block*>(act), nb);
    case dtype::q4_k:
      return dot_k45<false>(w, static_cast<const q8k_block*>(act), nb);
    case dtype::q5_k:
      return dot_k45<true>(w, static_cast<const q8k_block*>(act), nb);
    case dtype::q6_k:
      return dot_q6_k(w, static_cast<const q8k_block*>(act), nb);
    case dtype::q4_1:
      return dot_block32<false, true>(w, static_cast<const q8_block*>(act), nb);
    case dtype::q5_0:
      return dot_block32<true, false>(w, static_cast<const q8_block*>(act), nb);
    case dtype::q5_1:
      return dot_block32<true, true>(w, static_cast<const q8_block*>(act), nb);
    case dtype::q2_k:
      return dot_q23k<false>(w, static_cast<const q8k_block*>(act), nb);
    case dtype::q3_k:
      return dot_q23k<true>(w, static_cast<const q8k_block*>(act), nb);
    case dtype::iq4_nl:
      return dot_nibbles<true>(w, static_cast<const q8_block*>(act), nb);
    case dtype::iq4_xs:
      return dot_iq4_xs(w, static_cast<const q8k_block*>(act), nb);
    default:
      return 0;
  }
}

#else

float row_dot(dtype t, const uint8_t* w, const void* act, size_t nb) {
  return vec_dot_ref(t, w, act, int64_t(nb) * dtype_block_elems(t));
}

#endif

#undef COSERVE_QUANT_X86  // set again below for the x86 targets (this file is compiled per target)
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// x86 with AVX2 (and the AVX-512 targets, which run the same 256-bit code): 32 int8 products per
// instruction (unsigned x signed VPMADDUBSW, then pairs to int32 with VPMADDWD), and R activation
// rows per decoded weight block so that prefill decodes each block once for R rows.
#define COSERVE_QUANT_X86 1

HWY_INLINE float f16x(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
HWY_INLINE __m256i ld(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
HWY_INLINE float hsum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
// 8 int32 sums of adjacent products: unsigned u (0..255) times signed s.
HWY_INLINE __m256i dot_us(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// The block-32 weight types with Q8_0 activations: NR weight rows x R activation rows
// (out[i * R + r]); each activation block is loaded once for the NR weight rows.
template <dtype kT, int NR, int R>
void rows_32(const uint8_t* const* w, const q8_block* const* a, size_t nb, float* out) {
  // Two accumulator sets, even and odd blocks: with one weight and one activation row a single
  // FMA chain (4 cycles a block) was the limit, not memory. The 4- and 5-bit values go into the
  // products unsigned (0..15, 0..31); Q4_0's offset 8 (Q5_0's 16) times sum(a) (q8_block.s) is
  // taken off each block's integer sum, and Q4_1/Q5_1's minimum times it is added in fp32. Q8_0
  // and IQ4_NL's grid values are int8: |w| times a with w's sign, unsigned x signed.
  constexpr bool kMin = kT == dtype::q4_1 || kT == dtype::q5_1;
  constexpr int32_t kOff = kT == dtype::q4_0 ? 8 : kT == dtype::q5_0 ? 16 : 0;
  constexpr bool kSigned =
      kT == dtype::q8_0 || kT == dtype::iq4_nl;  // int8 weights: the sign trick
  constexpr size_t bb = kT == dtype::q8_0   ? 34
                        : kT == dtype::q4_1 ? 20
                        : kT == dtype::q5_0 ? 22
                        : kT == dtype::q5_1 ? 24
                                            : 18;
  constexpr size_t qh_at = kMin ? 4 : 2;
  constexpr size_t qs_at = kT == dtype::q4_0 || kT == dtype::iq4_nl ? 2
                           : kT == dtype::q4_1                      ? 4
                                                                    : qh_at + 4;
  __m256 acc[2][NR][R];
  float mins[NR][R] = {};
  for (int e = 0; e < 2; ++e)
    for (int i = 0; i < NR; ++i)
      for (int r = 0; r < R; ++r) acc[e][i][r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(15), k16 = _mm256_set1_epi8(16);
  const __m256i grid = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(k_iq4nl_values)));
  auto block = [&](size_t b, __m256(&ac)[NR][R]) HWY_ATTR {
    __m256i wq[NR], aw[NR];
    float dw[NR], mw[NR];
    for (int i = 0; i < NR; ++i) {
      const uint8_t* wb = w[i] + b * bb;
      if constexpr (kT == dtype::q8_0) {
        wq[i] = ld(wb + 2);
        aw[i] = _mm256_sign_epi8(wq[i], wq[i]);
      } else {
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + qs_at));
        wq[i] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
        if constexpr (kT == dtype::q5_0 || kT == dtype::q5_1)
          wq[i] = _mm256_or_si256(wq[i], _mm256_and_si256(x86::bits_to_bytes(wb + qh_at), k16));
        if constexpr (kT == dtype::iq4_nl) {
          wq[i] = _mm256_shuffle_epi8(grid, wq[i]);
          aw[i] = _mm256_sign_epi8(wq[i], wq[i]);
        }
      }
      dw[i] = f16x(wb);
      if constexpr (kMin) mw[i] = f16x(wb + 2);
    }
    for (int r = 0; r < R; ++r) {
      const __m256i x = ld(a[r][b].q);
      const float da = a[r][b].d;
      for (int i = 0; i < NR; ++i) {
        const float scale = dw[i] * da;
        __m256i s;
        if constexpr (kSigned) {
          s = dot_us(aw[i], _mm256_sign_epi8(x, wq[i]));
        } else if constexpr (kOff != 0) {
          // The offset in the integer sum (lane 0): no float chain across blocks for it.
          s = _mm256_sub_epi32(dot_us(wq[i], x),
                               _mm256_zextsi128_si256(_mm_cvtsi32_si128(kOff * a[r][b].s)));
        } else {
          s = dot_us(wq[i], x);
        }
        ac[i][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(scale), ac[i][r]);
        if constexpr (kMin) mins[i][r] += mw[i] * (da * float(a[r][b].s));
      }
    }
  };
  size_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    block(b, acc[0]);
    block(b + 1, acc[1]);
  }
  if (b < nb) block(b, acc[0]);
  for (int i = 0; i < NR; ++i)
    for (int r = 0; r < R; ++r)
      out[i * R + r] = hsum8(_mm256_add_ps(acc[0][i][r], acc[1][i][r])) + mins[i][r];
}

// Q4_K / Q5_K (kFive) with Q8_K activations, R rows. The mins' share (dmin * m[s] times the sum of
// the sub-block's activations) comes from the activations' 16-value sums, in vector form.
template <bool kFive, int R>
void rows_k45(const uint8_t* w, const q8k_block* const* a, size_t nb, float* out) {
  __m256 acc[R], macc[R];
  for (int r = 0; r < R; ++r) acc[r] = macc[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(15), k16 = _mm256_set1_epi8(16);
  constexpr size_t bb = kFive ? 176 : 144;
  constexpr uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
  for (size_t b = 0; b < nb; ++b, w += bb) {
    // The twelve scale bytes unpacked as ggml does: utmp[0..1] the eight 6-bit scales,
    // utmp[2..3] the eight 6-bit mins.
    uint32_t utmp[4];
    std::memcpy(utmp, w + 4, 12);
    utmp[3] = ((utmp[2] >> 4) & km2) | (((utmp[1] >> 6) & km3) << 4);
    const uint32_t uaux = utmp[1] & km1;
    utmp[1] = (utmp[2] & km2) | (((utmp[0] >> 6) & km3) << 4);
    utmp[2] = uaux;
    utmp[0] &= km1;
    // The scales and mins come from the registers: reading utmp back as bytes or as one 64-bit
    // value right after its 32-bit stores stalls on store forwarding (measured: 40% of the kernel).
    const __m128i mn8 = _mm_cvtsi64_si128(int64_t(uint64_t(utmp[2]) | (uint64_t(utmp[3]) << 32)));
    // The eight scales as int16 in both 128-bit halves; sub-block s's scale is word s broadcast
    // by one byte shuffle (a scalar extract and broadcast per sub-block cost 3-4 instructions).
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(
        _mm_cvtsi64_si128(int64_t(uint64_t(utmp[0]) | (uint64_t(utmp[1]) << 32)))));
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));  // m[s] at 2s, 2s + 1
    const uint8_t* qs = kFive ? w + 48 : w + 16;
    __m256i hv = _mm256_setzero_si256();
    if constexpr (kFive) hv = ld(w + 16);
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i v = ld(qs + 32 * c);
      for (int half = 0; half < 2; ++half) {
        const int s = 2 * c + half;
        __m256i q = half ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
        if constexpr (kFive) {
          const __m256i bit = _mm256_set1_epi8(char(1 << s));
          q = _mm256_or_si256(
              q, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, bit), bit), k16));
        }
        const __m256i scale =
            _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(short(0x0100 + 0x0202 * s)));
        for (int r = 0; r < R; ++r)
          isum[r] = _mm256_add_epi32(
              isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q, ld(a[r][b].q + 32 * s)), scale));
      }
    }
    const float d = f16x(w), dmin = f16x(w + 2);
    for (int r = 0; r < R; ++r) {
      const q8k_block& x = a[r][b];
      const __m256i msum = _mm256_madd_epi16(ld(x.bsums), mins16);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(d * x.d), acc[r]);
      macc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dmin * x.d), macc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]) - hsum8(macc[r]);
}

// Q6_K with Q8_K activations, R rows: the 6-bit values unsigned (0..63) in the products, the
// offset 32 taken off through the activations' 16-value sums.
template <int R>
void rows_q6k(const uint8_t* w, const q8k_block* const* a, size_t nb, float* out) {
  __m256 acc[R], cacc[R];
  for (int r = 0; r < R; ++r) acc[r] = cacc[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
  for (size_t b = 0; b < nb; ++b, w += 210) {
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    // Scale pairs (sc[2k], sc[2k + 1]) are dword k of sc16: broadcast it, then one shuffle puts
    // sc[2k] in every word of the low half and sc[2k + 1] in the high half.
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                          2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int hh = 0; hh < 2; ++hh) {
      const __m256i hv = ld(qh + 32 * hh);
      const __m256i l[2] = {ld(ql + 64 * hh), ld(ql + 64 * hh + 32)};
      for (int s = 0; s < 4; ++s) {
        const __m256i low = (s >> 1) ? _mm256_and_si256(_mm256_srli_epi16(l[s & 1], 4), m4)
                                     : _mm256_and_si256(l[s & 1], m4);
        const __m256i high = _mm256_and_si256(_mm256_srl_epi16(hv, _mm_cvtsi32_si128(2 * s)), m3);
        const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
        const int v0 = 128 * hh + 32 * s;
        const __m256i scales = _mm256_shuffle_epi8(
            _mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(v0 / 32)), pick);
        for (int r = 0; r < R; ++r)
          isum[r] = _mm256_add_epi32(
              isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q, ld(a[r][b].q + v0)), scales));
      }
    }
    const float d = f16x(w + 208);
    for (int r = 0; r < R; ++r) {
      const q8k_block& x = a[r][b];
      const __m256i off =
          _mm256_madd_epi16(ld(x.bsums), sc16);  // sum of scale[g] * bsums[g], in pairs
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(d * x.d), acc[r]);
      cacc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(off), _mm256_set1_ps(32.0f * d * x.d), cacc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]) - hsum8(cacc[r]);
}

// Q2_K (kThree false) and Q3_K with Q8_K activations, R rows: the values unsigned (Q2_K 0..3;
// Q3_K q + 4 = 0..7) in the products; per 16 values Q2_K's min (dmin * m) and Q3_K's offset
// (4 * scale) come off through the activations' 16-value sums.
template <bool kThree, int R>
void rows_q23k(const uint8_t* w, const q8k_block* const* a, size_t nb, float* out) {
  __m256 acc[R], cacc[R];
  for (int r = 0; r < R; ++r) acc[r] = cacc[r] = _mm256_setzero_ps();
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                        2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
  constexpr size_t bb = kThree ? 110 : 84;
  for (size_t b = 0; b < nb; ++b, w += bb) {
    const uint8_t* qs = kThree ? w + 32 : w + 16;
    // The 16 scales as int16 (Q3_K: 6-bit less 32; Q2_K: the low nibbles) and Q2_K's 16 mins.
    __m256i sc16, mn16 = _mm256_setzero_si256();
    if constexpr (kThree) {
      alignas(16) int8_t s8[16];
      for (int g = 0; g < 16; ++g) s8[g] = int8_t(q3k_scale(w + 96, g) - 32);
      sc16 = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(s8)));
    } else {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
      sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(15)));
      mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15)));
    }
    const __m256i hm = kThree ? ld(w) : _mm256_setzero_si256();
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int hh = 0; hh < 2; ++hh) {
      const __m256i l = ld(qs + 32 * hh);
      for (int s = 0; s < 4; ++s) {
        __m256i q = _mm256_and_si256(_mm256_srl_epi16(l, _mm_cvtsi32_si128(2 * s)), m3);
        if constexpr (kThree) {
          const __m256i hb =
              _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * hh + s)), one);
          q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 2));
        }
        const int v0 = 128 * hh + 32 * s;
        const __m256i scales = _mm256_shuffle_epi8(
            _mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(v0 / 32)), pick);
        for (int r = 0; r < R; ++r)
          isum[r] = _mm256_add_epi32(
              isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q, ld(a[r][b].q + v0)), scales));
      }
    }
    const float d = f16x(kThree ? w + 108 : w + 80);
    for (int r = 0; r < R; ++r) {
      const q8k_block& x = a[r][b];
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(d * x.d), acc[r]);
      if constexpr (kThree) {
        const __m256i off = _mm256_madd_epi16(ld(x.bsums), sc16);
        cacc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(off), _mm256_set1_ps(4.0f * d * x.d), cacc[r]);
      } else {
        const __m256i off = _mm256_madd_epi16(ld(x.bsums), mn16);
        cacc[r] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(off), _mm256_set1_ps(f16x(w + 82) * x.d), cacc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]) - hsum8(cacc[r]);
}

// IQ4_XS with Q8_K activations, R rows: the grid values signed (|v| <= 127, so the VPMADDUBSW pair
// sums of |v| and the sign-adjusted activations stay below 2^15), per 32 values times ls - 32.
template <int R>
void rows_iq4xs(const uint8_t* w, const q8k_block* const* a, size_t nb, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i grid = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(k_iq4nl_values)));
  for (size_t b = 0; b < nb; ++b, w += 136) {
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8 + 16 * j));
      const __m256i q = _mm256_shuffle_epi8(
          grid, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4));
      const __m256i aq = _mm256_sign_epi8(q, q);
      const __m256i scale = _mm256_set1_epi16(short(iq4xs_scale(w, j) - 32));
      for (int r = 0; r < R; ++r)
        isum[r] = _mm256_add_epi32(
            isum[r],
            _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(ld(a[r][b].q + 32 * j), q)),
                              scale));
    }
    const float d = f16x(w);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(d * a[r][b].d), acc[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]);
}

template <int R>
void rows_dot(dtype t, const uint8_t* w, const void* const* act, size_t nb, float* out) {
  switch (t) {
    case dtype::q8_0:
      rows_32<dtype::q8_0, 1, R>(&w, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::q4_0:
      rows_32<dtype::q4_0, 1, R>(&w, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::q4_1:
      rows_32<dtype::q4_1, 1, R>(&w, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::q5_0:
      rows_32<dtype::q5_0, 1, R>(&w, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::q5_1:
      rows_32<dtype::q5_1, 1, R>(&w, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::q2_k:
      rows_q23k<false, R>(w, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    case dtype::q3_k:
      rows_q23k<true, R>(w, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    case dtype::iq4_nl:
      rows_32<dtype::iq4_nl, 1, R>(&w, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::iq4_xs:
      rows_iq4xs<R>(w, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    case dtype::q4_k:
      rows_k45<false, R>(w, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    case dtype::q5_k:
      rows_k45<true, R>(w, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    case dtype::q6_k:
      rows_q6k<R>(w, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    default:
      break;
  }
}
#endif  // x86 AVX2 / AVX-512

// Activation rows quantized for weight type t (Q8_0 or Q8_K blocks, as quant.hpp's scalar
// quantizers produce them; rounding to nearest, ties to even).
void quantize_rows_impl(dtype t, const float* x, int64_t ldx, int64_t M, int64_t K, void* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const size_t L = hn::Lanes(df);
  if (!uses_q8k(t)) {
    auto* o = static_cast<q8_block*>(out);
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = x + m * ldx;
      for (int64_t b = 0; b < K / 32; ++b, ++o) {
        const float* p = xr + 32 * b;
        if (L > 32) {
          quantize_q8_0(p, o, 32);
          continue;
        }
        auto amax = hn::Zero(df);
        for (size_t i = 0; i < 32; i += L) amax = hn::Max(amax, hn::Abs(hn::LoadU(df, p + i)));
        const float d = hn::GetLane(hn::MaxOfLanes(df, amax)) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        o->d = f16_to_f32(f32_to_f16(d));
        const auto vid = hn::Set(df, id);
        auto sum = hn::Zero(di);
        for (size_t i = 0; i < 32; i += L) {
          const auto q = hn::NearestInt(hn::Mul(hn::LoadU(df, p + i), vid));
          hn::StoreU(hn::DemoteTo(d8, q), d8, o->q + i);
          sum = hn::Add(sum, q);
        }
        o->s = int16_t(hn::GetLane(hn::SumOfLanes(di, sum)));
      }
    }
    return;
  }
  auto* o = static_cast<q8k_block*>(out);
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * ldx;
    for (int64_t b = 0; b < K / 256; ++b, ++o) {
      const float* p = xr + 256 * b;
      if (L > 16) {
        quantize_q8_k(p, o, 256);
        continue;
      }
      auto vmax = hn::Set(df, -INFINITY), vmin = hn::Set(df, INFINITY);
      for (size_t i = 0; i < 256; i += L) {
        const auto v = hn::LoadU(df, p + i);
        vmax = hn::Max(vmax, v);
        vmin = hn::Min(vmin, v);
      }
      const float hi = hn::GetLane(hn::MaxOfLanes(df, vmax)),
                  lo = hn::GetLane(hn::MinOfLanes(df, vmin));
      const float max = -lo > hi ? lo : hi;
      if (max == 0.0f) {
        o->d = 0;
        std::memset(o->q, 0, sizeof o->q);
        std::memset(o->bsums, 0, sizeof o->bsums);
        continue;
      }
      const float iscale = -127.0f / max;
      const auto vs = hn::Set(df, iscale);
      const auto cap = hn::Set(di, 127);
      for (size_t i = 0; i < 256; i += L) {
        const auto q = hn::Min(hn::NearestInt(hn::Mul(hn::LoadU(df, p + i), vs)), cap);
        hn::StoreU(hn::DemoteTo(d8, q), d8, o->q + i);
      }
      for (int g = 0; g < 16; ++g) {
        int sum = 0;
        for (int k = 0; k < 16; ++k) sum += o->q[16 * g + k];
        o->bsums[g] = int16_t(sum);
      }
      o->d = 1.0f / iscale;
    }
  }
}

// y[m * ldy + j] (+)= dot(w row j, activation row m) for m < M, j < n; xq holds M rows of
// quantize_rows output for w.type.
void matmul_quantized_impl(const void* xq, int64_t M, const weight_ref* wr, int64_t n, float* y,
                           int64_t ldy, bool accumulate) {
  const weight_ref& w = *wr;
  const int64_t K = w.cols;
  const bool k_type = uses_q8k(w.type);
  const size_t nb = size_t(K / (k_type ? 256 : 32));
  const size_t row_bytes = w.row_bytes();
  const size_t act_stride = (k_type ? sizeof(q8k_block) : sizeof(q8_block)) * nb;
  const auto* act0 = static_cast<const uint8_t*>(xq);
  const auto* base = static_cast<const uint8_t*>(w.data);
  auto put = [&](int64_t m, int64_t j, float s) {
    float& out = y[m * ldy + j];
    out = accumulate ? out + s : s;
  };
#ifdef COSERVE_QUANT_X86
  // Tiles of up to 16 weight rows (about 7-14 KB at K = 768-2048) against groups of 4 activation
  // rows: both stay in L1 while they meet, instead of all M activation rows streaming from L2 for
  // every weight row. Batches that reach here with 64 rows or more are Q8_0 without AVX-512 VNNI
  // (quant_gemm.cpp takes the others): 2 weight rows per pass for them; below that, two
  // interleaved weight-row streams measured slower (2x at one row, 15-20% at 8 and 32).
  const bool pairs = w.type == dtype::q8_0 && M >= 64;
  constexpr int64_t tile = 16;
  for (int64_t t0 = 0; t0 < n; t0 += tile) {
    const int64_t t1 = std::min(n, t0 + tile);
    for (int64_t m = 0; m < M; m += 4) {
      const int r = int(std::min<int64_t>(4, M - m));
      const void* act[4];
      for (int i = 0; i < r; ++i) act[i] = act0 + size_t(m + i) * act_stride;
      int64_t j = t0;
      if (pairs) {
        const auto* a8 = reinterpret_cast<const q8_block* const*>(act);
        for (; j + 2 <= t1; j += 2) {
          const uint8_t* wj[2] = {base + size_t(j) * row_bytes, base + size_t(j + 1) * row_bytes};
          float s[8];
          switch (r) {
            case 4:
              rows_32<dtype::q8_0, 2, 4>(wj, a8, nb, s);
              break;
            case 3:
              rows_32<dtype::q8_0, 2, 3>(wj, a8, nb, s);
              break;
            case 2:
              rows_32<dtype::q8_0, 2, 2>(wj, a8, nb, s);
              break;
            default:
              rows_32<dtype::q8_0, 2, 1>(wj, a8, nb, s);
              break;
          }
          for (int jj = 0; jj < 2; ++jj)
            for (int i = 0; i < r; ++i) put(m + i, j + jj, s[jj * r + i]);
        }
      }
      for (; j < t1; ++j) {
        const uint8_t* wj = base + size_t(j) * row_bytes;
        float s[4];
        switch (r) {
          case 4:
            rows_dot<4>(w.type, wj, act, nb, s);
            break;
          case 3:
            rows_dot<3>(w.type, wj, act, nb, s);
            break;
          case 2:
            rows_dot<2>(w.type, wj, act, nb, s);
            break;
          default:
            rows_dot<1>(w.type, wj, act, nb, s);
            break;
        }
        for (int i = 0; i < r; ++i) put(m + i, j, s[i]);
      }
    }
  }
#else
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* wj = base + size_t(j) * row_bytes;
    for (int64_t m = 0; m < M; ++m)
      put(m, j, row_dot(w.type, wj, act0 + size_t(m) * act_stride, nb));
  }
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace coserve
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace coserve {

HWY_EXPORT(quantize_rows_impl);
HWY_EXPORT(matmul_quantized_impl);

size_t quantized_row_bytes(dtype t, int64_t k) noexcept {
  return uses_q8k(t) ? size_t(k / 256) * sizeof(q8k_block) : size_t(k / 32) * sizeof(q8_block);
}

void quantize_rows(dtype t, const float* x, int64_t ldx, int64_t M, int64_t K, void* out) noexcept {
  HWY_DYNAMIC_DISPATCH(quantize_rows_impl)(t, x, ldx, M, K, out);
}

void matmul_quantized(const void* xq, int64_t M, const weight_ref& w, int64_t n, float* y,
                      int64_t ldy, bool accumulate) {
  if (M <= 0 || n <= 0) return;
  if (w.packed && matmul_quantized_packed(xq, M, w, n, y, ldy, accumulate)) return;
  if (M >= lane_gemm_min_rows(w.type) && matmul_quantized_lanes(xq, M, w, n, y, ldy, accumulate))
    return;
  HWY_DYNAMIC_DISPATCH(matmul_quantized_impl)(xq, M, &w, n, y, ldy, accumulate);
}

void matmul_quant(const float* x, int64_t ldx, int64_t M, const weight_ref& w, int64_t n, float* y,
                  int64_t ldy, bool accumulate) {
  if (M <= 0 || n <= 0) return;
  thread_local std::vector<uint8_t> xq;
  xq.resize(size_t(M) * quantized_row_bytes(w.type, w.cols));
  quantize_rows(w.type, x, ldx, M, w.cols, xq.data());
  matmul_quantized(xq.data(), M, w, n, y, ldy, accumulate);
}

}  // namespace coserve
#endif  // HWY_ONCE
