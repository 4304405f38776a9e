#include "model/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/cpu_kernels.hpp"

namespace coserve {

double seq_rng::normal() noexcept {
  double u1 = uniform();
  while (u1 <= 0.0) u1 = uniform();
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
}

sampling_state::sampling_state(sampling_params p, uint64_t seed, std::span<const int32_t> prompt,
                               std::span<const int32_t> output, std::vector<int32_t> eos)
    : params(std::move(p)), eos_ids(std::move(eos)), seed(seed), rng(seed) {
  if (params.grammar) {
    matcher.emplace(params.grammar);
    mask.resize(size_t(grammar_mask_words(matcher->vocab_size())));
  }
  for (int32_t t : prompt) seen[t] = 1;
  for (int32_t t : output) accept(t);
}

void sampling_state::accept(int32_t token) {
  seen[token] = 1;
  ++out_count[token];
  ++num_output;
  if (matcher && !matcher->terminated() && !matcher->accept(token)) grammar_violated = true;
}

void apply_penalties(std::span<float> logits, const sampling_state& st, bool min_tokens_mask) {
  const sampling_params& p = st.params;
  const int64_t vocab = int64_t(logits.size());
  auto in_range = [&](int32_t t) { return t >= 0 && t < vocab; };
  for (auto [tok, bias] : p.logit_bias)
    if (in_range(tok)) logits[size_t(tok)] += bias;
  if (min_tokens_mask && st.num_output < p.min_tokens) {
    if (!p.ignore_eos)
      for (int32_t t : st.eos_ids)
        if (in_range(t)) logits[size_t(t)] = -INFINITY;
    for (int32_t t : p.stop_token_ids)
      if (in_range(t)) logits[size_t(t)] = -INFINITY;
  }
  if (p.repetition_penalty != 1.0f && p.repetition_penalty > 0.0f) {
    for (auto [tok, _] : st.seen) {
      if (!in_range(tok)) continue;
      float& l = logits[size_t(tok)];
      l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (auto [tok, count] : st.out_count) {
      if (!in_range(tok)) continue;
      logits[size_t(tok)] -=
          p.frequency_penalty * float(count) + p.presence_penalty * (count > 0 ? 1.0f : 0.0f);
    }
  }
}

void log_softmax(std::span<const float> logits, std::vector<float>& out) {
  out.resize(logits.size());
  const float lse = log_sum_exp(logits.data(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - lse;
}

namespace {

// A token as the filters see it: candidates are taken larger logit first, ties by smaller id.
struct candidate {
  float logit;
  int32_t id;
  float mass;  // exp(logit - max): its probability times the softmax's normalizer
};

bool ahead(const candidate& a, const candidate& b) noexcept {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Reorders c so that c[0, n) are the first n candidates in `ahead` order, n the fewest whose mass
// reaches `target` (at least 1; all of c when rounding leaves the sum short). Quickselect on the
// mass before each pivot: O(size) expected, no sort.
size_t nucleus(std::span<candidate> c, double target) {
  size_t lo = 0, hi = c.size();
  double mass_before = 0.0;  // of c[0, lo), all kept
  while (lo < hi) {
    // Median of three as the pivot, moved to the end of the range.
    const size_t mid = lo + (hi - lo) / 2;
    if (ahead(c[mid], c[lo])) std::swap(c[mid], c[lo]);
    if (ahead(c[hi - 1], c[lo])) std::swap(c[hi - 1], c[lo]);
    if (ahead(c[mid], c[hi - 1])) std::swap(c[mid], c[hi - 1]);
    const candidate pivot = c[hi - 1];
    auto first_after =
        std::partition(c.begin() + std::ptrdiff_t(lo), c.begin() + std::ptrdiff_t(hi - 1),
                       [&](const candidate& x) { return ahead(x, pivot); });
    const size_t at = size_t(first_after - c.begin());
    std::swap(c[at], c[hi - 1]);  // the pivot between those ahead of it and the rest
    double mass_ahead = 0.0;
    for (size_t i = lo; i < at; ++i) mass_ahead += double(c[i].mass);
    if (at > lo && mass_before + mass_ahead >= target) {
      hi = at;  // the boundary lies among those ahead of the pivot
      continue;
    }
    mass_before += mass_ahead + double(pivot.mass);
    if (mass_before >= target) return at + 1;  // the pivot is the last one kept
    lo = at + 1;
  }
  return std::max<size_t>(lo, 1);
}

// Logits in k_buckets buckets of equal width below the row's maximum, spanning k_bucket_span; the
// last bucket also takes everything lower (and -inf). The bucket never decreases as the logit
// falls, so each bucket holds a run of the `ahead` order (ties share a bucket).
constexpr int k_buckets = 2048;
constexpr float k_bucket_span = 40.0f;  // exp(-40): 4e-18 of the most likely token's probability

struct logit_buckets {
  float mx;
  int of(float l) const noexcept {
    const float d = (mx - l) * (float(k_buckets - 1) / k_bucket_span);
    return d < float(k_buckets - 1) ? (d > 0.0f ? int(d) : 0) : k_buckets - 1;
  }
  float mass(float l) const noexcept { return l > -INFINITY ? std::exp(l - mx) : 0.0f; }
};

}  // namespace

void apply_temperature_and_filters(std::span<float> logits, const sampling_params& p) {
  if (p.greedy()) return;
  const size_t vocab = logits.size();
  if (p.temperature != 1.0f)
    for (float& l : logits) l /= p.temperature;
  const bool top_k = p.top_k > 0 && size_t(p.top_k) < vocab;
  const bool top_p = p.top_p < 1.0f;
  const bool min_p = p.min_p > 0.0f;
  if (!top_k && !top_p && !min_p) return;
  // A NaN logit (a model that overflowed) is never kept; as -inf it cannot skew the maximum.
  for (float& l : logits)
    if (std::isnan(l)) l = -INFINITY;
  const float mx = max_value(logits.data(), vocab);
  if (!(mx > -INFINITY)) return;  // nothing finite to choose among

  // The kept tokens are a prefix of the `ahead` order: top-k takes the first k, top-p the fewest
  // of those whose probability (renormalised over them) reaches top_p, min-p those of the rest
  // with p >= min_p * p_max. Buckets of the logits narrow each cut to one bucket's tokens, where
  // selection finishes it: no sort of the vocabulary.
  const logit_buckets b{mx};
  std::vector<candidate> c;  // c[0, keep): the kept tokens, with their masses
  size_t keep = 0;
  if (top_k) {
    std::vector<int32_t> count(k_buckets, 0);
    for (float l : logits) ++count[size_t(b.of(l))];
    int last = 0;
    for (int64_t cum = 0; last < k_buckets - 1 && (cum += count[size_t(last)]) < p.top_k;) ++last;
    for (size_t i = 0; i < vocab; ++i)
      if (b.of(logits[i]) <= last) c.push_back({logits[i], int32_t(i), 0.0f});
    keep = size_t(p.top_k);
    std::nth_element(c.begin(), c.begin() + std::ptrdiff_t(keep - 1), c.end(), ahead);
    double sum = 0.0;
    for (size_t i = 0; i < keep; ++i) sum += double(c[i].mass = b.mass(c[i].logit));
    if (top_p) keep = nucleus(std::span<candidate>(c.data(), keep), double(p.top_p) * sum);
  } else if (top_p) {
    // The bucket where the running mass reaches top_p: the ones before it are kept, its tokens
    // go through nucleus() for the rest of the mass.
    std::vector<float> mass(vocab);
    std::vector<double> in_bucket(k_buckets, 0.0);
    double sum = 0.0;
    for (size_t i = 0; i < vocab; ++i) {
      mass[i] = b.mass(logits[i]);
      in_bucket[size_t(b.of(logits[i]))] += double(mass[i]);
      sum += double(mass[i]);
    }
    const double target = double(p.top_p) * sum;
    double before = 0.0;
    int at = 0;
    while (at < k_buckets - 1 && before + in_bucket[size_t(at)] < target)
      before += in_bucket[size_t(at++)];
    std::vector<candidate> edge;
    for (size_t i = 0; i < vocab; ++i) {
      const int k = b.of(logits[i]);
      if (k < at)
        c.push_back({logits[i], int32_t(i), mass[i]});
      else if (k == at)
        edge.push_back({logits[i], int32_t(i), mass[i]});
    }
    keep = c.size();
    if (!edge.empty()) {
      const size_t n = nucleus(edge, target - before);
      c.insert(c.end(), edge.begin(), edge.begin() + std::ptrdiff_t(n));
      keep = c.size();
    }
  } else {
    // min-p alone: mass >= min_p needs logit >= mx + log(min_p); the exact test on those near it.
    const float floor = std::min(mx, mx + std::log(p.min_p) - 1e-3f);
    for (size_t i = 0; i < vocab; ++i)
      if (logits[i] >= floor) c.push_back({logits[i], int32_t(i), b.mass(logits[i])});
    keep = c.size();
  }
  if (min_p) {
    // p_i >= min_p * p_max  <=>  exp(l_i - l_max) >= min_p; the most likely tokens (mass 1) stay.
    auto last = std::partition(
        c.begin(), c.begin() + std::ptrdiff_t(keep),
        [&](const candidate& x) { return x.logit == mx || double(x.mass) >= double(p.min_p); });
    keep = size_t(last - c.begin());
  }
  std::fill(logits.begin(), logits.end(), -INFINITY);
  for (size_t i = 0; i < keep; ++i) logits[size_t(c[i].id)] = c[i].logit;
}

namespace {

// Steps 0-6 on a copy of `raw`; `lp` gets the log-softmax of the processed row.
std::vector<float> processed_row(std::span<const float> raw, sampling_state& st,
                                 std::vector<float>& lp) {
  std::vector<float> row(raw.begin(), raw.end());
  if (!st.params.allowed_token_ids.empty()) {  // allowed_token_ids: every other logit -inf
    std::vector<float> kept;
    kept.reserve(st.params.allowed_token_ids.size());
    for (int32_t id : st.params.allowed_token_ids)
      kept.push_back(id >= 0 && size_t(id) < row.size() ? row[size_t(id)] : -INFINITY);
    std::fill(row.begin(), row.end(), -INFINITY);
    for (size_t i = 0; i < kept.size(); ++i)
      if (const int32_t id = st.params.allowed_token_ids[i]; id >= 0 && size_t(id) < row.size())
        row[size_t(id)] = kept[i];
  }
  if (st.matcher) {
    st.matcher->fill_mask(st.mask);
    apply_grammar_mask(row, st.mask);
    if (st.num_output < st.params.min_tokens) {
      std::vector<float> masked = row;
      apply_penalties(row, st);
      if (std::none_of(row.begin(), row.end(), [](float v) { return v > -INFINITY; })) {
        row = std::move(masked);
        apply_penalties(row, st, /*min_tokens_mask=*/false);
      }
    } else {
      apply_penalties(row, st);
    }
  } else {
    apply_penalties(row, st);
  }
  apply_temperature_and_filters(row, st.params);
  log_softmax(row, lp);
  return row;
}

// Inverse CDF draw over exp(lp), skipping `excluded` (-1: none) and scaling u by the remaining
// mass. Always advances the rng once.
int32_t draw(const std::vector<float>& lp, seq_rng& rng, int32_t excluded, double mass) {
  const double u = rng.uniform() * mass;
  double cum = 0.0;
  int32_t last_finite = -1;
  for (size_t i = 0; i < lp.size(); ++i) {
    if (lp[i] == -INFINITY || int32_t(i) == excluded) continue;
    last_finite = int32_t(i);
    cum += std::exp(double(lp[i]));
    if (u < cum) return int32_t(i);
  }
  return last_finite;  // rounding left u just above the total mass
}

void fill_top_logprobs(const std::vector<float>& lp, const sampling_state& st, sample_output& out) {
  out.logprob = lp[size_t(out.token)];
  if (st.params.logprobs <= 0) return;
  const size_t n = std::min(size_t(st.params.logprobs), lp.size());
  std::vector<int32_t> idx(lp.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(
      idx.begin(), idx.begin() + std::ptrdiff_t(n), idx.end(), [&](int32_t a, int32_t b) {
        return lp[size_t(a)] > lp[size_t(b)] || (lp[size_t(a)] == lp[size_t(b)] && a < b);
      });
  for (size_t i = 0; i < n; ++i)
    if (lp[size_t(idx[i])] != -INFINITY) out.top_logprobs.push_back({idx[i], lp[size_t(idx[i])]});
}

// True when steps 0-6 leave the row as the model gave it: no grammar, bias, min_tokens masking or
// penalties (temperature and filters aside).
bool row_as_is(const sampling_state& st) {
  const sampling_params& p = st.params;
  return !st.matcher && p.logit_bias.empty() && p.allowed_token_ids.empty() &&
         st.num_output >= p.min_tokens &&
         (p.repetition_penalty == 1.0f || p.repetition_penalty <= 0.0f) &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f;
}

// Greedy on an untouched row without top logprobs: the argmax and log-sum-exp in one kernel, no
// copies; the same token and logprob as the general path, bit for bit. False: take that path.
bool greedy_as_is(std::span<const float> raw, const sampling_state& st, sample_output& out) {
  if (!st.params.greedy() || st.params.logprobs > 0 || !row_as_is(st)) return false;
  int64_t tok = -1;
  const float lse = log_sum_exp_argmax(raw.data(), raw.size(), tok);
  if (tok < 0 || !std::isfinite(lse)) return false;
  out.token = int32_t(tok);
  out.logprob = raw[size_t(tok)] - lse;
  return true;
}

}  // namespace

sample_output sample_token(std::span<const float> raw, sampling_state& st) {
  if (sample_output fast; greedy_as_is(raw, st, fast)) return fast;
  std::vector<float> lp;
  const std::vector<float> row = processed_row(raw, st, lp);
  sample_output out;
  if (st.params.greedy())
    out.token = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
  else
    out.token = std::max(0, draw(lp, st.draw_rng(), -1, 1.0));
  fill_top_logprobs(lp, st, out);
  return out;
}

sample_output verify_token(std::span<const float> raw, sampling_state& st, int32_t draft,
                           bool& accepted) {
  if (sample_output fast; greedy_as_is(raw, st, fast)) {
    accepted = fast.token == draft;
    return fast;
  }
  std::vector<float> lp;
  const std::vector<float> row = processed_row(raw, st, lp);
  sample_output out;
  const bool in_vocab = draft >= 0 && size_t(draft) < lp.size();
  if (st.params.greedy()) {
    out.token = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    accepted = out.token == draft;
  } else {
    const double p =
        in_vocab && lp[size_t(draft)] != -INFINITY ? std::exp(double(lp[size_t(draft)])) : 0.0;
    accepted = p > 0.0 && st.draw_rng().uniform() < p;
    if (accepted) {
      out.token = draft;
    } else {
      const int32_t t = draw(lp, st.rng, in_vocab ? draft : -1, std::max(0.0, 1.0 - p));
      out.token = t >= 0 ? t : std::max(0, draft);  // p == 1 cannot be rejected; defensive
    }
  }
  fill_top_logprobs(lp, st, out);
  return out;
}

sample_output verify_token_q(std::span<const float> raw, sampling_state& st, int32_t draft,
                             std::span<const float> q, bool& accepted) {
  std::vector<float> lp;
  processed_row(raw, st, lp);
  sample_output out;
  const bool in_vocab = draft >= 0 && size_t(draft) < lp.size() && q.size() == lp.size();
  const double p_d =
      in_vocab && lp[size_t(draft)] != -INFINITY ? std::exp(double(lp[size_t(draft)])) : 0.0;
  const double q_d = in_vocab ? double(q[size_t(draft)]) : 0.0;
  seq_rng& rng = st.draw_rng();
  accepted = p_d > 0.0 && (q_d <= p_d || rng.uniform() * q_d < p_d);
  if (accepted) {
    out.token = draft;
  } else {
    // Residual max(0, p - q): an inverse-CDF draw over it (p itself when it has no mass).
    double mass = 0.0;
    std::vector<double> r(lp.size(), 0.0);
    for (size_t i = 0; i < lp.size(); ++i) {
      const double pi = lp[i] == -INFINITY ? 0.0 : std::exp(double(lp[i]));
      r[i] = std::max(0.0, pi - (q.size() == lp.size() ? double(q[i]) : 0.0));
      mass += r[i];
    }
    if (mass <= 1e-12) {
      out.token = std::max(0, draw(lp, rng, -1, 1.0));
    } else {
      const double u = rng.uniform() * mass;
      double cum = 0.0;
      out.token = -1;
      for (size_t i = 0; i < r.size(); ++i) {
        if (r[i] <= 0.0) continue;
        cum += r[i];
        out.token = int32_t(i);
        if (u < cum) break;
      }
    }
  }
  fill_top_logprobs(lp, st, out);
  return out;
}

int32_t draft_sample(std::span<const float> raw, const sampling_params& p, seq_rng& rng,
                     std::vector<float>& q) {
  std::vector<float> row(raw.begin(), raw.end());
  apply_temperature_and_filters(row, p);
  std::vector<float> lp;
  log_softmax(row, lp);
  q.resize(lp.size());
  for (size_t i = 0; i < lp.size(); ++i) q[i] = lp[i] == -INFINITY ? 0.0f : std::exp(lp[i]);
  return std::max(0, draw(lp, rng, -1, 1.0));
}

prompt_logprob score_prompt_token(std::span<const float> raw, int32_t token, int32_t top_n) {
  const float lse = log_sum_exp(raw.data(), raw.size());
  prompt_logprob e;
  e.token = token;
  const float at = raw[size_t(token)];
  e.logprob = at - lse;
  int32_t above = 0;
  for (float v : raw) above += v > at ? 1 : 0;
  e.rank = 1 + above;
  const size_t n = std::min(size_t(std::max(top_n, 0)), raw.size());
  if (n > 0) {
    std::vector<int32_t> idx(raw.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(
        idx.begin(), idx.begin() + std::ptrdiff_t(n), idx.end(), [&](int32_t a, int32_t b) {
          return raw[size_t(a)] > raw[size_t(b)] || (raw[size_t(a)] == raw[size_t(b)] && a < b);
        });
    for (size_t i = 0; i < n; ++i) e.top.push_back({idx[i], raw[size_t(idx[i])] - lse});
  }
  return e;
}

}  // namespace coserve
