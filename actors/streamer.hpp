// streamer — turns sampled tokens into each request's output events: incremental detokenization,
// stop strings (text that may still become a stop string is held back; the stop string itself is
// not output unless asked), finish reasons, usage, logprobs, latency metrics (TTFT, ITL, e2e).
// A stop string ends the sample here and is reported to the scheduler.
//
// Failures: fail_all (the engine failed) ends every open stream with an error event. A handler
// that throws ends every stream the streamer held with an error event and cancels their
// sequences; the supervisor then restarts it empty.
//
// Sends to: the scheduler (finish_sequence on a stop string, cancel_sequences when it fails),
// intake (request_closed when a request ends, cancel_request for a stream cancelled while intake's
// mailbox was full).
//
// Threads: an actor on the runtime's pool. Streams are concurrent channels: events are sent from
// here and received on the client's executor.
#pragma once

#include <chrono>
#include <memory>
#include <unordered_map>
#include <vector>

#include "actors/engine_shared.hpp"
#include "actors/intake_messages.hpp"
#include "actors/scheduler_messages.hpp"
#include "actors/stop_checker.hpp"
#include "actors/stream_impl.hpp"
#include "actors/streamer_messages.hpp"
#include "model/text/tokenizer/incremental_detokenizer.hpp"
#include "model/text/tokenizer/tokenizer.hpp"
#include "runtime/actor.hpp"
#include "runtime/outbox.hpp"

namespace coserve::actors {

class streamer {
 public:
  using messages = streamer_protocol::messages;

  struct links {
    rt::actor_ref<scheduler_protocol> scheduler;
    rt::actor_ref<intake_protocol> intake;
  };
  // tok may be null (token ids only: no text, no stop strings).
  streamer(std::shared_ptr<engine_shared> shared, links to, const tokenizer* tok)
      : shared_(std::move(shared)), to_(std::move(to)), tok_(tok) {}
  void on_start(rt::actor_context<streamer>& ctx) { trace_id_ = ctx.self.cell().trace_id(); }

  void handle(open_stream& m);
  rt::maybe_async handle(token_batch& m);
  rt::maybe_async handle(end_request& m);
  rt::maybe_async handle(fail_all& m);
  // Supervision hook: a handler threw; settle every request held before the restart.
  void on_failure(const std::string& what);

 private:
  using clock = std::chrono::steady_clock;
  struct sample {
    std::unique_ptr<incremental_detokenizer> detok;
    std::unique_ptr<stop_checker> stops;
    bool done = false;
  };
  struct state {
    std::shared_ptr<stream_impl> stream;
    sampling_params params;
    bool return_logits = false;
    bool return_token_text = false;
    std::vector<sample> samples;
    int32_t live = 0;
    bool first_token_seen = false;
    bool cancel_sent = false;
    clock::time_point last_token;
  };
  // One sampled token to its stream: text, stop strings, logprobs, usage. Returns true when the
  // request ended with it.
  bool emit(token_event& e, state& st, clock::time_point now, rt::outbox& out);
  // The event's logprob token strings (each id decoded on its own).
  void add_token_texts(const token_event& e, const state& st, output_event& ev) const;
  // Ends one sample; the request when it was the last. Returns true when the request ended.
  bool end_sample(uint64_t rid, state& st, output_event ev, rt::outbox& out);
  // Ends every unfinished sample of the request with `reason`; true when the request ended.
  bool end_all_samples(uint64_t rid, state& st, finish_reason reason, const std::string& message,
                       rt::outbox& out);

  std::shared_ptr<engine_shared> shared_;
  links to_;
  const tokenizer* tok_;
  uint32_t trace_id_ = 0;
  std::unordered_map<uint64_t, state> states_;
  std::vector<uint64_t> traced_;  // scratch
};

}  // namespace coserve::actors
