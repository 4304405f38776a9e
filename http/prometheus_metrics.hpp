// prometheus_metrics: renders /metrics in the Prometheus text format (version 0.0.4), names
// prefixed `coserve_`. Gauges and counters come from engine_metrics snapshots; latency histograms
// are accumulated here from the samples each snapshot carries (engine::metrics() hands out the
// samples since its previous call, so this object must be the only caller of engine::metrics()).
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

class histogram {
 public:
  explicit histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // `name_bucket{le="..."} n` lines (cumulative), then _sum and _count.
  void render(std::string& out, const std::string& name) const;
  uint64_t count() const noexcept { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // one per bound, plus +Inf last; not cumulative
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class prometheus_metrics {
 public:
  explicit prometheus_metrics(std::string model_name);

  // Takes a snapshot from the engine and returns the whole exposition text.
  std::string scrape(engine& e);
  // Same, from a snapshot the caller took (tests).
  std::string render(const engine_metrics& m, bool healthy);

  // HTTP-side counters.
  void count_http(int status);         // every answered request, by status
  void count_client_disconnect();      // a streaming client left before the end

 private:
  std::mutex mu_;  // guards everything below
  std::string model_;
  histogram ttft_, itl_, e2e_, queue_;
  std::map<int, uint64_t> http_by_status_;
  uint64_t client_disconnects_ = 0;
};

}  // namespace coserve::http
