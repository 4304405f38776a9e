// coserve::engine — first implementation: one dedicated engine thread runs the batch planner and
// the model executor step by step (one step in flight); submissions and cancellations cross into
// it through a mutex-protected inbox, and events leave through a per-request concurrent channel
// whose receive resumes on the awaiting coroutine's executor. Tokenization of text prompts runs on
// the caller's thread (the tokenizer is thread-safe).
#include "actors/engine.hpp"

#include <asio/experimental/concurrent_channel.hpp>
#include <asio/system_executor.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "actors/batch_planner.hpp"
#include "actors/stop_checker.hpp"
#include "model/cpu_executor.hpp"
#include "model/jinja/chat_template.hpp"
#include "model/tokenizer/incremental_detokenizer.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace coserve {

namespace {

using event_channel = asio::experimental::concurrent_channel<void(asio::error_code, output_event)>;

class stream_impl final : public request_stream {
 public:
  stream_impl(uint64_t id, std::vector<int32_t> prompt, size_t capacity)
      : id_(id), prompt_(std::move(prompt)), channel_(asio::system_executor{}, capacity),
        submitted_(std::chrono::steady_clock::now()) {}
  std::chrono::steady_clock::time_point submitted() const noexcept { return submitted_; }
  uint64_t id() const noexcept override { return id_; }
  const std::vector<int32_t>& prompt_ids() const noexcept override { return prompt_; }
  asio::awaitable<std::optional<output_event>> next() override {
    if (ended_) co_return std::nullopt;
    output_event ev = co_await channel_.async_receive(asio::use_awaitable);
    if (ev.index < 0) {  // end-of-stream marker
      ended_ = true;
      co_return std::nullopt;
    }
    co_return ev;
  }
  void cancel() noexcept override { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }
  // Engine thread only. The capacity covers every event a request can produce.
  void send(output_event ev) { (void)channel_.try_send(asio::error_code{}, std::move(ev)); }

 private:
  uint64_t id_;
  std::vector<int32_t> prompt_;
  event_channel channel_;
  std::atomic<bool> cancelled_{false};
  bool ended_ = false;  // consumer side only
  std::chrono::steady_clock::time_point submitted_;
};

// Per-request state on the engine thread.
struct request_state {
  std::shared_ptr<stream_impl> stream;
  generate_request req;
  struct sample {
    std::unique_ptr<incremental_detokenizer> detok;
    std::unique_ptr<actors::stop_checker> stops;
    bool done = false;
  };
  std::vector<sample> samples;
  int32_t live = 0;
  using clock = std::chrono::steady_clock;
  clock::time_point submitted, last_token;
  bool first_token_seen = false;
};

class engine_impl final : public engine {
 public:
  engine_impl(engine_config cfg, tokenizer tok, std::unique_ptr<cpu_executor> exec)
      : cfg_(std::move(cfg)), tok_(std::move(tok)), exec_(std::move(exec)) {
    const executor_info ei = exec_->info();
    info_.served_model_name = cfg_.served_model_name.empty() ? cfg_.model_dir.filename().string()
                                                             : cfg_.served_model_name;
    info_.architecture = exec_->config().architecture;
    info_.max_model_len = ei.max_model_len;
    info_.vocab_size = ei.vocab_size;
    info_.created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
    const auto& eos = exec_->generation().eos_token_ids;
    extra_eos_.assign(eos.size() > 1 ? eos.begin() + 1 : eos.end(), eos.end());
    planner_ = std::make_unique<actors::batch_planner>(
        actors::planner_config{.max_num_seqs = cfg_.max_num_seqs,
                               .max_num_batched_tokens = cfg_.max_num_batched_tokens,
                               .max_model_len = ei.max_model_len,
                               .eos_id = eos.empty() ? -1 : eos.front()},
        actors::block_pool_options{.num_blocks = ei.num_kv_blocks, .block_size = ei.block_size,
                                   .enable_prefix_caching = cfg_.enable_prefix_caching, .hash = {}});
    kv_total_ = ei.num_kv_blocks;
    // The model's chat template (chat_template.jinja / .json or tokenizer_config.json), if any.
    if (auto src = load_chat_template_source(cfg_.model_dir); src.ok()) {
      if (auto parsed = chat_template::parse(std::move(*src)); parsed.ok())
        template_.emplace(std::move(*parsed));
      else
        template_error_ = "the model's chat template does not parse: " + parsed.err().message;
    } else {
      template_error_ = "the model has no chat template: " + src.err().message;
    }
    thread_ = std::thread([this] { loop(); });
  }
  ~engine_impl() override { stop(true); }

  asio::awaitable<result<std::shared_ptr<request_stream>>> submit(generate_request req) override {
    if (!healthy()) co_return error{"engine_down", "the engine is stopping"};
    std::vector<int32_t> ids;
    if (auto* text = std::get_if<std::string>(&req.input)) {
      ids = tok_.encode(*text, req.add_special_tokens);
    } else if (auto* given = std::get_if<std::vector<int32_t>>(&req.input)) {
      ids = *given;
    } else {
      auto chat_ids = tokenize_chat(std::get<chat_input>(req.input));
      if (!chat_ids.ok()) co_return std::move(chat_ids).err();
      ids = std::move(*chat_ids);
    }
    if (ids.empty()) co_return error{"invalid_request", "the prompt is empty"};
    for (int32_t id : ids)
      if (id < 0 || id >= info_.vocab_size)
        co_return error{"invalid_request", "token id " + std::to_string(id) + " is outside the vocabulary"};
    const int64_t total = static_cast<int64_t>(ids.size()) + req.params.max_tokens;
    if (total > info_.max_model_len)
      co_return error{"invalid_request",
                      "the prompt (" + std::to_string(ids.size()) + " tokens) plus max_tokens (" +
                          std::to_string(req.params.max_tokens) + ") exceeds the model context of " +
                          std::to_string(info_.max_model_len) + " tokens"};
    const int32_t n = std::max(1, req.params.n);
    const size_t capacity = static_cast<size_t>(n) * (static_cast<size_t>(req.params.max_tokens) + 2) + 2;
    std::shared_ptr<stream_impl> stream;
    {
      std::lock_guard lock(mu_);
      if (waiting_count_ >= cfg_.max_waiting) {
        ++rejected_;
        co_return error{"queue_full", "too many requests waiting"};
      }
      stream = std::make_shared<stream_impl>(next_request_++, ids, capacity);
      inbox_.push_back({stream, std::move(req)});
      ++waiting_count_;
    }
    cv_.notify_one();
    co_return std::static_pointer_cast<request_stream>(stream);
  }

  result<std::vector<int32_t>> tokenize(const std::string& text, bool add_special) const override {
    return tok_.encode(text, add_special);
  }
  // Renders the chat template as Hugging Face's apply_chat_template does (messages, tools,
  // add_generation_prompt, bos/eos tokens, extra variables), then encodes without adding special
  // tokens: the template already holds them. Template errors (raise_exception included) are
  // "invalid_request" with the template's message.
  result<std::vector<int32_t>> tokenize_chat(const chat_input& chat) const override {
    if (!template_) return error{"invalid_request", template_error_};
    json::value ctx;
    ctx["messages"] = chat.messages;
    if (!chat.tools.is_null()) ctx["tools"] = chat.tools;
    ctx["add_generation_prompt"] = chat.add_generation_prompt;
    ctx["bos_token"] = tok_.bos_token();
    ctx["eos_token"] = tok_.eos_token();
    if (chat.template_kwargs.is_object())
      for (const auto& [key, value] : chat.template_kwargs.as_object()) ctx[key] = value;
    auto text = template_->render(ctx);
    if (!text.ok()) return error{"invalid_request", std::move(text).err().message};
    return tok_.encode(*text, false);
  }
  result<std::string> detokenize(const std::vector<int32_t>& ids) const override {
    return tok_.decode(ids, true);
  }
  const model_info& info() const noexcept override { return info_; }
  bool healthy() const noexcept override { return running_.load(std::memory_order_acquire); }

  engine_metrics metrics() override {
    std::lock_guard lock(mu_);
    engine_metrics m = metrics_;
    metrics_.ttft_s.clear();
    metrics_.itl_s.clear();
    metrics_.e2e_s.clear();
    metrics_.queue_s.clear();
    m.rejected = rejected_;
    return m;
  }

  void stop(bool abort_running) override {
    {
      std::lock_guard lock(mu_);
      if (!running_.exchange(false)) return;
      abort_all_ = abort_running;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void admit(std::shared_ptr<stream_impl> stream, generate_request req) {
    const uint64_t rid = stream->id();
    auto& st = requests_[rid];
    st.stream = std::move(stream);
    st.req = std::move(req);
    st.submitted = st.stream->submitted();
    {
      std::lock_guard lock(mu_);
      metrics_.queue_s.push_back(
          std::chrono::duration<double>(request_state::clock::now() - st.submitted).count());
      metrics_.prompt_tokens += static_cast<int64_t>(st.stream->prompt_ids().size());
    }
    const int32_t n = std::max(1, st.req.params.n);
    st.samples.resize(static_cast<size_t>(n));
    st.live = n;
    for (int32_t i = 0; i < n; ++i) {
      auto& smp = st.samples[static_cast<size_t>(i)];
      smp.detok = std::make_unique<incremental_detokenizer>(
          tok_, st.req.params.skip_special_tokens, st.stream->prompt_ids());
      smp.stops = std::make_unique<actors::stop_checker>(st.req.params.stop,
                                                         st.req.params.include_stop_str_in_output);
      actors::sequence s;
      s.id = next_seq_++;
      s.request_id = rid;
      s.index = i;
      s.priority = st.req.priority;
      s.arrival = rid;
      s.prompt = st.stream->prompt_ids();
      s.params = st.req.params;
      if (!s.params.ignore_eos)
        s.params.stop_token_ids.insert(s.params.stop_token_ids.end(), extra_eos_.begin(), extra_eos_.end());
      s.seed = st.req.params.seed ? *st.req.params.seed + static_cast<uint64_t>(i) : rid * 7919 + static_cast<uint64_t>(i);
      s.fork_parent = i == 0 ? 0 : seq_of_[{rid, 0}];
      seq_of_[{rid, i}] = s.id;
      planner_->add(std::move(s));
    }
  }

  struct key_hash {
    size_t operator()(const std::pair<uint64_t, int32_t>& k) const noexcept {
      return std::hash<uint64_t>{}(k.first * 64 + static_cast<uint64_t>(k.second));
    }
  };

  void end_sample(request_state& st, uint64_t rid, int32_t index, output_event ev) {
    auto& smp = st.samples[static_cast<size_t>(index)];
    if (smp.done) return;
    smp.done = true;
    seq_of_.erase({rid, index});
    st.stream->send(std::move(ev));
    if (--st.live == 0) {
      {
        std::lock_guard lock(mu_);
        metrics_.e2e_s.push_back(
            std::chrono::duration<double>(request_state::clock::now() - st.submitted).count());
      }
      update_metrics();
      output_event end;
      end.index = -1;
      st.stream->send(std::move(end));
      requests_.erase(rid);
    }
  }

  void abort_request(uint64_t rid, finish_reason why, const std::string& message) {
    auto it = requests_.find(rid);
    if (it == requests_.end()) return;
    request_state& st = it->second;
    const int32_t n = static_cast<int32_t>(st.samples.size());
    for (int32_t i = 0; i < n && requests_.count(rid) != 0; ++i) {
      auto sit = seq_of_.find({rid, i});
      if (sit != seq_of_.end()) planner_->finish(sit->second, why);
      output_event ev;
      ev.index = i;
      ev.finish = why;
      ev.error_message = message;
      ev.prompt_tokens = static_cast<int32_t>(st.stream->prompt_ids().size());
      end_sample(st, rid, i, std::move(ev));
    }
  }

  void handle(const actors::seq_event& e) {
    auto it = requests_.find(e.request_id);
    if (it == requests_.end()) return;
    request_state& st = it->second;
    auto& smp = st.samples[static_cast<size_t>(e.index)];
    output_event ev;
    ev.index = e.index;
    ev.token_ids = {e.token};
    if (st.req.params.logprobs >= 0 && e.output != nullptr) ev.token_logprobs = {e.output->logprob};
    if (st.req.params.logprobs > 0 && e.output != nullptr) ev.top_logprobs = {e.output->top_logprobs};
    if (st.req.return_logits && e.output != nullptr) ev.logits = {e.output->logits};
    ev.prompt_tokens = e.prompt_tokens;
    ev.completion_tokens = e.completion_tokens;
    ev.cached_prompt_tokens = e.cached_prompt_tokens;
    {
      const auto now = request_state::clock::now();
      std::lock_guard lock(mu_);
      ++metrics_.generation_tokens;
      if (!st.first_token_seen) {
        metrics_.ttft_s.push_back(std::chrono::duration<double>(now - st.submitted).count());
        st.first_token_seen = true;
      } else {
        metrics_.itl_s.push_back(std::chrono::duration<double>(now - st.last_token).count());
      }
      st.last_token = now;
    }
    const bool is_stop_token = e.finish == finish_reason::stop;
    std::string piece = smp.detok->push(e.token);
    if (is_stop_token && !st.req.params.skip_special_tokens) piece.clear();
    ev.text = smp.stops->push(piece);
    ev.finish = e.finish;
    if (smp.stops->stopped()) {
      ev.finish = finish_reason::stop;
      ev.stop_reason = smp.stops->matched();
      if (e.finish == finish_reason::none) planner_->finish(e.seq_id, finish_reason::stop);
    } else if (e.finish != finish_reason::none) {
      ev.text += smp.stops->push(smp.detok->flush());
      ev.text += smp.stops->flush();
    }
    if (ev.finish != finish_reason::none) {
      {
        std::lock_guard lock(mu_);
        (ev.finish == finish_reason::stop ? metrics_.finished_stop : metrics_.finished_length)++;
      }
      end_sample(st, e.request_id, e.index, std::move(ev));
    } else {
      st.stream->send(std::move(ev));
    }
  }

  void loop() {
    for (;;) {
      std::vector<std::pair<std::shared_ptr<stream_impl>, generate_request>> inbox;
      bool stopping = false, abort_all = false;
      {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(planner_->has_work() ? 0 : 20), [&] {
          return !inbox_.empty() || !running_.load() || planner_->has_work();
        });
        inbox.swap(inbox_);
        stopping = !running_.load();
        abort_all = abort_all_;
      }
      for (auto& [stream, req] : inbox) admit(std::move(stream), std::move(req));
      if (!inbox.empty()) update_metrics();
      std::vector<uint64_t> cancelled;
      for (auto& [rid, st] : requests_)
        if (st.stream->cancelled() || (stopping && abort_all)) cancelled.push_back(rid);
      for (uint64_t rid : cancelled) {
        {
          std::lock_guard lock(mu_);
          ++metrics_.finished_abort;
        }
        abort_request(rid, finish_reason::abort, {});
      }
      if (!planner_->has_work()) {
        if (stopping) break;
        continue;
      }
      step_plan plan = planner_->plan();
      result<step_result> r = exec_->execute(plan);
      if (!r) {
        std::vector<uint64_t> all;
        for (auto& [rid, st] : requests_) all.push_back(rid);
        for (uint64_t rid : all) abort_request(rid, finish_reason::error, r.err().message);
        continue;
      }
      for (const auto& e : planner_->on_result(*r)) handle(e);
      update_metrics();
    }
  }

  // Engine thread. Called after each step and before a stream's end marker is sent, so a client
  // that saw its stream end sees the blocks it held as free.
  void update_metrics() {
      std::lock_guard lock(mu_);
      metrics_.requests_running = planner_->num_running();
      metrics_.requests_waiting = planner_->num_waiting();
      metrics_.kv_blocks_total = kv_total_;
      metrics_.kv_blocks_free = planner_->pool().num_free();
      metrics_.prefix_queries = planner_->pool().prefix_queries();
      metrics_.prefix_hits = planner_->pool().prefix_hits();
      metrics_.preemptions = planner_->num_preemptions();
      // Admission control counts what is queued: the inbox plus the planner's waiting sequences.
      waiting_count_ = static_cast<int32_t>(inbox_.size()) + planner_->num_waiting();
  }

  engine_config cfg_;
  tokenizer tok_;
  std::optional<chat_template> template_;
  std::string template_error_;
  std::unique_ptr<cpu_executor> exec_;
  model_info info_;
  std::vector<int32_t> extra_eos_;
  int64_t kv_total_ = 0;

  // Engine thread only.
  std::unique_ptr<actors::batch_planner> planner_;
  std::unordered_map<uint64_t, request_state> requests_;
  std::unordered_map<std::pair<uint64_t, int32_t>, seq_id_t, key_hash> seq_of_;
  seq_id_t next_seq_ = 1;

  // Shared, under mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::shared_ptr<stream_impl>, generate_request>> inbox_;
  int32_t waiting_count_ = 0;
  uint64_t next_request_ = 1;
  int64_t rejected_ = 0;
  bool abort_all_ = false;
  engine_metrics metrics_;
  std::atomic<bool> running_{true};
  std::thread thread_;
};

}  // namespace

result<std::unique_ptr<engine>> engine::start(engine_config config) {
  if (config.device != "cpu")
    return error{"invalid_argument", "device '" + config.device + "' is not supported by this engine build"};
  auto tok = tokenizer::load(config.model_dir / "tokenizer.json");
  if (!tok) return tok.err();
  cpu_executor_options opts;
  opts.block_size = config.block_size;
  opts.num_kv_blocks = config.num_kv_blocks > 0 ? static_cast<int32_t>(config.num_kv_blocks) : 1024;
  opts.num_threads = config.cpu_threads;
  opts.max_model_len = config.max_model_len;
  auto exec = cpu_executor::load(config.model_dir.string(), opts);
  if (!exec) return exec.err();
  std::fprintf(stderr, "coserve engine: model %s loaded\n", config.model_dir.string().c_str());
  return std::unique_ptr<engine>(new engine_impl(std::move(config), std::move(*tok), std::move(*exec)));
}

}  // namespace coserve
