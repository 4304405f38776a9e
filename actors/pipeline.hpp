// pipeline — what the serving actors share: references to each other (set once, before the first
// request), the per-request output stream, and the metrics cell each actor publishes into.
//
//   engine::submit ──▶ intake ──▶ tokenizer[i] ─▶ scheduler ◀──────── step_done ─────┐
//                                     │            │ step_draft                     │
//                                     │            ▼                                │
//                                     │        kv_allocator ── execute_step ──▶ executor
//                                     ▼            │
//                                 streamer ◀── token_batch (scheduler) ──▶ request_stream
//
// Threads: actor refs are written before any message flows and only read afterwards (the mailbox
// hand-off orders the reads). Metrics fields are written by one actor each (atomics, and a mutex
// for the latency samples) and read by engine::metrics() on any thread.
#pragma once

#include <array>
#include <asio/experimental/concurrent_channel.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "actors/engine.hpp"
#include "runtime/actor.hpp"

namespace coserve::rt {
class system;
}

namespace coserve::actors {

class intake;
class tokenizer_actor;
class scheduler;
class kv_allocator;
class executor_actor;
class streamer;

// seq ids carry their request: (request_id << 16) | sample index (n <= 65535).
inline seq_id_t make_seq_id(uint64_t request_id, int32_t index) noexcept {
  return (request_id << 16) | static_cast<seq_id_t>(index);
}
inline uint64_t request_of(seq_id_t seq) noexcept { return seq >> 16; }

// A fixed-bucket latency histogram that actors observe into and metrics() copies out. Any thread.
class latency_histogram {
 public:
  explicit latency_histogram(std::vector<double> bounds) {
    snap_.bounds = std::move(bounds);
    snap_.counts.assign(snap_.bounds.size() + 1, 0);
  }
  void observe(double seconds);
  histogram_snapshot snapshot() const {
    std::lock_guard lock(mu_);
    return snap_;
  }

 private:
  mutable std::mutex mu_;
  histogram_snapshot snap_;
};

// vLLM's buckets for the same metrics.
std::vector<double> ttft_buckets();
std::vector<double> itl_buckets();
std::vector<double> request_latency_buckets();

struct pipeline_metrics {
  // intake
  std::atomic<int64_t> open_requests{0}, rejected{0};
  // scheduler
  std::atomic<int64_t> running{0}, waiting{0}, preemptions{0}, prompt_tokens{0}, steps{0};
  std::atomic<int64_t> waiting_tokens{0};  // prompt tokens of waiting sequences not yet computed
  // kv_allocator
  std::atomic<int64_t> kv_total{0}, kv_free{0}, kv_cached_free{0}, prefix_queries{0},
      prefix_hits{0};
  // streamer
  std::atomic<int64_t> generation_tokens{0}, finished_stop{0}, finished_length{0},
      finished_abort{0}, finished_error{0};
  // latency (scheduler: queue time; streamer: the rest)
  latency_histogram ttft{ttft_buckets()}, itl{itl_buckets()}, e2e{request_latency_buckets()},
      queue{request_latency_buckets()};
  // grammar actor
  std::atomic<int64_t> grammar_compiles{0}, grammar_cache_hits{0}, grammar_failures{0},
      grammar_compile_us{0}, grammar_cache_bytes{0};
  // scheduler: speculative decoding
  std::atomic<int64_t> spec_drafts{0}, spec_draft_tokens{0}, spec_accepted_tokens{0};
  static constexpr size_t k_spec_positions = 16;
  std::array<std::atomic<int64_t>, k_spec_positions> spec_accepted_per_position{};
  std::atomic<int32_t> spec_positions{0};  // num_speculative_tokens (0: off)
  // executor: when the step now running started (tracer clock, ns), 0 while idle; steps launched
  // while another was still running (queued behind it on the device or the CPU step thread)
  std::atomic<int64_t> step_started_ns{0};
  std::atomic<int64_t> steps_launched_ahead{0};
};

// The engine's health: ready until something makes every later step fail (a stopped actor, a
// sticky device error, too many failed steps in a row, a stalled step); then failed for good,
// with the first reason. Any thread.
class engine_health {
 public:
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  // Returns true for the call that marked the failure (later reasons are dropped).
  bool fail(std::string reason) {
    std::lock_guard lock(mu_);
    if (failed_.load(std::memory_order_relaxed)) return false;
    reason_ = std::move(reason);
    failed_.store(true, std::memory_order_release);
    return true;
  }
  std::string reason() const {
    std::lock_guard lock(mu_);
    return reason_;
  }

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::string reason_;
};

struct pipeline {
  rt::system* sys = nullptr;
  rt::actor_ref<intake> intake_ref;
  // The tokenizer pool. tokenizer_load[i]: the input bytes sent to actor i and not yet handled
  // (pick_tokenizer adds, the actor subtracts when its handler ends).
  std::vector<rt::actor_ref<tokenizer_actor>> tokenizer_refs;
  std::unique_ptr<std::atomic<int64_t>[]> tokenizer_load;
  // The least loaded tokenizer; adds `cost` to its load. Any thread.
  size_t pick_tokenizer(int64_t cost);
  void tokenizer_done(size_t index, int64_t cost) {
    tokenizer_load[index].fetch_sub(cost, std::memory_order_relaxed);
  }
  int64_t max_waiting_tokens = 0;  // engine_config::max_waiting_tokens
  int32_t max_model_len = 0;
  rt::actor_ref<scheduler> scheduler_ref;
  rt::actor_ref<kv_allocator> kv_ref;
  rt::actor_ref<executor_actor> executor_ref;
  rt::actor_ref<streamer> streamer_ref;
  pipeline_metrics metrics;
  engine_health health;
  std::atomic<uint64_t> next_request_id{1};  // intake's, kept here so a restarted intake goes on
  // Open requests (submitted, stream not ended): intake updates it; stop() waits on the cv.
  std::mutex open_mu;
  std::condition_variable open_cv;
  // Fault injection (engine_config::fault_hook): called as a serving actor starts handling a
  // message; whatever it throws is that handler's failure. Empty in normal use.
  std::function<void(std::string_view actor, std::string_view message)> fault_hook;
  void fault_point(std::string_view actor, std::string_view message) const {
    if (fault_hook) fault_hook(actor, message);
  }
  // Marks the engine failed and ends every open request with an error (see engine.cpp).
  std::function<void(const std::string& reason)> on_engine_failure;
};

// One request's output: a channel of events the streamer fills and the client drains.
class stream_impl final : public request_stream {
 public:
  using clock = std::chrono::steady_clock;
  stream_impl(uint64_t id, size_t capacity, std::weak_ptr<pipeline> p);
  uint64_t id() const noexcept override { return id_; }
  const std::vector<int32_t>& prompt_ids() const noexcept override { return prompt_; }
  const std::string& prompt_text() const noexcept override { return prompt_text_; }
  asio::awaitable<std::optional<output_event>> next() override;
  void cancel() noexcept override;

  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }
  // Why the request was cancelled (abort: client gone or engine drain; error: an actor failed), or
  // none. Set before the cancel is sent to the scheduler, so a scheduler that receives the request
  // after the cancel (requests are tokenized in parallel) still sees it. First reason wins.
  void mark_cancelled(finish_reason r) noexcept {
    uint8_t none = 0;
    cancel_reason_.compare_exchange_strong(none, static_cast<uint8_t>(r),
                                           std::memory_order_release);
  }
  finish_reason cancel_reason() const noexcept {
    return static_cast<finish_reason>(cancel_reason_.load(std::memory_order_acquire));
  }
  clock::time_point submitted() const noexcept { return submitted_; }
  // Written once by the tokenizer before the stream is handed out.
  void set_prompt(std::vector<int32_t> ids, std::string text = {}) {
    prompt_ = std::move(ids);
    prompt_text_ = std::move(text);
  }
  // Streamer only. The capacity covers every event a request can produce.
  void send(output_event ev);
  void end();

 private:
  using channel = asio::experimental::concurrent_channel<void(asio::error_code, output_event)>;
  uint64_t id_;
  std::vector<int32_t> prompt_;
  std::string prompt_text_;
  channel channel_;
  std::weak_ptr<pipeline> pipeline_;
  std::atomic<bool> cancelled_{false};
  std::atomic<uint8_t> cancel_reason_{0};
  bool ended_ = false;  // consumer side only
  clock::time_point submitted_;
};

// Records a span on behalf of `request_id` for work an actor did for several requests at once
// (a step, a token batch), so a request's trace shows every actor it passed through.
void trace_for_request(rt::system& sys, uint32_t actor_trace_id, const char* what,
                       uint64_t request_id, int64_t start_ns, int64_t end_ns);

}  // namespace coserve::actors
