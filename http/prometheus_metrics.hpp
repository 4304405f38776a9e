// prometheus_metrics: renders /metrics in the Prometheus text format (version 0.0.4), names
// prefixed `coserve_` (vLLM's names after the prefix, and vLLM's latency buckets), every sample
// labelled model_name="<served model name>" as vLLM labels its own. Beside them, the families the
// Gateway API Inference Extension's model-server protocol reads, under vLLM's names:
// vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc,
// vllm:lora_requests_info and vllm:cache_config_info. Everything comes from engine_metrics
// snapshots (the engine keeps the histograms, of fixed size) and the model_info given at attach.
//
// Threads: scrape() and the count_* functions may be called from any thread (one mutex).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "actors/engine.hpp"

namespace coserve::http {

// `name_bucket{<labels>,le="..."} n` lines (cumulative), then _sum and _count; `labels`: the
// series' labels without braces (`model_name="m"`), "" for none.
void render_histogram(std::string& out, const std::string& name, const histogram_snapshot& h,
                      const std::string& labels = {});

// A label value escaped as the text format wants it (backslash, double quote, newline).
std::string escape_label_value(std::string_view v);

class prometheus_metrics {
 public:
  explicit prometheus_metrics(std::string model_name);
  // The model's KV cache settings and its served name (vllm:cache_config_info), once the engine is
  // known.
  void describe(const model_info& info);

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
  model_info info_;
  std::map<int, uint64_t> http_by_status_;
  uint64_t client_disconnects_ = 0;
};

}  // namespace coserve::http
