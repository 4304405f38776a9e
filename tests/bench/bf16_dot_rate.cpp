// Two facts behind the AVX512-BF16 matmul kernel's design (docs/benchmarks/cpu.md), on this CPU:
//   1. Issue rates in a register-only loop (12 independent chains, one core): 512-bit fp32 FMA,
//      256-bit fp32 FMA, and VDPBF16PS (32 bf16 products into 16 fp32 sums), as G instructions/s
//      and G multiply-adds/s.
//   2. Whether VDPBF16PS equals two fp32 FMAs per lane — element 2i+1's product first, then 2i's —
//      under MXCSR DAZ+FTZ, bit for bit, on random lanes: normal values with cancellation, values
//      over the whole exponent range, and tiny values (bf16 denormals, products below fp32's
//      normal range).
// Prints one JSON line per measurement; {"skipped": ...} without AVX512-BF16.
// Built and run by scripts/bench-bf16-dot.
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

namespace {

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

constexpr int k_chains = 12;

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

BF16_TARGET float fma512(long n) {
  __m512 a[k_chains];
  for (int i = 0; i < k_chains; ++i) a[i] = _mm512_set1_ps(1.0f + float(i) * 1e-7f);
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < n; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < k_chains; ++j) a[j] = _mm512_fmadd_ps(a[j], b, c);
    __asm__ volatile(""
                     : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]),
                       "+v"(a[6]), "+v"(a[7]), "+v"(a[8]), "+v"(a[9]), "+v"(a[10]), "+v"(a[11]));
  }
  __m512 s = a[0];
  for (int j = 1; j < k_chains; ++j) s = _mm512_add_ps(s, a[j]);
  return _mm512_reduce_add_ps(s);
}

BF16_TARGET float fma256(long n) {
  __m256 a[k_chains];
  for (int i = 0; i < k_chains; ++i) a[i] = _mm256_set1_ps(1.0f + float(i) * 1e-7f);
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < n; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < k_chains; ++j) a[j] = _mm256_fmadd_ps(a[j], b, c);
    __asm__ volatile(""
                     : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]),
                       "+v"(a[6]), "+v"(a[7]), "+v"(a[8]), "+v"(a[9]), "+v"(a[10]), "+v"(a[11]));
  }
  __m256 s = a[0];
  for (int j = 1; j < k_chains; ++j) s = _mm256_add_ps(s, a[j]);
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  return t[0];
}

BF16_TARGET float dpbf16(long n) {
  __m512 a[k_chains];
  for (int i = 0; i < k_chains; ++i) a[i] = _mm512_set1_ps(1.0f + float(i));
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3f803f80),
                 c = (__m512bh)_mm512_set1_epi32(0x33d633d6);
  for (long i = 0; i < n; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < k_chains; ++j) a[j] = _mm512_dpbf16_ps(a[j], b, c);
    __asm__ volatile(""
                     : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]),
                       "+v"(a[6]), "+v"(a[7]), "+v"(a[8]), "+v"(a[9]), "+v"(a[10]), "+v"(a[11]));
  }
  __m512 s = a[0];
  for (int j = 1; j < k_chains; ++j) s = _mm512_add_ps(s, a[j]);
  return _mm512_reduce_add_ps(s);
}

uint16_t random_bf16(std::mt19937_64& rng, int exp_lo, int exp_hi) {
  const uint64_t r = rng();
  const auto e = uint16_t(exp_lo + int(r % uint64_t(exp_hi - exp_lo + 1)));
  return uint16_t(((r >> 8) & 1u) << 15 | uint32_t(e) << 7 | ((r >> 9) & 0x7fu));
}

// Lanes where VDPBF16PS and the two FMAs differ, out of 16 * iters.
BF16_TARGET long emulation_mismatches(uint64_t seed, long iters, int a_lo, int a_hi, int b_lo,
                                      int b_hi, int c_lo, int c_hi) {
  std::mt19937_64 rng(seed);
  const __m512i hi = _mm512_set1_epi32(int(0xffff0000u));
  long bad = 0;
  for (long it = 0; it < iters; ++it) {
    alignas(64) uint16_t a[32], b[32];
    alignas(64) float c[16];
    for (int i = 0; i < 32; ++i) {
      a[i] = random_bf16(rng, a_lo, a_hi);
      b[i] = random_bf16(rng, b_lo, b_hi);
    }
    for (int i = 0; i < 16; ++i) {
      const uint32_t bits =
          uint32_t(random_bf16(rng, c_lo, c_hi)) << 16 | uint32_t(rng() & 0xffffu);
      std::memcpy(&c[i], &bits, 4);
    }
    const __m512 acc = _mm512_load_ps(c);
    const __m512i va = _mm512_load_si512(a), vb = _mm512_load_si512(b);
    const __m512 d = _mm512_dpbf16_ps(acc, (__m512bh)va, (__m512bh)vb);
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);  // FTZ | DAZ
    __m512 f = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(va, hi)),
                               _mm512_castsi512_ps(_mm512_and_si512(vb, hi)), acc);
    f = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(va, 16)),
                        _mm512_castsi512_ps(_mm512_slli_epi32(vb, 16)), f);
    _mm_setcsr(csr);
    bad += __builtin_popcount(
        _mm512_cmpneq_epi32_mask(_mm512_castps_si512(d), _mm512_castps_si512(f)));
  }
  return bad;
}

}  // namespace

int main() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) {
    std::printf("{\"skipped\":\"no AVX512-BF16 on this CPU\"}\n");
    return 0;
  }
  const long n = 50'000'000;
  (void)fma512(n / 10);  // warm-up (clock ramp)
  for (int rep = 0; rep < 2; ++rep) {
    volatile float sink = 0;
    const double t512 = seconds([&] { sink = fma512(n); });
    const double t256 = seconds([&] { sink = fma256(n); });
    const double tdp = seconds([&] { sink = dpbf16(n); });
    (void)sink;
    const double ops = double(k_chains) * double(n) * 1e-9;
    std::printf(
        "{\"rates\":{\"fma512_ginst_s\":%.2f,\"fma512_gmac_s\":%.1f,\"fma256_ginst_s\":%.2f,"
        "\"fma256_gmac_s\":%.1f,\"vdpbf16ps_ginst_s\":%.2f,\"vdpbf16ps_gmac_s\":%.1f}}\n",
        ops / t512, ops / t512 * 16, ops / t256, ops / t256 * 8, ops / tdp, ops / tdp * 32);
  }
  const long iters = 1'000'000;
  struct range {
    const char* name;
    int a_lo, a_hi, b_lo, b_hi, c_lo, c_hi;
  };
  for (const range& r : {range{"normal, cancelling", 120, 135, 120, 135, 110, 140},
                         range{"whole exponent range", 1, 254, 1, 254, 1, 254},
                         range{"tiny: denormals, flushed products", 0, 40, 60, 100, 0, 30}}) {
    const long bad = emulation_mismatches(7, iters, r.a_lo, r.a_hi, r.b_lo, r.b_hi, r.c_lo, r.c_hi);
    std::printf("{\"emulation\":\"%s\",\"lanes\":%ld,\"mismatches\":%ld}\n", r.name, iters * 16,
                bad);
  }
}
