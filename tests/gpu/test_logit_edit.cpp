// The sparse logit edits (gpu/logit_edit.hpp) reproduce the CPU sampler's processors exactly
// (model/sampler.hpp apply_penalties: logit_bias, min_tokens, repetition, presence/frequency).
#include <catch2/catch.hpp>
#include <random>

#include "gpu/logit_edit.hpp"
#include "gpu/sample_row_params.hpp"
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
    penalty_edits kept(p, prompt, vocab);
    for (int32_t t : output) kept.accept(t);
    kept.append(0, p, st.num_output, {2, 299}, edits);
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

TEST_CASE("a pending token counted on the device gives the edits of the history that includes it",
          "[gpu_host][logit_edit]") {
  std::mt19937 g(17);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int32_t vocab = 200;
  const std::vector<int32_t> eos{2, 199};
  for (int trial = 0; trial < 200; ++trial) {
    sampling_params p;
    p.repetition_penalty = trial % 3 == 0 ? 1.0f : 1.0f + float(trial % 7) * 0.1f;
    p.presence_penalty = float(trial % 4) * 0.25f;
    p.frequency_penalty = float(trial % 5) * 0.1f;
    p.min_tokens = trial % 2 ? 6 : 0;
    p.stop_token_ids = {7};
    p.logit_bias = {{3, 2.5f}, {11, -100.0f}};
    std::vector<int32_t> prompt, output;
    for (int i = 0; i < 15; ++i) prompt.push_back(int32_t(g() % vocab));
    for (int i = 0; i < trial % 11; ++i) output.push_back(int32_t(g() % 40));  // repeats
    // The pending token: one already in the output, the prompt, a biased or masked one, or new.
    const int32_t choice = trial % 5;
    const int32_t pending = choice == 0 && !output.empty() ? output[size_t(g() % output.size())]
                            : choice == 1                  ? prompt[size_t(g() % prompt.size())]
                            : choice == 2                  ? (trial % 2 ? 3 : 2)
                            : choice == 3                  ? 7
                                                           : int32_t(150 + g() % 50);
    std::vector<float> row(vocab);
    for (auto& x : row) x = nd(g);

    // What the host builds while the token is on the device (num_output counts it), applied as the
    // kernels do: every edit but the pending token's, then pending_edit for it.
    const int32_t launched = int32_t(output.size()) + 1;
    std::vector<logit_edit> edits;
    edits.push_back(
        {0, 5, 1.0f, 1.0f, 0.0f, 0, 0});  // another row's edit first: ranges are per row
    const int32_t begin = int32_t(edits.size());
    penalty_edits kept(p, prompt, vocab);
    for (int32_t t : output) kept.accept(t);
    kept.append(1, p, launched, eos, edits);
    const pending_penalty pp{1,
                             0,
                             begin,
                             int32_t(edits.size()),
                             p.repetition_penalty,
                             p.presence_penalty,
                             p.frequency_penalty};
    std::vector<float> got = row;
    for (int32_t i = begin; i < pp.edit_end; ++i)
      if (edits[size_t(i)].token != pending)
        got[size_t(edits[size_t(i)].token)] =
            apply_logit_edit(got[size_t(edits[size_t(i)].token)], edits[size_t(i)]);
    got[size_t(pending)] =
        apply_logit_edit(got[size_t(pending)], pending_edit(edits.data(), pp, pending));

    // The CPU sampler once the token is known.
    std::vector<int32_t> with = output;
    with.push_back(pending);
    sampling_state after(p, 1, prompt, with, eos);
    std::vector<float> expect = row;
    apply_penalties(expect, after);
    for (int32_t i = 0; i < vocab; ++i) {
      INFO("trial " << trial << " token " << i << " pending " << pending);
      CHECK(got[size_t(i)] == expect[size_t(i)]);
    }
  }
}

TEST_CASE(
    "penalty edits kept up to date token by token give the CPU sampler's penalties at every step",
    "[gpu_host][logit_edit]") {
  std::mt19937 g(29);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int32_t vocab = 120;
  const std::vector<int32_t> eos{2, 119};
  for (int trial = 0; trial < 60; ++trial) {
    sampling_params p;
    p.repetition_penalty = trial % 3 == 0 ? 1.0f : 1.3f;
    p.presence_penalty = trial % 4 == 1 ? 0.0f : 0.5f;
    p.frequency_penalty = trial % 5 == 2 ? 0.0f : 0.2f;
    p.min_tokens = trial % 2 ? 8 : 0;
    p.ignore_eos = trial % 7 == 3;
    p.stop_token_ids = {7, 500};
    if (trial % 3 != 1) p.logit_bias = {{3, 2.5f}, {11, -100.0f}, {-4, 1.0f}, {119, 0.5f}};
    std::vector<int32_t> prompt, output;
    for (int i = 0; i < 25; ++i)
      prompt.push_back(int32_t(g() % vocab) - (i == 3 ? 200 : 0));  // one out of range
    penalty_edits kept(p, prompt, vocab);
    for (int step = 0; step < 30; ++step) {
      std::vector<logit_edit> edits;
      kept.append(4, p, step, eos, edits);
      for (size_t i = 1; i < edits.size(); ++i) REQUIRE(edits[i].token > edits[i - 1].token);
      std::vector<float> row(vocab);
      for (auto& x : row) x = nd(g);
      std::vector<float> got = row, expect = row;
      for (const auto& e : edits) {
        REQUIRE(e.row == 4);
        got[size_t(e.token)] = apply_logit_edit(got[size_t(e.token)], e);
      }
      sampling_state st(p, 1, prompt, output, eos);
      apply_penalties(expect, st);
      INFO("trial " << trial << " step " << step);
      REQUIRE(got == expect);
      const int32_t t =
          int32_t(g() % 60) + (step == 5 ? vocab : 0);  // repeats, and one out of range
      output.push_back(t);
      kept.accept(t);
    }
  }
  // No penalties: nothing is kept, whatever the history.
  sampling_params plain;
  penalty_edits none(plain, {1, 2, 3}, vocab);
  none.accept(5);
  CHECK(none.size() == 0);
}

// What the executor does for a sequence with a row of counts on the device (gpu_executor.cpp): the
// row written from the host's history when it is taken (device_entries), then counted up by every
// sampled token (launch_count_sampled), read by launch_penalty_counts after the sparse edits of
// logit_bias and min_tokens. Simulated here with the kernels' per-token functions.
TEST_CASE(
    "penalties from token counts on the device give the CPU sampler's penalties at every step",
    "[gpu_host][logit_edit]") {
  std::mt19937 g(41);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int32_t vocab = 150;
  const std::vector<int32_t> eos{2, 149};
  for (int trial = 0; trial < 80; ++trial) {
    sampling_params p;
    p.repetition_penalty = trial % 3 == 0 ? 1.0f : (trial % 3 == 1 ? 1.25f : 0.8f);
    p.presence_penalty = trial % 4 == 1 ? 0.0f : (trial % 2 ? 0.5f : -0.3f);
    p.frequency_penalty = trial % 5 == 2 ? 0.0f : 0.2f;
    if (trial % 11 == 4)
      p.repetition_penalty = -2.0f;  // not positive: off, as the CPU sampler has it
    p.min_tokens = trial % 2 ? 8 : 0;
    p.ignore_eos = trial % 7 == 3;
    p.stop_token_ids = {7, 500};
    if (trial % 3 != 1) p.logit_bias = {{3, 2.5f}, {11, -100.0f}, {-4, 1.0f}, {149, 0.5f}};
    std::vector<int32_t> prompt, output;
    for (int i = 0; i < 30; ++i)
      prompt.push_back(int32_t(g() % vocab) - (i == 3 ? 200 : 0));  // one out of range
    for (int i = 0; i < trial % 13; ++i)
      output.push_back(int32_t(g() % 50));  // history before the row is taken
    penalty_edits kept(p, prompt, vocab);
    for (int32_t t : output) kept.accept(t);
    // The row taken now: reset, then the entries.
    std::vector<uint32_t> counts(size_t(vocab), 0u);
    std::vector<penalty_count_entry> entries;
    kept.device_entries(6, entries);
    for (const auto& e : entries) {
      REQUIRE(e.row == 6);
      REQUIRE(e.value != 0u);
      counts[size_t(e.token)] = e.value;
    }
    sample_row_params row;  // as the executor fills it
    row.penalty_row = 6;
    row.repetition = p.repetition_penalty > 0.0f ? p.repetition_penalty : 1.0f;
    row.presence = p.presence_penalty;
    row.frequency = p.frequency_penalty;
    for (int step = 0; step < 25; ++step) {
      std::vector<logit_edit> edits;
      kept.append(0, p, int32_t(output.size()), eos, edits, false);
      for (const auto& e : edits)
        REQUIRE((e.repetition == 1.0f && e.subtract == 0.0f));  // bias and masks only
      std::vector<float> logits(static_cast<size_t>(vocab));
      for (auto& x : logits) x = nd(g);
      std::vector<float> got = logits, expect = logits;
      for (const auto& e : edits) got[size_t(e.token)] = apply_logit_edit(got[size_t(e.token)], e);
      for (int32_t t = 0; t < vocab; ++t)
        got[size_t(t)] = apply_penalty_count(got[size_t(t)], counts[size_t(t)], row.repetition,
                                             row.presence, row.frequency);
      sampling_state st(p, 1, prompt, output, eos);
      apply_penalties(expect, st);
      INFO("trial " << trial << " step " << step);
      REQUIRE(got == expect);
      // The step's sampled token, counted on the device (out of range: not counted) and collected.
      const int32_t t = int32_t(g() % 60) + (step == 7 ? vocab : 0);
      if (t >= 0 && t < vocab) counts[size_t(t)] += 1;
      output.push_back(t);
      kept.accept(t);
    }
  }
  CHECK(sample_row_params{0.0f, 1.0f, 0.0f, 0, 0, 0}.penalty_row ==
        -1);  // rows without counts by default
}
