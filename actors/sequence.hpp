// sequence — one sample of one request as the scheduler sees it (the counting model of
// model/step.hpp): num_tokens() = prompt + known outputs + a token sampled by a step still in
// flight (`pending`); num_computed tokens have their K/V in the cache (as planned). Where the K/V
// live (block tables) is the KV allocator's business (kv_manager).
//
// Threads: none; owned by the step planner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/request.hpp"
#include "actors/speculation.hpp"
#include "model/sampling_params.hpp"
#include "model/step.hpp"

namespace coserve::actors {

// Sequence ids carry their request: (request_id << 16) | sample index (n <= 65535).
inline seq_id_t make_seq_id(uint64_t request_id, int32_t index) noexcept {
  return (request_id << 16) | static_cast<seq_id_t>(index);
}
inline uint64_t request_of(seq_id_t seq) noexcept { return seq >> 16; }

enum class seq_state : uint8_t { waiting, running, finished };

// Fields every step reads come first (with the vectors' sizes: the first two cache lines), then
// the sampling parameters, then what only admissions, forks and ends read.
struct sequence {
  seq_id_t id = 0;
  uint64_t request_id = 0;
  int32_t index = 0;          // sample index in [0, n)
  int32_t pending = 0;        // sampled by an in-flight step, value not yet known (0 or 1)
  uint64_t pending_step = 0;  // the step that samples it
  int32_t num_computed = 0;
  int32_t kv_sent = 0;  // known tokens already sent to the KV allocator
  seq_state state = seq_state::waiting;
  bool cancelled = false;
  finish_reason finish = finish_reason::none;
  // Speculative decoding: proposals of the step in flight (0: none), and the back-off.
  int32_t spec_proposed = 0;
  uint64_t spec_step = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;  // known sampled tokens
  sampling_params params;

  int32_t priority = 0;  // lower first
  uint64_t arrival = 0;  // FCFS order (monotonic counter)
  uint64_t seed = 0;
  int32_t num_cached_prompt = 0;  // prompt tokens served from the prefix cache (first admission)
  seq_id_t fork_parent = 0;       // n > 1: copies the parent's prompt blocks (0: none)
  int32_t num_preemptions = 0;
  speculation_backoff backoff;

  int32_t num_known() const noexcept { return static_cast<int32_t>(prompt.size() + output.size()); }
  int32_t num_tokens() const noexcept { return num_known() + pending; }
  int32_t num_generated() const noexcept { return static_cast<int32_t>(output.size()) + pending; }
  int32_t token_at(int32_t pos) const noexcept {
    const auto p = static_cast<int32_t>(prompt.size());
    return pos < p ? prompt[static_cast<size_t>(pos)] : output[static_cast<size_t>(pos - p)];
  }
};

}  // namespace coserve::actors
