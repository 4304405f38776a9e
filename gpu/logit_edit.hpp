// Sparse logits processors for device sampling: logit_bias, min_tokens masking, repetition penalty
// (HF) and presence/frequency penalties (OpenAI), in the CPU sampler's order (model/sampler.hpp,
// steps 1-4). The host turns each sampled row's state into at most one edit per (row, token)
// (penalty_edits); the kernel (gpu/kernels/logit_edits.cuh) applies them with one thread per edit,
// so no two threads touch one logit. Plain C++: the builder and apply_logit_edit are the CPU
// reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "model/sampling_params.hpp"

#if defined(__CUDACC__)
#define COSERVE_LOGIT_HD __host__ __device__ __forceinline__
#else
#define COSERVE_LOGIT_HD inline
#endif

namespace coserve::gpu {

// Device layout (28 bytes): row i32 | token i32 | bias f32 | repetition f32 | subtract f32 | mask
// i32 | count i32.
struct logit_edit {
  int32_t row;  // sampled row (index into the logits matrix)
  int32_t token;
  float bias;         // added first (logit_bias)
  float repetition;   // 1: none; else positive logits divided, negative multiplied
  float subtract;     // frequency * count + presence * [count > 0]
  int32_t mask;       // 1: set to -inf (min_tokens not reached: eos / stop ids)
  int32_t count = 0;  // the token's output count the edit was built from
};
static_assert(sizeof(logit_edit) == 28);

// A row whose sequence has one token still being sampled when the row's edits are built (its
// previous step is in flight): the token is read on the device from last_tokens[slot], and its
// edit is that of the host's history with the token counted once more (pending_edit).
struct pending_penalty {
  int32_t row;
  int32_t slot;                  // the sequence's entry in the device's last-token buffer
  int32_t edit_begin, edit_end;  // the row's edits (ascending tokens) in the step's edit list
  float repetition;              // the request's penalties
  float presence;
  float frequency;
};
static_assert(sizeof(pending_penalty) == 28);

// frequency * count + presence (the presence / frequency subtraction of a token seen `count`
// times), the product rounded before the sum on the host and the device alike (no FMA contraction),
// so every path that computes it gives the same bits.
COSERVE_LOGIT_HD float penalty_subtract(float frequency, float presence, int32_t count) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(frequency, float(count)), presence);
#else
  volatile float product = frequency * float(count);
  return product + presence;
#endif
}

// The edit token `t` takes once the pending token t is counted: the row's edit for t (binary
// search over its ascending edits), or none, with the repetition penalty applied (t is now seen)
// and the presence / frequency subtraction at count + 1.
COSERVE_LOGIT_HD logit_edit pending_edit(const logit_edit* edits, const pending_penalty& pp,
                                         int32_t t) {
  logit_edit e{pp.row, t, 0.0f, 1.0f, 0.0f, 0, 0};
  int32_t lo = pp.edit_begin, hi = pp.edit_end;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    if (edits[mid].token < t)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < pp.edit_end && edits[lo].token == t) e = edits[lo];
  if (pp.repetition != 1.0f && pp.repetition > 0.0f) e.repetition = pp.repetition;
  if (pp.presence != 0.0f || pp.frequency != 0.0f) {
    e.count += 1;
    e.subtract = penalty_subtract(pp.frequency, pp.presence, e.count);
  }
  return e;
}

COSERVE_LOGIT_HD float apply_logit_edit(float l, const logit_edit& e) {
  l += e.bias;
  if (e.mask) l = -INFINITY;
  if (e.repetition != 1.0f) l = l > 0.0f ? l / e.repetition : l * e.repetition;
  return l - e.subtract;
}

// ---- Penalties from token counts kept on the device ----
// A sequence with penalties may own a row of `vocab` 32-bit counts on the device (vLLM keeps the
// same per-request output counts): bits 0-30 count the token in the output, bit 31 marks a token
// of the prompt when the repetition penalty is on. The row is written once when the sequence gets
// it (reset, then the entries of penalty_edits::device_entries), and after that only on the
// device: each step adds its sampled token (launch_count_sampled). Steps then need no edit list for
// penalties, and a penalised decode step can replay its CUDA graph.
inline constexpr uint32_t k_count_prompt_bit = 0x80000000u;

struct penalty_count_entry {  // device layout (12 bytes): row i32 | token i32 | value u32
  int32_t row;                // the penalty row
  int32_t token;
  uint32_t value;  // output count | k_count_prompt_bit
};
static_assert(sizeof(penalty_count_entry) == 12);

// Steps 3-4 of the CPU sampler for one token from its count word: apply_logit_edit with the edit
// penalty_edits keeps for the token (no bias or mask: those stay sparse edits, applied before
// this).
COSERVE_LOGIT_HD float apply_penalty_count(float l, uint32_t v, float repetition, float presence,
                                           float frequency) {
  if (v == 0) return l;
  const auto count = int32_t(v & ~k_count_prompt_bit);
  const bool subtracts = count > 0 && (presence != 0.0f || frequency != 0.0f);
  return apply_logit_edit(
      l, logit_edit{0, 0, 0.0f, repetition,
                    subtracts ? penalty_subtract(frequency, presence, count) : 0.0f, 0, count});
}

// A sequence's edits kept up to date as its tokens arrive, so a step copies them instead of
// rebuilding them from the whole history: one edit per token the repetition penalty (prompt and
// output tokens) or the presence / frequency penalties (output tokens, with their counts) touch,
// ascending tokens, built from the prompt once and updated per output token in O(log n) plus the
// insert's shift. append() merges in logit_bias and min_tokens masking: at most one edit per
// token, tokens outside [0, vocab) ignored, as the CPU sampler does. Without penalties it holds
// nothing.
class penalty_edits {
 public:
  penalty_edits() = default;
  penalty_edits(const sampling_params& p, const std::vector<int32_t>& prompt, int32_t vocab)
      : repetition_(p.repetition_penalty != 1.0f && p.repetition_penalty > 0.0f
                        ? p.repetition_penalty
                        : 1.0f),
        presence_(p.presence_penalty),
        frequency_(p.frequency_penalty),
        vocab_(vocab) {
    if (repetition_ == 1.0f) return;  // the prompt counts for the repetition penalty only
    for (int32_t t : prompt) at(t);
  }
  void accept(int32_t t) {
    if (repetition_ == 1.0f && presence_ == 0.0f && frequency_ == 0.0f) return;
    logit_edit* e = at(t);
    if (e == nullptr || (presence_ == 0.0f && frequency_ == 0.0f)) return;
    ++e->count;
    e->subtract = penalty_subtract(frequency_, presence_, e->count);
  }
  // with_penalties false: logit_bias and min_tokens only (the row's penalties come from its counts
  // on the device, apply_penalty_count).
  void append(int32_t row, const sampling_params& p, int32_t num_output,
              const std::vector<int32_t>& eos_ids, std::vector<logit_edit>& out,
              bool with_penalties = true) const {
    std::map<int32_t, logit_edit> extra;  // logit_bias and min_tokens masks: a handful of tokens
    auto x = [&](int32_t t) -> logit_edit& {
      auto it = extra.find(t);
      if (it == extra.end())
        it = extra.emplace(t, logit_edit{row, t, 0.0f, 1.0f, 0.0f, 0, 0}).first;
      return it->second;
    };
    auto in_range = [&](int32_t t) { return t >= 0 && t < vocab_; };
    for (auto [tok, bias] : p.logit_bias)
      if (in_range(tok)) x(tok).bias += bias;
    if (num_output < p.min_tokens) {
      if (!p.ignore_eos)
        for (int32_t t : eos_ids)
          if (in_range(t)) x(t).mask = 1;
      for (int32_t t : p.stop_token_ids)
        if (in_range(t)) x(t).mask = 1;
    }
    if (!with_penalties) {
      for (const auto& [t, e] : extra) out.push_back(e);
      return;
    }
    out.reserve(out.size() + base_.size() + extra.size());
    auto it = extra.begin();
    for (const logit_edit& b : base_) {
      for (; it != extra.end() && it->first < b.token; ++it) out.push_back(it->second);
      logit_edit e = b;
      e.row = row;
      if (it != extra.end() && it->first == b.token) {
        e.bias = it->second.bias;
        e.mask = it->second.mask;
        ++it;
      }
      out.push_back(e);
    }
    for (; it != extra.end(); ++it) out.push_back(it->second);
  }
  size_t size() const noexcept { return base_.size(); }
  // The non-zero words of this history's count row (see k_count_prompt_bit), for penalty row
  // `row`: every kept token is marked seen when the repetition penalty is on (it applies to
  // prompt and output tokens alike), with its output count.
  void device_entries(int32_t row, std::vector<penalty_count_entry>& out) const {
    for (const logit_edit& b : base_) {
      const uint32_t v = uint32_t(b.count) | (repetition_ != 1.0f ? k_count_prompt_bit : 0u);
      if (v != 0) out.push_back({row, b.token, v});
    }
  }

 private:
  // The token's edit, inserted in order the first time (the repetition penalty applies from then).
  logit_edit* at(int32_t t) {
    if (t < 0 || t >= vocab_) return nullptr;
    auto it = std::lower_bound(base_.begin(), base_.end(), t,
                               [](const logit_edit& e, int32_t v) { return e.token < v; });
    if (it == base_.end() || it->token != t)
      it = base_.insert(it, logit_edit{0, t, 0.0f, repetition_, 0.0f, 0, 0});
    return &*it;
  }
  std::vector<logit_edit> base_;
  float repetition_ = 1.0f, presence_ = 0.0f, frequency_ = 0.0f;
  int32_t vocab_ = 0;
};

}  // namespace coserve::gpu
