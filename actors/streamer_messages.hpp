// streamer's protocol: per-request streams, incremental detokenization, stop strings, finishes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/request.hpp"
#include "model/step.hpp"
#include "runtime/message.hpp"

namespace coserve::actors {

class stream_impl;

// tokenizer → streamer, before the request reaches the scheduler.
struct open_stream {
  uint64_t request_id = 0;
  std::shared_ptr<stream_impl> stream;
  sampling_params params;
  bool return_logits = false;
  bool return_token_text = false;  // fill output_event::token_texts / top_logprob_texts
};

struct token_event {
  uint64_t request_id = 0;
  seq_id_t seq_id = 0;
  int32_t index = 0;
  int32_t token = 0;
  finish_reason finish = finish_reason::none;
  float logprob = 0.0f;
  std::vector<token_logprob> top_logprobs;
  std::vector<prompt_logprob> prompt_logprobs;
  std::vector<float> logits;
  std::vector<float> embedding;  // a pooling request's vector (seq_output::embedding)
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_prompt_tokens = 0;
};

// scheduler → streamer: one step's sampled tokens.
struct token_batch {
  uint64_t step_id = 0;
  std::vector<token_event> events;
};

// engine → streamer: the engine failed; every open stream ends with an error event.
struct fail_all {
  std::string reason;
};

// scheduler, tokenizer → streamer: every unfinished sample of the request ends with `reason`.
struct end_request {
  uint64_t request_id = 0;
  finish_reason reason = finish_reason::abort;
  std::string message;
};

struct streamer_protocol {
  using messages = rt::message_list<open_stream, token_batch, end_request, fail_all>;
};

}  // namespace coserve::actors
