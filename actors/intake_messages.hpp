// intake's protocol: admission control, request ids, cancellation, end-of-request bookkeeping.
#pragma once

#include <cstdint>
#include <memory>

#include "actors/request.hpp"
#include "runtime/message.hpp"
#include "runtime/reply.hpp"

namespace coserve::actors {

using submit_reply = rt::reply_ptr<std::shared_ptr<request_stream>>;

// engine::submit → intake. The reply completes once the request is tokenized and queued (the
// stream), or with an error ("queue_full", "engine_down", "invalid_request").
struct submit_request {
  generate_request request;
  submit_reply reply;
};

// request_stream::cancel, streamer → intake (forwarded to the scheduler while the request is open).
struct cancel_request {
  uint64_t request_id = 0;
};

// tokenizer (rejected) / streamer (ended) → intake: the request no longer counts as open.
struct request_closed {
  uint64_t request_id = 0;
};

// engine::drain → intake: abort every open request.
struct abort_all {};

struct intake_protocol {
  using messages = rt::message_list<submit_request, cancel_request, request_closed, abort_all>;
};

}  // namespace coserve::actors
