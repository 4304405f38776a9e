// Sparse logits processors for device sampling: logit_bias, min_tokens masking, repetition penalty
// (HF) and presence/frequency penalties (OpenAI), in the CPU sampler's order (model/sampler.hpp,
// steps 1-4). The host turns each sampled row's state into at most one edit per (row, token); the
// kernel (gpu/kernels/logit_edits.cuh) applies them with one thread per edit, so no two threads
// touch one logit. Plain C++: the builder and apply_logit_edit are the CPU reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "model/sampling_params.hpp"

#if defined(__CUDACC__)
#define COSERVE_LOGIT_HD __host__ __device__ __forceinline__
#else
#define COSERVE_LOGIT_HD inline
#endif

namespace coserve::gpu {

// Device layout (24 bytes): row i32 | token i32 | bias f32 | repetition f32 | subtract f32 | mask i32.
struct logit_edit {
  int32_t row;         // sampled row (index into the logits matrix)
  int32_t token;
  float bias;          // added first (logit_bias)
  float repetition;    // 1: none; else positive logits divided, negative multiplied
  float subtract;      // frequency * count + presence * [count > 0]
  int32_t mask;        // 1: set to -inf (min_tokens not reached: eos / stop ids)
};
static_assert(sizeof(logit_edit) == 24);

COSERVE_LOGIT_HD float apply_logit_edit(float l, const logit_edit& e) {
  l += e.bias;
  if (e.mask) l = -INFINITY;
  if (e.repetition != 1.0f) l = l > 0.0f ? l / e.repetition : l * e.repetition;
  return l - e.subtract;
}

// Appends the edits of one row. seen: prompt + output tokens; out_count: output token -> count;
// num_output: tokens generated so far; eos_ids: the model's eos ids. Tokens outside [0, vocab) are
// ignored, as the CPU sampler does.
inline void append_logit_edits(int32_t row, const sampling_params& p, const std::unordered_map<int32_t, int32_t>& seen,
                               const std::unordered_map<int32_t, int32_t>& out_count, int32_t num_output,
                               const std::vector<int32_t>& eos_ids, int32_t vocab, std::vector<logit_edit>& out) {
  std::map<int32_t, logit_edit> e;  // ordered: deterministic edit order
  auto at = [&](int32_t t) -> logit_edit& {
    auto it = e.find(t);
    if (it == e.end()) it = e.emplace(t, logit_edit{row, t, 0.0f, 1.0f, 0.0f, 0}).first;
    return it->second;
  };
  auto in_range = [&](int32_t t) { return t >= 0 && t < vocab; };
  for (auto [tok, bias] : p.logit_bias)
    if (in_range(tok)) at(tok).bias += bias;
  if (num_output < p.min_tokens) {
    if (!p.ignore_eos)
      for (int32_t t : eos_ids)
        if (in_range(t)) at(t).mask = 1;
    for (int32_t t : p.stop_token_ids)
      if (in_range(t)) at(t).mask = 1;
  }
  if (p.repetition_penalty != 1.0f && p.repetition_penalty > 0.0f)
    for (auto [tok, _] : seen)
      if (in_range(tok)) at(tok).repetition = p.repetition_penalty;
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)
    for (auto [tok, count] : out_count)
      if (in_range(tok))
        at(tok).subtract = p.frequency_penalty * float(count) + p.presence_penalty * (count > 0 ? 1.0f : 0.0f);
  for (auto& [t, x] : e) out.push_back(x);
}

}  // namespace coserve::gpu
