// CPU reference of device sampling (gpu/kernels/sampling.cuh), written the direct way: sort the
// scaled logits, cut top-k / top-p / min-p on the sorted list (ties at a cut kept), then Gumbel-max
// with the same counter-based uniforms; logprob and top logprobs over the kept set. Same contract
// as launch_sample.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "gpu/rng.hpp"
#include "gpu/sample_row_params.hpp"

namespace coserve::gpu::ref {

struct sample_out {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>>
      top;  // min(top_n, 20) kept ids by value (lower id first), logprobs
};

inline sample_out sample_ref(const float* x, int32_t vocab, const sample_row_params& p) {
  const bool greedy = p.temperature <= 0.0f;
  const float inv_t = greedy ? 1.0f : 1.0f / p.temperature;
  std::vector<float> v(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) v[size_t(i)] = x[i] * inv_t;
  const float mx = *std::max_element(v.begin(), v.end());
  float thr = -INFINITY;  // kept: v >= thr
  int32_t best = 0;
  if (greedy) {
    best = int32_t(std::max_element(v.begin(), v.end()) - v.begin());  // first maximum
  } else {
    std::vector<float> sorted = v;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    thr = sorted.back();
    if (p.top_k > 0 && p.top_k < vocab) thr = sorted[size_t(p.top_k) - 1];
    if (p.top_p < 1.0f) {
      double total = 0.0;
      for (float f : sorted)
        if (f >= thr) total += std::exp(double(f) - mx);
      double cum = 0.0;
      for (size_t i = 0; i < sorted.size() && sorted[i] >= thr; ++i) {
        cum += std::exp(double(sorted[i]) - mx);
        // include every tie of sorted[i] before deciding
        if ((i + 1 == sorted.size() || sorted[i + 1] != sorted[i]) &&
            cum >= double(p.top_p) * total) {
          thr = sorted[i];
          break;
        }
      }
    }
    if (p.min_p > 0.0f) thr = std::max(thr, mx + std::log(p.min_p));
    float best_score = -INFINITY;
    for (int32_t i = 0; i < vocab; ++i) {
      if (v[size_t(i)] < thr) continue;
      const float score =
          v[size_t(i)] - std::log(-std::log(uniform01(p.seed, p.counter, uint64_t(i))));
      if (score > best_score) {
        best_score = score;
        best = i;
      }
    }
  }
  double z = 0.0;
  for (float f : v)
    if (f >= thr) z += std::exp(double(f) - mx);
  sample_out out{best, float(double(v[size_t(best)]) - mx - std::log(z)), {}};
  std::vector<int32_t> kept;
  for (int32_t i = 0; i < vocab; ++i)
    if (v[size_t(i)] >= thr && v[size_t(i)] > -INFINITY) kept.push_back(i);
  std::stable_sort(kept.begin(), kept.end(),
                   [&](int32_t a, int32_t b) { return v[size_t(a)] > v[size_t(b)]; });
  for (size_t k = 0; k < kept.size() && k < size_t(std::min(p.top_n, 20)); ++k)
    out.top.emplace_back(kept[k], float(double(v[size_t(kept[k])]) - mx - std::log(z)));
  return out;
}

}  // namespace coserve::gpu::ref
