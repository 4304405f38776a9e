// status_view: what GET /api/status answers (the live view at /status draws it).
//
// status_history samples the engine's counters once a period on a thread of its own and keeps the
// newest `capacity` samples (default: one a second for five minutes), so a page opened now shows
// the last minutes. status_json() joins that history with the requests the scheduler holds, each
// actor's mailbox depth and busy time over a recent window, and the per-actor timelines of the
// last requests, all read from the actors' trace.
//
// Threads: status_history's members may be called from any thread; start() takes the first sample
// on the calling thread, then its sampler thread calls the source function given to start() (which
// must be safe there) until stop() returns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine.hpp"

namespace coserve::rt {
class tracer;
}

namespace coserve::http {

class status_history {
 public:
  struct sample {
    double t = 0.0;  // seconds since the epoch (wall clock)
    int64_t kv_total = 0, kv_free = 0, kv_cached_free = 0;
    int64_t running = 0, waiting = 0;
    int64_t prompt_tokens = 0, generation_tokens = 0;  // cumulative
    int64_t prefix_queries = 0, prefix_hits = 0;       // cumulative, in tokens
  };

  explicit status_history(size_t capacity = 300,
                          std::chrono::milliseconds period = std::chrono::seconds(1));
  ~status_history();
  status_history(const status_history&) = delete;
  status_history& operator=(const status_history&) = delete;

  // Starts sampling `source` once a period (the first sample before it returns). Once.
  void start(std::function<engine_metrics()> source);
  // Stops and joins the sampler. Idempotent.
  void stop();
  // Takes one sample now (what the sampler thread does each period).
  void record(const engine_metrics& m);
  std::vector<sample> samples() const;
  std::chrono::milliseconds period() const noexcept { return period_; }

 private:
  const size_t capacity_;
  const std::chrono::milliseconds period_;
  mutable std::mutex mu_;  // guards samples_, stop_
  std::condition_variable cv_;
  std::deque<sample> samples_;
  bool stop_ = false;
  std::thread thread_;
};

struct status_inputs {
  std::string model;
  double uptime_seconds = 0.0;
  std::string unhealthy_reason;  // "" while healthy
  engine_metrics metrics;        // now
  std::vector<status_history::sample> history;
  double history_period_seconds = 1.0;
  std::vector<request_status> requests;  // running first
  const rt::tracer* trace = nullptr;     // nullptr: no actor or timeline data
  std::chrono::milliseconds actor_window{std::chrono::seconds(10)};
  size_t timelines = 8;             // last requests drawn
  size_t spans_per_timeline = 400;  // the newest kept when a request has more
};

// The JSON body of GET /api/status (fields documented in docs/webui.md).
std::string status_json(const status_inputs& in);

}  // namespace coserve::http
