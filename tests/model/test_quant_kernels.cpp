// The SIMD integer products (matmul_nt on quantized weights, every instruction set this CPU runs)
// against the scalar reference vec_dot_ref on the same quantized activations, and against the
// dequantized weights times the unquantized activations.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/cpu_kernels.hpp"
#include "model/quant.hpp"
#include "tests/skip.hpp"

namespace {

using namespace coserve;

// Random blocks of type t with finite f16 scales in a sane range.
std::vector<uint8_t> random_blocks(dtype t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t bb = dtype_block_bytes(t);
  const size_t nb = size_t(rows * cols / dtype_block_elems(t));
  std::vector<uint8_t> out(nb * bb);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (auto& b : out) b = uint8_t(byte(rng));
  auto put = [&](uint8_t* p, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
  };
  for (size_t i = 0; i < nb; ++i) {
    uint8_t* p = out.data() + i * bb;
    switch (t) {
      case dtype::q8_0:
      case dtype::q4_0:
      case dtype::q5_0:
      case dtype::iq4_nl:
      case dtype::iq4_xs:
        put(p, scale(rng));
        break;
      case dtype::q4_1:
      case dtype::q5_1:
        put(p, scale(rng));
        put(p + 2, (byte(rng) % 2 ? -16.0f : 16.0f) * scale(rng));
        break;
      case dtype::q4_k:
      case dtype::q5_k:
        put(p, scale(rng));
        put(p + 2, scale(rng));
        break;
      case dtype::q6_k:
        put(p + 208, scale(rng));
        break;
      case dtype::q2_k:
        put(p + 80, scale(rng));
        put(p + 82, scale(rng));
        break;
      case dtype::q3_k:
        put(p + 108, scale(rng));
        break;
      default:
        break;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("quantized matmul matches the scalar integer reference on every instruction set",
          "[quant]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct shape {
    int64_t M, N, K;
  };
  // Below 5 (block-32 types) or 8 rows (K types): up to 4 activation rows per weight row, 2 weight
  // rows per pass from 64 rows where Q8_0 has no VNNI; from there the batched kernels (tiles of
  // 8 / 16 weight rows, partial tiles at N = 9 and 37, 4 activation rows at a time and the rest).
  // K = 288 and 96: the block-32 types only (block counts that are no multiple of 8 or of the
  // 256-value K blocks).
  const shape shapes[] = {{1, 9, 512},   {3, 9, 512},   {6, 9, 512}, {67, 9, 512}, {5, 37, 768},
                          {16, 16, 256}, {67, 37, 512}, {1, 9, 288}, {1, 5, 96},   {2, 5, 96}};
  for (dtype t : {dtype::q8_0, dtype::q4_0, dtype::q4_1, dtype::q5_0, dtype::q5_1, dtype::q2_k,
                  dtype::q3_k, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::iq4_nl, dtype::iq4_xs})
    for (const shape& sh : shapes) {
      const int64_t M = sh.M, N = sh.N, K = sh.K;
      if (K % dtype_block_elems(t) != 0) continue;
      const auto blocks = random_blocks(t, N, K, rng);
      weight_ref w{t, blocks.data(), N, K};
      std::vector<float> x(size_t(M * K));
      for (auto& v : x) v = nd(rng);
      // Reference: the activations quantized as the kernel quantizes them, products in scalar code.
      std::vector<float> ref(size_t(M * N)), deq_ref(size_t(M * N));
      std::vector<float> wf(size_t(N * K));
      dequantize(t, blocks.data(), wf.data(), wf.size());
      for (int64_t m = 0; m < M; ++m) {
        std::vector<q8_block> a0(size_t(K / 32));
        std::vector<q8k_block> ak(size_t(K / 256));
        quantize_q8_0(x.data() + m * K, a0.data(), K);
        quantize_q8_k(x.data() + m * K, ak.data(), K);
        for (int64_t j = 0; j < N; ++j) {
          const void* act = uses_q8k(t) ? static_cast<const void*>(ak.data())
                                        : static_cast<const void*>(a0.data());
          ref[size_t(m * N + j)] = vec_dot_ref(t, w.row(j), act, K);
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += double(x[size_t(m * K + k)]) * wf[size_t(j * K + k)];
          deq_ref[size_t(m * N + j)] = float(s);
        }
      }
      for (const std::string& isa : cpu_isa_available()) {
        INFO(std::string(dtype_name(t))
             << " on " << isa << ", M " << M << ", N " << N << ", K " << K);
        REQUIRE(cpu_isa_force(isa));
        std::vector<float> y(size_t(M * N), 1.0f);
        matmul_nt(x.data(), K, M, w, N, y.data(), N, /*accumulate=*/false);
        for (size_t i = 0; i < y.size(); ++i) {
          // Scale of the products: the fp32 rounding of partial sums (the kernels and the reference
          // add the blocks and the K types' min/offset terms in different orders) is relative to
          // it.
          double scale = 0;
          for (int64_t k = 0; k < K; ++k)
            scale += std::fabs(x[size_t((i / N) * K + k)] * wf[size_t((i % N) * K + k)]);
          CHECK_THAT(y[i], Catch::Matchers::WithinAbs(
                               ref[i], 1e-4 + 1e-5 * std::fabs(ref[i]) + 4e-6 * scale));
          // Activation quantization error: well under 1% of the products' scale.
          CHECK(std::fabs(y[i] - deq_ref[i]) < 0.01 * scale);
        }
        std::vector<float> acc(size_t(M * N), 2.0f);
        matmul_nt(x.data(), K, M, w, N, acc.data(), N, /*accumulate=*/true);
        for (size_t i = 0; i < acc.size(); ++i)
          CHECK_THAT(acc[i],
                     Catch::Matchers::WithinAbs(y[i] + 2.0f, 1e-4 + 1e-5 * std::fabs(y[i])));
      }
      cpu_isa_force("");
    }
}

// Every weight at its type's largest value and every activation at +-127 (one sign per row): the
// int16 sums of the kernels without VNNI are closest to saturating here, and must not.
TEST_CASE("batched quantized products at the largest values do not saturate", "[quant]") {
  std::mt19937 rng(11);
  const int64_t M = 10, N = 20, K = 512;  // M >= lane_gemm_min_rows: the batched kernels
  for (dtype t : {dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::q2_k, dtype::q3_k, dtype::q4_1,
                  dtype::q5_0, dtype::q5_1, dtype::iq4_nl, dtype::iq4_xs}) {
    REQUIRE(M >= lane_gemm_min_rows(t));
    auto blocks = random_blocks(t, N, K, rng);
    const size_t bb = dtype_block_bytes(t);
    for (size_t b = 0; b < blocks.size() / bb; ++b) {
      uint8_t* blk = blocks.data() + b * bb;
      if (t == dtype::q6_k)
        std::memset(blk, 0xFF, 192);  // ql, qh: every value 63
      else if (t == dtype::q5_k)
        std::memset(blk + 16, 0xFF, 160);  // qh, qs: every value 31
      else if (t == dtype::q4_k)
        std::memset(blk + 16, 0xFF, 128);  // qs: every value 15
      else if (t == dtype::q2_k)
        std::memset(blk + 16, 0xFF, 64);  // qs: every value 3
      else if (t == dtype::q3_k)
        std::memset(blk, 0xFF, 96);  // hmask, qs: every value 3 (+ 4)
      else if (t == dtype::q4_1)
        std::memset(blk + 4, 0xFF, 16);  // every value 15
      else if (t == dtype::iq4_nl)
        std::memset(blk + 2, 0, 16);  // every value -127
      else if (t == dtype::iq4_xs)
        std::memset(blk + 2, 0, 134);  // every value -127, every scale -32
      else
        std::memset(blk + (t == dtype::q5_0 ? 2 : 4), 0xFF, 20);  // qh, qs: every value 31
    }
    const weight_ref w{t, blocks.data(), N, K};
    std::vector<float> x(size_t(M * K));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k)
        x[size_t(m * K + k)] = (m % 2 ? -1.0f : 1.0f) * (1.0f + 1e-3f * float(k % 7 == 0));
    std::vector<float> ref(size_t(M * N));
    for (int64_t m = 0; m < M; ++m) {
      std::vector<q8k_block> ak(size_t(K / 256));
      std::vector<q8_block> a0(size_t(K / 32));
      quantize_q8_k(x.data() + m * K, ak.data(), K);
      quantize_q8_0(x.data() + m * K, a0.data(), K);
      const void* act =
          uses_q8k(t) ? static_cast<const void*>(ak.data()) : static_cast<const void*>(a0.data());
      for (int64_t j = 0; j < N; ++j) ref[size_t(m * N + j)] = vec_dot_ref(t, w.row(j), act, K);
    }
    for (const std::string& isa : cpu_isa_available()) {
      INFO(dtype_name(t) << " on " << isa);
      REQUIRE(cpu_isa_force(isa));
      std::vector<float> y(size_t(M * N));
      matmul_nt(x.data(), K, M, w, N, y.data(), N, false);
      for (size_t i = 0; i < y.size(); ++i)
        CHECK_THAT(y[i], Catch::Matchers::WithinAbs(ref[i], 1e-4 + 1e-5 * std::fabs(ref[i])));
    }
    cpu_isa_force("");
  }
}

TEST_CASE("the batched quantized kernels take x86 targets with AVX2 or better", "[quant]") {
  const auto isas = cpu_isa_available();
  if (std::find(isas.begin(), isas.end(), "AVX2") == isas.end())
    COSERVE_SKIP("this CPU has no AVX2");
  std::mt19937 rng(3);
  const int64_t K = 256, N = 8, M = 4;
  std::vector<float> x(size_t(M * K), 0.5f), y(size_t(M * N));
  std::vector<uint8_t> xq(size_t(M) * std::max(quantized_row_bytes(dtype::q4_k, K),
                                               quantized_row_bytes(dtype::q4_0, K)));
  for (const std::string& isa : isas) {
    if (isa != "AVX2" && isa.rfind("AVX3", 0) != 0) continue;
    INFO(isa);
    REQUIRE(cpu_isa_force(isa));
    for (dtype t : {dtype::q4_0, dtype::q4_1, dtype::q5_0, dtype::q5_1, dtype::q2_k, dtype::q3_k,
                    dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::iq4_nl, dtype::iq4_xs}) {
      const auto blocks = random_blocks(t, N, K, rng);
      quantize_rows(t, x.data(), K, M, K, xq.data());
      CHECK(matmul_quantized_lanes(xq.data(), M, weight_ref{t, blocks.data(), N, K}, N, y.data(), N,
                                   false));
    }
  }
  cpu_isa_force("");
}

TEST_CASE("repacked Q4_0 tiles give the unpacked kernels' products on every instruction set",
          "[quant]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct shape {
    int64_t M, N, K;
  };
  // N = 9 and 37: a partial last tile (padding rows); M from 1 to 70: 4 activation rows at a time
  // and the remainder; K = 96 and 288: block counts that are no multiple of 4 or 8.
  const shape shapes[] = {{1, 9, 512},  {2, 16, 96},  {3, 37, 288},  {4, 32, 256},
                          {5, 37, 512}, {8, 16, 768}, {70, 37, 288}, {1, 48, 2048}};
  for (const shape& sh : shapes) {
    const int64_t M = sh.M, N = sh.N, K = sh.K;
    const auto blocks = random_blocks(dtype::q4_0, N, K, rng);
    const weight_ref plain{dtype::q4_0, blocks.data(), N, K};
    const std::vector<unsigned char> tiles = pack_q4_0_tiles(plain);
    REQUIRE(tiles.size() == size_t((N + 15) / 16) * q4_0_tile_bytes(K));
    weight_ref packed = plain;
    packed.packed = tiles.data();
    std::vector<float> x(size_t(M * K));
    for (auto& v : x) v = nd(rng);
    std::vector<uint8_t> xq(size_t(M) * quantized_row_bytes(dtype::q4_0, K));
    quantize_rows(dtype::q4_0, x.data(), K, M, K, xq.data());
    std::vector<float> ref(size_t(M * N));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < N; ++j)
        ref[size_t(m * N + j)] =
            vec_dot_ref(dtype::q4_0, plain.row(j),
                        xq.data() + size_t(m) * quantized_row_bytes(dtype::q4_0, K), K);
    for (const std::string& isa : cpu_isa_available()) {
      INFO("M " << M << ", N " << N << ", K " << K << " on " << isa);
      REQUIRE(cpu_isa_force(isa));
      const bool lanes = isa == "AVX2" || isa.rfind("AVX3", 0) == 0;
      std::vector<float> y(size_t(M * N), 5.0f);
      // The packed kernel exists on the x86 targets with lane kernels; elsewhere it declines.
      CHECK(matmul_quantized_packed(xq.data(), M, packed, N, y.data(), N, false) == lanes);
      matmul_quantized(xq.data(), M, packed, N, y.data(), N, false);
      for (size_t i = 0; i < y.size(); ++i)
        CHECK_THAT(y[i], Catch::Matchers::WithinAbs(ref[i], 1e-4 + 1e-5 * std::fabs(ref[i])));
      if (lanes) {
        // The same integer sums and fp32 steps as the unpacked lane kernel: equal results.
        std::vector<float> u(size_t(M * N));
        REQUIRE(matmul_quantized_lanes(xq.data(), M, plain, N, u.data(), N, false));
        for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == u[i]);
      }
      // A ref that starts at the second tile reads the second tile.
      if (N > 16) {
        weight_ref sub = packed;
        sub.data = plain.row(16);
        sub.rows = N - 16;
        sub.packed = tiles.data() + q4_0_tile_bytes(K);
        std::vector<float> ys(size_t(M * (N - 16)), 1.0f);
        matmul_quantized(xq.data(), M, sub, N - 16, ys.data(), N - 16, true);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t j = 0; j < N - 16; ++j)
            CHECK(ys[size_t(m * (N - 16) + j)] == 1.0f + y[size_t(m * N + 16 + j)]);
      }
    }
    cpu_isa_force("");
  }
}
