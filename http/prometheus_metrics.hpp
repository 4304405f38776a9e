// prometheus_metrics: renders /metrics in the Prometheus text format (version 0.0.4), names
// prefixed `coserve_` (vLLM's names after the prefix, and vLLM's latency buckets). Everything comes
// from engine_metrics snapshots (the engine keeps the histograms, of fixed size).
//
// Threads: scrape() and the count_* functions may be called from any thread (one mutex).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "actors/engine.hpp"

namespace coserve::http {

// `name_bucket{le="..."} n` lines (cumulative), then _sum and _count.
void render_histogram(std::string& out, const std::string& name, const histogram_snapshot& h);

class prometheus_metrics {
 public:
  explicit prometheus_metrics(std::string model_name);

  // Takes a snapshot from the engine and returns the whole exposition text.
  std::string scrape(engine& e);
  // Same, from a snapshot the caller took (tests).
  std::string render(const engine_metrics& m, bool healthy);

  // HTTP-side counters.
  void count_http(int status);     // every answered request, by status
  void count_client_disconnect();  // a streaming client left before the end

 private:
  std::mutex mu_;  // guards everything below
  std::string model_;
  std::map<int, uint64_t> http_by_status_;
  uint64_t client_disconnects_ = 0;
};

}  // namespace coserve::http
