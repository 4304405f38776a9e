// Device sampling against the sort-based CPU reference (same counter-based uniforms).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <span>

#include "gpu/kernels.hpp"
#include "gpu/reference/sampling_ref.hpp"
#include "model/sampler.hpp"
#include "model/structured_output.hpp"
#include "tests/gpu/device_helpers.hpp"

using namespace coserve;
using namespace coserve::gpu;
using namespace coserve::gpu::test;

namespace {

// Samples every row on the device and compares token, logprob and top logprobs with the reference.
void check_rows_against_reference(const std::vector<float>& logits,
                                  const std::vector<sample_row_params>& params, int32_t vocab) {
  const int32_t rows = int32_t(params.size());
  auto d_logits = upload(logits), d_params = upload(params);
  auto d_tok = device_buffer::allocate(size_t(rows) * 4),
       d_lp = device_buffer::allocate(size_t(rows) * 4);
  auto d_top = device_buffer::allocate(size_t(rows) * k_top_logprob_words * 4);
  REQUIRE((d_tok.ok() && d_lp.ok() && d_top.ok()));
  REQUIRE(launch_sample(d_tok->as<int32_t>(), d_lp->as<float>(), d_logits.as<float>(),
                        d_params.as<sample_row_params>(), rows, vocab, nullptr,
                        d_top->as<uint32_t>())
              .ok());
  auto tok = download<int32_t>(*d_tok, size_t(rows));
  auto lp = download<float>(*d_lp, size_t(rows));
  auto top = download<uint32_t>(*d_top, size_t(rows) * k_top_logprob_words);
  for (int32_t r = 0; r < rows; ++r) {
    auto e = ref::sample_ref(logits.data() + size_t(r) * size_t(vocab), vocab, params[size_t(r)]);
    INFO("vocab " << vocab << " row " << r);
    CHECK(tok[size_t(r)] == e.token);
    CHECK(lp[size_t(r)] == Approx(e.logprob).margin(1e-3));
    const uint32_t* w = top.data() + size_t(r) * k_top_logprob_words;
    for (size_t j = 0; j < size_t(params[size_t(r)].top_n); ++j) {
      if (j >= e.top.size()) {
        CHECK(int32_t(w[2 * j]) == -1);
        break;
      }
      float v;
      std::memcpy(&v, &w[2 * j + 1], 4);
      CHECK(int32_t(w[2 * j]) == e.top[j].first);
      CHECK(v == Approx(e.top[j].second).margin(1e-3));
    }
  }
}

}  // namespace

TEST_CASE("sampling kernel matches the reference", "[gpu][sampling]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  for (int32_t vocab : {1000, 32000, 128256}) {
    std::mt19937 g{static_cast<uint32_t>(vocab)};
    std::normal_distribution<float> nd(0.0f, 3.0f);
    // Last field: top logprobs wanted (a top-k of 1 keeps one token: a list shorter than asked).
    std::vector<sample_row_params> params{
        {0.0f, 1.0f, 0.0f, 0, 1, 0, 5},       {1.0f, 1.0f, 0.0f, 0, 2, 3},
        {0.7f, 1.0f, 0.0f, 50, 3, 1, 20},     {1.0f, 0.9f, 0.0f, 0, 4, 9, 1},
        {1.3f, 0.8f, 0.0f, 20, 5, 2},         {1.0f, 1.0f, 0.05f, 0, 6, 4, 3},
        {0.6f, 0.95f, 0.02f, 100, 7, 11, 20}, {1.0f, 1.0f, 0.0f, 1, 8, 0, 4},
    };
    std::vector<float> logits(params.size() * size_t(vocab));
    for (auto& x : logits) x = nd(g);
    check_rows_against_reference(logits, params, vocab);
  }
}

TEST_CASE("sampling kernel: radix thresholds with ties, large k, flat rows and masked entries",
          "[gpu][sampling]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  // Integer logits tie in large groups (the threshold lands inside a tie: all of it kept), k near
  // the vocabulary, top-p near 0 and 1, a flat row, and rows with -inf entries (masked).
  for (int32_t vocab : {1000, 151936}) {
    std::mt19937 g{static_cast<uint32_t>(vocab + 1)};
    std::uniform_int_distribution<int> level(-6, 6);
    const std::vector<sample_row_params> params{
        {1.0f, 1.0f, 0.0f, vocab - 1, 1, 0, 3},
        {1.0f, 1.0f, 0.0f, 1000 < vocab ? 1000 : 999, 2, 1, 2},
        {1.0f, 0.01f, 0.0f, 0, 3, 2, 5},
        {1.0f, 0.999f, 0.0f, 0, 4, 3, 1},
        {0.5f, 0.5f, 0.0f, 7, 5, 4, 7},
        {1.0f, 0.3f, 0.0f, 0, 6, 5, 2},
        {2.0f, 0.9f, 0.1f, 300, 7, 6, 4},
        {1.0f, 0.7f, 0.0f, 13, 8, 7, 20},
    };
    std::vector<float> logits(params.size() * size_t(vocab));
    for (size_t r = 0; r < params.size(); ++r)
      for (int32_t i = 0; i < vocab; ++i) {
        float& x = logits[r * size_t(vocab) + size_t(i)];
        x = r == 5 ? 0.0f : float(level(g));      // row 5: flat
        if (r == 6 && i % 3 == 0) x = -INFINITY;  // row 6: a third masked
      }
    check_rows_against_reference(logits, params, vocab);
  }
}

TEST_CASE("sampling kernel: seeded draws are reproducible, counters change them",
          "[gpu][sampling]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const int32_t vocab = 50, rows = 256;
  std::vector<float> logits(size_t(rows) * vocab, 0.0f);  // uniform distribution
  std::vector<sample_row_params> params;
  for (int32_t r = 0; r < rows; ++r) params.push_back({1.0f, 1.0f, 0.0f, 0, 123, uint64_t(r)});
  auto d_logits = upload(logits), d_params = upload(params);
  auto d_tok = device_buffer::allocate(size_t(rows) * 4),
       d_lp = device_buffer::allocate(size_t(rows) * 4);
  REQUIRE((d_tok.ok() && d_lp.ok()));
  REQUIRE(launch_sample(d_tok->as<int32_t>(), d_lp->as<float>(), d_logits.as<float>(),
                        d_params.as<sample_row_params>(), rows, vocab, nullptr)
              .ok());
  auto a = download<int32_t>(*d_tok, size_t(rows));
  REQUIRE(launch_sample(d_tok->as<int32_t>(), d_lp->as<float>(), d_logits.as<float>(),
                        d_params.as<sample_row_params>(), rows, vocab, nullptr)
              .ok());
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
  REQUIRE(launch_logit_edits(d_logits.as<float>(), d_edits.as<logit_edit>(), int32_t(edits.size()),
                             vocab, nullptr)
              .ok());
  auto got = download<float>(d_logits, logits.size());
  for (const auto& e : edits) {
    auto& l = logits[size_t(e.row) * vocab + size_t(e.token)];
    l = apply_logit_edit(l, e);
  }
  CHECK(got == logits);
  std::vector<sample_row_params> params{
      {0.0f, 1.0f, 0.0f, 0, 1, 0}, {1.0f, 0.9f, 0.0f, 0, 2, 1}, {0.7f, 1.0f, 0.1f, 40, 3, 2}};
  auto d_params = upload(params);
  auto d_tok = device_buffer::allocate(size_t(rows) * 4),
       d_lp = device_buffer::allocate(size_t(rows) * 4);
  REQUIRE((d_tok.ok() && d_lp.ok()));
  REQUIRE(launch_sample(d_tok->as<int32_t>(), d_lp->as<float>(), d_logits.as<float>(),
                        d_params.as<sample_row_params>(), rows, vocab, nullptr)
              .ok());
  auto tok = download<int32_t>(*d_tok, size_t(rows));
  auto lp = download<float>(*d_lp, size_t(rows));
  for (int32_t r = 0; r < rows; ++r) {
    auto e = ref::sample_ref(logits.data() + size_t(r) * vocab, vocab, params[size_t(r)]);
    CHECK(tok[size_t(r)] == e.token);
    CHECK(lp[size_t(r)] == Approx(e.logprob).margin(1e-3));
    CHECK(std::isfinite(logits[size_t(r) * vocab + size_t(tok[size_t(r)])]));
  }
}

TEST_CASE(
    "penalty count kernels: rows written, penalties applied and sampled tokens counted as on the "
    "host",
    "[gpu][sampling][penalties]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  // Penalty rows of vocab 151936 (Qwen2) and an odd one; a row without counts, a row sharing
  // nothing with the others, repeated and out-of-range sampled tokens.
  for (const int32_t vocab : {151936, 1001}) {
    const int32_t prows = 3, rows = 4;
    std::mt19937 g{uint32_t(vocab)};
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<uint32_t> counts(size_t(prows) * size_t(vocab), 0xdeadbeefu);  // reset below
    std::vector<int32_t> resets{2, 0, 1};
    std::vector<penalty_count_entry> entries;
    // One entry per distinct (row, token), as the executor writes them: entries of one launch
    // land in no defined order.
    for (int32_t r = 0; r < prows; ++r) {
      std::set<int32_t> seen;
      for (int32_t i = 0; i < 300; ++i) {
        const int32_t t = int32_t(g() % uint32_t(vocab));
        if (!seen.insert(t).second) continue;
        entries.push_back({r, t, uint32_t(i % 4) | (i % 3 == 0 ? k_count_prompt_bit : 0u)});
      }
    }
    entries.push_back({1, vocab + 5, 7u});  // out of range: ignored
    auto d_counts = upload(counts), d_resets = upload(resets), d_entries = upload(entries);
    auto st = make_stream();
    REQUIRE(st.ok());
    REQUIRE(launch_penalty_rows_init(d_counts.as<uint32_t>(), d_resets.as<int32_t>(),
                                     int32_t(resets.size()), d_entries.as<penalty_count_entry>(),
                                     int32_t(entries.size()), vocab, st->get())
                .ok());
    std::fill(counts.begin(), counts.end(), 0u);
    for (const auto& e : entries)
      if (e.token < vocab) counts[size_t(e.row) * size_t(vocab) + size_t(e.token)] = e.value;
    CHECK(download<uint32_t>(d_counts, counts.size()) == counts);

    std::vector<float> logits(size_t(rows) * size_t(vocab));
    for (auto& x : logits) x = nd(g);
    std::vector<sample_row_params> params(size_t(rows),
                                          sample_row_params{0.0f, 1.0f, 0.0f, 0, 1, 0});
    params[0].penalty_row = 2, params[0].repetition = 1.3f, params[0].presence = 0.5f,
    params[0].frequency = 0.25f;
    params[1].penalty_row = -1;                              // no counts: untouched
    params[2].penalty_row = 0, params[2].repetition = 0.8f;  // repetition only (below 1 raises)
    params[3].penalty_row = 1, params[3].presence = -0.5f, params[3].frequency = 1.0f;
    auto d_logits = upload(logits), d_params = upload(params);
    REQUIRE(launch_penalty_counts(d_logits.as<float>(), d_params.as<sample_row_params>(), rows,
                                  vocab, d_counts.as<uint32_t>(), st->get())
                .ok());
    for (int32_t r = 0; r < rows; ++r) {
      const sample_row_params& p = params[size_t(r)];
      if (p.penalty_row < 0) continue;
      for (int32_t t = 0; t < vocab; ++t) {
        float& l = logits[size_t(r) * size_t(vocab) + size_t(t)];
        l = apply_penalty_count(l, counts[size_t(p.penalty_row) * size_t(vocab) + size_t(t)],
                                p.repetition, p.presence, p.frequency);
      }
    }
    CHECK(download<float>(d_logits, logits.size()) == logits);

    const std::vector<int32_t> tokens{5, 5, vocab - 1,
                                      vocab + 3};  // row 1 has no row; row 3's is out of range
    auto d_tokens = upload(tokens);
    for (int rep = 0; rep < 2; ++rep)  // counted twice: increments, not writes
      REQUIRE(launch_count_sampled(d_counts.as<uint32_t>(), d_params.as<sample_row_params>(),
                                   d_tokens.as<int32_t>(), rows, vocab, st->get())
                  .ok());
    counts[size_t(2) * size_t(vocab) + 5] += 2;
    counts[size_t(vocab - 1)] += 2;
    CHECK(download<uint32_t>(d_counts, counts.size()) == counts);
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
    for (size_t i = 0; i < masks.size(); ++i)
      masks[i] = i % 7 == 0 ? 0xffffffffu : i % 5 == 0 ? 0u : uint32_t(g());
    auto d_logits = upload(logits), d_rows = upload(masked_rows), d_masks = upload(masks);
    REQUIRE(launch_token_bitmask(d_logits.as<float>(), d_rows.as<int32_t>(), d_masks.as<uint32_t>(),
                                 int32_t(masked_rows.size()), words, vocab, nullptr)
                .ok());
    const auto got = download<float>(d_logits, logits.size());
    std::vector<float> want = logits;
    for (size_t k = 0; k < masked_rows.size(); ++k)
      apply_grammar_mask(
          std::span<float>(want.data() + size_t(masked_rows[k]) * size_t(vocab), size_t(vocab)),
          std::span<const uint32_t>(masks.data() + k * size_t(words), size_t(words)));
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("vocab " << vocab << " index " << i);
      REQUIRE(got[i] == want[i]);
    }
  }
}

TEST_CASE("prompt logprobs kernel matches score_prompt_token: logprob, rank and top-N with ties",
          "[gpu][sampling]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  constexpr int32_t stride = 2 + 2 * k_prompt_logprobs_max_top;
  for (int32_t vocab : {8, 1000, 32000, 151936}) {
    for (int32_t top_n : {0, 5, 20}) {
      std::mt19937 g{static_cast<uint32_t>(vocab + top_n)};
      std::normal_distribution<float> nd(0.0f, 3.0f);
      const int32_t rows = 6;
      std::vector<float> logits(size_t(rows) * size_t(vocab));
      for (size_t i = 0; i < logits.size(); ++i) {
        const size_t r = i / size_t(vocab);
        float v = nd(g);
        if (r == 1) v = std::round(v * 2.0f) / 2.0f;  // many ties
        if (r == 2 && i % 3 == 0) v = -INFINITY;      // masked entries
        logits[i] = v;
      }
      std::vector<int32_t> targets;
      for (int32_t r = 0; r < rows; ++r) targets.push_back(int32_t(g() % uint32_t(vocab)));
      targets[2] = 1;  // a finite entry of the masked row (i % 3 != 0)
      auto d_logits = upload(logits), d_targets = upload(targets);
      auto d_out = device_buffer::allocate(size_t(rows) * stride * 4);
      REQUIRE(d_out.ok());
      REQUIRE(launch_prompt_logprobs(d_out->as<uint32_t>(), d_logits.as<float>(),
                                     d_targets.as<int32_t>(), rows, vocab, top_n, stride, nullptr)
                  .ok());
      const auto out = download<uint32_t>(*d_out, size_t(rows) * stride);
      for (int32_t r = 0; r < rows; ++r) {
        const auto e = score_prompt_token(
            std::span<const float>(logits.data() + size_t(r) * size_t(vocab), size_t(vocab)),
            targets[size_t(r)], top_n);
        const uint32_t* w = out.data() + size_t(r) * stride;
        float lp;
        std::memcpy(&lp, &w[0], 4);
        INFO("vocab " << vocab << " top_n " << top_n << " row " << r);
        CHECK(lp == Approx(e.logprob).margin(1e-4));
        CHECK(int32_t(w[1]) == e.rank);
        for (int32_t j = 0; j < top_n; ++j) {
          const int32_t id = int32_t(w[2 + 2 * j]);
          if (size_t(j) >= e.top.size()) {  // a row shorter than top_n
            CHECK(id == -1);
            break;
          }
          float v;
          std::memcpy(&v, &w[3 + 2 * j], 4);
          CHECK(id == e.top[size_t(j)].token);
          if (std::isinf(e.top[size_t(j)].logprob))
            CHECK(std::isinf(v));
          else
            CHECK(v == Approx(e.top[size_t(j)].logprob).margin(1e-4));
        }
      }
    }
  }
  auto d = device_buffer::allocate(64);
  REQUIRE(d.ok());
  CHECK_FALSE(launch_prompt_logprobs(d->as<uint32_t>(), nullptr, nullptr, 1, 10, 5, 11, nullptr)
                  .ok());  // stride short
}
