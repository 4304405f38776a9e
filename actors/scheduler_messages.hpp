// scheduler's protocol: tokenized requests in, step outcomes back from the executor, finishes and
// aborts; the engine's failure and its status view.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/request.hpp"
#include "actors/step_draft.hpp"
#include "base/result.hpp"
#include "model/step.hpp"
#include "runtime/message.hpp"
#include "runtime/reply.hpp"

namespace coserve::actors {

class stream_impl;

// tokenizer → scheduler: a validated, tokenized request.
struct add_request {
  uint64_t request_id = 0;
  std::vector<int32_t> prompt;
  sampling_params params;
  int32_t priority = 0;
  std::chrono::steady_clock::time_point submitted;
  std::shared_ptr<const stream_impl> stream;  // its cancel_reason() is checked on arrival
};

// intake, streamer → scheduler: the client is gone, the engine stops with abort, or the streamer
// failed.
struct cancel_sequences {
  uint64_t request_id = 0;
  finish_reason reason = finish_reason::abort;
};

// streamer → scheduler: a stop string ended this sample.
struct finish_sequence {
  uint64_t request_id = 0;
  seq_id_t seq_id = 0;
};

// executor → scheduler: the allocations of the plans the executor received since its last
// step_done, in order; then, when step_id is not 0, that step's sampled tokens or its failure.
struct step_done {
  std::vector<step_allocation> allocations;
  uint64_t step_id = 0;
  result<step_result> outcome;
  bool ran = true;  // false: every sequence was left out (all in an earlier failed step)
};

// engine (an actor stopped, a step stalled) → scheduler: no step will complete again. Every
// request ends with an error and later ones are refused.
struct engine_failed {
  std::string reason;
};

// engine (status views) → scheduler: the requests it holds, running ones first, oldest first.
struct list_requests {
  size_t limit = 0;
  rt::reply_ptr<std::vector<request_status>> reply;
};

struct scheduler_protocol {
  using messages = rt::message_list<add_request, cancel_sequences, finish_sequence, step_done,
                                    engine_failed, list_requests>;
};

}  // namespace coserve::actors
