#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "model/sampler.hpp"

namespace coserve {
namespace {

sampling_state state(sampling_params p, std::vector<int32_t> prompt = {},
                     std::vector<int32_t> output = {}, uint64_t seed = 1,
                     std::vector<int32_t> eos = {}) {
  return sampling_state(std::move(p), seed, prompt, output, std::move(eos));
}

sampling_params greedy() {
  sampling_params p;
  p.temperature = 0.0f;
  return p;
}

// Empirical distribution of n draws, one per output position.
std::map<int32_t, int> draws(const std::vector<float>& logits, sampling_params p, int n,
                             uint64_t seed = 3) {
  auto st = state(p, {}, {}, seed);
  std::map<int32_t, int> counts;
  for (int i = 0; i < n;
       ++i) {  // one draw per output position (no penalties: the row stays the same)
    const int32_t t = sample_token(logits, st).token;
    ++counts[t];
    st.accept(t);
  }
  return counts;
}

}  // namespace

TEST_CASE("sampler: greedy is argmax, logprob is the log-softmax", "[model][sampler]") {
  const std::vector<float> l{0.1f, 2.0f, -1.0f, 1.5f};
  auto st = state(greedy());
  auto o = sample_token(l, st);
  CHECK(o.token == 1);
  double z = 0;
  for (float x : l) z += std::exp(double(x));
  CHECK(o.logprob == Approx(2.0 - std::log(z)).epsilon(1e-5));
}

TEST_CASE(
    "sampler: greedy without top logprobs gives the general path's token and logprob bit for bit",
    "[model][sampler]") {
  // logprobs = 1 takes the general path (copy, log-softmax, max_element); -1 and 0 the one-pass
  // kernel.
  seq_rng rng(5);
  for (size_t n : {size_t(1), size_t(3), size_t(17), size_t(50257)}) {
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<float> l(n);
      for (float& v : l)
        v = variant == 0 ? float(int(rng.next() % 16)) : float(rng.uniform() * 40.0 - 20.0);
      if (variant == 2) l[rng.next() % n] = -INFINITY;
      auto general = greedy();
      general.logprobs = 1;
      auto sg = state(general);
      const sample_output want = sample_token(l, sg);
      for (int32_t lp : {-1, 0}) {
        auto p = greedy();
        p.logprobs = lp;
        auto st = state(p);
        const sample_output got = sample_token(l, st);
        INFO("n " << n << " variant " << variant << " logprobs " << lp);
        CHECK(got.token == want.token);
        CHECK(std::memcmp(&got.logprob, &want.logprob, sizeof(float)) == 0);
        CHECK(got.top_logprobs.empty());
      }
    }
  }
  // A NaN row goes the general way: the same answer either way.
  std::vector<float> nan_row{1.0f, NAN, 3.0f};
  auto p = greedy();
  auto st = state(p);
  auto general = greedy();
  general.logprobs = 1;
  auto sg = state(general);
  CHECK(sample_token(nan_row, st).token == sample_token(nan_row, sg).token);
}

TEST_CASE("sampler: logit_bias and min_tokens masking", "[model][sampler]") {
  const std::vector<float> l{0.0f, 1.0f, 5.0f, 0.5f};
  auto p = greedy();
  p.logit_bias = {{0, 10.0f}};
  auto st = state(p);
  CHECK(sample_token(l, st).token == 0);

  p = greedy();
  p.min_tokens = 2;
  p.stop_token_ids = {1};
  auto s2 = state(p, {}, {}, 1, {2});
  std::vector<float> l2{0.0f, 4.0f, 5.0f, 0.5f};
  CHECK(sample_token(l2, s2).token == 3);  // eos 2 and stop id 1 masked
  s2.accept(3);
  CHECK(sample_token(l2, s2).token == 3);
  s2.accept(3);
  CHECK(sample_token(l2, s2).token == 2);  // two generated: eos allowed again
  p.ignore_eos = true;
  auto s3 = state(p, {}, {}, 1, {2});
  CHECK(sample_token(l2, s3).token == 2);  // eos not masked when ignored; stop id still is
}

TEST_CASE("sampler: repetition penalty (HF) over prompt and output", "[model][sampler]") {
  auto p = greedy();
  p.repetition_penalty = 2.0f;
  auto st = state(p, {0}, {1});
  std::vector<float> l{3.0f, -1.0f, 1.6f, 0.0f};
  apply_penalties(l, st);
  CHECK(l[0] == 1.5f);   // positive: divided
  CHECK(l[1] == -2.0f);  // negative: multiplied
  CHECK(l[2] == 1.6f);   // unseen: unchanged
  std::vector<float> raw{3.0f, -1.0f, 1.6f, 0.0f};
  CHECK(sample_token(raw, st).token == 2);
}

TEST_CASE("sampler: presence and frequency penalties (OpenAI) over output only",
          "[model][sampler]") {
  auto p = greedy();
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  auto st = state(p, {3}, {1, 1, 2});
  std::vector<float> l{0.0f, 1.0f, 1.0f, 1.0f};
  apply_penalties(l, st);
  CHECK(l[1] == Approx(1.0f - 0.5f - 0.5f));
  CHECK(l[2] == Approx(1.0f - 0.5f - 0.25f));
  CHECK(l[3] == 1.0f);  // prompt token: not penalised
  CHECK(l[0] == 0.0f);
}

TEST_CASE("sampler: top-k, top-p and min-p keep the right sets", "[model][sampler]") {
  // probabilities ~ 0.5, 0.25, 0.125, 0.0625, 0.0625
  const std::vector<float> l{std::log(8.0f), std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  sampling_params p;
  p.top_k = 2;
  auto c = draws(l, p, 2000);
  CHECK(std::set<int32_t>{0, 1} == std::set<int32_t>{c.begin()->first, c.rbegin()->first});
  CHECK(c.size() == 2);
  CHECK(c[0] > c[1]);

  p = sampling_params{};
  p.top_p = 0.7f;  // 0.5 + 0.25 reaches 0.7
  c = draws(l, p, 2000);
  CHECK(c.size() == 2);
  p.top_p = 0.8f;  // needs the third
  c = draws(l, p, 2000);
  CHECK(c.size() == 3);

  p = sampling_params{};
  p.min_p = 0.2f;  // keep p >= 0.1: tokens 0, 1, 2
  c = draws(l, p, 2000);
  CHECK(c.size() == 3);

  std::vector<float> row = l;
  p = sampling_params{};
  p.temperature = 0.5f;
  p.top_k = 3;
  apply_temperature_and_filters(row, p);
  CHECK(row[0] == Approx(2 * std::log(8.0f)));
  CHECK(std::isinf(row[3]));
  CHECK(std::isinf(row[4]));
}

// The filters' definition, by a full sort: tokens ordered by logit (ties: smaller id first), the
// first top_k, then the fewest of those whose renormalised probability reaches top_p, then those
// with p >= min_p * p_max. Returns the kept ids.
std::set<int32_t> kept_by_sorting(std::vector<float> l, const sampling_params& p) {
  for (float& x : l) x /= p.temperature;
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return l[size_t(a)] > l[size_t(b)] || (l[size_t(a)] == l[size_t(b)] && a < b);
  });
  size_t keep = p.top_k > 0 ? std::min(l.size(), size_t(p.top_k)) : l.size();
  const double mx = l[size_t(order[0])];
  std::vector<double> prob(keep);
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(double(l[size_t(order[i])]) - mx);
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    size_t n = 0;
    while (n < keep) {
      cum += prob[n++];
      if (cum >= double(p.top_p) * sum) break;
    }
    keep = n;
  }
  if (p.min_p > 0.0f) {
    size_t n = 1;
    while (n < keep && prob[n] >= double(p.min_p)) ++n;
    keep = n;
  }
  return std::set<int32_t>(order.begin(), order.begin() + std::ptrdiff_t(keep));
}

TEST_CASE("sampler: top-k, top-p and min-p by selection keep what a full sort keeps",
          "[model][sampler]") {
  seq_rng rng(17);
  int checked = 0;
  for (size_t vocab : {size_t(1), size_t(2), size_t(9), size_t(100), size_t(1000), size_t(50257)}) {
    for (int trial = 0; trial < (vocab > 1000 ? 6 : 60); ++trial) {
      // Coarse values give many ties, which the ids order.
      // Peaked, flat, and spread over more than the filters' 40-nat buckets.
      const int shape = trial % 4;
      std::vector<float> l(vocab);
      for (float& x : l)
        x = shape == 0   ? float(int(rng.next() % 12)) * 0.5f
            : shape == 1 ? float(rng.normal() * 4.0)
            : shape == 2 ? float(rng.uniform() * 0.2)
                         : float(rng.normal() * 30.0);
      if (vocab > 4 && trial % 4 == 0) l[rng.next() % vocab] = -INFINITY;
      sampling_params p;
      p.temperature = trial % 5 == 0 ? 1.0f : float(0.3 + rng.uniform());
      if (trial % 2 == 0) p.top_k = int32_t(1 + rng.next() % std::max<size_t>(1, vocab + 2));
      // Values of top_p and min_p away from the partial sums of coarse rows (no exact-boundary
      // ties).
      if (trial % 3 != 1)
        p.top_p = trial % 7 == 0 ? 0.99999f : float(0.05 + 0.9 * rng.uniform()) + 1e-4f;
      if (trial % 4 == 3) p.min_p = float(0.01 + 0.5 * rng.uniform()) + 1e-4f;
      std::vector<float> row = l;
      apply_temperature_and_filters(row, p);
      std::set<int32_t> kept;
      for (size_t i = 0; i < vocab; ++i)
        if (row[i] != -INFINITY) kept.insert(int32_t(i));
      // A token that was -inf before stays -inf; compare the finite ones.
      std::set<int32_t> want;
      for (int32_t t : kept_by_sorting(l, p))
        if (l[size_t(t)] != -INFINITY) want.insert(t);
      INFO("vocab " << vocab << " trial " << trial << " top_k " << p.top_k << " top_p " << p.top_p
                    << " min_p " << p.min_p << " temperature " << p.temperature);
      REQUIRE(kept == want);
      REQUIRE(!kept.empty());
      ++checked;
    }
  }
  CHECK(checked == 5 * 60 + 6);

  // NaN logits (a model that overflowed) count as -inf: never kept, the others filtered as usual.
  std::vector<float> l(5000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = i % 7 == 0 ? NAN : float(rng.normal() * 3.0);
  for (int variant = 0; variant < 3; ++variant) {
    sampling_params p;
    if (variant != 1) p.top_k = 50;
    if (variant != 0) p.top_p = 0.9f;
    std::vector<float> row = l, clean = l;
    for (float& x : clean)
      if (std::isnan(x)) x = -INFINITY;
    apply_temperature_and_filters(row, p);
    std::set<int32_t> kept;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i % 7 == 0) CHECK(row[i] == -INFINITY);
      if (row[i] > -INFINITY) kept.insert(int32_t(i));
    }
    CHECK(kept == kept_by_sorting(clean, p));
  }
}

TEST_CASE("sampler: temperature sampling follows the distribution", "[model][sampler]") {
  const std::vector<float> l{std::log(3.0f), 0.0f};  // 0.75 / 0.25 at T=1
  sampling_params p;
  auto c = draws(l, p, 4000);
  CHECK(double(c[0]) / 4000 == Approx(0.75).margin(0.03));
  p.temperature = 2.0f;  // sqrt(3) : 1 -> 0.634
  c = draws(l, p, 4000);
  CHECK(double(c[0]) / 4000 == Approx(std::sqrt(3.0) / (1 + std::sqrt(3.0))).margin(0.03));
}

TEST_CASE("sampler: a seed reproduces the tokens, another seed differs", "[model][sampler]") {
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(i % 7) * 0.3f;
  sampling_params p;
  p.temperature = 1.0f;
  auto run = [&](uint64_t seed) {
    auto st = state(p, {}, {}, seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) {
      auto t = sample_token(l, st).token;
      st.accept(t);
      out.push_back(t);
    }
    return out;
  };
  CHECK(run(42) == run(42));
  CHECK(run(42) != run(43));
}

TEST_CASE("sampler: top-N logprobs are ordered and consistent", "[model][sampler]") {
  std::vector<float> l{0.3f, 2.0f, -1.0f, 1.5f, 0.9f, 1.9f};
  sampling_params p;
  p.logprobs = 4;
  p.temperature = 0.7f;
  auto st = state(p);
  auto o = sample_token(l, st);
  REQUIRE(o.top_logprobs.size() == 4);
  CHECK(o.top_logprobs[0].token == 1);
  CHECK(o.top_logprobs[1].token == 5);
  for (size_t i = 1; i < o.top_logprobs.size(); ++i)
    CHECK(o.top_logprobs[i - 1].logprob >= o.top_logprobs[i].logprob);
  std::vector<float> lp;
  std::vector<float> scaled = l;
  apply_temperature_and_filters(scaled, p);
  log_softmax(scaled, lp);
  double total = 0;
  for (float x : lp) total += std::exp(double(x));
  CHECK(total == Approx(1.0).epsilon(1e-6));
  CHECK(o.logprob == Approx(lp[size_t(o.token)]));
  CHECK(o.top_logprobs[0].logprob == Approx(lp[1]));

  // With a top-k filter the masked tokens are not listed and the kept mass is 1.
  p.top_k = 2;
  auto s2 = state(p);
  auto o2 = sample_token(l, s2);
  REQUIRE(o2.top_logprobs.size() == 2);
  CHECK(std::exp(double(o2.top_logprobs[0].logprob)) +
            std::exp(double(o2.top_logprobs[1].logprob)) ==
        Approx(1.0).epsilon(1e-5));
}

}  // namespace coserve
