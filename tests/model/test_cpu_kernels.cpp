// The SIMD kernels against plain scalar references, on every instruction set this CPU can run
// (dispatch forced to each in turn): matmul for M = 1..64 rows, N and K that are not multiples of
// any vector width, weights in f32 / bf16 / f16 (unaligned too); attention over paged caches of
// each KV dtype, causal prefill tiles and split-context decode merged; log-sum-exp (and its
// argmax).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "model/cpu_kernels.hpp"
#include "model/dtype.hpp"
#include "model/rng.hpp"
#include "tests/skip.hpp"

namespace coserve {
namespace {

// Restores normal dispatch when a test ends, passing or not.
struct isa_guard {
  ~isa_guard() { cpu_isa_force(""); }
};

std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  seq_rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = float(rng.uniform() * 2.0 - 1.0) * scale;
  return v;
}

// Weights of `t` in a byte buffer at byte offset `skew` (1: unaligned for every element type),
// and the fp32 values they hold exactly (fp8: the codes' values times a per-row scale).
struct weights_of {
  std::vector<unsigned char> bytes;
  std::vector<float> exact;
  std::vector<float> scales;  // fp8: per row
  weight_ref ref;
};

weights_of make_weights(dtype t, int64_t rows, int64_t cols, uint64_t seed, size_t skew) {
  weights_of w;
  const size_t n = size_t(rows * cols);
  const auto src = random_floats(n, seed);
  w.bytes.resize(n * dtype_size(t) + skew);
  w.exact.resize(n);
  unsigned char* p = w.bytes.data() + skew;
  for (size_t i = 0; i < n; ++i) {
    if (t == dtype::f32) {
      std::memcpy(p + 4 * i, &src[i], 4);
      w.exact[i] = src[i];
    } else if (dtype_is_fp8(t)) {  // codes of values up to 8, and a scale per row
      p[i] = t == dtype::f8_e4m3 ? f32_to_e4m3(8.0f * src[i]) : f32_to_e5m2(8.0f * src[i]);
      w.exact[i] = t == dtype::f8_e4m3 ? e4m3_to_f32(p[i]) : e5m2_to_f32(p[i]);
    } else {
      const uint16_t h = t == dtype::bf16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
      std::memcpy(p + 2 * i, &h, 2);
      w.exact[i] = t == dtype::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  w.ref = weight_ref{t, p, rows, cols};
  if (dtype_is_fp8(t)) {
    w.scales.resize(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
      w.scales[size_t(r)] = 0.01f * float(1 + r % 13);
      for (int64_t c = 0; c < cols; ++c) w.exact[size_t(r * cols + c)] *= w.scales[size_t(r)];
    }
    w.ref.row_scale = w.scales.data();
  }
  return w;
}

float max_rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  float worst = 0.0f;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]) / (1.0 + std::abs(want[i]));
    worst = std::max(worst, float(err));
  }
  return worst;
}

// act_bf16: the reference rounds x to bf16 (nearest even) where the weights are bf16.
void check_matmul(int64_t M, int64_t N, int64_t K, dtype t, size_t skew, bool accumulate,
                  bool act_bf16 = false) {
  INFO("M " << M << " N " << N << " K " << K << " dtype " << dtype_name(t) << " skew " << skew
            << " acc " << accumulate << " act_bf16 " << act_bf16);
  const auto w = make_weights(t, N, K, uint64_t(M * 131 + N * 7 + K), skew);
  const int64_t ldx = K + 3, ldy = N + 5;  // row strides wider than the rows
  const auto x = random_floats(size_t(M * ldx), uint64_t(K));
  std::vector<float> y = random_floats(size_t(M * ldy), 99);
  std::vector<double> want(y.size());
  for (size_t i = 0; i < y.size(); ++i) want[i] = y[i];
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        float xv = x[size_t(m * ldx + k)];
        if (act_bf16 && t == dtype::bf16) xv = bf16_to_f32(f32_to_bf16(xv));
        s += double(xv) * double(w.exact[size_t(j * K + k)]);
      }
      double& out = want[size_t(m * ldy + j)];
      out = accumulate ? out + s : s;
    }
  matmul_nt(x.data(), ldx, M, w.ref, N, y.data(), ldy, accumulate, act_bf16);
  CHECK(max_rel_err(y, want) <= 2e-5f);  // includes the padding columns: they must be untouched
}

TEST_CASE("matmul kernel equals the scalar product on every instruction set", "[model][kernels]") {
  isa_guard guard;
  const auto isas = cpu_isa_available();
  REQUIRE(!isas.empty());
  for (const std::string& isa : isas) {
    REQUIRE(cpu_isa_force(isa));
    INFO("isa " << isa);
    CHECK(cpu_isa() == isa);
    for (dtype t : {dtype::f32, dtype::bf16, dtype::f16, dtype::f8_e4m3, dtype::f8_e5m2})
      for (bool act : {false, true}) {
        for (int64_t M : {1, 2, 3, 4, 5, 7, 8, 13, 32, 64})
          check_matmul(M, 37, 83, t, 0, false, act);
        check_matmul(3, 1, 1, t, 1, false, act);
        check_matmul(5, 6, 17, t, 1, true, act);
        check_matmul(9, 64, 256, t, 0, true, act);
        check_matmul(64, 19, 1000, t, 1, false, act);
        check_matmul(70, 9, 2048, t, 0, true, act);  // rows span several row blocks
        // From 16 rows the broadcast kernel: several weight panels and a partial one, several K
        // blocks and a partial one, a partial last row tile.
        check_matmul(40, 150, 600, t, 1, false, act);
        // Weight rows in several L2 blocks (about 256 KiB of bf16 each) and a partial one.
        check_matmul(20, 301, 2048, t, 1, true, act);
      }
  }
}

TEST_CASE("round_to_bf16_f32 rounds to nearest even as f32_to_bf16 does, NaN stays NaN",
          "[model][kernels]") {
  isa_guard guard;
  std::vector<float> x = random_floats(1000, 5, 100.0f);
  // Ties (the dropped half exactly 0x8000) both ways, an odd tie that carries into the exponent,
  // infinities, NaNs, signed zero and subnormals.
  for (uint32_t bits :
       {0x3f808000u, 0x3f818000u, 0x3fff8000u, 0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00001u,
        0xffa00000u, 0x7f800001u, 0x80000000u, 0x00000001u, 0x00018000u}) {
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
  }
  const int64_t M = 3, K = int64_t(x.size()) / M - 5;  // rows of K out of row stride K + 5
  for (const std::string& isa : cpu_isa_available()) {
    REQUIRE(cpu_isa_force(isa));
    INFO("isa " << isa);
    std::vector<float> out(size_t(M * K));
    round_to_bf16_f32(x.data(), K + 5, M, K, out.data());
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        const float want = bf16_to_f32(f32_to_bf16(x[size_t(m * (K + 5) + k)]));
        const float got = out[size_t(m * K + k)];
        if (std::isnan(want))
          CHECK(std::isnan(got));
        else
          CHECK(std::memcmp(&want, &got, 4) == 0);
      }
  }
}

// Batch invariance: a row's products do not depend on how many rows share the call, so a
// sequence's logits (and greedy tokens) are the same computed alone, in a batch, or after a
// prefix-cache hit shortened its prefill. Holds for bf16 weights with bf16 activations (the
// serving default) on every instruction set: on the AVX512-BF16 kernel every output is one
// VDPBF16PS chain and one reduction whatever the tile shape; on the widening kernel one weight row
// at a time with the same chains at every row count.
TEST_CASE("bf16 x bf16 products do not depend on the number of rows, on every instruction set",
          "[model][kernels]") {
  isa_guard guard;
  // The second shape spans several blocks of weight rows (about 256 KiB each) and a partial one.
  for (const auto& [N, K, Mmax] :
       {std::tuple<int64_t, int64_t, int64_t>{70, 1030, 100}, {263, 2080, 24}})
    for (const std::string& isa : cpu_isa_available()) {
      const auto w = make_weights(dtype::bf16, N, K, 77, 0);
      const auto x = random_floats(size_t(Mmax * K), 78);
      REQUIRE(cpu_isa_force(isa));
      std::vector<float> all(size_t(Mmax * N));
      matmul_nt(x.data(), K, Mmax, w.ref, N, all.data(), N, false, true);
      for (int64_t M : {1, 2, 3, 5, 8, 9, 16, 20, 33, 64}) {
        if (M > Mmax) continue;
        INFO("isa " << isa << " N " << N << " K " << K << " M " << M);
        for (int64_t m0 : {int64_t(0), Mmax - M}) {
          std::vector<float> y(size_t(M * N));
          matmul_nt(x.data() + m0 * K, K, M, w.ref, N, y.data(), N, false, true);
          CHECK(std::memcmp(y.data(), all.data() + m0 * N, y.size() * sizeof(float)) == 0);
          std::vector<uint16_t> xb(size_t(M * K));
          round_to_bf16(x.data() + m0 * K, K, M, K, xb.data());
          matmul_nt_bf16(xb.data(), M, w.ref, N, y.data(), N, false);
          CHECK(std::memcmp(y.data(), all.data() + m0 * N, y.size() * sizeof(float)) == 0);
        }
      }
    }
}

TEST_CASE(
    "bf16 activations prepared once give matmul_nt's products bit for bit, on every instruction "
    "set",
    "[model][kernels]") {
  isa_guard guard;
  for (const std::string& isa : cpu_isa_available()) {
    REQUIRE(cpu_isa_force(isa));
    if (bf16_dot_active()) continue;  // the AVX512-BF16 kernel has its own entry (matmul_nt_bf16)
    for (const auto& [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 37, 83},
                                  {3, 19, 600},
                                  {5, 64, 256},
                                  {7, 9, 1030},
                                  {13, 150, 600},
                                  {32, 37, 83},
                                  {70, 40, 2048}}) {
      INFO("isa " << isa << " M " << M << " N " << N << " K " << K);
      const auto w = make_weights(dtype::bf16, N, K, uint64_t(M + N + K), 1);
      const int64_t ldx = K + 3;
      const auto x = random_floats(size_t(M * ldx), uint64_t(K) + 5);
      for (bool acc : {false, true}) {
        std::vector<float> want = random_floats(size_t(M * N), 7), got = want;
        matmul_nt(x.data(), ldx, M, w.ref, N, want.data(), N, acc, true);
        std::vector<float> xr(size_t(M * K));
        prepare_bf16_activations(x.data(), ldx, M, K, xr.data());
        // Two calls over column ranges of the weights, as threads split one product.
        const int64_t half = N / 2;
        weight_ref hi = w.ref;
        hi.data = w.ref.row(half);
        hi.rows = N - half;
        matmul_nt_bf16_prepared(xr.data(), M, w.ref, half, got.data(), N, acc);
        matmul_nt_bf16_prepared(xr.data(), M, hi, N - half, got.data() + half, N, acc);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("unknown instruction set names are refused", "[model][kernels]") {
  isa_guard guard;
  CHECK_FALSE(cpu_isa_force("not-an-isa"));
  CHECK(!cpu_isa().empty());
}

// Scalar causal attention over a paged cache, in double.
struct attn_case {
  int32_t head_dim, group, num_kv_heads, block_size, ctx;  // ctx: cached positions after the step
  int32_t num_q;                                           // queries: the last num_q positions
  dtype kv;
};

void check_attention(const attn_case& c, bool split) {
  INFO("d " << c.head_dim << " group " << c.group << " kvh " << c.num_kv_heads << " bs "
            << c.block_size << " ctx " << c.ctx << " q " << c.num_q << " kv " << dtype_name(c.kv)
            << " split " << split);
  const int32_t nh = c.group * c.num_kv_heads, d = c.head_dim;
  const int32_t blocks = (c.ctx + c.block_size - 1) / c.block_size;
  // Block table in reverse order, so pages are not contiguous.
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int32_t b = 0; b < blocks; ++b) table[size_t(b)] = blocks - 1 - b;
  const int64_t slot_stride = int64_t(c.num_kv_heads) * d;
  const size_t slots = size_t(blocks) * size_t(c.block_size);
  const auto kf = random_floats(slots * size_t(slot_stride), 7, 2.0f);
  const auto vf = random_floats(slots * size_t(slot_stride), 8);
  std::vector<unsigned char> kc(kf.size() * dtype_size(c.kv)), vc(vf.size() * dtype_size(c.kv));
  store_kv(c.kv, kf.data(), kc.data(), kf.size());
  store_kv(c.kv, vf.data(), vc.data(), vf.size());
  std::vector<float> kx(kf.size()), vx(vf.size());  // what the cache holds, exactly
  convert_to_f32(c.kv, kc.data(), kx.data(), kx.size());
  convert_to_f32(c.kv, vc.data(), vx.data(), vx.size());

  const int64_t q_stride = int64_t(nh) * d + 11;
  const auto q = random_floats(size_t(c.num_q * q_stride), 9);
  const float scale = 1.0f / std::sqrt(float(d));
  const int32_t q_pos0 = c.ctx - c.num_q;
  auto slot_of = [&](int32_t pos) {
    return int64_t(table[size_t(pos / c.block_size)]) * c.block_size + pos % c.block_size;
  };

  std::vector<double> want(size_t(c.num_q) * size_t(nh) * size_t(d));
  for (int32_t i = 0; i < c.num_q; ++i)
    for (int32_t h = 0; h < nh; ++h) {
      const int32_t kvh = h / c.group, len = q_pos0 + i + 1;
      std::vector<double> s(static_cast<size_t>(len));
      double mx = -INFINITY;
      for (int32_t p = 0; p < len; ++p) {
        double dot = 0.0;
        for (int32_t j = 0; j < d; ++j)
          dot += double(q[size_t(i * q_stride + h * d + j)]) *
                 kx[size_t(slot_of(p) * slot_stride + kvh * d + j)];
        s[size_t(p)] = dot * scale;
        mx = std::max(mx, s[size_t(p)]);
      }
      double sum = 0.0;
      for (double& e : s) sum += e = std::exp(e - mx);
      for (int32_t j = 0; j < d; ++j) {
        double o = 0.0;
        for (int32_t p = 0; p < len; ++p)
          o += s[size_t(p)] / sum * vx[size_t(slot_of(p) * slot_stride + kvh * d + j)];
        want[size_t((i * nh + h) * d + j)] = o;
      }
    }

  const int64_t out_stride = int64_t(nh) * d;
  std::vector<float> out(size_t(c.num_q) * size_t(out_stride), NAN);
  for (int32_t kvh = 0; kvh < c.num_kv_heads; ++kvh) {
    attn_tile t;
    t.q = q.data();
    t.q_stride = q_stride;
    t.out = out.data();
    t.out_stride = out_stride;
    t.k = kc.data();
    t.v = vc.data();
    t.kv_type = c.kv;
    t.slot_stride = slot_stride;
    t.block_table = table.data();
    t.block_size = c.block_size;
    t.head_dim = d;
    t.group = c.group;
    t.kv_head = kvh;
    t.num_q = c.num_q;
    t.q_pos0 = q_pos0;
    t.ctx_begin = 0;
    t.ctx_end = c.ctx;
    t.scale = scale;
    if (!split) {
      attend(t);
      continue;
    }
    // Three uneven splits of the context, merged.
    const int32_t rows = c.group * c.num_q, cuts[4] = {0, c.ctx / 5, c.ctx / 2 + 1, c.ctx};
    std::vector<float> mx(size_t(3 * rows)), sum(size_t(3 * rows)), acc(size_t(3 * rows * d));
    for (int32_t sp = 0; sp < 3; ++sp) {
      t.ctx_begin = cuts[sp];
      t.ctx_end = cuts[sp + 1];
      t.partial_max = mx.data() + sp * rows;
      t.partial_sum = sum.data() + sp * rows;
      t.partial_acc = acc.data() + sp * rows * d;
      attend(t);
    }
    REQUIRE(c.num_q == 1);
    attn_merge(3, rows, d, mx.data(), sum.data(), acc.data(),
               out.data() + int64_t(kvh) * c.group * d, out_stride, c.group);
  }
  CHECK(max_rel_err(out, want) <= 2e-5f);
}

TEST_CASE("attention kernel equals scalar causal attention on every instruction set",
          "[model][kernels]") {
  isa_guard guard;
  for (const std::string& isa : cpu_isa_available()) {
    REQUIRE(cpu_isa_force(isa));
    INFO("isa " << isa);
    for (dtype kv : {dtype::f32, dtype::bf16, dtype::f16, dtype::f8_e4m3, dtype::f8_e5m2}) {
      check_attention({64, 4, 2, 16, 1, 1, kv}, false);    // first token
      check_attention({64, 4, 2, 16, 77, 1, kv}, false);   // decode
      check_attention({64, 4, 2, 16, 77, 1, kv}, true);    // decode, context split
      check_attention({32, 3, 1, 16, 40, 40, kv}, false);  // prefill from position 0
      check_attention({24, 2, 3, 5, 50, 9, kv}, false);    // chunk after a cached prefix, odd sizes
      check_attention({17, 1, 2, 64, 130, 7, kv},
                      false);  // head_dim below and not a multiple of lanes
      check_attention({17, 3, 1, 16, 60, 6, kv},
                      false);  // the same with enough rows to score against K transposed
      check_attention({128, 8, 1, 32, 300, 1, kv}, true);
    }
  }
}

TEST_CASE("log_sum_exp equals the double-precision sum, -inf entries count as zero",
          "[model][kernels]") {
  isa_guard guard;
  for (const std::string& isa : cpu_isa_available()) {
    REQUIRE(cpu_isa_force(isa));
    INFO("isa " << isa);
    for (size_t n : {size_t(1), size_t(7), size_t(50257), size_t(151936)}) {
      auto x = random_floats(n, n, 20.0f);
      if (n > 3) x[2] = -INFINITY;
      double mx = -INFINITY;
      for (float v : x) mx = std::max(mx, double(v));
      double s = 0.0;
      for (float v : x) s += std::exp(double(v) - mx);
      const double want = mx + std::log(s);
      CHECK(std::abs(double(log_sum_exp(x.data(), n)) - want) <= 1e-6 * (1.0 + std::abs(want)));
    }
    const std::vector<float> none(9, -INFINITY);
    CHECK(log_sum_exp(none.data(), none.size()) == -INFINITY);
  }
}

TEST_CASE(
    "log_sum_exp_argmax: log_sum_exp bit for bit and std::max_element's index, on every "
    "instruction set",
    "[model][kernels]") {
  isa_guard guard;
  std::mt19937 g(11);
  for (const std::string& isa : cpu_isa_available()) {
    REQUIRE(cpu_isa_force(isa));
    INFO("isa " << isa);
    for (size_t n : {size_t(1), size_t(5), size_t(16), size_t(33), size_t(50257), size_t(151936)}) {
      for (int variant = 0; variant < 4; ++variant) {
        INFO("n " << n << " variant " << variant);
        // Coarse values (many ties), the maximum repeated late, or in the tail after the vectors.
        std::vector<float> x(n);
        for (float& v : x)
          v = variant == 0 ? float(int(g() % 64)) / 8.0f : float(int(g() % 200001) - 100000) / 1e4f;
        if (variant >= 1 && n > 1) x[n - 1] = 1e3f;
        if (variant == 2 && n > 3) x[n / 2] = 1e3f;
        if (variant == 3) x[g() % n] = -INFINITY;
        int64_t idx = -2;
        const float lse = log_sum_exp_argmax(x.data(), n, idx);
        const float want = log_sum_exp(x.data(), n);
        CHECK(std::memcmp(&lse, &want, sizeof lse) == 0);
        if (std::isfinite(float(*std::max_element(x.begin(), x.end()))))
          CHECK(idx == int64_t(std::max_element(x.begin(), x.end()) - x.begin()));
      }
    }
    const std::vector<float> none(9, -INFINITY);
    int64_t idx = 5;
    CHECK(log_sum_exp_argmax(none.data(), none.size(), idx) == -INFINITY);
    CHECK(idx == -1);
  }
}

TEST_CASE("mask_logits clears exactly the tokens whose bit is clear, on every instruction set",
          "[model][kernels]") {
  isa_guard guard;
  std::mt19937 g(9);
  for (const std::string& isa : cpu_isa_available()) {
    REQUIRE(cpu_isa_force(isa));
    INFO("isa " << isa);
    for (size_t n : {size_t(1), size_t(7), size_t(33), size_t(1000), size_t(50257)}) {
      std::vector<uint32_t> words((n + 31) / 32);
      for (size_t w = 0; w < words.size(); ++w)
        words[w] = w % 5 == 0 ? 0xffffffffu : w % 7 == 0 ? 0u : uint32_t(g());
      std::vector<float> x(n), want(n);
      for (size_t i = 0; i < n; ++i) x[i] = want[i] = float(int(g() % 2001) - 1000) / 100.0f;
      for (size_t i = 0; i < n; ++i)
        if (!((words[i / 32] >> (i % 32)) & 1u)) want[i] = -INFINITY;
      mask_logits(x.data(), words.data(), n);
      for (size_t i = 0; i < n; ++i) {
        INFO("n " << n << " i " << i);
        REQUIRE(x[i] == want[i]);
      }
    }
  }
}

TEST_CASE("gelu: exact (erf) and tanh forms against their scalar formulas") {
  for (size_t n : {size_t(1), size_t(7), size_t(64), size_t(1001)}) {
    std::vector<float> x = random_floats(n, 40 + n, 6.0f);
    x[0] = 0.0f;
    if (n > 2) x[1] = -12.0f, x[2] = 12.0f;
    std::vector<float> exact = x, tanh_form = x;
    gelu(exact.data(), n, false);
    gelu(tanh_form.data(), n, true);
    for (size_t i = 0; i < n; ++i) {
      const double v = x[i];
      const double want_exact = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      const double want_tanh =
          0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
      CHECK(std::abs(exact[i] - want_exact) <= 2e-6 * std::max(1.0, std::abs(v)));
      CHECK(std::abs(tanh_form[i] - want_tanh) <= 2e-6 * std::max(1.0, std::abs(v)));
    }
  }
}

}  // namespace
}  // namespace coserve
