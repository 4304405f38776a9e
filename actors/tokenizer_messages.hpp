// tokenizer_actor's interface: chat template + encode + validation, off the I/O threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/intake_messages.hpp"

namespace coserve::actors {

class stream_impl;

// intake → tokenizer: a request to encode, validate and hand to the streamer and the scheduler.
// `cost` is what pipeline::pick_tokenizer added to this actor's load.
struct tokenize_request {
  uint64_t request_id = 0;
  generate_request request;
  std::shared_ptr<stream_impl> stream;
  submit_reply reply;
  int64_t cost = 0;
};

// engine::tokenize → tokenizer (/tokenize).
struct encode_text {
  tokenize_request_input input;
  rt::reply_ptr<std::vector<int32_t>> reply;
  int64_t cost = 0;
};

// engine::detokenize → tokenizer (/detokenize).
struct decode_ids {
  std::vector<int32_t> ids;
  rt::reply_ptr<std::string> reply;
  int64_t cost = 0;
};

}  // namespace coserve::actors
