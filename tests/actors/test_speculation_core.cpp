// Speculative decoding's host side, without an engine: the --speculative-config parser (vLLM's
// keys, defaults, errors naming the field), the n-gram proposer and the per-sequence back-off.
#include <catch2/catch.hpp>
#include <utility>
#include <vector>

#include "actors/speculation.hpp"

using namespace coserve;
using actors::ngram_propose;
using actors::parse_speculative_config;
using actors::token_view;

namespace {

constexpr const char* k_ngram =
    R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":3})";

std::vector<int32_t> propose(const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                             int32_t lo, int32_t hi, int32_t k, int32_t skip = 0) {
  std::vector<int32_t> out;
  const int32_t n = ngram_propose(token_view{&prompt, &output}, lo, hi, k, skip, out);
  REQUIRE(n == static_cast<int32_t>(out.size()));
  return out;
}

}  // namespace

TEST_CASE("speculative config: vLLM's keys, defaults, and errors naming the field",
          "[speculation]") {
  auto c = parse_speculative_config(R"({"method":"ngram","num_speculative_tokens":4})");
  REQUIRE(c);
  CHECK(c->enabled());
  CHECK(c->num_speculative_tokens == 4);
  CHECK(c->prompt_lookup_min == 5);
  CHECK(c->prompt_lookup_max == 5);
  c = parse_speculative_config(
      R"({"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":3})");
  REQUIRE(c);
  CHECK(c->prompt_lookup_min == 3);
  c = parse_speculative_config(R"({"model":"/models/draft","num_speculative_tokens":3})");
  REQUIRE(c);
  CHECK(c->method == "draft_model");
  CHECK(c->draft_model == "/models/draft");
  CHECK(c->backoff);
  c = parse_speculative_config(
      R"({"model":"/models/draft","num_speculative_tokens":3,"backoff":false})");
  REQUIRE(c);
  CHECK_FALSE(c->backoff);
  c = parse_speculative_config(k_ngram);
  REQUIRE(c);
  CHECK(c->prompt_lookup_min == 1);
  CHECK(c->prompt_lookup_max == 3);
  const std::pair<const char*, const char*> bad[] = {
      {"{", ""},
      {"[1]", ""},
      {R"({"num_speculative_tokens":2})", "method"},
      {R"({"method":"eagle","num_speculative_tokens":2})", "method"},
      {R"({"method":"ngram"})", "num_speculative_tokens"},
      {R"({"method":"ngram","num_speculative_tokens":0})", "num_speculative_tokens"},
      {R"({"method":"ngram","num_speculative_tokens":"3"})", "num_speculative_tokens"},
      {R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":4,"prompt_lookup_max":2})",
       "prompt_lookup_min"},
      {R"({"method":"ngram","num_speculative_tokens":3,"lookahead":2})", "lookahead"},
      {R"({"method":"draft_model","num_speculative_tokens":3})", "model"},
      {R"({"method":"ngram","model":"/models/draft","num_speculative_tokens":3})", "model"},
      {R"({"model":"/models/draft","num_speculative_tokens":3,"prompt_lookup_max":2})",
       "prompt_lookup_max"},
      {R"({"model":7,"num_speculative_tokens":3})", "model"},
      {R"({"method":"ngram","num_speculative_tokens":3,"backoff":0})", "backoff"},
  };
  for (auto [text, field] : bad) {
    INFO(text);
    auto r = parse_speculative_config(text);
    REQUIRE_FALSE(r);
    CHECK(r.err().code == "invalid_argument");
    CHECK(r.err().param == field);
    CHECK(r.err().message.find("--speculative-config") == 0);
  }
}

TEST_CASE("n-gram proposer: the latest earlier match of the longest suffix, at most k tokens",
          "[speculation]") {
  // Suffix [7 8] occurs at 1..2 (followed by 9 4 5) and at 5..6 (followed by 1 2): the latest wins.
  CHECK(propose({3, 7, 8, 9, 4, 7, 8, 1, 2}, {7, 8}, 2, 2, 3) == std::vector<int32_t>{1, 2, 7});
  // The output counts as much as the prompt; k caps the proposal.
  CHECK(propose({1, 2, 3}, {4, 1, 2}, 1, 3, 1) == std::vector<int32_t>{3});
  // Longest first: [5 6] matches nowhere earlier, [6] does.
  CHECK(propose({6, 9, 9, 5}, {6}, 1, 2, 2) == std::vector<int32_t>{9, 9});
  // Below prompt_lookup_min nothing is tried.
  CHECK(propose({6, 9, 9, 5}, {6}, 2, 3, 2).empty());
  // No earlier occurrence, or too short a sequence.
  CHECK(propose({1, 2, 3, 4}, {}, 1, 3, 4).empty());
  CHECK(propose({1}, {}, 1, 3, 4).empty());
  // A match near the end proposes what there is.
  CHECK(propose({5, 5}, {}, 1, 1, 4) == std::vector<int32_t>{5});
  // A later match with fewer than k tokens after it loses to an earlier one with k: in a loop of
  // period 1 or 2 the whole proposal continues the loop.
  CHECK(propose({1, 1, 1, 1, 1, 1}, {}, 1, 2, 3) == std::vector<int32_t>{1, 1, 1});
  CHECK(propose({4, 6, 4, 6, 4, 6, 4}, {}, 1, 2, 4) == std::vector<int32_t>{6, 4, 6, 4});
  CHECK(propose({4, 6, 4, 6}, {}, 2, 2, 4) == std::vector<int32_t>{4, 6});
  // A token still being sampled: the match predicts it (9) and the proposals follow it.
  CHECK(propose({3, 7, 8, 9, 4, 5, 6, 1, 7, 8}, {}, 2, 2, 3, 1) == std::vector<int32_t>{4, 5, 6});
  // Nothing left after the prediction: no proposal.
  CHECK(propose({2, 7, 8}, {7, 8}, 2, 2, 3, 1) == std::vector<int32_t>{8});
  CHECK(propose({8, 8, 8}, {}, 2, 2, 3, 1).empty());
}

TEST_CASE("speculation back-off doubles up to 64 decode steps and halves on a good proposal",
          "[speculation]") {
  actors::speculation_backoff b;
  b.on_outcome(false);
  CHECK(b.skip == 1);
  b.skip = 0;
  b.on_outcome(false);
  CHECK(b.skip == 2);
  for (int i = 0; i < 10; ++i) b.on_outcome(false);
  CHECK(b.skip == 64);
  // One good proposal after many bad ones: the next bad one backs off as long again.
  b.skip = 0;
  b.on_outcome(true);
  CHECK(b.penalty == 32);
  CHECK(b.skip == 0);  // the next step may propose
  b.on_outcome(false);
  CHECK(b.skip == 64);
  // A run of good proposals clears it: a draft that keeps being accepted proposes every step.
  for (int i = 0; i < 7; ++i) b.on_outcome(true);
  CHECK(b.penalty == 0);
  b.skip = 0;
  b.on_outcome(false);
  CHECK(b.skip == 1);
}
