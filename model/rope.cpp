// RoPE inverse frequencies for a model config (model/cpu_forward.hpp): default, Llama 3, linear,
// YaRN and LongRoPE scaling as transformers computes them, or GGUF's per-frequency divisors.
#include "model/rope.hpp"

#include <algorithm>
#include <cmath>

namespace coserve {

std::vector<float> rope_inv_freq(const model_config& c, bool long_factors) {
  const int32_t dim = c.rotary_dim > 0 ? c.rotary_dim : c.head_dim;  // the rotated dimensions
  const int32_t half = dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int32_t i = 0; i < half; ++i) {
    const float exponent = float(2 * i) / float(dim);
    inv[size_t(i)] = float(1.0 / std::pow(double(c.rope_theta), double(exponent)));
  }
  if (c.rope_scaling.kind == rope_kind::longrope) {
    // 1 / (ext_factor * base^(2i/dim)): the short factors below original_max_position_embeddings,
    // the long ones from there on (model/cpu_forward.cpp picks per position).
    const auto& f = long_factors ? c.rope_scaling.long_factor : c.rope_scaling.short_factor;
    for (int32_t i = 0; i < half; ++i) {
      const float exponent = float(2 * i) / float(dim);
      inv[size_t(i)] =
          float(1.0 / (double(f[size_t(i)]) * std::pow(double(c.rope_theta), double(exponent))));
    }
    return inv;
  }
  if (!c.rope_freq_factors.empty()) {
    for (int32_t i = 0; i < half; ++i) inv[size_t(i)] /= c.rope_freq_factors[size_t(i)];
    return inv;
  }
  if (c.rope_scaling.kind == rope_kind::llama3) {
    // Same rule as transformers' _compute_llama3_parameters.
    const auto& s = c.rope_scaling;
    const float old_len = float(s.original_max_position_embeddings);
    const float low_wavelen = old_len / s.low_freq_factor;
    const float high_wavelen = old_len / s.high_freq_factor;
    const float pi = 3.14159265358979323846f;
    for (float& f : inv) {
      const float wavelen = 2.0f * pi / f;
      float scaled = wavelen > low_wavelen ? f / s.factor : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        scaled = (1.0f - smooth) * scaled / s.factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  if (c.rope_scaling.kind == rope_kind::linear)
    for (float& f : inv) f /= c.rope_scaling.factor;  // positions divided by the factor
  if (c.rope_scaling.kind == rope_kind::yarn) {
    // transformers' _compute_yarn_parameters: interpolated (divided by the factor) below the
    // correction range's low dimension, extrapolated (kept) above its high one, a linear ramp
    // between.
    const auto& s = c.rope_scaling;
    const double rdim = double(dim), base = double(c.rope_theta), pi = 3.14159265358979323846;
    auto correction_dim = [&](double rotations) {
      return rdim * std::log(double(s.original_max_position_embeddings) / (rotations * 2.0 * pi)) /
             (2.0 * std::log(base));
    };
    double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, rdim - 1.0);
    if (low == high) high += 0.001;
    for (int32_t i = 0; i < half; ++i) {
      const float ramp = std::clamp(float((float(i) - float(low)) / float(high - low)), 0.0f, 1.0f);
      const float extrapolation = 1.0f - ramp;
      const float kept = inv[size_t(i)], interpolated = inv[size_t(i)] / s.factor;
      inv[size_t(i)] = interpolated * (1.0f - extrapolation) + kept * extrapolation;
    }
  }
  return inv;
}

}  // namespace coserve
