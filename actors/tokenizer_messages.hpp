// tokenizer_actor's interface: chat template + encode + validation, off the I/O threads.
#pragma once

#include <cstdint>
#include <memory>

#include "actors/intake_messages.hpp"

namespace coserve::actors {

class stream_impl;

// intake → tokenizer.
struct tokenize_request {
  uint64_t request_id = 0;
  generate_request request;
  std::shared_ptr<stream_impl> stream;
  submit_reply reply;
};

}  // namespace coserve::actors
