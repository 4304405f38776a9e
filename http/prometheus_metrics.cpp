#include "http/prometheus_metrics.hpp"

#include <algorithm>
#include <charconv>

namespace coserve::http {

namespace {

// Shortest round-trip text (0.005, not 0.0050000000000000001): bucket labels must read as written.
std::string num(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
          2.5,   5.0,   7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
}

}  // namespace

histogram::histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void histogram::observe(double v) {
  auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);  // first bound >= v: le semantics
  ++counts_[static_cast<size_t>(it - bounds_.begin())];
  sum_ += v;
  ++count_;
}

void histogram::render(std::string& out, const std::string& name) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  out += name + "_sum " + num(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

prometheus_metrics::prometheus_metrics(std::string model_name)
    : model_(std::move(model_name)),
      ttft_(latency_buckets()),
      itl_(latency_buckets()),
      e2e_(latency_buckets()),
      queue_(latency_buckets()) {}

void prometheus_metrics::count_http(int status) {
  std::lock_guard lk(mu_);
  ++http_by_status_[status];
}

void prometheus_metrics::count_client_disconnect() {
  std::lock_guard lk(mu_);
  ++client_disconnects_;
}

std::string prometheus_metrics::scrape(engine& e) { return render(e.metrics(), e.healthy()); }

std::string prometheus_metrics::render(const engine_metrics& m, bool healthy) {
  std::lock_guard lk(mu_);
  for (double v : m.ttft_s) ttft_.observe(v);
  for (double v : m.itl_s) itl_.observe(v);
  for (double v : m.e2e_s) e2e_.observe(v);
  for (double v : m.queue_s) queue_.observe(v);

  std::string out;
  out.reserve(8192);
  auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto sample = [&](const std::string& name, double v) { out += name + " " + num(v) + "\n"; };

  family("coserve_up", "gauge", "1 while the engine is healthy.");
  sample("coserve_up", healthy ? 1 : 0);
  family("coserve_num_requests_running", "gauge", "Requests in the running batch.");
  sample("coserve_num_requests_running", static_cast<double>(m.requests_running));
  family("coserve_num_requests_waiting", "gauge", "Requests waiting to be scheduled.");
  sample("coserve_num_requests_waiting", static_cast<double>(m.requests_waiting));
  family("coserve_kv_blocks_total", "gauge", "KV cache blocks in the pool.");
  sample("coserve_kv_blocks_total", static_cast<double>(m.kv_blocks_total));
  family("coserve_kv_blocks_free", "gauge", "KV cache blocks free (incl. cached, evictable).");
  sample("coserve_kv_blocks_free", static_cast<double>(m.kv_blocks_free));
  family("coserve_kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0..1).");
  sample("coserve_kv_cache_usage_perc",
         m.kv_blocks_total > 0 ? 1.0 - static_cast<double>(m.kv_blocks_free) / static_cast<double>(m.kv_blocks_total) : 0.0);
  family("coserve_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.");
  sample("coserve_prefix_cache_queries_total", static_cast<double>(m.prefix_queries));
  family("coserve_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.");
  sample("coserve_prefix_cache_hits_total", static_cast<double>(m.prefix_hits));
  family("coserve_prompt_tokens_total", "counter", "Prompt tokens processed.");
  sample("coserve_prompt_tokens_total", static_cast<double>(m.prompt_tokens));
  family("coserve_generation_tokens_total", "counter", "Tokens generated.");
  sample("coserve_generation_tokens_total", static_cast<double>(m.generation_tokens));
  family("coserve_num_preemptions_total", "counter", "Sequences preempted (recomputed later).");
  sample("coserve_num_preemptions_total", static_cast<double>(m.preemptions));
  family("coserve_requests_rejected_total", "counter", "Requests refused at admission (overload).");
  sample("coserve_requests_rejected_total", static_cast<double>(m.rejected));

  family("coserve_num_requests_open", "gauge", "Requests admitted whose stream has not ended.");
  sample("coserve_num_requests_open", static_cast<double>(m.open_requests));
  family("coserve_engine_steps_total", "counter", "Executor steps completed.");
  sample("coserve_engine_steps_total", static_cast<double>(m.steps));
  family("coserve_actor_mailbox_depth", "gauge", "Messages queued in each serving actor's mailbox.");
  for (const auto& [actor, n] : m.mailbox_depth)
    sample("coserve_actor_mailbox_depth{actor=\"" + actor + "\"}", static_cast<double>(n));

  family("coserve_request_success_total", "counter", "Finished requests by finish reason.");
  const std::pair<const char*, int64_t> reasons[] = {{"stop", m.finished_stop},
                                                     {"length", m.finished_length},
                                                     {"abort", m.finished_abort},
                                                     {"error", m.finished_error}};
  for (const auto& [reason, n] : reasons)
    sample(std::string("coserve_request_success_total{finished_reason=\"") + reason + "\"}", static_cast<double>(n));

  family("coserve_time_to_first_token_seconds", "histogram", "Time to first token.");
  ttft_.render(out, "coserve_time_to_first_token_seconds");
  family("coserve_inter_token_latency_seconds", "histogram", "Time between two streamed tokens.");
  itl_.render(out, "coserve_inter_token_latency_seconds");
  family("coserve_e2e_request_latency_seconds", "histogram", "Request latency, arrival to last token.");
  e2e_.render(out, "coserve_e2e_request_latency_seconds");
  family("coserve_request_queue_time_seconds", "histogram", "Time waiting before the first schedule.");
  queue_.render(out, "coserve_request_queue_time_seconds");

  family("coserve_http_requests_total", "counter", "HTTP responses by status.");
  for (const auto& [status, n] : http_by_status_)
    sample("coserve_http_requests_total{status=\"" + std::to_string(status) + "\"}", static_cast<double>(n));
  family("coserve_http_client_disconnects_total", "counter", "Streams aborted because the client left.");
  sample("coserve_http_client_disconnects_total", static_cast<double>(client_disconnects_));
  (void)model_;
  return out;
}

}  // namespace coserve::http
