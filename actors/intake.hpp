// intake — the front of the actor graph: request ids, admission control over a bounded number of
// open requests (over the limit: an immediate "queue_full" rejection, HTTP 429), one output stream
// per request, and cancellation (forwarded to the scheduler while the request is open).
//
// Once the engine has failed, submissions are refused ("engine_down" with the reason).
//
// Sends to: the tokenizer pool (tokenize_request), the scheduler (cancel_sequences).
//
// Threads: an actor on the runtime's pool; its state is touched only by its handlers. Request ids
// come from engine_shared, so a restarted intake never reuses one; on a failure the requests it
// held are ended with an error (through the scheduler) before the restart.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "actors/engine_shared.hpp"
#include "actors/intake_messages.hpp"
#include "actors/scheduler_messages.hpp"
#include "actors/stream_impl.hpp"
#include "actors/tokenizer_messages.hpp"
#include "runtime/actor.hpp"

namespace coserve::actors {

class intake {
 public:
  using messages = intake_protocol::messages;

  struct links {
    std::shared_ptr<tokenizer_pool> tokenizers;
    rt::actor_ref<scheduler_protocol> scheduler;
  };
  // At most `max_open` requests between submission and the end of their stream; a request without
  // a given max_tokens may produce up to max_model_len tokens (its stream's capacity).
  intake(std::shared_ptr<engine_shared> shared, links to, int64_t max_open, int32_t max_model_len)
      : shared_(std::move(shared)),
        to_(std::move(to)),
        max_open_(max_open),
        max_model_len_(max_model_len) {}
  void on_start(rt::actor_context<intake>& ctx) {
    trace_id_ = ctx.self.cell().trace_id();
    self_ = ctx.self;
  }

  asio::awaitable<void> handle(submit_request& m);
  void handle(cancel_request& m);
  void handle(request_closed& m);
  void handle(abort_all& m);
  // Supervision hook: a handler threw; end the requests held (and answer the one in hand).
  void on_failure(const std::string& what);

 private:
  void publish();

  std::shared_ptr<engine_shared> shared_;
  links to_;
  rt::actor_ref<intake_protocol> self_;  // what the streams it hands out cancel through
  int64_t max_open_;
  int32_t max_model_len_;
  uint32_t trace_id_ = 0;
  // Open requests and their streams (weak: the client and the streamer own them). A cancel marks
  // the stream (stream_impl::mark_cancelled) before telling the scheduler.
  std::unordered_map<uint64_t, std::weak_ptr<stream_impl>> open_;
  void cancel(uint64_t rid, const std::weak_ptr<stream_impl>& s, finish_reason why);
  submit_reply in_hand_;  // the submission being handled (answered by on_failure if it throws)
};

}  // namespace coserve::actors
