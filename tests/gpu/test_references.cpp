// The CPU references the kernels are checked against, checked themselves against closed forms.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "gpu/reference/attention_ref.hpp"
#include "gpu/reference/elementwise_ref.hpp"
#include "gpu/reference/rope_kv_ref.hpp"
#include "gpu/reference/sampling_ref.hpp"
#include "gpu/rope_freqs.hpp"
#include "model/rope.hpp"

using namespace coserve;
using namespace coserve::gpu;

TEST_CASE("rope inverse frequencies: default and llama3", "[gpu_host][reference]") {
  rope_params d;
  d.theta = 10000.0f;
  d.rotary_dim = 64;
  auto f = rope_inv_freq(d);
  REQUIRE(f.size() == 32);
  CHECK(f[0] == Approx(1.0f));
  CHECK(f[16] == Approx(std::pow(10000.0, -0.5)).epsilon(1e-6));

  rope_params l;  // Llama 3.1 8B
  l.theta = 500000.0f;
  l.rotary_dim = 128;
  l.llama3 = true;
  auto g = rope_inv_freq(l);
  rope_params plain = l;
  plain.llama3 = false;
  auto h = rope_inv_freq(plain);
  CHECK(g[0] == Approx(h[0]));             // high frequency (short wavelength): unchanged
  CHECK(g[63] == Approx(h[63] / 8.0f));    // low frequency: divided by factor
  for (size_t i = 0; i < g.size(); ++i) {  // in between: between the two
    CHECK(g[i] <= h[i] * 1.000001f);
    CHECK(g[i] >= h[i] / 8.0f * 0.999999f);
  }
}

TEST_CASE(
    "rope inverse frequencies: the executor's (model/rope.cpp) equal the kernel tests' closed form",
    "[gpu_host][reference]") {
  // The CUDA executor uploads coserve::rope_inv_freq(config); the kernel tests build theirs from
  // rope_params. Default and llama3 must agree.
  for (bool llama3 : {false, true}) {
    model_config c;
    c.head_dim = 128;
    c.rope_theta = 500000.0f;
    if (llama3) {
      c.rope_scaling.kind = rope_kind::llama3;
      c.rope_scaling.original_max_position_embeddings = 8192;
      c.rope_scaling.factor = 8.0f;  // Llama 3.1's, rope_params' default
    }
    rope_params p;
    p.theta = c.rope_theta;
    p.rotary_dim = 128;
    p.llama3 = llama3;
    const auto a = coserve::rope_inv_freq(c), b = gpu::rope_inv_freq(p);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-5));
  }
}

TEST_CASE("rmsnorm and silu references", "[gpu_host][reference]") {
  std::vector<uint16_t> x{f32_to_bf16(3.0f), f32_to_bf16(4.0f)},
      res{f32_to_bf16(1.0f), f32_to_bf16(-2.0f)};
  std::vector<uint16_t> w{f32_to_bf16(1.0f), f32_to_bf16(2.0f)};
  auto out = ref::rmsnorm_ref(x, &res, w, nullptr, 1, 2, 0.0f, true);
  // z = (4, 2), rms = sqrt(10)
  CHECK(bf16_to_f32(res[0]) == 4.0f);
  CHECK(bf16_to_f32(res[1]) == 2.0f);
  CHECK(bf16_to_f32(out[0]) == Approx(4.0 / std::sqrt(10.0)).epsilon(1e-2));
  CHECK(bf16_to_f32(out[1]) == Approx(2.0 * 2.0 / std::sqrt(10.0)).epsilon(1e-2));
  std::vector<uint16_t> gu{f32_to_bf16(0.0f), f32_to_bf16(2.0f), f32_to_bf16(5.0f),
                           f32_to_bf16(3.0f)};
  auto a = ref::silu_mul_ref(gu, 1, 2);
  CHECK(bf16_to_f32(a[0]) == 0.0f);
  CHECK(bf16_to_f32(a[1]) == Approx(2.0 / (1.0 + std::exp(-2.0)) * 3.0).epsilon(1e-2));
}

TEST_CASE("q/k head rmsnorm reference: each q and k head over head_dim, v untouched",
          "[gpu_host][reference]") {
  // One token, one q head, one kv head, head_dim 2: q (3, 4), k (0, 2), v (5, 6).
  std::vector<uint16_t> qkv;
  for (float f : {3.0f, 4.0f, 0.0f, 2.0f, 5.0f, 6.0f}) qkv.push_back(f32_to_bf16(f));
  std::vector<uint16_t> qw{f32_to_bf16(1.0f), f32_to_bf16(2.0f)},
      kw{f32_to_bf16(0.5f), f32_to_bf16(1.0f)};
  ref::head_rmsnorm_ref(qkv, qw, kw, 1, 1, 1, 2, 0.0f);
  const double rq = std::sqrt(12.5), rk = std::sqrt(2.0);
  CHECK(bf16_to_f32(qkv[0]) == Approx(3.0 / rq).epsilon(1e-2));
  CHECK(bf16_to_f32(qkv[1]) == Approx(2.0 * 4.0 / rq).epsilon(1e-2));
  CHECK(bf16_to_f32(qkv[2]) == 0.0f);
  CHECK(bf16_to_f32(qkv[3]) == Approx(2.0 / rk).epsilon(1e-2));
  CHECK(bf16_to_f32(qkv[4]) == 5.0f);
  CHECK(bf16_to_f32(qkv[5]) == 6.0f);
}

TEST_CASE("attention reference: one key returns its value, equal keys average",
          "[gpu_host][reference]") {
  const int32_t D = 4;
  batch_plan p;
  p.num_tokens = 2;
  p.num_seqs = 1;
  p.cu_seqlens_q = {0, 2};
  p.kv_lens = {2};
  p.block_table_offsets = {0, 1};
  p.block_tables = {1};
  std::vector<uint16_t> q(2 * D, f32_to_bf16(1.0f));
  std::vector<uint16_t> k(2 * 2 * D, f32_to_bf16(0.5f)), v(2 * 2 * D, 0);
  for (int c = 0; c < D; ++c) {
    v[size_t(2 * D + c)] = f32_to_bf16(2.0f);  // block 1, slot 0
    v[size_t(3 * D + c)] = f32_to_bf16(4.0f);  // block 1, slot 1
  }
  auto o = ref::attention_ref(q, D, k, v, p, 1, 1, D, 2, 0.5f);
  CHECK(o[0] == Approx(2.0f));          // query 0 sees key 0 only
  CHECK(o[size_t(D)] == Approx(3.0f));  // query 1 sees both, equal scores
}

namespace {
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> x;
  for (double p : probs) x.push_back(float(std::log(p)));
  return x;
}
}  // namespace

TEST_CASE("sampling reference: greedy, filters and frequencies",
          "[gpu_host][reference][sampling]") {
  auto x = logits_of({0.1, 0.5, 0.3, 0.1});
  sample_row_params p{0.0f, 1.0f, 0.0f, 0, 1, 0};
  auto g = ref::sample_ref(x.data(), 4, p);
  CHECK(g.token == 1);
  CHECK(g.logprob == Approx(std::log(0.5)).epsilon(1e-5));
  CHECK(g.top.empty());
  // Top logprobs: by probability, the lower id first among equal ones, at most top_n.
  p.top_n = 3;
  g = ref::sample_ref(x.data(), 4, p);
  REQUIRE(g.top.size() == 3);
  CHECK(g.top[0].first == 1);
  CHECK(g.top[1].first == 2);
  CHECK(g.top[2].first == 0);  // 0 and 3 tie at 0.1
  CHECK(g.top[2].second == Approx(std::log(0.1)).epsilon(1e-5));
  sample_row_params one_kept{1.0f, 1.0f, 0.0f, 1, 3, 0, 4};  // top-k 1 keeps one: a shorter list
  CHECK(ref::sample_ref(x.data(), 4, one_kept).top.size() == 1);

  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    sample_row_params q{1.0f, 1.0f, 0.0f, 0, 42, uint64_t(i)};
    counts[ref::sample_ref(x.data(), 4, q).token]++;
  }
  CHECK(counts[1] / double(n) == Approx(0.5).margin(0.02));
  CHECK(counts[2] / double(n) == Approx(0.3).margin(0.02));
  CHECK(counts[0] / double(n) == Approx(0.1).margin(0.02));

  counts.clear();
  for (int i = 0; i < 2000; ++i) {
    sample_row_params q{1.0f, 0.7f, 0.0f, 0, 7, uint64_t(i)};  // nucleus: {1, 2} (0.8 >= 0.7)
    counts[ref::sample_ref(x.data(), 4, q).token]++;
  }
  CHECK(counts[0] == 0);
  CHECK(counts[3] == 0);
  CHECK(counts[1] > 0);
  CHECK(counts[2] > 0);

  for (int i = 0; i < 200; ++i) {
    sample_row_params k1{1.0f, 1.0f, 0.0f, 1, 9, uint64_t(i)};
    CHECK(ref::sample_ref(x.data(), 4, k1).token == 1);
    sample_row_params mp{1.0f, 1.0f, 0.7f, 0, 9, uint64_t(i)};  // 0.3 < 0.7 * 0.5
    CHECK(ref::sample_ref(x.data(), 4, mp).token == 1);
  }
  sample_row_params s1{0.8f, 0.9f, 0.0f, 3, 1234, 5};
  CHECK(ref::sample_ref(x.data(), 4, s1).token == ref::sample_ref(x.data(), 4, s1).token);
}

TEST_CASE("dummy fill reference is bounded and seed dependent", "[gpu_host][reference]") {
  auto a = ref::fill_random_ref(1000, 0.02f, 1), b = ref::fill_random_ref(1000, 0.02f, 2);
  int diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(std::fabs(bf16_to_f32(a[i])) <= 0.0201f);
    diff += a[i] != b[i];
  }
  CHECK(diff > 900);
}
