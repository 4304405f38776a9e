// RoPE inverse frequencies, computed on the host once at load (default and Llama-3 scaling, as in
// Hugging Face's _compute_default_rope_parameters / _compute_llama3_parameters) and uploaded; the
// kernel only evaluates angle = position * inv_freq[i]. Shared by the executor and the references.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace coserve::gpu {

struct rope_params {
  float theta = 10000.0f;
  int32_t rotary_dim = 128;  // == head_dim for the supported families
  bool llama3 = false;       // rope_scaling.rope_type == "llama3"
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int32_t original_max_position = 8192;
};

inline std::vector<float> rope_inv_freq(const rope_params& p) {
  const int32_t half = p.rotary_dim / 2;
  std::vector<float> f(size_t(half), 0.0f);
  for (int32_t i = 0; i < half; ++i) {
    double inv = 1.0 / std::pow(double(p.theta), double(2 * i) / double(p.rotary_dim));
    if (p.llama3) {
      const double low_wavelen = p.original_max_position / p.low_freq_factor;
      const double high_wavelen = p.original_max_position / p.high_freq_factor;
      const double wavelen = 2.0 * M_PI / inv;
      if (wavelen > low_wavelen) {
        inv = inv / p.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (p.original_max_position / wavelen - p.low_freq_factor) /
                              (p.high_freq_factor - p.low_freq_factor);
        inv = (1.0 - smooth) * inv / p.factor + smooth * inv;
      }
    }
    f[size_t(i)] = float(inv);
  }
  return f;
}

}  // namespace coserve::gpu
