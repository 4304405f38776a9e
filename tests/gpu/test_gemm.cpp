// cuBLASLt GEMM (y = x w^T, bf16 in, fp32 accumulate) against a float reference.
#include <algorithm>
#include <catch2/catch.hpp>

#include "gpu/gemm.hpp"
#include "gpu/kernels.hpp"
#include "tests/gpu/device_helpers.hpp"

using namespace coserve;
using namespace coserve::gpu;
using namespace coserve::gpu::test;
using bf16 = __nv_bfloat16;

TEST_CASE("gemm_runner matches a float reference, bf16 and fp32 outputs, with bias",
          "[gpu][gemm]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  auto gr = gemm_runner::create();
  REQUIRE(gr.ok());
  struct shape {
    int32_t m, n, k;
  };
  for (shape s : {shape{1, 64, 128}, shape{7, 320, 96}, shape{33, 1000, 512}}) {
    auto x = random_bf16(size_t(s.m) * s.k, 1), w = random_bf16(size_t(s.n) * s.k, 2),
         bias = random_bf16(size_t(s.n), 3);
    std::vector<float> ref(size_t(s.m) * s.n);
    for (int32_t i = 0; i < s.m; ++i)
      for (int32_t j = 0; j < s.n; ++j) {
        double acc = 0;
        for (int32_t c = 0; c < s.k; ++c)
          acc += double(bf16_to_f32(x[size_t(i) * s.k + c])) * bf16_to_f32(w[size_t(j) * s.k + c]);
        ref[size_t(i) * s.n + j] = float(acc);
      }
    auto d_x = upload(x), d_w = upload(w), d_b = upload(bias);
    auto d_y = device_buffer::allocate(size_t(s.m) * s.n * 4);
    REQUIRE(d_y.ok());
    REQUIRE(gr->run(d_y->get(), gemm_out::f32, d_x.as<bf16>(), d_w.as<bf16>(), nullptr, s.m, s.n,
                    s.k, nullptr)
                .ok());
    auto y = download<float>(*d_y, ref.size());
    for (size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == Approx(ref[i]).margin(1e-2));
    REQUIRE(gr->run(d_y->get(), gemm_out::bf16, d_x.as<bf16>(), d_w.as<bf16>(), d_b.as<bf16>(), s.m,
                    s.n, s.k, nullptr)
                .ok());
    auto yb = download<uint16_t>(*d_y, ref.size());
    for (size_t i = 0; i < yb.size(); ++i) {
      const float e = ref[i] + bf16_to_f32(bias[i % size_t(s.n)]);
      REQUIRE(bf16_to_f32(yb[i]) == Approx(e).margin(0.02 + 0.01 * std::fabs(e)));
    }
  }
  CHECK_FALSE(gr->run(nullptr, gemm_out::f32, nullptr, nullptr, nullptr, 1, 0, 4, nullptr).ok());
}

TEST_CASE(
    "gemm_runner fp8: E4M3 codes with per-token and per-channel scales, with and without bias",
    "[gpu][gemm][fp8]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  auto gr = gemm_runner::create();
  REQUIRE(gr.ok());
  struct shape {
    int32_t m, n, k;
  };
  for (shape s : {shape{1, 64, 128}, shape{7, 320, 96}, shape{33, 1024, 512}}) {
    CAPTURE(s.m, s.n, s.k);
    std::vector<uint8_t> xq(size_t(s.m) * s.k), wq(size_t(s.n) * s.k);
    for (size_t i = 0; i < xq.size(); ++i)
      xq[i] = uint8_t((i * 131 + 7) % 251) & 0xf7;  // no NaN codes
    for (size_t i = 0; i < wq.size(); ++i) wq[i] = uint8_t((i * 97 + 3) % 241) & 0xf7;
    std::vector<float> xs(size_t(s.m)), ws(size_t(s.n));
    for (int32_t i = 0; i < s.m; ++i) xs[size_t(i)] = 0.001f * float(1 + i % 5);
    for (int32_t j = 0; j < s.n; ++j) ws[size_t(j)] = 0.002f * float(1 + j % 7);
    auto bias = random_bf16(size_t(s.n), 3);
    auto d_xq = upload(xq), d_wq = upload(wq), d_xs = upload(xs), d_ws = upload(ws),
         d_b = upload(bias);
    auto d_y = device_buffer::allocate(size_t(s.m) * s.n * 2);
    REQUIRE(d_y.ok());
    for (bool with_bias : {false, true}) {
      auto ran = gr->run_fp8(d_y->as<bf16>(), d_xq.as<uint8_t>(), d_xs.as<float>(),
                             d_wq.as<uint8_t>(), d_ws.as<float>(),
                             with_bias ? d_b.as<bf16>() : nullptr, s.m, s.n, s.k, nullptr);
      CAPTURE(with_bias);
      INFO((ran.ok() ? std::string() : ran.err().message));
      CHECK(ran.ok());
      if (!ran.ok()) continue;
      auto y = download<uint16_t>(*d_y, size_t(s.m) * s.n);
      for (int32_t i = 0; i < s.m; ++i)
        for (int32_t j = 0; j < s.n; ++j) {
          double acc = 0;
          for (int32_t c = 0; c < s.k; ++c)
            acc +=
                double(e4m3_to_f32(xq[size_t(i) * s.k + c])) * e4m3_to_f32(wq[size_t(j) * s.k + c]);
          const float e = float(acc * xs[size_t(i)] * ws[size_t(j)]) +
                          (with_bias ? bf16_to_f32(bias[size_t(j)]) : 0.0f);
          REQUIRE(bf16_to_f32(y[size_t(i) * s.n + j]) ==
                  Approx(e).margin(0.02 + 0.01 * std::fabs(e)));
        }
    }
  }
  CHECK_FALSE(gr->run_fp8(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 64, 100, nullptr)
                  .ok());  // k % 16
}

namespace {

// launch(y, x, bias, m) for m = 1..k_gemv_max_rows, with and without bias, against a double
// reference: y[i, j] = sum_c x[i, c] * weight(j, c) * scale(j) + bias[j].
template <class Launch, class Weight, class Scale>
void check_gemv(int32_t n, int32_t k, const Launch& launch, const Weight& weight,
                const Scale& scale) {
  const auto x = random_bf16(size_t(k_gemv_max_rows) * k, 11), bias = random_bf16(size_t(n), 3);
  auto d_x = upload(x), d_b = upload(bias);
  auto d_y = device_buffer::allocate(size_t(k_gemv_max_rows) * n * 2);
  REQUIRE(d_y.ok());
  for (int32_t m = 1; m <= k_gemv_max_rows; ++m)
    for (bool with_bias : {false, true}) {
      CAPTURE(n, k, m, with_bias);
      REQUIRE(
          launch(d_y->as<bf16>(), d_x.as<bf16>(), with_bias ? d_b.as<bf16>() : nullptr, m).ok());
      const auto y = download<uint16_t>(*d_y, size_t(m) * n);
      for (int32_t i = 0; i < m; ++i)
        for (int32_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int32_t c = 0; c < k; ++c)
            acc += double(bf16_to_f32(x[size_t(i) * k + c])) * weight(j, c);
          const float e = float(acc * scale(j)) + (with_bias ? bf16_to_f32(bias[size_t(j)]) : 0.0f);
          REQUIRE(bf16_to_f32(y[size_t(i) * n + j]) ==
                  Approx(e).margin(0.02 + 0.01 * std::fabs(e)));
        }
    }
}

}  // namespace

TEST_CASE(
    "fp8 GEMV (W8A16): E4M3 weights with per-channel scales against bf16 activations, 1 to 8 rows",
    "[gpu][gemm][fp8]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  struct shape {
    int32_t n, k;
  };
  // n not a multiple of a block's 16 rows; k from one 16-byte chunk per row to many per lane.
  for (shape s : {shape{1, 16}, shape{64, 128}, shape{333, 1040}, shape{1000, 4096}}) {
    std::vector<uint8_t> wq(size_t(s.n) * s.k);
    for (size_t i = 0; i < wq.size(); ++i)
      wq[i] = uint8_t((i * 97 + 3) % 241) & 0xf7;  // no NaN codes
    std::vector<float> ws(size_t(s.n));
    for (int32_t j = 0; j < s.n; ++j) ws[size_t(j)] = 0.002f * float(1 + j % 7);
    auto d_wq = upload(wq), d_ws = upload(ws);
    check_gemv(
        s.n, s.k,
        [&](bf16* y, const bf16* x, const bf16* bias, int32_t m) {
          return launch_fp8_gemv(y, x, d_wq.as<uint8_t>(), d_ws.as<float>(), bias, m, s.n, s.k,
                                 nullptr);
        },
        [&](int32_t j, int32_t c) { return double(e4m3_to_f32(wq[size_t(j) * s.k + c])); },
        [&](int32_t j) { return double(ws[size_t(j)]); });
  }
  // Rows past the GEMV's range and k not a multiple of 16 are refused.
  CHECK_FALSE(launch_fp8_gemv(nullptr, nullptr, nullptr, nullptr, nullptr, k_gemv_max_rows + 1, 64,
                              128, nullptr)
                  .ok());
  CHECK_FALSE(
      launch_fp8_gemv(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 64, 100, nullptr).ok());
}

TEST_CASE("bf16 GEMV: 1 to 8 rows against a double reference, with and without bias",
          "[gpu][gemm]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  struct shape {
    int32_t n, k;
  };
  for (shape s : {shape{1, 8}, shape{64, 120}, shape{333, 1032}, shape{1000, 4096}}) {
    const auto w = random_bf16(size_t(s.n) * s.k, 5);
    auto d_w = upload(w);
    check_gemv(
        s.n, s.k,
        [&](bf16* y, const bf16* x, const bf16* bias, int32_t m) {
          return launch_bf16_gemv(y, x, d_w.as<bf16>(), bias, m, s.n, s.k, nullptr);
        },
        [&](int32_t j, int32_t c) { return double(bf16_to_f32(w[size_t(j) * s.k + c])); },
        [](int32_t) { return 1.0; });
  }
  CHECK_FALSE(launch_bf16_gemv(nullptr, nullptr, nullptr, nullptr, 0, 64, 128, nullptr).ok());
  CHECK_FALSE(
      launch_bf16_gemv(nullptr, nullptr, nullptr, nullptr, 1, 64, 100, nullptr).ok());  // k % 8
}

TEST_CASE("gemm_runner keeps at most max_plans plans and rebuilds evicted ones correctly",
          "[gpu][gemm]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  CHECK_FALSE(gemm_runner::create(0).ok());
  auto gr = gemm_runner::create(2);
  REQUIRE(gr.ok());
  CHECK(gr->max_plans() == 2);
  const int32_t n = 64, k = 96, max_m = 9;
  auto x = random_bf16(size_t(max_m) * k, 4), w = random_bf16(size_t(n) * k, 5);
  auto d_x = upload(x), d_w = upload(w);
  auto d_y = device_buffer::allocate(size_t(max_m) * n * 4);
  REQUIRE(d_y.ok());
  // m cycles through more shapes than the cache holds, so every pass rebuilds evicted plans.
  for (int pass = 0; pass < 2; ++pass)
    for (int32_t m = 1; m <= max_m; m += 2) {
      CAPTURE(pass, m);
      REQUIRE(gr->run(d_y->get(), gemm_out::f32, d_x.as<bf16>(), d_w.as<bf16>(), nullptr, m, n, k,
                      nullptr)
                  .ok());
      CHECK(gr->num_plans() == size_t(std::min<int32_t>(2, pass * 5 + (m + 1) / 2)));
      auto y = download<float>(*d_y, size_t(m) * n);
      for (int32_t i = 0; i < m; ++i)
        for (int32_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int32_t c = 0; c < k; ++c)
            acc += double(bf16_to_f32(x[size_t(i) * k + c])) * bf16_to_f32(w[size_t(j) * k + c]);
          REQUIRE(y[size_t(i) * n + j] == Approx(acc).margin(1e-2));
        }
    }
}

TEST_CASE(
    "gemm_runner tune: the timed choices per row bucket still match the float reference, split-K "
    "included",
    "[gpu][gemm]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  auto gr = gemm_runner::create();
  REQUIRE(gr.ok());
  // K large enough for split-K candidates (K / splits >= 256); outputs bf16 with bias and fp32.
  const int32_t max_m = 100, n = 384, k = 4096;
  auto x = random_bf16(size_t(max_m) * k, 11), w = random_bf16(size_t(n) * k, 12),
       bias = random_bf16(size_t(n), 13);
  auto d_x = upload(x), d_w = upload(w), d_b = upload(bias);
  auto d_y = device_buffer::allocate(size_t(max_m) * n * 4);
  REQUIRE(d_y.ok());
  gemm_runner::shape with_bias;
  with_bias.n = n;
  with_bias.k = k;
  with_bias.w = d_w.get();
  with_bias.x = d_x.get();
  with_bias.y = d_y->get();
  with_bias.bias = d_b.as<bf16>();
  with_bias.max_m = max_m;
  gemm_runner::shape f32 = with_bias;
  f32.out = gemm_out::f32;
  f32.bias = nullptr;
  auto rep = gr->tune({with_bias, f32}, nullptr);
  REQUIRE(rep.ok());
  INFO(rep->shapes << " pairs, " << rep->candidates << " candidates, " << rep->not_first
                   << " not the first");
  CHECK(rep->shapes == 2 * 8);  // buckets 1, 2, 4, ..., 64, 100
  CHECK(rep->candidates >= rep->shapes);
  for (int32_t m : {1, 3, 8, 33, 64, 65, 100}) {  // bucket edges and rows between them
    std::vector<float> ref(size_t(m) * n);
    for (int32_t i = 0; i < m; ++i)
      for (int32_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int32_t c = 0; c < k; ++c)
          acc += double(bf16_to_f32(x[size_t(i) * k + c])) * bf16_to_f32(w[size_t(j) * k + c]);
        ref[size_t(i) * n + j] = float(acc);
      }
    REQUIRE(gr->run(d_y->get(), gemm_out::f32, d_x.as<bf16>(), d_w.as<bf16>(), nullptr, m, n, k,
                    nullptr)
                .ok());
    auto y = download<float>(*d_y, ref.size());
    for (size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == Approx(ref[i]).margin(5e-2));
    REQUIRE(gr->run(d_y->get(), gemm_out::bf16, d_x.as<bf16>(), d_w.as<bf16>(), d_b.as<bf16>(), m,
                    n, k, nullptr)
                .ok());
    auto yb = download<uint16_t>(*d_y, ref.size());
    for (size_t i = 0; i < yb.size(); ++i) {
      const float e = ref[i] + bf16_to_f32(bias[i % size_t(n)]);
      REQUIRE(bf16_to_f32(yb[i]) == Approx(e).margin(0.05 + 0.01 * std::fabs(e)));
    }
  }
}
