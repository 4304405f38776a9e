// intake — the front of the actor graph: request ids, admission control over a bounded number of
// open requests (over the limit: an immediate "queue_full" rejection, HTTP 429), one output stream
// per request, and cancellation (forwarded to the scheduler while the request is open).
//
// Threads: an actor on the runtime's pool; its state is touched only by its handlers.
#pragma once

#include <cstdint>
#include <unordered_set>

#include "actors/intake_messages.hpp"
#include "actors/pipeline.hpp"
#include "runtime/actor.hpp"

namespace coserve::actors {

class intake {
 public:
  using messages = rt::message_list<submit_request, cancel_request, request_closed, abort_all>;

  // At most `max_open` requests between submission and the end of their stream.
  intake(std::shared_ptr<pipeline> p, int64_t max_open) : p_(std::move(p)), max_open_(max_open) {}
  void on_start(rt::actor_context<intake>& ctx) { trace_id_ = ctx.self.cell().trace_id(); }

  asio::awaitable<void> handle(submit_request& m);
  void handle(cancel_request& m);
  void handle(request_closed& m);
  void handle(abort_all& m);

 private:
  void publish();

  std::shared_ptr<pipeline> p_;
  int64_t max_open_;
  uint32_t trace_id_ = 0;
  uint64_t next_id_ = 1;
  std::unordered_set<uint64_t> open_;
};

}  // namespace coserve::actors
