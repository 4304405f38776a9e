// coserve::engine — builds the serving actor graph on the runtime:
//
//   intake → tokenizer → scheduler → kv_allocator → executor → scheduler → streamer → streams
//
// and exposes it as the embedding API (actors/engine.hpp). spawn_serving_actors is the one place
// that says who sends to whom. The facade's methods and the graph's wiring are engine_impl's: it
// owns the configuration, the actors' references and the runtime. Loading the executor
// (make_default_executor, the CUDA module loader) is actors/make_executor.cpp. The facade holds
// no request state: submit() asks intake, metrics() reads what each actor publishes, stop() drains
// or aborts through intake and then stops the actors in reverse start order. Over 500 lines:
// engine_impl is the facade and the graph's owner in one class, and engine::start's checks of the
// model against the flags (check_task, check_model_kind) read the same config it then builds from.
#include "actors/engine.hpp"

#include <algorithm>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine_shared.hpp"
#include "actors/executor_actor.hpp"
#include "actors/grammar_actor.hpp"
#include "actors/intake.hpp"
#include "actors/kv_allocator.hpp"
#include "actors/kv_event_publisher.hpp"
#include "actors/scheduler.hpp"
#include "actors/streamer.hpp"
#include "actors/tokenizer_actor.hpp"
#include "model/config.hpp"
#include "model/encoder_model.hpp"
#include "model/gguf_model.hpp"
#include "model/hf_overrides.hpp"
#include "model/text/jinja/chat_template.hpp"
#include "model/text/tokenizer/tokenizer.hpp"
#include "runtime/system.hpp"

namespace coserve {

namespace {

using namespace actors;

std::string no_tokenizer_message() {
  return "the model has no tokenizer.json: only prompt token ids are accepted";
}

// Awaits a reply_state completed by some actor; resumes on the awaiting coroutine's executor.
template <class T, class Start>
asio::awaitable<result<T>> await_reply(Start start) {
  auto ex = co_await asio::this_coro::executor;
  co_return co_await asio::async_initiate<decltype(asio::use_awaitable), void(result<T>)>(
      [&](auto handler) {
        auto h = std::make_shared<decltype(handler)>(std::move(handler));
        auto hex = asio::get_associated_executor(*h, ex);
        // The work guard keeps the awaiting io_context running until the post below has fully
        // returned on the replying thread (an io_context may be destroyed as soon as run() ends).
        auto work = asio::make_work_guard(hex);
        auto st = std::make_shared<rt::reply_state<T>>([h, hex, work](result<T> r) mutable {
          asio::post(hex, [h, r = std::move(r)]() mutable { (*h)(std::move(r)); });
          work.reset();
        });
        start(st);
      },
      asio::use_awaitable);
}

// The references the engine facade keeps to the serving actors (the actors keep their own, to
// exactly the actors they send to: see spawn_serving_actors).
struct serving_refs {
  rt::actor_ref<intake_protocol> intake;
  std::shared_ptr<tokenizer_pool> tokenizers;
  rt::actor_ref<grammar_protocol> grammar;  // null without a tokenizer
  rt::actor_ref<scheduler_protocol> scheduler;
  rt::actor_ref<kv_allocator_protocol> kv_allocator;
  rt::actor_ref<executor_protocol> executor;
  rt::actor_ref<streamer_protocol> streamer;
};

class engine_impl final : public engine {
 public:
  engine_impl(engine_config cfg, std::optional<tokenizer> tok, model_config model,
              generation_config gen, std::unique_ptr<executor> exec,
              actors::speculative_config spec, sampling_defaults defaults,
              std::shared_ptr<kv_event_publisher> kv_events)
      : cfg_(std::move(cfg)), tok_(std::move(tok)), spec_(spec), kv_events_(std::move(kv_events)) {
    const executor_info ei = exec->info();
    rank_stats_ = exec->rank_stats();
    describe_model(model, ei, defaults);
    load_chat_template(ei);
    start_runtime();
    const auto& eos = gen.eos_token_ids.empty() ? model.eos_token_ids : gen.eos_token_ids;
    spawn_serving_actors(std::move(exec), ei, eos);
    log_started(ei);
    if (cfg_.step_timeout.count() > 0) watchdog_ = std::thread([this] { watch_steps(); });
  }

  ~engine_impl() override { stop(true); }

 private:
  void describe_model(const model_config& model, const executor_info& ei,
                      const sampling_defaults& defaults) {
    info_.served_model_name = cfg_.served_model_name.empty() ? cfg_.model_dir.filename().string()
                                                             : cfg_.served_model_name;
    info_.served_model_aliases = cfg_.served_model_aliases;
    info_.defaults = defaults;
    info_.architecture = model.architecture;
    info_.max_model_len = ei.max_model_len;
    info_.vocab_size = ei.vocab_size;
    info_.block_size = ei.block_size;
    info_.kv_cache_dtype = cfg_.kv_cache_dtype;
    info_.prefix_caching = cfg_.enable_prefix_caching;
    info_.gpu_memory_utilization = cfg_.device == "cuda" ? cfg_.gpu_memory_utilization : 0.0;
    info_.prompt_logprobs = ei.computes_prompt_logprobs;
    info_.task = ei.task;
    info_.pooled_size = ei.pooled_size;
    if (ei.task == "score" && model.classifier())  // a decoder reranker
      info_.score_input = cfg_.chat_template.empty() ? "concat" : "template";
    info_.matryoshka = ei.matryoshka;
    for (const std::string& m : cfg_.lora_modules)
      if (auto parsed = parse_lora_module(m)) info_.lora_modules.push_back(std::move(*parsed));
    info_.matryoshka_dimensions = ei.matryoshka_dimensions;
    info_.created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  }

  // The chat template's source: engine_config::chat_template (a file or the text itself), else
  // the model's (chat_template.jinja / .json, tokenizer_config.json, or the GGUF metadata).
  result<std::string> chat_template_source() const {
    if (cfg_.chat_template.empty()) {
      if (is_gguf_file(cfg_.model_dir.string())) {
        auto f = gguf_file::open(cfg_.model_dir.string());
        if (!f) return f.err();
        return gguf_chat_template(**f);
      }
      return load_chat_template_source(cfg_.model_dir);
    }
    std::error_code ec;
    if (cfg_.chat_template.find('\n') == std::string::npos &&
        cfg_.chat_template.find("{%") == std::string::npos &&
        cfg_.chat_template.find("{{") == std::string::npos &&
        std::filesystem::is_regular_file(cfg_.chat_template, ec))
      return load_chat_template_source(cfg_.chat_template);
    return cfg_.chat_template;
  }

  // What the tokenizer actors encode with: the tokenizer and the parsed chat template (or why
  // there is none).
  void load_chat_template(const executor_info& ei) {
    if (!tok_) {
      encoder_.template_error = no_tokenizer_message();
    } else if (auto src = chat_template_source(); src.ok()) {
      if (auto parsed = chat_template::parse(std::move(*src)); parsed.ok())
        template_.emplace(std::move(*parsed));
      else
        encoder_.template_error =
            "the model's chat template does not parse: " + parsed.err().message;
    } else {
      encoder_.template_error = "the model has no chat template: " + src.err().message;
    }
    encoder_.tok = tok_ ? &*tok_ : nullptr;
    encoder_.tmpl = template_ ? &*template_ : nullptr;
    encoder_.vocab_size = ei.vocab_size;
    encoder_.max_model_len = ei.max_model_len;
    encoder_.lower_case =
        !is_gguf_file(cfg_.model_dir.string()) && read_do_lower_case(cfg_.model_dir);
    if (encoder_.lower_case)
      std::fprintf(stderr,
                   "coserve engine: input texts lowercased before tokenizing "
                   "(sentence_bert_config.json do_lower_case)\n");
  }

  void start_runtime() {
    rt::system_config sc;
    sc.threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 4);
    // Spans kept per thread (56 bytes each, the ring allocated whole): 2^18 (14.7 MB a thread)
    // when a trace file is asked for, otherwise 2^15 (1.8 MB), enough for /api/trace's recent
    // window without the engine's threads holding ~100 MB of trace.
    sc.trace_ring_capacity = cfg_.trace_file.empty() ? size_t(1) << 15 : size_t(1) << 18;
    sys_ = std::make_unique<rt::system>(sc);
    shared_ = std::make_shared<engine_shared>();
    shared_->sys = sys_.get();
    shared_->fault_hook = cfg_.fault_hook;
  }

  // Spawn options. Intake, tokenizer and streamer settle what they held (on_failure) and restart
  // empty; the scheduler, KV allocator and executor hold the batch's state, which cannot be
  // rebuilt empty: their failure fails the engine.
  rt::spawn_options actor_options(std::string name, size_t capacity, bool restartable,
                                  bool dedicated = false) {
    rt::spawn_options o;
    o.name = std::move(name);
    o.mailbox_capacity = capacity;
    o.on_failure = restartable ? rt::restart_policy::restart : rt::restart_policy::stop;
    o.dedicated_thread = dedicated;
    o.on_stopped = [this](const std::string& actor, const std::string& why) {
      std::fprintf(stderr, "coserve engine: actor '%s' stopped: %s\n", actor.c_str(), why.c_str());
      fail_engine("actor '" + actor + "' stopped: " + why);
    };
    return o;
  }

  // Why a request cannot run on this model's task (a pooling request on a generating model, or
  // the other way round).
  std::string task_mismatch(bool pooling) const {
    if (pooling)
      return "The model `" + info_.served_model_name +
             "` does not support embeddings or scores: it generates text (task 'generate'); "
             "serve an embedding or cross-encoder model for them";
    return "The model `" + info_.served_model_name + "` does not generate text: it serves task '" +
           info_.task + "' (/v1/embeddings, /v1/score and /v1/rerank)";
  }

  planner_config make_planner_config(const executor_info& ei,
                                     const std::vector<int32_t>& eos) const {
    return planner_config{
        .max_num_seqs = cfg_.max_num_seqs,
        .max_num_batched_tokens = cfg_.max_num_batched_tokens,
        .max_model_len = ei.max_model_len,
        .eos_id = eos.empty() ? -1 : eos.front(),
        .speculation = spec_,
        .extra_eos = std::vector<int32_t>(eos.size() > 1 ? eos.begin() + 1 : eos.end(), eos.end()),
        .num_kv_blocks = ei.num_kv_blocks,
        .max_consecutive_failures = cfg_.max_consecutive_step_failures,
        .whole_prompts = ei.whole_prompts,
        .num_loras = static_cast<int32_t>(cfg_.lora_modules.size())};
  }

  // The serving graph, and the one place that says who sends to whom:
  //
  //   intake ──tokenize_request──▶ tokenizer[i] ──open_stream──▶ streamer
  //     ▲  │                           │  └──add_request──▶ scheduler ──kv_step──▶ kv_allocator
  //     │  └──cancel_sequences──▶ scheduler                    ▲  │                  │ run_step
  //     │                                                      │  └─token_batch,     ▼
  //     └──request_closed── tokenizer, streamer     step_done──┘    end_request──▶ executor
  //                                                 (executor)      (to streamer)
  //   streamer ──finish_sequence, cancel_sequences──▶ scheduler; streams ──cancel_request──▶ intake
  //
  // Every actor is reserved first (its mailbox exists, nothing runs), then started with the
  // references of the actors it sends to; they stop in reverse reserve order (intake first).
  void spawn_serving_actors(std::unique_ptr<executor> exec, const executor_info& ei,
                            const std::vector<int32_t>& eos) {
    rt::supervisor& root = sys_->root();
    auto executor_ref = root.reserve<executor_actor>(actor_options("executor", 1024, false, true));
    auto kv_ref = root.reserve<kv_allocator>(actor_options("kv_allocator", 4096, false));
    auto streamer_ref = root.reserve<streamer>(actor_options("streamer", 1u << 16, true));
    auto scheduler_ref = root.reserve<scheduler>(actor_options("scheduler", 1u << 16, false));
    refs_.executor = executor_ref;  // fail_engine may need the last two from here on
    refs_.kv_allocator = kv_ref;
    refs_.streamer = streamer_ref;
    refs_.scheduler = scheduler_ref;
    // The tokenizer pool: each actor on a thread of its own, so a long prompt being encoded holds
    // one of them and never the runtime's pool (scheduler, streamer) or the HTTP threads.
    const size_t pool_size = static_cast<size_t>(
        cfg_.tokenizer_pool_size > 0
            ? cfg_.tokenizer_pool_size
            : std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, 4));
    auto pool = std::make_shared<tokenizer_pool>(pool_size);
    std::vector<rt::actor_ref<tokenizer_actor>> tokenizer_refs;
    for (size_t i = 0; i < pool_size; ++i) {
      tokenizer_refs.push_back(root.reserve<tokenizer_actor>(
          actor_options("tokenizer" + std::to_string(i), 4096, true, true)));
      pool->add(tokenizer_refs.back());
    }
    auto grammar_ref = reserve_grammar_actor(ei, eos);
    auto intake_ref = root.reserve<intake>(actor_options("intake", 8192, true));

    std::shared_ptr<engine_shared> shared = shared_;
    auto holder = std::make_shared<std::unique_ptr<executor>>(std::move(exec));
    root.start(executor_ref, [shared, holder, to = executor_actor::links{scheduler_ref}] {
      return std::make_unique<executor_actor>(shared, to, std::move(*holder));
    });
    const block_pool_options kv_opts{.num_blocks = ei.num_kv_blocks,
                                     .block_size = ei.block_size,
                                     .enable_prefix_caching = cfg_.enable_prefix_caching,
                                     .hash = {}};
    root.start(kv_ref, [shared, kv_opts, to = kv_allocator::links{executor_ref, kv_events_}] {
      return std::make_unique<kv_allocator>(shared, to, kv_opts);
    });
    const tokenizer* tok = tok_ ? &*tok_ : nullptr;
    root.start(streamer_ref, [shared, tok, to = streamer::links{scheduler_ref, intake_ref}] {
      return std::make_unique<streamer>(shared, to, tok);
    });
    shared_->metrics.spec_positions.store(spec_.enabled() ? spec_.num_speculative_tokens : 0,
                                          std::memory_order_relaxed);
    root.start(scheduler_ref,
               [shared, pc = make_planner_config(ei, eos), journal = cfg_.planner_journal,
                to = scheduler::links{kv_ref, streamer_ref}] {
                 return std::make_unique<scheduler>(shared, to, pc, journal);
               });
    const int64_t max_waiting_tokens = cfg_.max_waiting_tokens;
    for (size_t i = 0; i < pool_size; ++i) {
      tokenizer_actor::links to{streamer_ref, scheduler_ref, intake_ref, pool};
      root.start(tokenizer_refs[i], [shared, to, this, i, max_waiting_tokens] {
        return std::make_unique<tokenizer_actor>(shared, to, &encoder_, i, max_waiting_tokens);
      });
    }
    max_open_ = int64_t{cfg_.max_num_seqs} + cfg_.max_waiting;
    root.start(intake_ref, [shared, max_open = max_open_, max_len = ei.max_model_len,
                            to = intake::links{pool, scheduler_ref}] {
      return std::make_unique<intake>(shared, to, max_open, max_len);
    });
    refs_.intake = intake_ref;
    refs_.tokenizers = pool;
    refs_.grammar = grammar_ref;
  }

  // The grammar actor (structured outputs), started at once (it sends to nobody), when there is a
  // tokenizer to build the vocabulary from; a null reference otherwise (structured_error_ says
  // why).
  rt::actor_ref<grammar_protocol> reserve_grammar_actor(const executor_info& ei,
                                                        const std::vector<int32_t>& eos) {
    if (!tok_) {
      structured_error_ = "structured outputs need the model's tokenizer (tokenizer.json)";
      return {};
    }
    const int threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 1, 4);
    auto gc = grammar_compiler::create(*tok_, ei.vocab_size, eos, 256, threads);
    if (!gc) {
      structured_error_ = gc.err().message;
      std::fprintf(stderr, "coserve engine: structured outputs unavailable: %s\n",
                   structured_error_.c_str());
      return {};
    }
    std::shared_ptr<grammar_compiler> compiler(std::move(*gc));
    auto ref = sys_->root().reserve<grammar_actor>(actor_options("grammar", 4096, true, true));
    sys_->root().start(ref, [shared = shared_, compiler] {
      return std::make_unique<grammar_actor>(shared, compiler);
    });
    return ref;
  }

  void log_started(const executor_info& ei) const {
    std::fprintf(
        stderr,
        "coserve engine: actors intake, tokenizer x%zu,%s scheduler, kv_allocator, "
        "executor [%s], streamer started; KV cache %d blocks x %d tokens; max_num_seqs %d, "
        "max_num_batched_tokens %d, max_model_len %d\n",
        refs_.tokenizers->size(), refs_.grammar ? " grammar," : "", ei.device.c_str(),
        ei.num_kv_blocks, ei.block_size, cfg_.max_num_seqs, cfg_.max_num_batched_tokens,
        ei.max_model_len);
    if (!spec_.enabled()) return;
    const std::string how = spec_.method == "draft_model"
                                ? "draft model " + spec_.draft_model
                                : "n-grams of " + std::to_string(spec_.prompt_lookup_min) + ".." +
                                      std::to_string(spec_.prompt_lookup_max) + " tokens";
    const std::string off =
        spec_.disable_by_batch_size > 0
            ? ", off above " + std::to_string(spec_.disable_by_batch_size) + " running sequences"
            : "";
    std::fprintf(stderr,
                 "coserve engine: speculative decoding: %s, up to %d proposals a step, %s%s\n",
                 spec_.method.c_str(), spec_.num_speculative_tokens, how.c_str(), off.c_str());
  }

  // Marks the engine failed once and ends every open request: the scheduler ends the ones it
  // holds (and refuses later ones), the streamer every stream still open (covers a dead
  // scheduler). Any thread.
  void fail_engine(const std::string& reason) {
    if (!shared_->health.fail(reason)) return;
    std::fprintf(stderr, "coserve engine: unhealthy: %s\n", reason.c_str());
    shared_->open_cv.notify_all();
    (void)refs_.scheduler.tell(engine_failed{reason});
    (void)refs_.streamer.tell(fail_all{reason});
  }

 public:
  asio::awaitable<result<std::shared_ptr<request_stream>>> submit(generate_request req) override {
    // Refusals are answered here, on the caller's thread, without waiting on any busy actor.
    if (!healthy()) co_return error{"engine_down", unhealthy_reason()};
    if (shared_->metrics.open_requests.load(std::memory_order_relaxed) >= max_open_) {
      shared_->metrics.rejected.fetch_add(1, std::memory_order_relaxed);
      co_return error{"queue_full", "too many requests in flight (" + std::to_string(max_open_) +
                                        "); retry later"};
    }
    if (const int64_t waiting = shared_->metrics.waiting_tokens.load(std::memory_order_relaxed);
        cfg_.max_waiting_tokens > 0 && waiting >= cfg_.max_waiting_tokens) {
      shared_->metrics.rejected.fetch_add(1, std::memory_order_relaxed);
      co_return error{"queue_full", "too many prompt tokens waiting (" + std::to_string(waiting) +
                                        "); retry later"};
    }
    if (req.params.pooling.enabled != (info_.task != "generate"))
      co_return error{"invalid_request", task_mismatch(req.params.pooling.enabled)};
    if (req.params.prompt_logprobs >= 0 && !info_.prompt_logprobs)
      co_return error{"invalid_request", "prompt logprobs are not computed by this executor",
                      "prompt_logprobs"};
    if (req.structured) {
      // The grammar first (compiled off the scheduler's path, or found in the cache): a request
      // with an invalid one is refused before anything is queued.
      if (!refs_.grammar) {
        error e{"invalid_request", structured_error_, req.structured->param};
        co_return e;
      }
      auto gref = refs_.grammar;
      auto g = co_await await_reply<std::shared_ptr<
          const compiled_grammar>>([&](rt::reply_ptr<std::shared_ptr<const compiled_grammar>>
                                           reply) {
        compile_grammar m{*req.structured, reply};
        const rt::send_status s = gref.try_tell(m);
        if (s == rt::send_status::full) {
          shared_->metrics.rejected.fetch_add(1, std::memory_order_relaxed);
          reply->complete(error{"queue_full", "too many grammars waiting to compile; retry later"});
        } else if (s == rt::send_status::closed) {
          reply->complete(error{"engine_down", "the engine is stopping"});
        }
      });
      if (!g) co_return std::move(g).err();
      req.params.grammar = std::move(*g);
    }
    auto ref = refs_.intake;
    co_return co_await await_reply<std::shared_ptr<request_stream>>([&](submit_reply reply) {
      submit_request m{std::move(req), reply};
      const rt::send_status s = ref.try_tell(m);
      if (s == rt::send_status::full) {
        shared_->metrics.rejected.fetch_add(1, std::memory_order_relaxed);
        reply->complete(error{"queue_full", "too many requests arriving; retry later"});
      } else if (s == rt::send_status::closed) {
        reply->complete(error{"engine_down", "the engine is stopping"});
      }
    });
  }

  asio::awaitable<result<std::vector<int32_t>>> tokenize(tokenize_request_input in) override {
    const int64_t cost = tokenize_cost(in);
    co_return co_await await_reply<std::vector<int32_t>>(
        [&](rt::reply_ptr<std::vector<int32_t>> reply) {
          send_to_pool(encode_text{std::move(in), reply, cost}, cost, reply);
        });
  }
  asio::awaitable<result<std::string>> detokenize(std::vector<int32_t> ids) override {
    const auto cost = static_cast<int64_t>(ids.size()) + 1;
    co_return co_await await_reply<std::string>([&](rt::reply_ptr<std::string> reply) {
      send_to_pool(decode_ids{std::move(ids), reply, cost}, cost, reply);
    });
  }
  const model_info& info() const noexcept override { return info_; }
  bool healthy() const noexcept override {
    return running_.load(std::memory_order_acquire) && !shared_->health.failed();
  }
  std::string unhealthy_reason() const override {
    if (shared_->health.failed()) return "the engine has failed: " + shared_->health.reason();
    if (!running_.load(std::memory_order_acquire)) return "the engine is shutting down";
    return {};
  }

  engine_metrics metrics() override {
    auto& m = shared_->metrics;
    engine_metrics out;
    out.requests_running = m.running.load(std::memory_order_relaxed);
    out.requests_waiting = m.waiting.load(std::memory_order_relaxed);
    for (auto [mask, names] :
         {std::pair{m.lora_running.load(std::memory_order_relaxed), &out.lora_running},
          std::pair{m.lora_waiting.load(std::memory_order_relaxed), &out.lora_waiting}})
      for (size_t i = 0; i < info_.lora_modules.size() && i < 64; ++i)
        if (mask >> i & 1) names->push_back(info_.lora_modules[i].name);
    out.kv_blocks_total = m.kv_total.load(std::memory_order_relaxed);
    out.kv_blocks_free = m.kv_free.load(std::memory_order_relaxed);
    out.kv_blocks_cached_free = m.kv_cached_free.load(std::memory_order_relaxed);
    out.prefix_queries = m.prefix_queries.load(std::memory_order_relaxed);
    out.prefix_hits = m.prefix_hits.load(std::memory_order_relaxed);
    out.prompt_tokens = m.prompt_tokens.load(std::memory_order_relaxed);
    out.generation_tokens = m.generation_tokens.load(std::memory_order_relaxed);
    out.preemptions = m.preemptions.load(std::memory_order_relaxed);
    out.finished_stop = m.finished_stop.load(std::memory_order_relaxed);
    out.finished_length = m.finished_length.load(std::memory_order_relaxed);
    out.finished_abort = m.finished_abort.load(std::memory_order_relaxed);
    out.finished_error = m.finished_error.load(std::memory_order_relaxed);
    out.rejected = m.rejected.load(std::memory_order_relaxed);
    out.open_requests = m.open_requests.load(std::memory_order_relaxed);
    out.steps = m.steps.load(std::memory_order_relaxed);
    out.steps_launched_ahead = m.steps_launched_ahead.load(std::memory_order_relaxed);
    out.grammar_compiles = m.grammar_compiles.load(std::memory_order_relaxed);
    out.grammar_cache_hits = m.grammar_cache_hits.load(std::memory_order_relaxed);
    out.grammar_failures = m.grammar_failures.load(std::memory_order_relaxed);
    out.grammar_cache_bytes = m.grammar_cache_bytes.load(std::memory_order_relaxed);
    out.grammar_compile_seconds =
        double(m.grammar_compile_us.load(std::memory_order_relaxed)) / 1e6;
    out.spec_drafts = m.spec_drafts.load(std::memory_order_relaxed);
    out.spec_draft_tokens = m.spec_draft_tokens.load(std::memory_order_relaxed);
    out.spec_accepted_tokens = m.spec_accepted_tokens.load(std::memory_order_relaxed);
    const auto positions = static_cast<size_t>(m.spec_positions.load(std::memory_order_relaxed));
    for (size_t i = 0; i < positions && i < m.spec_accepted_per_position.size(); ++i)
      out.spec_accepted_per_position.push_back(
          m.spec_accepted_per_position[i].load(std::memory_order_relaxed));
    if (refs_.intake) {
      const int64_t tokenizer_queued = refs_.tokenizers->queued();  // the pool, summed
      out.mailbox_depth = {{"intake", int64_t(refs_.intake.queued())},
                           {"tokenizer", tokenizer_queued},
                           {"grammar", refs_.grammar ? int64_t(refs_.grammar.queued()) : 0},
                           {"scheduler", int64_t(refs_.scheduler.queued())},
                           {"kv_allocator", int64_t(refs_.kv_allocator.queued())},
                           {"executor", int64_t(refs_.executor.queued())},
                           {"streamer", int64_t(refs_.streamer.queued())}};
    }
    if (rank_stats_) out.tp_ranks = rank_stats_->snapshot();
    out.ttft = m.ttft.snapshot();
    out.itl = m.itl.snapshot();
    out.e2e = m.e2e.snapshot();
    out.queue = m.queue.snapshot();
    return out;
  }

  asio::awaitable<result<int32_t>> reset_prefix_cache() override {
    auto ref = refs_.kv_allocator;
    co_return co_await await_reply<int32_t>([&](rt::reply_ptr<int32_t> reply) {
      tell_or_refuse(ref, actors::reset_prefix_cache{reply}, *reply);
    });
  }

  asio::awaitable<result<prefix_cache_listing>> prefix_cache() override {
    auto ref = refs_.kv_allocator;
    co_return co_await await_reply<prefix_cache_listing>(
        [&](rt::reply_ptr<prefix_cache_listing> reply) {
          tell_or_refuse(ref, list_cached_blocks{reply}, *reply);
        });
  }

  asio::awaitable<result<std::vector<request_status>>> requests(size_t limit) override {
    auto ref = refs_.scheduler;
    co_return co_await await_reply<std::vector<request_status>>(
        [&](rt::reply_ptr<std::vector<request_status>> reply) {
          tell_or_refuse(ref, list_requests{limit, reply}, *reply);
        });
  }

  // Sends a message carrying `reply`; completes the reply with the error when the actor's
  // mailbox refuses it.
  template <class Ref, class Message, class Reply>
  static void tell_or_refuse(Ref& ref, Message m, Reply& reply) {
    const rt::send_status s = ref.try_tell(m);
    if (s == rt::send_status::full)
      reply.complete(error{"queue_full", "the engine is busy; retry later"});
    else if (s == rt::send_status::closed)
      reply.complete(error{"engine_down", "the engine is stopping"});
  }

  rt::tracer* tracer() noexcept override { return &sys_->trace(); }

  int64_t drain(std::chrono::milliseconds grace) override {
    running_.store(false, std::memory_order_release);
    auto open = [this] { return shared_->metrics.open_requests.load(std::memory_order_relaxed); };
    std::unique_lock lock(shared_->open_mu);
    shared_->open_cv.wait_for(lock, grace, [&] { return open() == 0 || shared_->health.failed(); });
    if (shared_->health.failed())  // every open request is being ended with an error already
      shared_->open_cv.wait_for(lock, std::chrono::seconds(5), [&] { return open() == 0; });
    const int64_t aborted = open();
    if (aborted > 0) {
      std::fprintf(stderr, "coserve engine: aborting %lld open requests\n",
                   static_cast<long long>(aborted));
      (void)refs_.intake.tell(abort_all{});
      // Aborted streams end within a step; a failed engine has ended them already. The bound only
      // guards against a wedged executor thread.
      shared_->open_cv.wait_for(lock, std::chrono::seconds(30), [&] { return open() == 0; });
    }
    return aborted;
  }

  void stop(bool abort_running) override {
    std::lock_guard lock(stop_mu_);
    if (stopped_) return;
    drain(abort_running ? std::chrono::milliseconds(0)
                        : std::chrono::milliseconds(std::chrono::minutes(10)));
    {
      std::lock_guard wl(watch_mu_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    sys_->stop();
    stopped_ = true;
    if (!cfg_.trace_file.empty()) {
      if (auto w = sys_->trace().write_chrome_json(cfg_.trace_file); w.ok())
        std::fprintf(stderr, "coserve engine: trace written to %s\n",
                     cfg_.trace_file.string().c_str());
      else
        std::fprintf(stderr, "coserve engine: cannot write the trace: %s\n",
                     w.err().message.c_str());
    }
  }

  // Sends a tokenizer-pool message to the least loaded actor; a full mailbox or a stopped pool
  // answers the reply at once.
  template <class M, class Reply>
  void send_to_pool(M m, int64_t cost, const Reply& reply) {
    if (!running_.load(std::memory_order_acquire)) {
      reply->complete(error{"engine_down", "the engine is stopping"});
      return;
    }
    const size_t i = refs_.tokenizers->pick(cost);
    const rt::send_status s = (*refs_.tokenizers)[i].try_tell(m);
    if (s == rt::send_status::ok) return;
    refs_.tokenizers->done(i, cost);
    if (s == rt::send_status::full)
      reply->complete(error{"queue_full", "the tokenizers are busy; retry later"});
    else
      reply->complete(error{"engine_down", "the engine is stopping"});
  }

  // Fails the engine when one step runs past cfg_.step_timeout (checked ten times a timeout).
  void watch_steps() {
    const auto period =
        std::max<std::chrono::milliseconds>(cfg_.step_timeout / 10, std::chrono::milliseconds(1));
    const int64_t limit_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.step_timeout).count();
    std::unique_lock lock(watch_mu_);
    while (!watch_cv_.wait_for(lock, period, [this] { return watch_stop_; })) {
      const int64_t started = shared_->metrics.step_started_ns.load(std::memory_order_relaxed);
      if (started == 0 || shared_->health.failed()) continue;
      if (sys_->trace().now_ns() - started > limit_ns) {
        fail_engine("an executor step has not completed in " +
                    std::to_string(cfg_.step_timeout.count()) + " ms");
      }
    }
  }

 private:
  engine_config cfg_;
  std::optional<tokenizer> tok_;     // absent: token ids in and out only
  actors::speculative_config spec_;  // parsed --speculative-config (off unless enabled())
  std::shared_ptr<kv_event_publisher> kv_events_;       // --kv-events-config (none: not published)
  std::shared_ptr<const rank_stats_board> rank_stats_;  // tensor parallel executors only
  std::optional<chat_template> template_;
  prompt_encoder encoder_;
  model_info info_;
  std::unique_ptr<rt::system> sys_;
  std::shared_ptr<engine_shared> shared_;
  serving_refs refs_;
  std::atomic<bool> running_{true};
  int64_t max_open_ = 0;
  std::string structured_error_;  // why structured outputs are unavailable
  std::mutex stop_mu_;
  bool stopped_ = false;
  std::thread watchdog_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
};

// vLLM's --task against what the model is: an encoder embeds or scores (its architecture says
// which), anything else generates.
result<void> check_task(const std::string& task, bool encoder, const std::string& arch) {
  if (task != "auto" && task != "generate" && task != "embed" && task != "embedding" &&
      task != "score")
    return error{"invalid_argument",
                 "--task '" + task + "' is not one of auto, generate, embed, score", "task"};
  if (task == "auto") return {};
  const bool classifier = arch.ends_with("ForSequenceClassification");
  if (encoder && task == "generate")
    return error{"invalid_argument",
                 "--task generate: " + arch +
                     " is an encoder; it serves embeddings or scores (--task embed or score)",
                 "task"};
  if (!classifier && task == "score")
    return error{"invalid_argument",
                 "--task score: " + (arch.empty() ? std::string("the model") : arch) +
                     " is not a sequence classifier (scores are served from "
                     "*ForSequenceClassification models: BERT and XLM-RoBERTa cross-encoders, "
                     "decoder rerankers, a language model read as one with --hf-overrides' "
                     "classifier_from_token; or by the cosine of an embedding model's vectors with "
                     "--task embed)",
                 "task"};
  if (classifier && task != "score")
    return error{"invalid_argument",
                 "--task " + task + ": " + arch +
                     " is a sequence classifier; it serves scores (--task "
                     "score: /v1/score and /v1/rerank)",
                 "task"};
  return {};
}

// Whether the model is an encoder, after vLLM's --hf-overrides (checked here: Hugging Face
// folders of decoders on the CPU, one rank) and --task are checked against its architecture.
result<bool> check_model_kind(const engine_config& config, bool gguf) {
  if (!config.hf_overrides.empty()) {
    if (gguf || config.device != "cpu" || config.tensor_parallel_size > 1)
      return error{"invalid_argument",
                   "--hf-overrides applies to Hugging Face folders of decoders on the CPU "
                   "executor (--device cpu), one rank",
                   "hf_overrides"};
    if (auto r = read_config_json(config.model_dir, config.hf_overrides); !r) return r.err();
  }
  const std::string arch =
      gguf ? std::string() : read_architecture(config.model_dir, config.hf_overrides);
  const bool encoder = is_encoder_architecture(arch);
  if (encoder && !config.hf_overrides.empty())
    return error{"invalid_argument",
                 "--hf-overrides applies to decoders; " + arch + " is an encoder", "hf_overrides"};
  if (auto t = check_task(config.task, encoder, arch); !t) return t.err();
  return encoder;
}

// What the engine reads of an encoder's config: its architecture and sizes.
result<model_config> encoder_model_summary(const std::filesystem::path& dir) {
  auto c = load_encoder_config(dir);
  if (!c) return c.err();
  model_config m;
  m.architecture = c->architecture;
  m.model_type = c->model_type;
  m.hidden_size = c->hidden_size;
  m.num_hidden_layers = c->num_hidden_layers;
  m.num_attention_heads = c->num_attention_heads;
  m.vocab_size = c->vocab_size;
  m.max_position_embeddings = c->max_model_len();
  return m;
}

}  // namespace

namespace {

// --enable-lora and --lora-modules, checked before the model loads (each adapter is read against
// the model's config when the executor loads).
result<void> check_lora_flags(const engine_config& config) {
  if (config.lora_modules.empty()) return {};
  if (!config.enable_lora)
    return error{"invalid_argument", "--lora-modules needs --enable-lora", "lora_modules"};
  if (config.tensor_parallel_size > 1)
    return error{"invalid_argument",
                 "--lora-modules: LoRA adapters are not supported with tensor parallelism",
                 "lora_modules"};
  std::vector<std::string> names;
  for (const std::string& text : config.lora_modules) {
    auto m = parse_lora_module(text);
    if (!m) return m.err();
    if (std::find(names.begin(), names.end(), m->name) != names.end() ||
        m->name == config.served_model_name)
      return error{"invalid_argument",
                   "--lora-modules: the name '" + m->name + "' is already taken", "lora_modules"};
    names.push_back(m->name);
  }
  return {};
}

// --kv-events-config (and the LoRA flags), parsed and checked against the flags before the model
// loads.
result<actors::kv_events_config> read_kv_events_config(const engine_config& config) {
  if (auto r = check_lora_flags(config); !r) return r.err();
  if (config.kv_events_config.empty()) return actors::kv_events_config{};
  auto parsed = actors::parse_kv_events_config(config.kv_events_config);
  if (parsed && parsed->publishes() && !config.enable_prefix_caching)
    return error{"invalid_argument",
                 "--kv-events-config: the events describe the prefix cache, which "
                 "--no-enable-prefix-caching turns off",
                 "kv_events_config"};
  return parsed;
}

// The KV-event publisher when the config publishes (none otherwise); its sockets open here.
result<std::shared_ptr<kv_event_publisher>> start_kv_events(const actors::kv_events_config& c,
                                                            const executor_info& ei, bool encoder) {
  if (!c.publishes()) return std::shared_ptr<kv_event_publisher>();
  if (encoder)
    return error{"invalid_argument",
                 "--kv-events-config: an encoder model keeps no KV cache to publish",
                 "kv_events_config"};
  auto started = kv_event_publisher::start(c, ei.block_size, ei.device == "cuda" ? "GPU" : "CPU");
  if (!started) return started.err();
  const kv_event_publisher& p = **started;
  std::fprintf(stderr, "coserve engine: KV-cache events published on %s (topic \"%s\")%s%s\n",
               p.endpoint().c_str(), c.topic.c_str(),
               p.replay_endpoint().empty() ? "" : ", replayed on ", p.replay_endpoint().c_str());
  return std::shared_ptr<kv_event_publisher>(std::move(*started));
}

}  // namespace

result<std::unique_ptr<engine>> engine::start(engine_config config) {
  if (config.max_num_batched_tokens <= 0)
    config.max_num_batched_tokens = config.device == "cpu" ? 512 : 2048;
  auto spec = config.speculative_config.empty()
                  ? result<actors::speculative_config>(actors::speculative_config{})
                  : actors::parse_speculative_config(config.speculative_config);
  if (!spec) return spec.err();
  auto kv_events = read_kv_events_config(config);
  if (!kv_events) return kv_events.err();
  std::optional<tokenizer> tok;
  const bool gguf = is_gguf_file(config.model_dir.string());
  std::shared_ptr<const gguf_file> gguf_meta;
  if (gguf) {
    auto f = gguf_file::open(config.model_dir.string());
    if (!f) return f.err();
    gguf_meta = std::move(*f);
    std::fprintf(stderr, "coserve engine: %s: %s\n", config.model_dir.string().c_str(),
                 gguf_summary(*gguf_meta).c_str());
  }
  if (!config.skip_tokenizer_init && gguf && gguf_meta->find("tokenizer.ggml.model")) {
    auto loaded = load_gguf_tokenizer(*gguf_meta);
    if (!loaded) return loaded.err();
    tok.emplace(std::move(*loaded));
  } else if (!config.skip_tokenizer_init && gguf) {
    std::fprintf(stderr,
                 "coserve engine: no tokenizer (the GGUF file has no tokenizer.ggml.* metadata): "
                 "prompts are token ids, outputs token ids without text\n");
  } else if (!config.skip_tokenizer_init &&
             std::filesystem::exists(config.model_dir / "tokenizer.json")) {
    auto loaded = tokenizer::load(config.model_dir / "tokenizer.json");
    if (!loaded) return loaded.err();
    tok.emplace(std::move(*loaded));
  } else {
    std::fprintf(
        stderr,
        "coserve engine: no tokenizer (%s): prompts are token ids, outputs token ids without "
        "text\n",
        config.skip_tokenizer_init ? "skip_tokenizer_init" : "the folder has no tokenizer.json");
  }
  // Encoders (embedding models, cross-encoders) have a config of their own: the engine reads its
  // architecture and sizes; the executor the rest.
  auto kind = check_model_kind(config, gguf);
  if (!kind) return kind.err();
  const bool encoder = *kind;
  // A GGUF file's metadata is parsed once above and read from there.
  auto model = encoder ? encoder_model_summary(config.model_dir)
               : gguf  ? gguf_model_config(*gguf_meta)
                       : load_model_config(config.model_dir.string(), config.hf_overrides);
  if (!model) return model.err();
  if (encoder) config.enable_prefix_caching = false;  // no KV to reuse
  auto gen =
      gguf ? gguf_generation_config(*gguf_meta) : load_generation_config(config.model_dir.string());
  if (!gen) return gen.err();
  // Sampling defaults for what requests leave out (vLLM's --generation-config and
  // --override-generation-config).
  generation_config from_file, over;
  if (config.generation_config == "auto") {
    from_file = *gen;
  } else if (config.generation_config != "vllm") {
    const std::filesystem::path file =
        std::filesystem::path(config.generation_config) / "generation_config.json";
    if (!std::filesystem::is_regular_file(file))
      return error{"invalid_argument",
                   "--generation-config: " + file.string() +
                       " not found (give auto, vllm or a folder "
                       "holding generation_config.json)",
                   "generation_config"};
    auto g = load_generation_config(config.generation_config);
    if (!g)
      return error{"invalid_argument", "--generation-config: " + g.err().message,
                   "generation_config"};
    from_file = *g;
  }
  if (!config.override_generation_config.empty()) {
    auto o =
        parse_generation_config(config.override_generation_config, "--override-generation-config");
    if (!o) return error{"invalid_argument", o.err().message, "override_generation_config"};
    over = *o;
  }
  auto defaults = sampling_defaults_of(from_file, over);
  if (!defaults) return error{"invalid_argument", defaults.err().message, "generation_config"};
  if (!defaults->empty())
    std::fprintf(
        stderr,
        "coserve engine: default sampling parameters from the generation config: %s (requests "
        "override them; --generation-config vllm leaves the API's defaults)\n",
        describe(*defaults).c_str());
  const auto t0 = std::chrono::steady_clock::now();
  auto made = config.make_executor ? config.make_executor(config) : make_default_executor(config);
  if (!made) return made.err();
  std::unique_ptr<executor> exec = std::move(*made);
  if (spec->enabled() && !exec->info().verifies_proposals)
    return error{"invalid_argument",
                 "--speculative-config: the " + exec->info().device +
                     " executor does not verify proposals; speculative decoding runs on "
                     "--device cpu, and n-gram lookup on --device cuda",
                 "speculative_config"};
  std::fprintf(stderr, "coserve engine: model %s loaded in %.1f s\n",
               config.model_dir.string().c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (const executor_info ei = exec->info();
      ei.whole_prompts && config.max_num_batched_tokens < ei.max_model_len) {
    // An encoder sees each input whole in one step: the step budget must hold the longest.
    std::fprintf(stderr,
                 "coserve engine: max_num_batched_tokens raised from %d to max_model_len %d (an "
                 "encoder computes each input whole in one step)\n",
                 config.max_num_batched_tokens, ei.max_model_len);
    config.max_num_batched_tokens = ei.max_model_len;
  }
#if defined(__GLIBC__)
  // Loading freed more than it keeps (the tokenizer's JSON document tree, the GGUF metadata's
  // parse buffers): hand the free pages inside the heap back instead of keeping them resident.
  malloc_trim(0);
#endif
  auto publisher = start_kv_events(*kv_events, exec->info(), encoder);
  if (!publisher) return publisher.err();
  return std::unique_ptr<engine>(
      new engine_impl(std::move(config), std::move(tok), std::move(*model), std::move(*gen),
                      std::move(exec), *spec, *defaults, std::move(*publisher)));
}

}  // namespace coserve
