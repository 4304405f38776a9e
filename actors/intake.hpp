// intake — the front of the actor graph: request ids, admission control over a bounded number of
// open requests (over the limit: an immediate "queue_full" rejection, HTTP 429), one output stream
// per request, and cancellation (forwarded to the scheduler while the request is open).
//
// Once the engine has failed, submissions are refused ("engine_down" with the reason).
//
// Threads: an actor on the runtime's pool; its state is touched only by its handlers. Request ids
// come from the pipeline, so a restarted intake never reuses one; on a failure the requests it
// held are ended with an error (through the scheduler) before the restart.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

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
  // Supervision hook: a handler threw; end the requests held (and answer the one in hand).
  void on_failure(const std::string& what);

 private:
  void publish();

  std::shared_ptr<pipeline> p_;
  int64_t max_open_;
  uint32_t trace_id_ = 0;
  // Open requests and their streams (weak: the client and the streamer own them). A cancel marks
  // the stream (stream_impl::mark_cancelled) before telling the scheduler.
  std::unordered_map<uint64_t, std::weak_ptr<stream_impl>> open_;
  void cancel(uint64_t rid, const std::weak_ptr<stream_impl>& s, finish_reason why);
  submit_reply in_hand_;  // the submission being handled (answered by on_failure if it throws)
};

}  // namespace coserve::actors
