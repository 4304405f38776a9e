#include "http/prometheus_metrics.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>

namespace coserve::http {

namespace {

// Shortest round-trip text (0.005, not 0.0050000000000000001): bucket labels must read as written.
std::string num(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void render_histogram(std::string& out, const std::string& name, const histogram_snapshot& h,
                      const std::string& labels) {
  const std::string lead = labels.empty() ? "" : labels + ",";
  const std::string own = labels.empty() ? "" : "{" + labels + "}";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += i < h.counts.size() ? h.counts[i] : 0;
    out += name + "_bucket{" + lead + "le=\"" + num(h.bounds[i]) + "\"} " +
           std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{" + lead + "le=\"+Inf\"} " + std::to_string(h.count) + "\n";
  out += name + "_sum" + own + " " + num(h.sum) + "\n";
  out += name + "_count" + own + " " + std::to_string(h.count) + "\n";
}

prometheus_metrics::prometheus_metrics(std::string model_name) : model_(std::move(model_name)) {
  info_.served_model_name = model_;
}

void prometheus_metrics::describe(const model_info& info) {
  std::lock_guard lk(mu_);
  info_ = info;
  model_ = info.served_model_name;
}

void prometheus_metrics::count_http(int status) {
  std::lock_guard lk(mu_);
  ++http_by_status_[status];
}

void prometheus_metrics::count_client_disconnect() {
  std::lock_guard lk(mu_);
  ++client_disconnects_;
}

std::string prometheus_metrics::scrape(engine& e) { return render(e.metrics(), e.healthy()); }

namespace {

// The exposition text being written: families (# HELP, # TYPE) and their samples.
// Every sample gets the model_name label, first.
class exposition {
 public:
  exposition(std::string& out, const std::string& model)
      : out_(out), label_("model_name=\"" + escape_label_value(model) + "\"") {}
  void family(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  // `name` or `name{labels}`.
  void sample(const std::string& name, double v) {
    const size_t brace = name.find('{');
    if (brace == std::string::npos)
      out_ += name + "{" + label_ + "} " + num(v) + "\n";
    else
      out_ +=
          name.substr(0, brace + 1) + label_ + "," + name.substr(brace + 1) + " " + num(v) + "\n";
  }
  // A family of one sample.
  void single(const char* name, const char* type, const char* help, double v) {
    family(name, type, help);
    sample(name, v);
  }
  void histogram(const char* name, const char* help, const histogram_snapshot& h) {
    family(name, "histogram", help);
    render_histogram(out_, name, h, label_);
  }

 private:
  std::string& out_;
  std::string label_;
};

double kv_usage(const engine_metrics& m) {
  return m.kv_blocks_total > 0
             ? 1.0 - static_cast<double>(m.kv_blocks_free) / static_cast<double>(m.kv_blocks_total)
             : 0.0;
}

// The families the Gateway API Inference Extension's model-server protocol reads, under vLLM's
// names (its routers scrape vLLM servers): queue and batch sizes, KV usage, the LoRA adapters of
// running and waiting requests (max_lora: the adapters served, all of which may share a step) and
// the cache's block size and count.
void render_vllm_compatible(exposition& x, const engine_metrics& m, const model_info& info) {
  x.single("vllm:num_requests_running", "gauge", "Requests in the running batch (vLLM's name).",
           static_cast<double>(m.requests_running));
  x.single("vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled (vLLM's name).",
           static_cast<double>(m.requests_waiting));
  x.single("vllm:kv_cache_usage_perc", "gauge",
           "Fraction of KV cache blocks in use, 0..1 (vLLM's name).", kv_usage(m));
  x.family("vllm:lora_requests_info", "gauge",
           "LoRA adapters of running and of waiting requests (comma-separated), and how many may "
           "run at once (every served adapter); the value is the scrape's unix time (vLLM's name "
           "and labels).");
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto joined = [](const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : ",") + n;
    return escape_label_value(s);
  };
  x.sample("vllm:lora_requests_info{max_lora=\"" + std::to_string(info.lora_modules.size()) +
               "\",running_lora_adapters=\"" + joined(m.lora_running) +
               "\",waiting_lora_adapters=\"" + joined(m.lora_waiting) + "\"}",
           now);
  x.family("vllm:cache_config_info", "gauge",
           "The KV cache's configuration as labels, value 1 (vLLM's name; num_gpu_blocks is the "
           "executor's KV blocks, in host memory on the CPU executor).");
  x.sample("vllm:cache_config_info{block_size=\"" + std::to_string(info.block_size) +
               "\",cache_dtype=\"" + escape_label_value(info.kv_cache_dtype) +
               "\",enable_prefix_caching=\"" + (info.prefix_caching ? "True" : "False") +
               "\",gpu_memory_utilization=\"" + num(info.gpu_memory_utilization) +
               "\",num_gpu_blocks=\"" + std::to_string(m.kv_blocks_total) +
               "\",num_cpu_blocks=\"0\"}",
           1.0);
}

// Requests, KV blocks, the prefix cache, tokens, steps and grammars.
void render_engine(exposition& x, const engine_metrics& m, bool healthy) {
  x.single("coserve_up", "gauge", "1 while the engine is healthy.", healthy ? 1 : 0);
  x.single("coserve_num_requests_running", "gauge", "Requests in the running batch.",
           static_cast<double>(m.requests_running));
  x.single("coserve_num_requests_waiting", "gauge", "Requests waiting to be scheduled.",
           static_cast<double>(m.requests_waiting));
  x.single("coserve_kv_blocks_total", "gauge", "KV cache blocks in the pool.",
           static_cast<double>(m.kv_blocks_total));
  x.single("coserve_kv_blocks_free", "gauge", "KV cache blocks free (incl. cached, evictable).",
           static_cast<double>(m.kv_blocks_free));
  x.single("coserve_kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0..1).",
           kv_usage(m));
  x.single("coserve_prefix_cache_queries_total", "counter",
           "Prompt tokens looked up in the prefix cache.", static_cast<double>(m.prefix_queries));
  x.single("coserve_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
           static_cast<double>(m.prefix_hits));
  x.single("coserve_prompt_tokens_total", "counter", "Prompt tokens processed.",
           static_cast<double>(m.prompt_tokens));
  x.single("coserve_generation_tokens_total", "counter", "Tokens generated.",
           static_cast<double>(m.generation_tokens));
  x.single("coserve_num_preemptions_total", "counter", "Sequences preempted (recomputed later).",
           static_cast<double>(m.preemptions));
  x.single("coserve_requests_rejected_total", "counter",
           "Requests refused at admission (overload).", static_cast<double>(m.rejected));
  x.single("coserve_num_requests_open", "gauge", "Requests admitted whose stream has not ended.",
           static_cast<double>(m.open_requests));
  x.single("coserve_engine_steps_total", "counter", "Executor steps completed.",
           static_cast<double>(m.steps));
  x.single(
      "coserve_engine_steps_launched_ahead_total", "counter",
      "Executor steps launched while the step before them was still running (queued behind it).",
      static_cast<double>(m.steps_launched_ahead));
}

void render_grammar(exposition& x, const engine_metrics& m) {
  x.single("coserve_grammar_compiles_total", "counter",
           "Structured-output grammars compiled (cache misses).",
           static_cast<double>(m.grammar_compiles));
  x.single("coserve_grammar_cache_hits_total", "counter",
           "Structured-output grammars served from the compile cache.",
           static_cast<double>(m.grammar_cache_hits));
  x.single("coserve_grammar_compile_failures_total", "counter",
           "Structured-output specs rejected as invalid.", static_cast<double>(m.grammar_failures));
  x.single("coserve_grammar_cache_bytes", "gauge",
           "Compiled grammars held by the compile cache (bytes, xgrammar's estimate).",
           static_cast<double>(m.grammar_cache_bytes));
  x.single("coserve_grammar_compile_seconds_total", "counter", "Time spent compiling grammars.",
           m.grammar_compile_seconds);
}

void render_speculative(exposition& x, const engine_metrics& m) {
  x.single("coserve_spec_decode_num_drafts_total", "counter",
           "Speculative decoding: verify steps of sequences with proposals.",
           static_cast<double>(m.spec_drafts));
  x.single("coserve_spec_decode_num_draft_tokens_total", "counter",
           "Speculative decoding: tokens proposed.", static_cast<double>(m.spec_draft_tokens));
  x.single("coserve_spec_decode_num_accepted_tokens_total", "counter",
           "Speculative decoding: proposals accepted.",
           static_cast<double>(m.spec_accepted_tokens));
  x.family("coserve_spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Speculative decoding: proposals accepted at each position of a proposal (0 first).");
  for (size_t i = 0; i < m.spec_accepted_per_position.size(); ++i)
    x.sample("coserve_spec_decode_num_accepted_tokens_per_pos_total{position=\"" +
                 std::to_string(i) + "\"}",
             static_cast<double>(m.spec_accepted_per_position[i]));
}

void render_mailboxes(exposition& x, const engine_metrics& m) {
  x.family("coserve_actor_mailbox_depth", "gauge",
           "Messages queued in each serving actor's mailbox.");
  for (const auto& [actor, n] : m.mailbox_depth)
    x.sample("coserve_actor_mailbox_depth{actor=\"" + actor + "\"}", static_cast<double>(n));
}

// Per tensor-parallel rank (only with more than one).
void render_tensor_parallel(exposition& x, const engine_metrics& m) {
  if (m.tp_ranks.empty()) return;
  x.single("coserve_tensor_parallel_size", "gauge", "Tensor-parallel ranks of the executor.",
           static_cast<double>(m.tp_ranks.size()));
  auto label = [](const char* name, const rank_stats& r) {
    return std::string(name) + "{rank=\"" + std::to_string(r.rank) + "\"}";
  };
  x.family("coserve_tp_rank_compute_seconds_total", "counter",
           "Per tensor-parallel rank: seconds of its forward passes outside collectives.");
  for (const rank_stats& r : m.tp_ranks)
    x.sample(label("coserve_tp_rank_compute_seconds_total", r), r.compute_seconds);
  x.family("coserve_tp_rank_collective_seconds_total", "counter",
           "Per tensor-parallel rank: seconds in all-reduces and the logits gather, waiting for "
           "the slowest "
           "rank included.");
  for (const rank_stats& r : m.tp_ranks)
    x.sample(label("coserve_tp_rank_collective_seconds_total", r), r.collective_seconds);
  x.family("coserve_tp_rank_steps_total", "counter",
           "Per tensor-parallel rank: forward passes run.");
  for (const rank_stats& r : m.tp_ranks)
    x.sample(label("coserve_tp_rank_steps_total", r), static_cast<double>(r.steps));
}

// Finish reasons and the latency histograms.
void render_requests(exposition& x, const engine_metrics& m) {
  x.family("coserve_request_success_total", "counter", "Finished requests by finish reason.");
  const std::pair<const char*, int64_t> reasons[] = {{"stop", m.finished_stop},
                                                     {"length", m.finished_length},
                                                     {"abort", m.finished_abort},
                                                     {"error", m.finished_error}};
  for (const auto& [reason, n] : reasons)
    x.sample(std::string("coserve_request_success_total{finished_reason=\"") + reason + "\"}",
             static_cast<double>(n));
  x.histogram("coserve_time_to_first_token_seconds", "Time to first token.", m.ttft);
  x.histogram("coserve_inter_token_latency_seconds", "Time between two streamed tokens.", m.itl);
  x.histogram("coserve_e2e_request_latency_seconds", "Request latency, arrival to last token.",
              m.e2e);
  x.histogram("coserve_request_queue_time_seconds", "Time waiting before the first schedule.",
              m.queue);
}

}  // namespace

std::string prometheus_metrics::render(const engine_metrics& m, bool healthy) {
  std::lock_guard lk(mu_);
  std::string out;
  out.reserve(8192);
  exposition x(out, model_);
  render_engine(x, m, healthy);
  render_vllm_compatible(x, m, info_);
  render_grammar(x, m);
  render_speculative(x, m);
  render_mailboxes(x, m);
  render_tensor_parallel(x, m);
  render_requests(x, m);
  x.family("coserve_http_requests_total", "counter", "HTTP responses by status.");
  for (const auto& [status, n] : http_by_status_)
    x.sample("coserve_http_requests_total{status=\"" + std::to_string(status) + "\"}",
             static_cast<double>(n));
  x.single("coserve_http_client_disconnects_total", "counter",
           "Streams aborted because the client left.", static_cast<double>(client_disconnects_));
  return out;
}

}  // namespace coserve::http
