// The sparse logit edits (gpu/logit_edit.hpp) reproduce the CPU sampler's processors exactly
// (model/sampler.hpp apply_penalties: logit_bias, min_tokens, repetition, presence/frequency).
#include <catch2/catch.hpp>

#include <random>

#include "gpu/logit_edit.hpp"
#include "model/sampler.hpp"

using namespace coserve;
using namespace coserve::gpu;

TEST_CASE("logit edits match the CPU sampler's penalties", "[gpu_host][logit_edit]") {
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int32_t vocab = 300;
  for (int trial = 0; trial < 50; ++trial) {
    sampling_params p;
    p.repetition_penalty = trial % 3 == 0 ? 1.0f : 1.0f + float(trial % 7) * 0.1f;
    p.presence_penalty = float(trial % 4) * 0.25f;
    p.frequency_penalty = float(trial % 5) * 0.1f;
    p.min_tokens = trial % 2 ? 5 : 0;
    p.ignore_eos = trial % 6 == 1;
    p.stop_token_ids = {7, 299, 400};
    p.logit_bias = {{3, 2.5f}, {11, -100.0f}, {-1, 3.0f}, {7, 1.0f}};
    std::vector<int32_t> prompt, output;
    for (int i = 0; i < 20; ++i) prompt.push_back(int32_t(g() % vocab));
    for (int i = 0; i < trial % 9; ++i) output.push_back(int32_t(g() % vocab));
    sampling_state st(p, 1, prompt, output, {2, 299});
    std::vector<float> row(vocab);
    for (auto& x : row) x = nd(g);
    std::vector<float> expect = row;
    apply_penalties(expect, st);

    std::vector<logit_edit> edits;
    append_logit_edits(0, p, st.seen, st.out_count, st.num_output, {2, 299}, vocab, edits);
    std::vector<float> got = row;
    for (const auto& e : edits) {
      REQUIRE(e.row == 0);
      got[size_t(e.token)] = apply_logit_edit(got[size_t(e.token)], e);
    }
    for (int32_t i = 0; i < vocab; ++i) {
      INFO("trial " << trial << " token " << i);
      CHECK(got[size_t(i)] == expect[size_t(i)]);
    }
    // one edit per token at most
    for (size_t i = 1; i < edits.size(); ++i) CHECK(edits[i].token > edits[i - 1].token);
  }
}
