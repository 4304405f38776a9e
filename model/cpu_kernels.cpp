// Highway compiles this file once per target (foreach_target.h re-includes it); the functions in
// namespace HWY_NAMESPACE are that target's kernels, and the HWY_ONCE part at the end holds the
// dispatching entry points declared in cpu_kernels.hpp.
// Over 500 lines: the per-target kernels and the HWY_ONCE dispatchers must share this translation
// unit (HWY_EXPORT names the kernels of every target compiled from it), and the AVX512-BF16 matmul
// sits beside them because matmul_nt chooses between the two.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/cpu_kernels.cpp"
// clang-format off: foreach_target.h comes first (it includes this file again once per target)
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format on
#include <hwy/aligned_allocator.h>
#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/bcast_blocking.hpp"
#include "model/cpu_kernels.hpp"
#include "model/quant.hpp"
#include "model/x86_transpose.hpp"

HWY_BEFORE_NAMESPACE();
namespace coserve {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Element loads widened to fp32: one vector of lanes from p (unaligned).
HWY_INLINE VF load_f32(DF df, const float* p) { return hn::LoadU(df, p); }
HWY_INLINE VF load_f32(DF df, const hwy::bfloat16_t* p) {
  const hn::Rebind<hwy::bfloat16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, p));
}
HWY_INLINE VF load_f32(DF df, const hwy::float16_t* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, p));
}

// fp8 KV caches: a byte per value. E4M3 widens through f16: (c & 0x7f) << 7 is the f16 of
// value * 2^-8 (normals and subnormals alike), the sign moves to bit 15, and the product with 256
// restores the value exactly. E5M2 is the top byte of an f16.
struct e4m3_t {
  uint8_t bits;
};
struct e5m2_t {
  uint8_t bits;
};
// E4M3 weights, read as value * 2^-8 (matmul_nt multiplies the 256 back in with the row scale):
// the sign-extended byte shifted left by 7, bit 14 cleared, is that f16.
struct e4m3_lo_t {
  uint8_t bits;
};
HWY_INLINE VF load_f32(DF df, const e4m3_lo_t* p) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::Rebind<int16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const auto c = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const int8_t*>(p)));
  const auto h = hn::And(hn::ShiftLeft<7>(c), hn::Set(d16, int16_t(-16512)));  // 0xbf80
  return hn::PromoteTo(df, hn::BitCast(dh, h));
}
HWY_INLINE VF load_f32(DF df, const e4m3_t* p) {
  const hn::Rebind<uint8_t, DF> d8;
  const hn::Rebind<uint16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const auto c = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const uint8_t*>(p)));
  const auto h = hn::Or(hn::ShiftLeft<7>(hn::And(c, hn::Set(d16, uint16_t{0x7f}))),
                        hn::ShiftLeft<8>(hn::And(c, hn::Set(d16, uint16_t{0x80}))));
  return hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, h)), hn::Set(df, 256.0f));
}
HWY_INLINE VF load_f32(DF df, const e5m2_t* p) {
  const hn::Rebind<uint8_t, DF> d8;
  const hn::Rebind<uint16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const auto c = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const uint8_t*>(p)));
  return hn::PromoteTo(df, hn::BitCast(dh, hn::ShiftLeft<8>(c)));
}

// Weights may sit at any byte offset of a mapped file: scalar reads go through memcpy.
HWY_INLINE float scalar_f32(const float* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
HWY_INLINE float scalar_f32(const hwy::bfloat16_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return bf16_to_f32(h);
}
HWY_INLINE float scalar_f32(const hwy::float16_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
HWY_INLINE float scalar_f32(const e4m3_t* p) { return e4m3_to_f32(p->bits); }
HWY_INLINE float scalar_f32(const e5m2_t* p) { return e5m2_to_f32(p->bits); }
HWY_INLINE float scalar_f32(const e4m3_lo_t* p) { return e4m3_to_f32(p->bits) * (1.0f / 256.0f); }

// Registers allow 4 x 4 accumulators where there are 32 vector registers (AVX-512, NEON);
// 4 x 2 with 16 (AVX2, SSE4).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM
constexpr size_t k_nr = 4;
#else
constexpr size_t k_nr = 2;
#endif
constexpr size_t k_mr = 4;
// Activation rows per tile of bf16 weights: 6 x 2 outputs on AVX2 (a hand-allocated kernel,
// tile_bf16_6x2_avx2: 12 independent FMA chains against the 4 x 2 tile's 8), 4 elsewhere.
#if HWY_TARGET == HWY_AVX2 && HWY_ARCH_X86_64 && (defined(__GNUC__) || defined(__clang__))
constexpr size_t k_mr_bf16 = 6;
#else
constexpr size_t k_mr_bf16 = 4;
#endif

// Up to this many activation rows, the weight rows are walked one at a time (NR = 1): each thread
// then reads one sequential stream, which the hardware prefetchers follow; 4-row tiles interleave
// four streams, which measured ~25% slower at batch 1 (150M bf16 model, 2 threads). Above it,
// 4-row tiles save activation loads and win. Multi-row tiles prefetch the next tile's rows (that
// measured faster); single rows do not (the hardware prefetcher does better alone).
constexpr size_t k_single_row_max_m = 4;

// Keeps v in a register at this point on the 16-register x86 targets: the compiler cannot fold
// its load into each FMA that uses it (GCC otherwise reads the same activations from memory once
// per weight column, which made the AVX2 tiles load-bound; AVX-512 measured no better with it).
HWY_INLINE void in_register(VF& v) {
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4) && \
    (defined(__GNUC__) || defined(__clang__))
  asm("" : "+x"(v.raw));
#else
  (void)v;
#endif
}

// y[MR rows, NR cols] for weight rows w[0..NR) (row stride K) and x rows (stride ldx).
template <size_t MR, size_t NR, typename WT>
HWY_INLINE void tile(const float* HWY_RESTRICT x, size_t ldx, const WT* HWY_RESTRICT w, size_t K,
                     float* HWY_RESTRICT y, size_t ldy, bool accumulate, bool prefetch) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF acc[MR][NR];
  HWY_UNROLL(1)
  for (size_t m = 0; m < MR; ++m)
    for (size_t j = 0; j < NR; ++j) acc[m][j] = hn::Zero(df);
  size_t k = 0;
  for (; k + L <= K; k += L) {
    VF wv[NR];
    for (size_t j = 0; j < NR; ++j) {
      if (NR > 1 && prefetch) hwy::Prefetch(w + (NR + j) * K + k);
      wv[j] = load_f32(df, w + j * K + k);
    }
    for (size_t m = 0; m < MR; ++m) {
      VF xv = hn::LoadU(df, x + m * ldx + k);
      in_register(xv);
      for (size_t j = 0; j < NR; ++j) acc[m][j] = hn::MulAdd(xv, wv[j], acc[m][j]);
    }
  }
  for (size_t m = 0; m < MR; ++m)
    for (size_t j = 0; j < NR; ++j) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[m][j]));
      for (size_t kk = k; kk < K; ++kk) s += x[m * ldx + kk] * scalar_f32(w + j * K + kk);
      float& out = y[m * ldy + j];
      out = accumulate ? out + s : s;
    }
}

// bf16 weights without a widening shuffle: a u32 lane holds elements 2i (low half) and 2i+1
// (high half), so `v << 16` is element 2i as fp32 and `v & 0xffff0000` is element 2i+1. The
// activations are stored reordered to match (xr: per block of 2L columns, the L even columns,
// then the L odd ones), which costs M x K copies per call against N x M x K multiply-adds.
// Products and fp32 accumulation are the same as the plain path's; only the summation order
// inside a vector differs.
template <size_t MR, size_t NR>
HWY_INLINE void tile_bf16(const float* HWY_RESTRICT xr, size_t ldxr,
                          const hwy::bfloat16_t* HWY_RESTRICT w, size_t K, size_t K2,
                          float* HWY_RESTRICT y, size_t ldy, bool accumulate, bool prefetch) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const size_t L = hn::Lanes(df);
  const auto hi_mask = hn::Set(du, 0xffff0000u);
  // One accumulator per output at every tile shape, so each output is the same chain of FMAs
  // whatever NR and MR (see matmul_bf16).
  VF acc[MR][NR];
  HWY_UNROLL(1)
  for (size_t m = 0; m < MR; ++m) {
    for (size_t j = 0; j < NR; ++j) acc[m][j] = hn::Zero(df);
  }
  for (size_t k = 0; k < K2; k += 2 * L) {
    VF we[NR], wo[NR];
    for (size_t j = 0; j < NR; ++j) {
      if (NR > 1 && prefetch) hwy::Prefetch(w + (NR + j) * K + k);
      const auto v = hn::LoadU(du, reinterpret_cast<const uint32_t*>(w + j * K + k));
      we[j] = hn::BitCast(df, hn::ShiftLeft<16>(v));
      wo[j] = hn::BitCast(df, hn::And(v, hi_mask));
    }
    for (size_t m = 0; m < MR; ++m) {
      VF xe = hn::LoadU(df, xr + m * ldxr + k);
      VF xo = hn::LoadU(df, xr + m * ldxr + k + L);
      in_register(xe);
      in_register(xo);
      for (size_t j = 0; j < NR; ++j) {
        acc[m][j] = hn::MulAdd(xe, we[j], acc[m][j]);
        acc[m][j] = hn::MulAdd(xo, wo[j], acc[m][j]);
      }
    }
  }
  for (size_t m = 0; m < MR; ++m)
    for (size_t j = 0; j < NR; ++j) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[m][j]));
      for (size_t kk = K2; kk < K; ++kk) s += xr[m * ldxr + kk] * scalar_f32(w + j * K + kk);
      float& out = y[m * ldy + j];
      out = accumulate ? out + s : s;
    }
}

#if HWY_TARGET == HWY_AVX2 && HWY_ARCH_X86_64 && (defined(__GNUC__) || defined(__clang__))
// tile_bf16<6, 2> with its registers allocated by hand: 12 accumulators (ymm0-11), the two weight
// rows' half blocks (ymm12-13), one activation vector (ymm14) and the odd-half mask (ymm15), the
// six activation rows addressed from two bases and one stride. Compilers spill at this register
// pressure (GCC 12 kept accumulators and row addresses on the stack, and the tile measured slower
// than 4 x 2). Each output's chain of FMAs is tile_bf16's (per block of 16 columns, the even
// half, then the odd half), and the sums are reduced as there.
HWY_INLINE void tile_bf16_6x2_avx2(const float* xr, size_t ldxr, const hwy::bfloat16_t* w, size_t K,
                                   size_t K2, float* y, size_t ldy, bool accumulate,
                                   bool prefetch) {
  alignas(32) static constexpr uint32_t hi_mask[8] = {0xffff0000u, 0xffff0000u, 0xffff0000u,
                                                      0xffff0000u, 0xffff0000u, 0xffff0000u,
                                                      0xffff0000u, 0xffff0000u};
  alignas(32) float acc[12][8];
  const float* x0 = xr;
  const float* x3 = xr + 3 * ldxr;
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w);
  // The next tile's two weight rows, or (without prefetch) this tile's own, already on their way.
  const uint16_t* pf = prefetch ? wp + 2 * K : wp;
  const intptr_t xs = intptr_t(ldxr * sizeof(float));
  const intptr_t ws = intptr_t(K * sizeof(uint16_t));
  size_t n = K2 / 16;
// One activation row's vector at ADDR times the two weight vectors (ymm12, ymm13) into its two
// accumulators.
#define COSERVE_ROW_6X2(ADDR, A0, A1)      \
  "vmovups " ADDR                          \
  ", %%ymm14\n"                            \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm" A0 \
  "\n"                                     \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm" A1 "\n"
// The six rows at byte offset OFF of the current block.
#define COSERVE_HALF_6X2(OFF)                      \
  COSERVE_ROW_6X2(OFF "(%[x0])", "0", "1")         \
  COSERVE_ROW_6X2(OFF "(%[x0],%[xs])", "2", "3")   \
  COSERVE_ROW_6X2(OFF "(%[x0],%[xs],2)", "4", "5") \
  COSERVE_ROW_6X2(OFF "(%[x3])", "6", "7")         \
  COSERVE_ROW_6X2(OFF "(%[x3],%[xs])", "8", "9")   \
  COSERVE_ROW_6X2(OFF "(%[x3],%[xs],2)", "10", "11")
  asm volatile(
      "vxorps %%ymm0, %%ymm0, %%ymm0\n"
      "vmovaps %%ymm0, %%ymm1\n"
      "vmovaps %%ymm0, %%ymm2\n"
      "vmovaps %%ymm0, %%ymm3\n"
      "vmovaps %%ymm0, %%ymm4\n"
      "vmovaps %%ymm0, %%ymm5\n"
      "vmovaps %%ymm0, %%ymm6\n"
      "vmovaps %%ymm0, %%ymm7\n"
      "vmovaps %%ymm0, %%ymm8\n"
      "vmovaps %%ymm0, %%ymm9\n"
      "vmovaps %%ymm0, %%ymm10\n"
      "vmovaps %%ymm0, %%ymm11\n"
      "vmovdqa %[mask], %%ymm15\n"
      "test %[n], %[n]\n"
      "jz 2f\n"
      "1:\n"
      "prefetcht0 (%[pf])\n"
      "prefetcht0 (%[pf],%[ws])\n"
      // Even half: the low 16 bits of each u32 lane, shifted up, are the even columns as fp32.
      "vmovdqu (%[w]), %%ymm12\n"
      "vmovdqu (%[w],%[ws]), %%ymm13\n"
      "vpslld $16, %%ymm12, %%ymm12\n"
      "vpslld $16, %%ymm13, %%ymm13\n"
      COSERVE_HALF_6X2("")
      // Odd half: the high 16 bits, masked.
      "vpand (%[w]), %%ymm15, %%ymm12\n"
      "vpand (%[w],%[ws]), %%ymm15, %%ymm13\n"
      COSERVE_HALF_6X2("32")
      "add $32, %[w]\n"
      "add $32, %[pf]\n"
      "add $64, %[x0]\n"
      "add $64, %[x3]\n"
      "dec %[n]\n"
      "jnz 1b\n"
      "2:\n"
      "vmovaps %%ymm0, 0(%[acc])\n"
      "vmovaps %%ymm1, 32(%[acc])\n"
      "vmovaps %%ymm2, 64(%[acc])\n"
      "vmovaps %%ymm3, 96(%[acc])\n"
      "vmovaps %%ymm4, 128(%[acc])\n"
      "vmovaps %%ymm5, 160(%[acc])\n"
      "vmovaps %%ymm6, 192(%[acc])\n"
      "vmovaps %%ymm7, 224(%[acc])\n"
      "vmovaps %%ymm8, 256(%[acc])\n"
      "vmovaps %%ymm9, 288(%[acc])\n"
      "vmovaps %%ymm10, 320(%[acc])\n"
      "vmovaps %%ymm11, 352(%[acc])\n"
      : [w] "+r"(wp), [pf] "+r"(pf), [x0] "+r"(x0), [x3] "+r"(x3), [n] "+r"(n)
      : [xs] "r"(xs), [ws] "r"(ws), [mask] "m"(hi_mask), [acc] "r"(&acc[0][0])
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
        "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
#undef COSERVE_HALF_6X2
#undef COSERVE_ROW_6X2
  const DF df;
  for (size_t m = 0; m < 6; ++m)
    for (size_t j = 0; j < 2; ++j) {
      float s = hn::GetLane(hn::SumOfLanes(df, hn::Load(df, acc[2 * m + j])));
      for (size_t kk = K2; kk < K; ++kk) s += xr[m * ldxr + kk] * scalar_f32(w + j * K + kk);
      float& out = y[m * ldy + j];
      out = accumulate ? out + s : s;
    }
}
#endif

template <size_t NR>
HWY_INLINE void tile_rows_bf16(size_t mr, const float* xr, size_t ldxr, const hwy::bfloat16_t* w,
                               size_t K, size_t K2, float* y, size_t ldy, bool accumulate,
                               bool prefetch) {
  switch (mr) {
    case 6:
#if HWY_TARGET == HWY_AVX2 && HWY_ARCH_X86_64 && (defined(__GNUC__) || defined(__clang__))
      if constexpr (NR == 2) {
        tile_bf16_6x2_avx2(xr, ldxr, w, K, K2, y, ldy, accumulate, prefetch);
        break;
      }
#endif
      tile_bf16<6, NR>(xr, ldxr, w, K, K2, y, ldy, accumulate, prefetch);
      break;
    case 5:
      tile_bf16<5, NR>(xr, ldxr, w, K, K2, y, ldy, accumulate, prefetch);
      break;
    case 4:
      tile_bf16<4, NR>(xr, ldxr, w, K, K2, y, ldy, accumulate, prefetch);
      break;
    case 3:
      tile_bf16<3, NR>(xr, ldxr, w, K, K2, y, ldy, accumulate, prefetch);
      break;
    case 2:
      tile_bf16<2, NR>(xr, ldxr, w, K, K2, y, ldy, accumulate, prefetch);
      break;
    default:
      tile_bf16<1, NR>(xr, ldxr, w, K, K2, y, ldy, accumulate, prefetch);
      break;
  }
}

template <size_t NR, typename WT>
HWY_INLINE void tile_rows(size_t mr, const float* x, size_t ldx, const WT* w, size_t K, float* y,
                          size_t ldy, bool accumulate, bool prefetch) {
  switch (mr) {
    case 4:
      tile<4, NR>(x, ldx, w, K, y, ldy, accumulate, prefetch);
      break;
    case 3:
      tile<3, NR>(x, ldx, w, K, y, ldy, accumulate, prefetch);
      break;
    case 2:
      tile<2, NR>(x, ldx, w, K, y, ldy, accumulate, prefetch);
      break;
    default:
      tile<1, NR>(x, ldx, w, K, y, ldy, accumulate, prefetch);
      break;
  }
}

// Many activation rows (prefill): a broadcast-FMA micro-kernel, as BLAS libraries compute GEMMs.
// The weights of a panel of k_bc_nv vectors of output features are packed, widened to fp32, for
// up to 256 columns at a time (bp[k][c], about 32 KiB: it stays in L1); then for every k_bc_mr rows
// of x the tile's k_bc_mr x k_bc_nv accumulators take, per column k, k_bc_nv vector loads of bp
// and one broadcast of each row's x[k]. Nothing is reduced across lanes, and only the broadcast
// x values stream from L2 (the dot-product tiles above load a vector of x per 4 FMAs).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM
// 12 x 2 accumulators + 2 panel vectors + 1 broadcast of 32 registers: 14 loads per 24 FMAs. On
// the Intel machine of docs/benchmarks/cpu.md, 150M f32 prefill 512: 6 x 4 tiles 935-960 tok/s,
// 8 x 3 900-1030, 12 x 2 975-1030.
constexpr size_t k_bc_nv = 2, k_bc_mr = 12;
#else
constexpr size_t k_bc_nv = 2,
                 k_bc_mr = 6;  // 6 x 2 accumulators + 2 panel vectors + 1 broadcast of 16
#endif
// From this many rows the broadcast kernel runs (below it, packing the panel costs more than it
// saves).
constexpr size_t k_bc_min_m = 16;

template <size_t MR>
HWY_INLINE void bcast_tile(const float* HWY_RESTRICT x, size_t ldx, const float* HWY_RESTRICT bp,
                           size_t kc, float* HWY_RESTRICT y, size_t ldy, size_t ncols, bool add) {
  const DF df;
  const size_t L = hn::Lanes(df), NRL = k_bc_nv * L;
  VF acc[MR][k_bc_nv];
  HWY_UNROLL(1)
  for (size_t m = 0; m < MR; ++m)
    for (size_t v = 0; v < k_bc_nv; ++v) acc[m][v] = hn::Zero(df);
  for (size_t k = 0; k < kc; ++k) {
    VF b[k_bc_nv];
    for (size_t v = 0; v < k_bc_nv; ++v) b[v] = hn::Load(df, bp + k * NRL + v * L);
    for (size_t m = 0; m < MR; ++m) {
      const VF a = hn::Set(df, x[m * ldx + k]);
      for (size_t v = 0; v < k_bc_nv; ++v) acc[m][v] = hn::MulAdd(a, b[v], acc[m][v]);
    }
  }
  if (ncols == NRL) {
    for (size_t m = 0; m < MR; ++m)
      for (size_t v = 0; v < k_bc_nv; ++v) {
        float* p = y + m * ldy + v * L;
        hn::StoreU(add ? hn::Add(hn::LoadU(df, p), acc[m][v]) : acc[m][v], df, p);
      }
    return;
  }
  HWY_ALIGN float tmp[k_bc_nv * hn::MaxLanes(DF())];
  for (size_t m = 0; m < MR; ++m) {
    for (size_t v = 0; v < k_bc_nv; ++v) hn::Store(acc[m][v], df, tmp + v * L);
    float* p = y + m * ldy;
    for (size_t c = 0; c < ncols; ++c) p[c] = add ? p[c] + tmp[c] : tmp[c];
  }
}

// In-register transpose of L x L floats (v[r] lane i -> v[i] lane r) where model/x86_transpose.hpp
// has one for the target; pack_panel lays weight rows out as panel columns with it, in whole-vector
// stores. Other targets pack element by element.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool k_have_transpose = true;
HWY_INLINE void transpose_lanes(VF* v) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = v[i].raw;
  x86::transpose16(r);
  for (int i = 0; i < 16; ++i) v[i].raw = r[i];
}
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
constexpr bool k_have_transpose = true;
HWY_INLINE void transpose_lanes(VF* v) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = v[i].raw;
  x86::transpose8(r);
  for (int i = 0; i < 8; ++i) v[i].raw = r[i];
}
#else
constexpr bool k_have_transpose = false;
HWY_INLINE void transpose_lanes(VF*) {}
#endif

// bp[k * NRL + c] = w[c, k0 + k] as fp32 for c < ncols, 0 beyond (a partial last panel).
template <typename WT>
HWY_INLINE void pack_panel(const WT* HWY_RESTRICT w, size_t K, size_t ncols, size_t k0, size_t kc,
                           float* HWY_RESTRICT bp) {
  const DF df;
  const size_t L = hn::Lanes(df), NRL = k_bc_nv * L;
  HWY_ALIGN float row[256 + HWY_MAX_BYTES / sizeof(float)];  // kc <= 256 (matmul_bcast's KC)
  size_t c = 0;
  if constexpr (k_have_transpose) {
    // L whole columns at a time: L x L blocks widened, transposed in registers, stored as vectors.
    constexpr size_t LM = hn::MaxLanes(DF());
    for (; c + L <= ncols; c += L) {
      const WT* src = w + c * K + k0;
      size_t k = 0;
      for (; k + L <= kc; k += L) {
        VF v[LM];
        for (size_t r = 0; r < L; ++r) v[r] = load_f32(df, src + r * K + k);
        transpose_lanes(v);
        for (size_t i = 0; i < L; ++i) hn::Store(v[i], df, bp + (k + i) * NRL + c);
      }
      for (; k < kc; ++k)
        for (size_t r = 0; r < L; ++r) bp[k * NRL + c + r] = scalar_f32(src + r * K + k);
    }
  }
  for (; c < NRL; ++c) {
    if (c < ncols) {
      // Widened a vector at a time (the fp8 and f16 conversions cost more than a store), then
      // transposed into the panel.
      const WT* src = w + c * K + k0;
      size_t k = 0;
      for (; k + L <= kc; k += L) hn::Store(load_f32(df, src + k), df, row + k);
      for (; k < kc; ++k) row[k] = scalar_f32(src + k);
      for (k = 0; k < kc; ++k) bp[k * NRL + c] = row[k];
    } else {
      for (size_t k = 0; k < kc; ++k) bp[k * NRL + c] = 0.0f;
    }
  }
}

template <typename WT>
void matmul_bcast(const float* x, size_t ldx, size_t M, const WT* w, size_t N, size_t K, float* y,
                  size_t ldy, bool accumulate) {
  const size_t NRL = k_bc_nv * hn::Lanes(DF());
  // About 32 KiB of panel, and at most 256 columns: each block's sums are chains of kc FMAs, added
  // into y block by block, which keeps the fp32 rounding of long K near the dot-product tiles'.
  const size_t KC = std::clamp<size_t>((size_t(32) << 10) / (NRL * sizeof(float)), 64, 256);
  thread_local hwy::AlignedFreeUniquePtr<float[]> bp_mem;
  thread_local size_t bp_size = 0;
  if (bp_size < KC * NRL) {
    bp_mem = hwy::AllocateAligned<float>(KC * NRL);
    bp_size = KC * NRL;
  }
  float* bp = bp_mem.get();
  const size_t tiles = (M + k_bc_mr - 1) / k_bc_mr;
  for (size_t j0 = 0; j0 < N; j0 += NRL) {
    const size_t ncols = std::min(NRL, N - j0);
    for (size_t k0 = 0; k0 < K; k0 += KC) {
      const size_t kc = std::min(KC, K - k0);
      pack_panel(w + j0 * K, K, ncols, k0, kc, bp);
      const bool add = accumulate || k0 > 0;
      next_block_prefetch next(w, sizeof(WT), N, K, NRL, KC, j0, k0, tiles);
      for (size_t m = 0; m < M; m += k_bc_mr) {
        next.share();
        const float* xm = x + m * ldx + k0;
        float* ym = y + m * ldy + j0;
        with_tile_rows<k_bc_mr>(
            M - m, [&](auto mr) { bcast_tile<mr()>(xm, ldx, bp, kc, ym, ldy, ncols, add); });
      }
    }
  }
}

template <typename WT>
void matmul_typed(const float* x, size_t ldx, size_t M, const WT* w, size_t N, size_t K, float* y,
                  size_t ldy, bool accumulate) {
  if (M >= k_bc_min_m) {
    matmul_bcast(x, ldx, M, w, N, K, y, ldy, accumulate);
    return;
  }
  // Rows of x per block: about 256 KiB of them, so they stay in L2 while a weight tile (NR rows,
  // in L1) is applied to each of them.
  const size_t mb =
      std::clamp<size_t>((size_t(256) << 10) / (K * sizeof(float) + 1) / k_mr * k_mr, k_mr, 256);
  for (size_t m0 = 0; m0 < M; m0 += mb) {
    const size_t m1 = std::min(M, m0 + mb);
    size_t j = 0;
    if (M > k_single_row_max_m)
      for (; j + k_nr <= N; j += k_nr)
        for (size_t m = m0; m < m1; m += k_mr)
          tile_rows<k_nr>(std::min(k_mr, m1 - m), x + m * ldx, ldx, w + j * K, K, y + m * ldy + j,
                          ldy, accumulate, m == m0);
    for (; j < N; ++j)
      for (size_t m = m0; m < m1; m += k_mr)
        tile_rows<1>(std::min(k_mr, m1 - m), x + m * ldx, ldx, w + j * K, K, y + m * ldy + j, ldy,
                     accumulate, m == m0);
  }
}

void round_bf16_f32_impl(const float* x, int64_t ldx, int64_t M, int64_t K, float* out);

// One row of activations in the layout the bf16 tiles read: per block of 2L columns, the L even
// columns, then the L odd ones; the K - K2 tail as it is; rounded to bf16 (kept as fp32) when
// act_bf16.
HWY_INLINE void reorder_bf16_row(const float* src, size_t K, bool act_bf16, float* dst) {
  const size_t L = hn::Lanes(DF());
  const size_t K2 = K / (2 * L) * (2 * L);
  for (size_t k = 0; k < K2; k += 2 * L)
    for (size_t i = 0; i < L; ++i) {
      dst[k + i] = src[k + 2 * i];
      dst[k + L + i] = src[k + 2 * i + 1];
    }
  for (size_t k = K2; k < K; ++k) dst[k] = src[k];
  if (act_bf16) round_bf16_f32_impl(dst, int64_t(K), 1, int64_t(K), dst);
}

// Rows of activations (row stride ldx) in that layout, into xr [M, K].
void prepare_bf16_impl(const float* x, int64_t ldx, int64_t M, int64_t K, float* xr) {
  for (int64_t m = 0; m < M; ++m) reorder_bf16_row(x + m * ldx, size_t(K), true, xr + m * K);
}

// Activation rows per block of the bf16 tiles: about 256 KiB of them (L2), whole tiles.
HWY_INLINE size_t bf16_row_block(size_t K) {
  return std::clamp<size_t>((size_t(256) << 10) / (K * sizeof(float) + 1) / k_mr_bf16 * k_mr_bf16,
                            k_mr_bf16, 256);
}

// The bf16 tiles over activations already in that layout (xr [M, K]).
void matmul_bf16_tiles(const float* xr, size_t M, const hwy::bfloat16_t* w, size_t N, size_t K,
                       float* y, size_t ldy, bool accumulate) {
  const size_t L = hn::Lanes(DF());
  const size_t K2 = K / (2 * L) * (2 * L);
  const size_t mb = bf16_row_block(K);
  for (size_t m0 = 0; m0 < M; m0 += mb) {
    const size_t m1 = std::min(M, m0 + mb);
    const float* xb = xr + m0 * K;
    size_t j = 0;
    if (M > k_single_row_max_m) {
      // Weight rows in blocks of about 256 KiB (L2); each tile of k_mr_bf16 activation rows (in L1)
      // meets a whole block before the next tile, so the fp32 activations are read from L2 once
      // per block rather than once per weight tile.
      const size_t nb =
          std::max<size_t>(k_nr, (size_t(256) << 10) / (K * sizeof(uint16_t) + 1) / k_nr * k_nr);
      const size_t nt = N / k_nr * k_nr;
      for (size_t j0 = 0; j0 < nt; j0 += nb) {
        const size_t j1 = std::min(nt, j0 + nb);
        for (size_t m = m0; m < m1; m += k_mr_bf16)
          for (size_t jj = j0; jj < j1; jj += k_nr)
            tile_rows_bf16<k_nr>(std::min(k_mr_bf16, m1 - m), xb + (m - m0) * K, K, w + jj * K, K,
                                 K2, y + m * ldy + jj, ldy, accumulate, m == m0);
      }
      j = nt;
    }
    for (; j < N; ++j)
      for (size_t m = m0; m < m1; m += k_mr_bf16)
        tile_rows_bf16<1>(std::min(k_mr_bf16, m1 - m), xb + (m - m0) * K, K, w + j * K, K, K2,
                          y + m * ldy + j, ldy, accumulate, m == m0);
  }
}

void matmul_bf16_prepared_impl(const float* xr, int64_t M, const weight_ref* w, int64_t n, float* y,
                               int64_t ldy, bool accumulate) {
  matmul_bf16_tiles(xr, size_t(M), static_cast<const hwy::bfloat16_t*>(w->data), size_t(n),
                    size_t(w->cols), y, size_t(ldy), accumulate);
}

// act_bf16: the activations are rounded to bf16 first (the products are then those of
// two bf16 numbers, as the AVX512-BF16 kernel computes them).
void matmul_bf16(const float* x, size_t ldx, size_t M, const hwy::bfloat16_t* w, size_t N, size_t K,
                 float* y, size_t ldy, bool accumulate, bool act_bf16) {
  // bf16 activations (the serving default) stay on the dot-product tiles at every row count, and
  // every tile shape computes an output with the same chain of FMAs, so a sequence's results do not
  // change with its batch (as on the AVX512-BF16 kernel). fp32 activations take the broadcast
  // kernel from k_bc_min_m rows (its sums are in another order).
  if (M >= k_bc_min_m && !act_bf16) {
    matmul_bcast(x, ldx, M, w, N, K, y, ldy, accumulate);
    return;
  }
  // The rows reordered (and rounded) in blocks of about 256 KiB, each block's tiles run on it.
  const size_t mb = bf16_row_block(K);
  thread_local std::vector<float> xr;
  xr.resize(std::min(M, mb) * K);
  for (size_t m0 = 0; m0 < M; m0 += mb) {
    const size_t m1 = std::min(M, m0 + mb);
    for (size_t m = m0; m < m1; ++m)
      reorder_bf16_row(x + m * ldx, K, act_bf16, xr.data() + (m - m0) * K);
    matmul_bf16_tiles(xr.data(), m1 - m0, w, N, K, y + m0 * ldy, ldy, accumulate);
  }
}

void matmul_nt_impl(const float* x, int64_t ldx, int64_t M, const weight_ref* w, int64_t n,
                    float* y, int64_t ldy, bool accumulate, bool act_bf16) {
  const size_t K = size_t(w->cols);
  switch (w->type) {
    case dtype::f32:
      matmul_typed(x, size_t(ldx), size_t(M), static_cast<const float*>(w->data), size_t(n), K, y,
                   size_t(ldy), accumulate);
      break;
    case dtype::bf16:
      matmul_bf16(x, size_t(ldx), size_t(M), static_cast<const hwy::bfloat16_t*>(w->data),
                  size_t(n), K, y, size_t(ldy), accumulate, act_bf16);
      break;
    case dtype::f16:
      matmul_typed(x, size_t(ldx), size_t(M), static_cast<const hwy::float16_t*>(w->data),
                   size_t(n), K, y, size_t(ldy), accumulate);
      break;
    default:
      break;              // quantized weights: matmul_nt sends them to matmul_quant
    case dtype::f8_e4m3:  // value * 2^-8, unscaled: matmul_nt applies 256 * row_scale
      matmul_typed(x, size_t(ldx), size_t(M), static_cast<const e4m3_lo_t*>(w->data), size_t(n), K,
                   y, size_t(ldy), accumulate);
      break;
    case dtype::f8_e5m2:
      matmul_typed(x, size_t(ldx), size_t(M), static_cast<const e5m2_t*>(w->data), size_t(n), K, y,
                   size_t(ldy), accumulate);
      break;
  }
}

HWY_INLINE float dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, size_t n) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF s0 = hn::Zero(df), s1 = hn::Zero(df);
  size_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + i + L), hn::LoadU(df, b + i + L), s1);
  }
  for (; i + L <= n; i += L) s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// NV vectors of an accumulator row: acc = acc * corr + sum_{j < n} p[j] * v[j * d ..]; two sets
// of accumulators (even and odd positions) so the FMA chains run side by side.
template <size_t NV>
HWY_INLINE void pv_block(float* HWY_RESTRICT acc, const VF vc, const float* HWY_RESTRICT p,
                         const float* HWY_RESTRICT v, size_t n, size_t d) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF a[NV], b[NV];
  for (size_t i = 0; i < NV; ++i) {
    a[i] = hn::Mul(hn::LoadU(df, acc + i * L), vc);
    b[i] = hn::Zero(df);
  }
  size_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const VF p0 = hn::Set(df, p[j]), p1 = hn::Set(df, p[j + 1]);
    for (size_t i = 0; i < NV; ++i) {
      a[i] = hn::MulAdd(p0, hn::LoadU(df, v + j * d + i * L), a[i]);
      b[i] = hn::MulAdd(p1, hn::LoadU(df, v + (j + 1) * d + i * L), b[i]);
    }
  }
  if (j < n) {
    const VF p0 = hn::Set(df, p[j]);
    for (size_t i = 0; i < NV; ++i) a[i] = hn::MulAdd(p0, hn::LoadU(df, v + j * d + i * L), a[i]);
  }
  for (size_t i = 0; i < NV; ++i) hn::StoreU(hn::Add(a[i], b[i]), df, acc + i * L);
}

// acc[0..d) = acc * corr + sum_{j < n} p[j] * v[j * d + 0..d): the accumulator row stays in
// registers across the positions (up to 4 vectors at a time) and is stored once.
HWY_INLINE void pv_accumulate(float* HWY_RESTRICT acc, float corr, const float* HWY_RESTRICT p,
                              const float* HWY_RESTRICT v, size_t n, size_t d) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const VF vc = hn::Set(df, corr);
  size_t c = 0;
  for (; c + 4 * L <= d; c += 4 * L) pv_block<4>(acc + c, vc, p, v + c, n, d);
  if (c + 2 * L <= d) {
    pv_block<2>(acc + c, vc, p, v + c, n, d);
    c += 2 * L;
  }
  if (c + L <= d) {
    pv_block<1>(acc + c, vc, p, v + c, n, d);
    c += L;
  }
  for (; c < d; ++c) {
    float x = acc[c] * corr;
    for (size_t j = 0; j < n; ++j) x += p[j] * v[j * d + c];
    acc[c] = x;
  }
}

// Widens n elements of the cache row at p to fp32.
template <typename T>
HWY_INLINE void widen_row(const T* HWY_RESTRICT p, float* HWY_RESTRICT out, size_t n) {
  const DF df;
  const size_t L = hn::Lanes(df);
  size_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(load_f32(df, p + i), df, out + i);
  for (; i < n; ++i) out[i] = scalar_f32(p + i);
}

constexpr size_t k_chunk = 32;  // cached positions scored together

// attend_typed's per-thread scratch, carved from one buffer: scaled queries and accumulators
// ([rows][d] each), the chunk's K/V rows in fp32 ([k_chunk][d] each), scores ([rows][sc_len]),
// the running max and sum per row, and (transposed scoring only) K transposed ([d][sc_len]).
struct attn_scratch {
  float* q;
  float* acc;
  float* kbuf;
  float* vbuf;
  float* sc;
  float* mx;
  float* sum;
  float* kt;
  size_t sc_len;  // k_chunk rounded up to whole vectors
};

HWY_INLINE attn_scratch carve_attn_scratch(std::vector<float>& buf, size_t rows, size_t d, size_t L,
                                           bool transposed) {
  attn_scratch s;
  s.sc_len = (k_chunk + L - 1) / L * L;
  buf.resize(rows * d * 2 + 2 * k_chunk * d + rows * s.sc_len + 2 * rows +
             (transposed ? d * s.sc_len : 0));
  s.q = buf.data();
  s.acc = s.q + rows * d;
  s.kbuf = s.acc + rows * d;
  s.vbuf = s.kbuf + k_chunk * d;
  s.sc = s.vbuf + k_chunk * d;
  s.mx = s.sc + rows * s.sc_len;
  s.sum = s.mx + rows;
  s.kt = s.sum + rows;
  return s;
}

// Row r = (query i, head g of the group): the query times the scale, a zero accumulator, no max
// and no sum yet.
HWY_INLINE void load_queries(const attn_tile& t, const attn_scratch& s, size_t rows, size_t d) {
  for (size_t r = 0; r < rows; ++r) {
    const size_t i = r / size_t(t.group), g = r % size_t(t.group);
    const float* src =
        t.q + int64_t(i) * t.q_stride + (int64_t(t.kv_head) * t.group + int64_t(g)) * t.head_dim;
    for (size_t j = 0; j < d; ++j) s.q[r * d + j] = src[j] * t.scale;
    std::fill(s.acc + r * d, s.acc + (r + 1) * d, 0.0f);
    s.mx[r] = -INFINITY;
    s.sum[r] = 0.0f;
  }
}

// The chunk's n K and V rows (slots slot0 .. slot0 + n - 1, this KV head) widened to fp32; with
// transposed scoring, K also transposed into kt (zero-padded to n_pad positions).
template <typename T>
HWY_INLINE void load_kv_chunk(const attn_tile& t, const attn_scratch& s, int64_t slot0, int32_t n,
                              size_t n_pad, size_t d, bool transposed) {
  const T* kc = static_cast<const T*>(t.k);
  const T* vc = static_cast<const T*>(t.v);
  const size_t head_off = size_t(t.kv_head) * d;
  for (int32_t j = 0; j < n; ++j) {
    widen_row(kc + size_t(slot0 + j) * size_t(t.slot_stride) + head_off, s.kbuf + size_t(j) * d, d);
    widen_row(vc + size_t(slot0 + j) * size_t(t.slot_stride) + head_off, s.vbuf + size_t(j) * d, d);
  }
  if (!transposed) return;
  for (size_t c = 0; c < d; ++c) {
    float* dst = s.kt + c * s.sc_len;
    for (size_t j = 0; j < size_t(n); ++j) dst[j] = s.kbuf[j * d + c];
    for (size_t j = size_t(n); j < n_pad; ++j) dst[j] = 0.0f;
  }
}

// Scores of every row that sees part of the chunk at `pos` against K transposed: 4 rows at a time
// share each K load, and their 4 independent FMA chains (8 with two position vectors) keep the FMA
// units busy where one row's chain waited on each FMA's latency. Rows go by query position: a
// group of 4 whose last row cannot see pos is skipped.
HWY_INLINE void score_chunk_transposed(const attn_tile& t, const attn_scratch& s, size_t rows,
                                       size_t d, int32_t pos, size_t n_pad) {
  const DF df;
  const size_t L = hn::Lanes(df);
  for (size_t r0 = 0; r0 < rows; r0 += 4) {
    if (t.q_pos0 + int32_t(std::min(r0 + 3, rows - 1) / size_t(t.group)) < pos) continue;
    const float* qr[4];
    for (size_t i = 0; i < 4; ++i) qr[i] = s.q + std::min(r0 + i, rows - 1) * d;
    size_t j0 = 0;
    for (; j0 + 2 * L <= n_pad; j0 += 2 * L) {
      VF a[4][2];
      for (auto& ai : a) ai[0] = ai[1] = hn::Zero(df);
      for (size_t c = 0; c < d; ++c) {
        const VF k0 = hn::LoadU(df, s.kt + c * s.sc_len + j0),
                 k1 = hn::LoadU(df, s.kt + c * s.sc_len + j0 + L);
        for (size_t i = 0; i < 4; ++i) {
          const VF qv = hn::Set(df, qr[i][c]);
          a[i][0] = hn::MulAdd(qv, k0, a[i][0]);
          a[i][1] = hn::MulAdd(qv, k1, a[i][1]);
        }
      }
      for (size_t i = 0; i < 4 && r0 + i < rows; ++i) {
        hn::StoreU(a[i][0], df, s.sc + (r0 + i) * s.sc_len + j0);
        hn::StoreU(a[i][1], df, s.sc + (r0 + i) * s.sc_len + j0 + L);
      }
    }
    if (j0 < n_pad) {
      VF a[4];
      for (auto& ai : a) ai = hn::Zero(df);
      for (size_t c = 0; c < d; ++c) {
        const VF k0 = hn::LoadU(df, s.kt + c * s.sc_len + j0);
        for (size_t i = 0; i < 4; ++i) a[i] = hn::MulAdd(hn::Set(df, qr[i][c]), k0, a[i]);
      }
      for (size_t i = 0; i < 4 && r0 + i < rows; ++i)
        hn::StoreU(a[i], df, s.sc + (r0 + i) * s.sc_len + j0);
    }
  }
}

// The running sum rescaled by corr plus a chunk's mass. On x86 the product is rounded before the
// add: with GCC an association barrier keeps the two from being fused into one FMA. Elsewhere the
// compiler may fuse them (GCC does on Arm).
HWY_INLINE float rescaled_sum(float sum, float corr, float add) {
#if HWY_ARCH_X86 && HWY_COMPILER_GCC_ACTUAL && __has_builtin(__builtin_assoc_barrier)
  return __builtin_assoc_barrier(sum * corr) + add;
#else
  return sum * corr + add;
#endif
}

// Each row's accumulator divided by its sum into the output, or (a split of the context) its
// max, sum and accumulator into the tile's partials for attn_merge.
HWY_INLINE void store_attention_rows(const attn_tile& t, const attn_scratch& s, size_t rows,
                                     size_t d) {
  for (size_t r = 0; r < rows; ++r) {
    if (t.partial_acc) {
      t.partial_max[r] = s.mx[r];
      t.partial_sum[r] = s.sum[r];
      std::copy_n(s.acc + r * d, d, t.partial_acc + r * d);
      continue;
    }
    const size_t i = r / size_t(t.group), g = r % size_t(t.group);
    float* o = t.out + int64_t(i) * t.out_stride +
               (int64_t(t.kv_head) * t.group + int64_t(g)) * t.head_dim;
    const float inv = s.sum[r] > 0.0f ? 1.0f / s.sum[r] : 0.0f;
    for (size_t j = 0; j < d; ++j) o[j] = s.acc[r * d + j] * inv;
  }
}

// One tile: its query rows against the cached positions [ctx_begin, ctx_end) visible to them, a
// chunk of up to k_chunk positions (contiguous slots of one block) at a time; per row an online
// softmax over each chunk (the running max and sum, the accumulator rescaled as the max grows).
template <typename T>
void attend_typed(const attn_tile& t) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const size_t d = size_t(t.head_dim);
  const size_t rows = size_t(t.group) * size_t(t.num_q);
  // Enough query rows (prefill tiles) score a chunk against K transposed: per row, d broadcast
  // FMAs give L scores at once, where row-by-row dot products each end in a horizontal sum.
  const bool transposed = rows >= 8;
  thread_local std::vector<float> scratch;
  const attn_scratch s = carve_attn_scratch(scratch, rows, d, L, transposed);
  float* q = s.q;
  float* acc = s.acc;
  float* kbuf = s.kbuf;
  float* vbuf = s.vbuf;
  float* sc = s.sc;
  float* mx = s.mx;
  float* sum = s.sum;
  const size_t sc_len = s.sc_len;
  load_queries(t, s, rows, d);
  const int32_t last_pos = t.q_pos0 + t.num_q - 1;
  const int32_t end = std::min(t.ctx_end, last_pos + 1);
  // With a sliding window no row sees a key before the first row's window.
  const int32_t begin = t.window > 0 ? std::max(t.ctx_begin, t.q_pos0 - t.window + 1) : t.ctx_begin;
  for (int32_t pos = begin; pos < end;) {
    // A run of positions that are contiguous slots in one block.
    const int32_t in_block = pos % t.block_size;
    const int32_t n = std::min({t.block_size - in_block, end - pos, int32_t(k_chunk)});
    const int64_t slot0 = int64_t(t.block_table[pos / t.block_size]) * t.block_size + in_block;
    const size_t n_pad = (size_t(n) + L - 1) / L * L;
    load_kv_chunk<T>(t, s, slot0, n, n_pad, d, transposed);
    if (transposed) score_chunk_transposed(t, s, rows, d, pos, n_pad);
    for (size_t r = 0; r < rows; ++r) {
      const int32_t limit = t.q_pos0 + int32_t(r / size_t(t.group));  // last visible position
      float* sr = sc + r * sc_len;
      const int32_t visible = std::min(n, limit - pos + 1);
      // Sliding window: keys at chunk offsets below `hidden` are before this row's window.
      const int32_t hidden = t.window > 0 ? std::clamp(limit - t.window + 1 - pos, 0, n) : 0;
      if (visible <= hidden) continue;
      float block_max = -INFINITY;
      if (transposed) {
        for (int32_t j = hidden; j < visible; ++j) block_max = std::max(block_max, sr[j]);
      } else {
        for (int32_t j = hidden; j < visible; ++j) {
          sr[j] = dot(q + r * d, kbuf + size_t(j) * d, d);
          block_max = std::max(block_max, sr[j]);
        }
      }
      for (int32_t j = 0; j < hidden; ++j) sr[j] = -INFINITY;
      for (size_t j = size_t(visible); j < sc_len; ++j) sr[j] = -INFINITY;
      const float new_max = std::max(mx[r], block_max);
      const float corr = std::exp(mx[r] - new_max);  // 0 on the first chunk (mx = -inf)
      const VF vmax = hn::Set(df, new_max);
      VF vsum = hn::Zero(df);
      for (size_t j = 0; j < sc_len; j += L) {
        const VF v = hn::LoadU(df, sr + j);
        const VF e =
            hn::IfThenZeroElse(hn::Eq(v, hn::Set(df, -INFINITY)), hn::Exp(df, hn::Sub(v, vmax)));
        hn::StoreU(e, df, sr + j);
        vsum = hn::Add(vsum, e);
      }
      sum[r] = rescaled_sum(sum[r], corr, hn::GetLane(hn::SumOfLanes(df, vsum)));
      mx[r] = new_max;
      pv_accumulate(acc + r * d, corr, sr, vbuf, size_t(visible), d);
    }
    pos += n;
  }
  store_attention_rows(t, s, rows, d);
}

void attend_impl(const attn_tile* t) {
  switch (t->kv_type) {
    case dtype::f32:
      attend_typed<float>(*t);
      break;
    case dtype::bf16:
      attend_typed<hwy::bfloat16_t>(*t);
      break;
    case dtype::f16:
      attend_typed<hwy::float16_t>(*t);
      break;
    case dtype::f8_e4m3:
      attend_typed<e4m3_t>(*t);
      break;
    case dtype::f8_e5m2:
      attend_typed<e5m2_t>(*t);
      break;
    default:
      break;  // KV caches are f32, bf16, f16 or fp8
  }
}

// GELU in place: exact (x/2 (1 + erf(x / sqrt 2)), erf by Abramowitz & Stegun 7.1.26, absolute
// error below 1.5e-7) or the tanh form (x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))). The tail
// past the last whole vector runs through a padded vector too.
template <bool tanh_form>
HWY_INLINE VF gelu_vec(DF df, VF x) {
  const VF half = hn::Set(df, 0.5f), one = hn::Set(df, 1.0f);
  if constexpr (tanh_form) {
    const VF inner = hn::Mul(hn::Set(df, 0.7978845608f),
                             hn::MulAdd(hn::Mul(hn::Set(df, 0.044715f), hn::Mul(x, x)), x, x));
    return hn::Mul(hn::Mul(half, x), hn::Add(one, hn::Tanh(df, inner)));
  } else {
    const VF z = hn::Mul(hn::Abs(x), hn::Set(df, 0.70710678118654752f));
    const VF t = hn::Div(one, hn::MulAdd(hn::Set(df, 0.3275911f), z, one));
    VF poly = hn::Set(df, 1.061405429f);
    poly = hn::MulAdd(poly, t, hn::Set(df, -1.453152027f));
    poly = hn::MulAdd(poly, t, hn::Set(df, 1.421413741f));
    poly = hn::MulAdd(poly, t, hn::Set(df, -0.284496736f));
    poly = hn::MulAdd(poly, t, hn::Set(df, 0.254829592f));
    poly = hn::Mul(poly, t);
    const VF erf_abs = hn::NegMulAdd(poly, hn::Exp(df, hn::Neg(hn::Mul(z, z))), one);
    const VF erf = hn::CopySign(erf_abs, x);
    return hn::Mul(hn::Mul(half, x), hn::Add(one, erf));
  }
}

void gelu_impl(float* x, size_t n, bool tanh_form) {
  const DF df;
  const size_t L = hn::Lanes(df);
  size_t i = 0;
  for (; i + L <= n; i += L) {
    const VF v = hn::LoadU(df, x + i);
    hn::StoreU(tanh_form ? gelu_vec<true>(df, v) : gelu_vec<false>(df, v), df, x + i);
  }
  if (i < n) {
    HWY_ALIGN float tail[hn::MaxLanes(DF())] = {};
    std::copy(x + i, x + n, tail);
    const VF v = hn::Load(df, tail);
    hn::Store(tanh_form ? gelu_vec<true>(df, v) : gelu_vec<false>(df, v), df, tail);
    std::copy(tail, tail + (n - i), x + i);
  }
}

float max_of(const float* x, size_t n) {
  const DF df;
  const size_t L = hn::Lanes(df);
  float mx = -INFINITY;
  size_t i = 0;
  if (n >= L) {
    VF vm = hn::Set(df, -INFINITY);
    for (; i + L <= n; i += L) vm = hn::Max(vm, hn::LoadU(df, x + i));
    mx = hn::GetLane(hn::MaxOfLanes(df, vm));
  }
  for (size_t j = i; j < n; ++j) mx = std::max(mx, x[j]);
  return mx;
}

// log(sum exp(x[i])) given mx = max x[i] (finite).
float log_sum_exp_from(const float* x, size_t n, float mx) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const VF vmx = hn::Set(df, mx), ninf = hn::Set(df, -INFINITY);
  // fp32 lane sums over at most 256 terms each, then added into the double total.
  HWY_ALIGN float lanes[2 * HWY_MAX_BYTES / sizeof(float)];
  double sum = 0.0;
  size_t i = 0;
  while (i + 2 * L <= n) {
    VF s0 = hn::Zero(df), s1 = hn::Zero(df);
    for (size_t r = 0; r < 256 && i + 2 * L <= n; ++r, i += 2 * L) {
      const VF a = hn::LoadU(df, x + i), b = hn::LoadU(df, x + i + L);
      s0 = hn::Add(s0, hn::IfThenZeroElse(hn::Eq(a, ninf), hn::Exp(df, hn::Sub(a, vmx))));
      s1 = hn::Add(s1, hn::IfThenZeroElse(hn::Eq(b, ninf), hn::Exp(df, hn::Sub(b, vmx))));
    }
    hn::Store(s0, df, lanes);
    hn::Store(s1, df, lanes + L);
    for (size_t j = 0; j < 2 * L; ++j) sum += double(lanes[j]);
  }
  for (; i < n; ++i) sum += std::exp(double(x[i]) - double(mx));
  return mx + float(std::log(sum));
}

float log_sum_exp_impl(const float* x, size_t n) {
  const float mx = max_of(x, n);
  if (mx == -INFINITY || std::isnan(mx)) return mx;
  return log_sum_exp_from(x, n, mx);
}

// log_sum_exp, and in `first_max` the first index holding the largest value (-1 when the values
// are all -inf or the maximum is NaN: then the first return is that maximum).
float log_sum_exp_argmax_impl(const float* x, size_t n, int64_t* first_max) {
  *first_max = -1;
  const float mx = max_of(x, n);
  if (mx == -INFINITY || std::isnan(mx)) return mx;
  const DF df;
  const size_t L = hn::Lanes(df);
  const VF vmx = hn::Set(df, mx);
  size_t i = 0;
  for (; i + L <= n && *first_max < 0; i += L) {
    const intptr_t lane = hn::FindFirstTrue(df, hn::Eq(hn::LoadU(df, x + i), vmx));
    if (lane >= 0) *first_max = int64_t(i) + lane;
  }
  for (; i < n && *first_max < 0; ++i)
    if (x[i] == mx) *first_max = int64_t(i);
  return log_sum_exp_from(x, n, mx);
}

// x[i] = -inf where bit i of `bits` (LSB first) is clear. Vectors of 8k lanes read whole bytes of
// bits; other widths, and the tail, go one value at a time.
void mask_logits_impl(float* x, const uint8_t* bits, size_t n) {
  const DF df;
  const size_t L = hn::Lanes(df);
  size_t i = 0;
  if (L % 8 == 0) {
    const VF ninf = hn::Set(df, -INFINITY);
    for (; i + L <= n; i += L) {
      const uint8_t* b = bits + i / 8;
      bool all = true;
      for (size_t k = 0; k < L / 8; ++k) all = all && b[k] == 0xFF;
      if (all) continue;  // inside free text most tokens are allowed
      hn::StoreU(hn::IfThenElse(hn::LoadMaskBits(df, b), hn::LoadU(df, x + i), ninf), df, x + i);
    }
  }
  for (; i < n; ++i)
    if (!((bits[i / 8] >> (i % 8)) & 1u)) x[i] = -INFINITY;
}

// x [M, K] (row stride ldx) rounded to bf16 (nearest even; NaN stays NaN, as f32_to_bf16) and
// kept as fp32 in out [M, K].
void round_bf16_f32_impl(const float* x, int64_t ldx, int64_t M, int64_t K, float* out) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const size_t L = hn::Lanes(df);
  const auto one = hn::Set(du, 1u), half = hn::Set(du, 0x7fffu), hi = hn::Set(du, 0xffff0000u);
  const auto quiet = hn::Set(du, 0x00400000u);
  for (int64_t m = 0; m < M; ++m) {
    const float* src = x + m * ldx;
    float* dst = out + m * K;
    size_t k = 0;
    for (; k + L <= size_t(K); k += L) {
      const VF v = hn::LoadU(df, src + k);
      const auto b = hn::BitCast(du, v);
      const auto r = hn::And(hn::Add(b, hn::Add(half, hn::And(hn::ShiftRight<16>(b), one))), hi);
      const auto q = hn::And(hn::Or(b, quiet), hi);
      hn::StoreU(hn::BitCast(df, hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), q, r)), df,
                 dst + k);
    }
    for (; k < size_t(K); ++k) dst[k] = bf16_to_f32(f32_to_bf16(src[k]));
  }
}

int64_t target_bit() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace coserve
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define COSERVE_BF16DOT 1
#else
#define COSERVE_BF16DOT 0
#endif

namespace coserve {

#if COSERVE_BF16DOT
namespace {

// AVX512-BF16 kernel (Zen 4 and later, Cooper Lake, Sapphire Rapids): activations rounded to bf16
// (nearest even) and multiplied with bf16 weights by VDPBF16PS, 32 products per instruction into
// 16 fp32 sums. Compiled for that target only; matmul_nt calls it after checking the CPU.
#define COSERVE_BF16DOT_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

template <size_t MR, size_t NR>
COSERVE_BF16DOT_TARGET inline void dot_tile(const uint16_t* xb, size_t ldxb, const uint16_t* w,
                                            size_t K, size_t K2, float* y, size_t ldy,
                                            bool accumulate, bool prefetch) {
  __m512 acc[MR][NR];
  for (size_t m = 0; m < MR; ++m)
    for (size_t j = 0; j < NR; ++j) acc[m][j] = _mm512_setzero_ps();
  for (size_t k = 0; k < K2; k += 32) {
    __m512bh wv[NR];
    for (size_t j = 0; j < NR; ++j) {
      if (NR > 1 && prefetch)
        _mm_prefetch(reinterpret_cast<const char*>(w + (NR + j) * K + k), _MM_HINT_T0);
      wv[j] = (__m512bh)_mm512_loadu_si512(w + j * K + k);
    }
    for (size_t m = 0; m < MR; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + m * ldxb + k);
      for (size_t j = 0; j < NR; ++j) acc[m][j] = _mm512_dpbf16_ps(acc[m][j], xv, wv[j]);
    }
  }
  for (size_t m = 0; m < MR; ++m)
    for (size_t j = 0; j < NR; ++j) {
      float s = _mm512_reduce_add_ps(acc[m][j]);
      for (size_t kk = K2; kk < K; ++kk) {
        uint16_t h;
        std::memcpy(&h, w + j * K + kk, 2);
        s += bf16_to_f32(xb[m * ldxb + kk]) * bf16_to_f32(h);
      }
      float& out = y[m * ldy + j];
      out = accumulate ? out + s : s;
    }
}

template <size_t NR>
COSERVE_BF16DOT_TARGET inline void dot_rows(size_t mr, const uint16_t* xb, size_t ldxb,
                                            const uint16_t* w, size_t K, size_t K2, float* y,
                                            size_t ldy, bool accumulate, bool prefetch) {
  switch (mr) {
    case 4:
      dot_tile<4, NR>(xb, ldxb, w, K, K2, y, ldy, accumulate, prefetch);
      break;
    case 3:
      dot_tile<3, NR>(xb, ldxb, w, K, K2, y, ldy, accumulate, prefetch);
      break;
    case 2:
      dot_tile<2, NR>(xb, ldxb, w, K, K2, y, ldy, accumulate, prefetch);
      break;
    default:
      dot_tile<1, NR>(xb, ldxb, w, K, K2, y, ldy, accumulate, prefetch);
      break;
  }
}

// Rows [0, M) of bf16 activations xb (row stride K) times weight rows [0, N).
COSERVE_BF16DOT_TARGET void bf16dot_rows(const uint16_t* xb, size_t M, const uint16_t* w, size_t N,
                                         size_t K, float* y, size_t ldy, bool accumulate) {
  // One weight row at a time up to 8 activation rows (one sequential stream per thread; measured
  // ~10% faster than 4 x 4 tiles at 8 rows, slower at 16).
  constexpr size_t mr = 4, nr = 4, single_row_max_m = 8;
  const size_t K2 = K / 32 * 32;
  // Rows of xb per block: about 256 KiB, kept in L2 while a weight tile (in L1) meets each of them.
  const size_t mb = std::clamp<size_t>((size_t(256) << 10) / (K * 2 + 1) / mr * mr, mr, 256);
  for (size_t m0 = 0; m0 < M; m0 += mb) {
    const size_t m1 = std::min(M, m0 + mb);
    size_t j = 0;
    if (M > single_row_max_m) {
      // Weight rows in blocks of about 256 KiB (L2), each met by every tile of mr activation rows
      // (in L1) before the next block (as matmul_bf16 does).
      const size_t nb = std::max<size_t>(nr, (size_t(256) << 10) / (K * 2 + 1) / nr * nr);
      const size_t nt = N / nr * nr;
      for (size_t j0 = 0; j0 < nt; j0 += nb) {
        const size_t j1 = std::min(nt, j0 + nb);
        for (size_t m = m0; m < m1; m += mr)
          for (size_t jj = j0; jj < j1; jj += nr)
            dot_rows<nr>(std::min(mr, m1 - m), xb + m * K, K, w + jj * K, K, K2, y + m * ldy + jj,
                         ldy, accumulate, m == m0);
      }
      j = nt;
    }
    for (; j < N; ++j)
      for (size_t m = m0; m < m1; m += mr)
        dot_rows<1>(std::min(mr, m1 - m), xb + m * K, K, w + j * K, K, K2, y + m * ldy + j, ldy,
                    accumulate, m == m0);
  }
}

COSERVE_BF16DOT_TARGET void round_rows_bf16dot(const float* x, size_t ldx, size_t M, size_t K,
                                               uint16_t* out) {
  for (size_t m = 0; m < M; ++m) {
    const float* src = x + m * ldx;
    uint16_t* dst = out + m * K;
    size_t k = 0;
    for (; k + 32 <= K; k += 32) {
      const __m512bh v =
          _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + k + 16), _mm512_loadu_ps(src + k));
      _mm512_storeu_si512(dst + k, (__m512i)v);
    }
    for (; k < K; ++k) dst[k] = f32_to_bf16(src[k]);
  }
}

void matmul_bf16dot(const float* x, size_t ldx, size_t M, const uint16_t* w, size_t N, size_t K,
                    float* y, size_t ldy, bool accumulate) {
  thread_local std::vector<uint16_t> xb;
  xb.resize(M * K);
  round_rows_bf16dot(x, ldx, M, K, xb.data());
  bf16dot_rows(xb.data(), M, w, N, K, y, ldy, accumulate);
}

bool cpu_has_bf16dot() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

}  // namespace
#else
namespace {
bool cpu_has_bf16dot() { return false; }
}  // namespace
#endif

namespace {
// Whether matmul_nt uses the AVX512-BF16 kernel for bf16 activations x bf16 weights.
std::atomic<bool>& bf16dot_on() {
  static std::atomic<bool> on{cpu_has_bf16dot()};
  return on;
}
constexpr const char* k_bf16dot_name = "AVX3+BF16";
}  // namespace

HWY_EXPORT(matmul_nt_impl);
HWY_EXPORT(attend_impl);
HWY_EXPORT(target_bit);
HWY_EXPORT(log_sum_exp_impl);
HWY_EXPORT(log_sum_exp_argmax_impl);
HWY_EXPORT(max_of);
HWY_EXPORT(gelu_impl);
HWY_EXPORT(mask_logits_impl);
HWY_EXPORT(round_bf16_f32_impl);
HWY_EXPORT(prepare_bf16_impl);
HWY_EXPORT(matmul_bf16_prepared_impl);

float log_sum_exp(const float* x, size_t n) noexcept {
  return HWY_DYNAMIC_DISPATCH(log_sum_exp_impl)(x, n);
}

float max_value(const float* x, size_t n) noexcept { return HWY_DYNAMIC_DISPATCH(max_of)(x, n); }

void gelu(float* x, size_t n, bool tanh_form) noexcept {
  HWY_DYNAMIC_DISPATCH(gelu_impl)(x, n, tanh_form);
}

float log_sum_exp_argmax(const float* x, size_t n, int64_t& first_max) noexcept {
  return HWY_DYNAMIC_DISPATCH(log_sum_exp_argmax_impl)(x, n, &first_max);
}

void mask_logits(float* x, const uint32_t* words, size_t n) noexcept {
  static_assert(std::endian::native == std::endian::little, "the bitmask words are read as bytes");
  HWY_DYNAMIC_DISPATCH(mask_logits_impl)(x, reinterpret_cast<const uint8_t*>(words), n);
}

void matmul_nt(const float* x, int64_t ldx, int64_t M, const weight_ref& w, int64_t n, float* y,
               int64_t ldy, bool accumulate, bool act_bf16) {
  if (M <= 0 || n <= 0) return;
  if (dtype_is_quantized(w.type)) {
    matmul_quant(x, ldx, M, w, n, y, ldy, accumulate);
    return;
  }
  if (dtype_is_fp8(w.type)) {
    // The kernel's sums over the codes, then times each output column's scale (1 without
    // row_scale); accumulating calls sum into a scratch first.
    thread_local std::vector<float> part;
    float* out = y;
    int64_t ldo = ldy;
    if (accumulate) {
      part.resize(size_t(M * n));
      out = part.data();
      ldo = n;
    }
    HWY_DYNAMIC_DISPATCH(matmul_nt_impl)(x, ldx, M, &w, n, out, ldo, false, false);
    const float unit = w.type == dtype::f8_e4m3 ? 256.0f : 1.0f;  // the E4M3 kernel's 2^-8
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < n; ++j) {
        const float v = out[m * ldo + j] * ((w.row_scale ? w.row_scale[j] : 1.0f) * unit);
        y[m * ldy + j] = accumulate ? y[m * ldy + j] + v : v;
      }
    return;
  }
  act_bf16 = act_bf16 && w.type == dtype::bf16;
#if COSERVE_BF16DOT
  if (act_bf16 && bf16dot_on().load(std::memory_order_relaxed)) {
    matmul_bf16dot(x, size_t(ldx), size_t(M), static_cast<const uint16_t*>(w.data), size_t(n),
                   size_t(w.cols), y, size_t(ldy), accumulate);
    return;
  }
#endif
  HWY_DYNAMIC_DISPATCH(matmul_nt_impl)(x, ldx, M, &w, n, y, ldy, accumulate, act_bf16);
}

bool bf16_dot_active() noexcept {
  return COSERVE_BF16DOT && bf16dot_on().load(std::memory_order_relaxed);
}

void round_to_bf16_f32(const float* x, int64_t ldx, int64_t M, int64_t K, float* out) noexcept {
  HWY_DYNAMIC_DISPATCH(round_bf16_f32_impl)(x, ldx, M, K, out);
}

void round_to_bf16(const float* x, int64_t ldx, int64_t M, int64_t K, uint16_t* out) noexcept {
#if COSERVE_BF16DOT
  if (bf16_dot_active()) {
    round_rows_bf16dot(x, size_t(ldx), size_t(M), size_t(K), out);
    return;
  }
#endif
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) out[m * K + k] = f32_to_bf16(x[m * ldx + k]);
}

void matmul_nt_bf16(const uint16_t* xb, int64_t M, const weight_ref& w, int64_t n, float* y,
                    int64_t ldy, bool accumulate) {
  if (M <= 0 || n <= 0) return;
#if COSERVE_BF16DOT
  if (bf16_dot_active() && w.type == dtype::bf16) {
    bf16dot_rows(xb, size_t(M), static_cast<const uint16_t*>(w.data), size_t(n), size_t(w.cols), y,
                 size_t(ldy), accumulate);
    return;
  }
#endif
  // Without the AVX512-BF16 kernel: the widening kernel on the (exactly representable) values.
  const int64_t K = w.cols;
  thread_local std::vector<float> xf;
  xf.resize(size_t(M * K));
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = bf16_to_f32(xb[i]);
  // act_bf16 (the values are bf16 already): the same batch-invariant path as matmul_nt's.
  HWY_DYNAMIC_DISPATCH(matmul_nt_impl)
  (xf.data(), K, M, &w, n, y, ldy, accumulate, w.type == dtype::bf16);
}

void prepare_bf16_activations(const float* x, int64_t ldx, int64_t M, int64_t K,
                              float* out) noexcept {
  HWY_DYNAMIC_DISPATCH(prepare_bf16_impl)(x, ldx, M, K, out);
}

void matmul_nt_bf16_prepared(const float* xr, int64_t M, const weight_ref& w, int64_t n, float* y,
                             int64_t ldy, bool accumulate) {
  if (M <= 0 || n <= 0) return;
  HWY_DYNAMIC_DISPATCH(matmul_bf16_prepared_impl)(xr, M, &w, n, y, ldy, accumulate);
}

void attend(const attn_tile& t) { HWY_DYNAMIC_DISPATCH(attend_impl)(&t); }

void attn_merge(int32_t splits, int32_t rows, int32_t head_dim, const float* max, const float* sum,
                const float* acc, float* out, int64_t out_stride, int32_t group) {
  for (int32_t r = 0; r < rows; ++r) {
    float m = -INFINITY;
    for (int32_t s = 0; s < splits; ++s) m = std::max(m, max[s * rows + r]);
    float total = 0.0f;
    float* o = out + int64_t(r / group) * out_stride + int64_t(r % group) * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    for (int32_t s = 0; s < splits; ++s) {
      const float ms = max[s * rows + r];
      if (ms == -INFINITY) continue;  // a split that saw no visible position
      const float w = std::exp(ms - m);
      total += w * sum[s * rows + r];
      const float* a = acc + (int64_t(s) * rows + r) * head_dim;
      for (int32_t j = 0; j < head_dim; ++j) o[j] += w * a[j];
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (int32_t j = 0; j < head_dim; ++j) o[j] *= inv;
  }
}

void store_kv(dtype t, const float* src, void* dst, size_t n) noexcept {
  auto* p = static_cast<unsigned char*>(dst);
  switch (t) {
    case dtype::f32:
      std::memcpy(p, src, n * 4);
      break;
    case dtype::bf16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      break;
    case dtype::f16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      break;
    case dtype::f8_e4m3:
      for (size_t i = 0; i < n; ++i) p[i] = f32_to_e4m3(src[i]);
      break;
    case dtype::f8_e5m2:
      for (size_t i = 0; i < n; ++i) p[i] = f32_to_e5m2(src[i]);
      break;
    default:
      break;  // KV caches are f32, bf16, f16 or fp8
  }
}

std::string cpu_isa() {
  std::string name = hwy::TargetName(HWY_DYNAMIC_DISPATCH(target_bit)());
  return bf16dot_on().load() ? k_bf16dot_name : name;
}

std::vector<std::string> cpu_isa_available() {
  std::vector<std::string> out;
  if (cpu_has_bf16dot()) out.emplace_back(k_bf16dot_name);
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) out.emplace_back(hwy::TargetName(t));
  return out;
}

bool cpu_isa_force(const std::string& name) {
  hwy::SetSupportedTargetsForTest(0);
  if (name.empty() || (name == k_bf16dot_name && cpu_has_bf16dot())) {
    bf16dot_on() = cpu_has_bf16dot();
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    return true;
  }
  bf16dot_on() = false;
  for (int64_t t : hwy::SupportedAndGeneratedTargets())
    if (name == hwy::TargetName(t)) {
      hwy::SetSupportedTargetsForTest(t);
      hwy::GetChosenTarget().Update(hwy::SupportedTargets());
      return true;
    }
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  return false;
}

}  // namespace coserve
#endif  // HWY_ONCE
