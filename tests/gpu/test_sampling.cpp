// Device sampling against the sort-based CPU reference (same counter-based uniforms).
#include <catch2/catch.hpp>

#include <random>

#include "gpu/kernels.hpp"
#include "gpu/reference/sampling_ref.hpp"
#include "model/structured_output.hpp"
#include "tests/gpu/device_helpers.hpp"

using namespace coserve;
using namespace coserve::gpu;
using namespace coserve::gpu::test;

TEST_CASE("sampling kernel matches the reference", "[gpu][sampling]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  for (int32_t vocab : {1000, 32000, 128256}) {
    std::mt19937 g{static_cast<uint32_t>(vocab)};
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<sample_row_params> params{
        {0.0f, 1.0f, 0.0f, 0, 1, 0},      {1.0f, 1.0f, 0.0f, 0, 2, 3},  {0.7f, 1.0f, 0.0f, 50, 3, 1},
        {1.0f, 0.9f, 0.0f, 0, 4, 9},      {1.3f, 0.8f, 0.0f, 20, 5, 2}, {1.0f, 1.0f, 0.05f, 0, 6, 4},
        {0.6f, 0.95f, 0.02f, 100, 7, 11}, {1.0f, 1.0f, 0.0f, 1, 8, 0},
    };
    const int32_t rows = int32_t(params.size());
    std::vector<float> logits(size_t(rows) * size_t(vocab));
    for (auto& x : logits) x = nd(g);
    auto d_logits = upload(logits), d_params = upload(params);
    auto d_tok = device_buffer::allocate(size_t(rows) * 4), d_lp = device_buffer::allocate(size_t(rows) * 4);
    REQUIRE((d_tok.ok() && d_lp.ok()));
    REQUIRE(launch_sample(d_tok->as<int32_t>(), d_lp->as<float>(), d_logits.as<float>(),
                          d_params.as<sample_row_params>(), rows, vocab, nullptr).ok());
    auto tok = download<int32_t>(*d_tok, size_t(rows));
    auto lp = download<float>(*d_lp, size_t(rows));
    for (int32_t r = 0; r < rows; ++r) {
      auto e = ref::sample_ref(logits.data() + size_t(r) * size_t(vocab), vocab, params[size_t(r)]);
      INFO("vocab " << vocab << " row " << r);
      CHECK(tok[size_t(r)] == e.token);
      CHECK(lp[size_t(r)] == Approx(e.logprob).margin(1e-3));
    }
  }
}

TEST_CASE("sampling kernel: seeded draws are reproducible, counters change them", "[gpu][sampling]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const int32_t vocab = 50, rows = 256;
  std::vector<float> logits(size_t(rows) * vocab, 0.0f);  // uniform distribution
  std::vector<sample_row_params> params;
  for (int32_t r = 0; r < rows; ++r) params.push_back({1.0f, 1.0f, 0.0f, 0, 123, uint64_t(r)});
  auto d_logits = upload(logits), d_params = upload(params);
  auto d_tok = device_buffer::allocate(size_t(rows) * 4), d_lp = device_buffer::allocate(size_t(rows) * 4);
  REQUIRE((d_tok.ok() && d_lp.ok()));
  REQUIRE(launch_sample(d_tok->as<int32_t>(), d_lp->as<float>(), d_logits.as<float>(), d_params.as<sample_row_params>(),
                        rows, vocab, nullptr).ok());
  auto a = download<int32_t>(*d_tok, size_t(rows));
  REQUIRE(launch_sample(d_tok->as<int32_t>(), d_lp->as<float>(), d_logits.as<float>(), d_params.as<sample_row_params>(),
                        rows, vocab, nullptr).ok());
  auto b = download<int32_t>(*d_tok, size_t(rows));
  CHECK(a == b);
  std::vector<int> seen(size_t(vocab), 0);
  for (int32_t t : a) seen[size_t(t)]++;
  int distinct = 0;
  for (int s : seen) distinct += s > 0;
  CHECK(distinct > 30);  // 256 uniform draws over 50 ids hit most of them
}

TEST_CASE("logit edits kernel and sampling over masked rows", "[gpu][sampling]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const int32_t vocab = 5000, rows = 3;
  std::mt19937 g{11};
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits(size_t(rows) * vocab);
  for (auto& x : logits) x = nd(g);
  std::vector<logit_edit> edits;
  for (int32_t r = 0; r < rows; ++r)
    for (int32_t t = r; t < vocab; t += 97)
      edits.push_back({r, t, 0.5f * float(t % 3), 1.3f, 0.2f * float(t % 2), t % 5 == 0 ? 1 : 0});
  auto d_logits = upload(logits), d_edits = upload(edits);
  REQUIRE(launch_logit_edits(d_logits.as<float>(), d_edits.as<logit_edit>(), int32_t(edits.size()), vocab, nullptr).ok());
  auto got = download<float>(d_logits, logits.size());
  for (const auto& e : edits) {
    auto& l = logits[size_t(e.row) * vocab + size_t(e.token)];
    l = apply_logit_edit(l, e);
  }
  CHECK(got == logits);
  std::vector<sample_row_params> params{{0.0f, 1.0f, 0.0f, 0, 1, 0}, {1.0f, 0.9f, 0.0f, 0, 2, 1}, {0.7f, 1.0f, 0.1f, 40, 3, 2}};
  auto d_params = upload(params);
  auto d_tok = device_buffer::allocate(size_t(rows) * 4), d_lp = device_buffer::allocate(size_t(rows) * 4);
  REQUIRE((d_tok.ok() && d_lp.ok()));
  REQUIRE(launch_sample(d_tok->as<int32_t>(), d_lp->as<float>(), d_logits.as<float>(), d_params.as<sample_row_params>(),
                        rows, vocab, nullptr).ok());
  auto tok = download<int32_t>(*d_tok, size_t(rows));
  auto lp = download<float>(*d_lp, size_t(rows));
  for (int32_t r = 0; r < rows; ++r) {
    auto e = ref::sample_ref(logits.data() + size_t(r) * vocab, vocab, params[size_t(r)]);
    CHECK(tok[size_t(r)] == e.token);
    CHECK(lp[size_t(r)] == Approx(e.logprob).margin(1e-3));
    CHECK(std::isfinite(logits[size_t(r) * vocab + size_t(tok[size_t(r)])]));
  }
}

TEST_CASE("token bitmask kernel matches apply_grammar_mask", "[gpu][sampling][structured]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  for (int32_t vocab : {1000, 50257, 151936}) {
    std::mt19937 g{static_cast<uint32_t>(vocab)};
    std::normal_distribution<float> nd(0.0f, 3.0f);
    const int32_t rows = 4, words = grammar_mask_words(vocab);
    std::vector<float> logits(size_t(rows) * size_t(vocab));
    for (auto& x : logits) x = nd(g);
    // Masked rows 3 and 1 (row 0 and 2 untouched): mixed words, all-set words, all-clear words.
    const std::vector<int32_t> masked_rows{3, 1};
    std::vector<uint32_t> masks(masked_rows.size() * size_t(words));
    for (size_t i = 0; i < masks.size(); ++i) masks[i] = i % 7 == 0 ? 0xffffffffu : i % 5 == 0 ? 0u : uint32_t(g());
    auto d_logits = upload(logits), d_rows = upload(masked_rows), d_masks = upload(masks);
    REQUIRE(launch_token_bitmask(d_logits.as<float>(), d_rows.as<int32_t>(), d_masks.as<uint32_t>(),
                                 int32_t(masked_rows.size()), words, vocab, nullptr).ok());
    const auto got = download<float>(d_logits, logits.size());
    std::vector<float> want = logits;
    for (size_t k = 0; k < masked_rows.size(); ++k)
      apply_grammar_mask(std::span<float>(want.data() + size_t(masked_rows[k]) * size_t(vocab), size_t(vocab)),
                         std::span<const uint32_t>(masks.data() + k * size_t(words), size_t(words)));
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("vocab " << vocab << " index " << i);
      REQUIRE(got[i] == want[i]);
    }
  }
}
