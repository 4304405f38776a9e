// engine_shared — what the serving actors share besides messages: the metrics cell each actor
// publishes into (and engine::metrics() reads), the engine's health, the count of open requests
// the drain waits on, the request-id counter, and the fault-injection hook. It holds no actor
// references: who sends to whom is wired in one place, engine.cpp (spawn_serving_actors), and
// drawn in docs/architecture.md.
//
// Threads: metrics fields are written by one actor each (atomics, and a mutex for the latency
// samples) and read by engine::metrics() on any thread; the rest is safe from any thread as noted.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "actors/engine_metrics.hpp"

namespace coserve::rt {
class system;
}

namespace coserve::actors {

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

struct metrics_cell {
  // intake
  std::atomic<int64_t> open_requests{0}, rejected{0};
  // scheduler
  std::atomic<int64_t> running{0}, waiting{0}, preemptions{0}, prompt_tokens{0}, steps{0};
  // LoRA adapters of the running and waiting sequences (step_planner::lora_masks).
  std::atomic<uint64_t> lora_running{0}, lora_waiting{0};
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

struct engine_shared {
  rt::system* sys = nullptr;  // the runtime (its tracer)
  metrics_cell metrics;
  engine_health health;
  std::atomic<uint64_t> next_request_id{1};  // intake's, kept here so a restarted intake goes on
  // Open requests (submitted, stream not ended): intake updates metrics.open_requests under
  // open_mu and notifies open_cv; engine::drain waits on it.
  std::mutex open_mu;
  std::condition_variable open_cv;
  // Fault injection (engine_config::fault_hook): called as a serving actor starts handling a
  // message; whatever it throws is that handler's failure. Empty in normal use.
  std::function<void(std::string_view actor, std::string_view message)> fault_hook;
  void fault_point(std::string_view actor, std::string_view message) const {
    if (fault_hook) fault_hook(actor, message);
  }
};

// Records a span on behalf of `request_id` for work an actor did for several requests at once
// (a step, a token batch), so a request's trace shows every actor it passed through.
void trace_for_request(rt::system& sys, uint32_t actor_trace_id, const char* what,
                       uint64_t request_id, int64_t start_ns, int64_t end_ns);

}  // namespace coserve::actors
