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

}  // namespace

void render_histogram(std::string& out, const std::string& name, const histogram_snapshot& h) {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += i < h.counts.size() ? h.counts[i] : 0;
    out += name + "_bucket{le=\"" + num(h.bounds[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(h.count) + "\n";
  out += name + "_sum " + num(h.sum) + "\n";
  out += name + "_count " + std::to_string(h.count) + "\n";
}

prometheus_metrics::prometheus_metrics(std::string model_name) : model_(std::move(model_name)) {}

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
         m.kv_blocks_total > 0
             ? 1.0 - static_cast<double>(m.kv_blocks_free) / static_cast<double>(m.kv_blocks_total)
             : 0.0);
  family("coserve_prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache.");
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
  family(
      "coserve_engine_steps_launched_ahead_total", "counter",
      "Executor steps launched while the step before them was still running (queued behind it).");
  sample("coserve_engine_steps_launched_ahead_total", static_cast<double>(m.steps_launched_ahead));
  family("coserve_grammar_compiles_total", "counter",
         "Structured-output grammars compiled (cache misses).");
  sample("coserve_grammar_compiles_total", static_cast<double>(m.grammar_compiles));
  family("coserve_grammar_cache_hits_total", "counter",
         "Structured-output grammars served from the compile cache.");
  sample("coserve_grammar_cache_hits_total", static_cast<double>(m.grammar_cache_hits));
  family("coserve_grammar_compile_failures_total", "counter",
         "Structured-output specs rejected as invalid.");
  sample("coserve_grammar_compile_failures_total", static_cast<double>(m.grammar_failures));
  family("coserve_grammar_cache_bytes", "gauge",
         "Compiled grammars held by the compile cache (bytes, xgrammar's estimate).");
  sample("coserve_grammar_cache_bytes", static_cast<double>(m.grammar_cache_bytes));
  family("coserve_grammar_compile_seconds_total", "counter", "Time spent compiling grammars.");
  sample("coserve_grammar_compile_seconds_total", m.grammar_compile_seconds);
  family("coserve_spec_decode_num_drafts_total", "counter",
         "Speculative decoding: verify steps of sequences with proposals.");
  sample("coserve_spec_decode_num_drafts_total", static_cast<double>(m.spec_drafts));
  family("coserve_spec_decode_num_draft_tokens_total", "counter",
         "Speculative decoding: tokens proposed.");
  sample("coserve_spec_decode_num_draft_tokens_total", static_cast<double>(m.spec_draft_tokens));
  family("coserve_spec_decode_num_accepted_tokens_total", "counter",
         "Speculative decoding: proposals accepted.");
  sample("coserve_spec_decode_num_accepted_tokens_total",
         static_cast<double>(m.spec_accepted_tokens));
  family("coserve_spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Speculative decoding: proposals accepted at each position of a proposal (0 first).");
  for (size_t i = 0; i < m.spec_accepted_per_position.size(); ++i)
    sample("coserve_spec_decode_num_accepted_tokens_per_pos_total{position=\"" + std::to_string(i) +
               "\"}",
           static_cast<double>(m.spec_accepted_per_position[i]));
  family("coserve_actor_mailbox_depth", "gauge",
         "Messages queued in each serving actor's mailbox.");
  for (const auto& [actor, n] : m.mailbox_depth)
    sample("coserve_actor_mailbox_depth{actor=\"" + actor + "\"}", static_cast<double>(n));
  if (!m.tp_ranks.empty()) {
    family("coserve_tensor_parallel_size", "gauge", "Tensor-parallel ranks of the executor.");
    sample("coserve_tensor_parallel_size", static_cast<double>(m.tp_ranks.size()));
    family("coserve_tp_rank_compute_seconds_total", "counter",
           "Per tensor-parallel rank: seconds of its forward passes outside collectives.");
    for (const rank_stats& r : m.tp_ranks)
      sample("coserve_tp_rank_compute_seconds_total{rank=\"" + std::to_string(r.rank) + "\"}",
             r.compute_seconds);
    family("coserve_tp_rank_collective_seconds_total", "counter",
           "Per tensor-parallel rank: seconds in all-reduces and the logits gather, waiting for "
           "the slowest "
           "rank included.");
    for (const rank_stats& r : m.tp_ranks)
      sample("coserve_tp_rank_collective_seconds_total{rank=\"" + std::to_string(r.rank) + "\"}",
             r.collective_seconds);
    family("coserve_tp_rank_steps_total", "counter",
           "Per tensor-parallel rank: forward passes run.");
    for (const rank_stats& r : m.tp_ranks)
      sample("coserve_tp_rank_steps_total{rank=\"" + std::to_string(r.rank) + "\"}",
             static_cast<double>(r.steps));
  }

  family("coserve_request_success_total", "counter", "Finished requests by finish reason.");
  const std::pair<const char*, int64_t> reasons[] = {{"stop", m.finished_stop},
                                                     {"length", m.finished_length},
                                                     {"abort", m.finished_abort},
                                                     {"error", m.finished_error}};
  for (const auto& [reason, n] : reasons)
    sample(std::string("coserve_request_success_total{finished_reason=\"") + reason + "\"}",
           static_cast<double>(n));

  family("coserve_time_to_first_token_seconds", "histogram", "Time to first token.");
  render_histogram(out, "coserve_time_to_first_token_seconds", m.ttft);
  family("coserve_inter_token_latency_seconds", "histogram", "Time between two streamed tokens.");
  render_histogram(out, "coserve_inter_token_latency_seconds", m.itl);
  family("coserve_e2e_request_latency_seconds", "histogram",
         "Request latency, arrival to last token.");
  render_histogram(out, "coserve_e2e_request_latency_seconds", m.e2e);
  family("coserve_request_queue_time_seconds", "histogram",
         "Time waiting before the first schedule.");
  render_histogram(out, "coserve_request_queue_time_seconds", m.queue);

  family("coserve_http_requests_total", "counter", "HTTP responses by status.");
  for (const auto& [status, n] : http_by_status_)
    sample("coserve_http_requests_total{status=\"" + std::to_string(status) + "\"}",
           static_cast<double>(n));
  family("coserve_http_client_disconnects_total", "counter",
         "Streams aborted because the client left.");
  sample("coserve_http_client_disconnects_total", static_cast<double>(client_disconnects_));
  (void)model_;
  return out;
}

}  // namespace coserve::http
