// The CPU executor: loading and sharding (tensor-parallel ranks as threads or MPI processes), the
// step (batch layout, draft proposals, forward pass, sampling or pooling per sequence) and the
// launch/collect thread. Over 500 lines: the step's parts share the executor's sequence state; the
// draft model's half is model/cpu_executor_draft.cpp.
#include "model/cpu_executor.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>

namespace coserve {

int32_t physical_cores() {
  std::set<std::string> cores;
  for (int cpu = 0;; ++cpu) {
    std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                    "/topology/thread_siblings_list");
    if (!f) break;
    std::string s;
    std::getline(f, s);
    cores.insert(s);
  }
  const int32_t logical = int32_t(std::thread::hardware_concurrency());
  if (cores.empty()) return std::max(1, logical);
  return std::max<int32_t>(1, int32_t(cores.size()));
}

namespace {

int32_t default_workers(int32_t asked) { return (asked > 0 ? asked : physical_cores()) - 1; }

// Threads of each rank's forward pass when `ranks` ranks share this process.
int32_t threads_per_rank(int32_t asked, int32_t ranks) {
  return std::max(1, (asked > 0 ? asked : physical_cores()) / std::max(1, ranks));
}

// Every rank's load error, gathered on rank 0 ("rank r: ..." lines; "" when all loaded).
result<std::string> gather_load_errors(communicator& world, const std::string& mine) {
  std::vector<unsigned char> all;
  const bool root = world.rank() == 0;
  if (auto r = world.gather(mine.data(), mine.size(), root ? &all : nullptr, 0); !r) return r.err();
  return std::string(all.begin(), all.end());
}

std::string tag_error(int32_t rank, const std::string& e) {
  return e.empty() ? e : "rank " + std::to_string(rank) + ": " + e + "\n";
}

// Where each sequence's logits rows start: consecutive per sequence that asked for them (its last
// 1 + num_draft are the ones sampled).
std::vector<size_t> logit_first_rows(const std::vector<forward_seq>& batch) {
  std::vector<size_t> first_row(batch.size(), 0);
  for (size_t i = 0, row = 0; i < batch.size(); ++i) {
    first_row[i] = row;
    if (batch[i].want_logits)
      row += size_t(std::clamp(batch[i].logit_rows, 1, batch[i].num_tokens));
  }
  return first_row;
}

// A sequence classifier's head in fp32 [num_labels, hidden]: the checkpoint's score.weight, or the
// LM-head rows of classifier_from_token's ids (model_config::classifier_from_token).
result<std::vector<float>> classifier_head(const model_weights& w,
                                           const std::vector<int32_t>& token_ids) {
  const model_config& c = w.config;
  if (c.classifier_from_token.empty()) return to_f32(w.score);
  if (token_ids.size() != c.classifier_from_token.size())
    return error{"invalid_argument",
                 "classifier_from_token: " + std::to_string(c.classifier_from_token.size()) +
                     " tokens, " + std::to_string(token_ids.size()) + " ids resolved",
                 "hf_overrides"};
  const auto h = size_t(c.hidden_size);
  std::vector<std::vector<float>> rows;
  for (int32_t id : token_ids) {
    if (id < 0 || id >= c.vocab_size)
      return error{"invalid_argument",
                   "classifier_from_token: id " + std::to_string(id) + " outside the vocabulary",
                   "hf_overrides"};
    rows.push_back(to_f32(weight_rows(w.lm_head, id, 1)));
  }
  if (!c.two_way_softmax) {
    std::vector<float> head;
    for (const auto& r : rows) head.insert(head.end(), r.begin(), r.end());
    return head;
  }
  // sigmoid(logit_1 - logit_0) is softmax([logit_0, logit_1])[1]: one label, row 1 minus row 0.
  std::vector<float> head(h);
  for (size_t i = 0; i < h; ++i) head[i] = rows[1][i] - rows[0][i];
  return head;
}

}  // namespace

struct cpu_executor::tp_ranks {
  std::shared_ptr<communicator> world;               // MPI: rank 0 of the job
  std::vector<std::unique_ptr<communicator>> local;  // in-process: one per rank (0 is ours)
  std::vector<std::unique_ptr<tp_worker>> workers;   // in-process ranks 1..N-1
  std::vector<std::thread> threads;
  communicator* comm = nullptr;  // rank 0's
  bool failed = false;           // a collective failed: no stop message

  ~tp_ranks() {
    if (!failed && comm) {
      auto stop = encode_tp_stop();
      (void)comm->broadcast(stop, 0);
    }
    for (auto& t : threads) t.join();
  }
};

result<void> tp_setup_exchange_root(communicator& world, const std::string& my_error,
                                    const tp_setup& setup) {
  auto errors = gather_load_errors(world, tag_error(0, my_error));
  if (!errors) return errors.err();
  tp_setup s = setup;
  s.error = *errors;
  auto msg = encode_tp_setup(s);
  if (auto r = world.broadcast(msg, 0); !r) return r;
  if (!s.error.empty()) {
    while (!s.error.empty() && s.error.back() == '\n') s.error.pop_back();
    return error{"invalid_argument", "tensor parallel startup failed: " + s.error,
                 "tensor_parallel_size"};
  }
  return {};
}

result<void> run_tp_rank(const std::string& dir, communicator& world, int32_t threads,
                         const load_progress& progress) {
  std::string my_error;
  std::optional<model_weights> shard;
  auto full = load_weights(dir, progress);
  if (!full) {
    my_error = full.err().message;
  } else {
    auto s = shard_weights(*full, world.rank(), world.size());
    if (!s)
      my_error = s.err().message;
    else
      shard.emplace(std::move(*s));
  }
  auto errors = gather_load_errors(world, tag_error(world.rank(), my_error));
  if (!errors) return errors.err();
  std::vector<unsigned char> msg;
  if (auto r = world.broadcast(msg, 0); !r) return r;
  auto setup = decode_tp_setup(msg);
  if (!setup) return setup.err();
  if (!setup->error.empty()) {
    while (!setup->error.empty() && setup->error.back() == '\n') setup->error.pop_back();
    return error{"invalid_argument", "tensor parallel startup failed: " + setup->error,
                 "tensor_parallel_size"};
  }
  tp_worker w(std::move(*shard), *setup, world, threads > 0 ? threads : physical_cores());
  std::fprintf(stderr, "coserve rank %d/%d: %s; KV cache %zu MiB (%d blocks)\n", world.rank(),
               world.size(), describe_shard(w.weights()).c_str(), w.kv_cache_bytes() >> 20,
               setup->num_kv_blocks);
  return w.serve();
}

cpu_executor::cpu_executor(model_weights weights, generation_config gen,
                           const cpu_executor_options& opts)
    : weights_(std::move(weights)),
      gen_(std::move(gen)),
      opts_(opts),
      pool_(default_workers(opts.num_threads)),
      cache_(weights_.config.num_hidden_layers, opts.num_kv_blocks, opts.block_size,
             weights_.shard.num_heads ? weights_.shard.num_kv_heads
                                      : weights_.config.num_key_value_heads,
             weights_.config.head_dim, opts.kv_cache_dtype),
      forward_(weights_, pool_) {
  if (const std::string fp8 = describe_fp8(weights_); !fp8.empty())
    std::fprintf(stderr, "coserve: %s\n", fp8.c_str());
  if (const size_t packed = pack_for_cpu(weights_); packed > 0)
    std::fprintf(
        stderr,
        "coserve: Q4_0 matrices repacked into 16-row tiles for the CPU kernels (%zu MiB; the "
        "file's pages of the originals released)\n",
        packed >> 20);
  if (opts_.max_model_len <= 0 || opts_.max_model_len > weights_.config.max_position_embeddings)
    opts_.max_model_len = weights_.config.max_position_embeddings;
  forward_.set_bf16_activations(opts_.bf16_activations);
}

result<std::unique_ptr<cpu_executor>> cpu_executor::create(model_weights weights,
                                                           generation_config gen,
                                                           const cpu_executor_options& opts) {
  if (opts.num_kv_blocks <= 0 || opts.block_size <= 0)
    return make_error("invalid_argument",
                      "cpu executor: num_kv_blocks and block_size must be positive");
  if (weights.config.classifier()) {  // a reranker: its head on the last token's hidden state
    if (opts.tensor_parallel_size > 1)
      return error{"invalid_argument",
                   weights.config.architecture + " (a sequence classifier) runs on one rank",
                   "tensor_parallel_size"};
    if (!opts.draft_model_dir.empty())
      return error{"invalid_argument",
                   "--speculative-config: a sequence classifier generates nothing to speculate on",
                   "speculative_config"};
    auto head = classifier_head(weights, opts.classifier_token_ids);
    if (!head) return head.err();
    cpu_executor_options scoring = opts;
    scoring.pooling = pooling_config{};
    scoring.pooling->type = pooling_type::last;
    scoring.pooling->normalize = false;
    scoring.pooling->source = "the sequence classifier's head";
    auto made = std::unique_ptr<cpu_executor>(
        new cpu_executor(std::move(weights), std::move(gen), scoring));
    made->score_head_ = std::move(*head);
    return made;
  }
  if (opts.pooling && opts.pooling->type != pooling_type::last)
    return make_error("invalid_argument",
                      "--task embed: " + weights.config.architecture + " pools its last token; " +
                          std::string(pooling_type_name(opts.pooling->type)) + " pooling (" +
                          opts.pooling->source +
                          ") needs every token's state, which chunked prefill does not keep");
  if (weights.headless && !opts.pooling)
    return make_error("invalid_argument",
                      "the checkpoint is a base model's (no lm_head.weight, untied embeddings): "
                      "it serves embeddings (--task embed), not generation");
  if (gen.eos_token_ids.empty()) gen.eos_token_ids = weights.config.eos_token_ids;
  const int32_t n = std::max(1, opts.tensor_parallel_size);
  if (n == 1)
    return std::unique_ptr<cpu_executor>(
        new cpu_executor(std::move(weights), std::move(gen), opts));
  if (!opts.draft_model_dir.empty())
    return error{"invalid_argument",
                 "--speculative-config: a draft model does not run with --tensor-parallel-size > 1 "
                 "(n-gram speculation does)",
                 "speculative_config"};
  tp_setup setup;
  setup.num_kv_blocks = opts.num_kv_blocks;
  setup.block_size = opts.block_size;
  setup.kv_type = opts.kv_cache_dtype;
  setup.bf16_activations = opts.bf16_activations;
  auto tp = std::make_unique<tp_ranks>();
  cpu_executor_options o = opts;
  if (opts.world) {
    if (opts.world->size() != n || opts.world->rank() != 0) {
      const std::string e = "--tensor-parallel-size " + std::to_string(n) + " in a job of " +
                            std::to_string(opts.world->size()) +
                            " ranks: start one rank per shard (mpirun -np " + std::to_string(n) +
                            ")";
      if (opts.world->rank() == 0) (void)tp_setup_exchange_root(*opts.world, e, setup);
      return error{"invalid_argument", e, "tensor_parallel_size"};
    }
    auto shard = shard_weights(weights, 0, n);
    if (auto r = tp_setup_exchange_root(*opts.world, shard ? "" : shard.err().message, setup); !r)
      return r.err();
    tp->world = opts.world;
    tp->comm = opts.world.get();
    weights = std::move(*shard);
  } else {
    if (auto r = check_tensor_parallel_size(weights, n); !r) return r.err();
    const int32_t per = threads_per_rank(opts.num_threads, n);
    o.num_threads = per;
    const int32_t cores = opts.num_threads > 0 ? opts.num_threads : physical_cores();
    if (n > cores)
      std::fprintf(stderr,
                   "coserve: warning: %d tensor-parallel ranks on %d %s: each rank still runs one "
                   "thread, so "
                   "they take turns on the cores\n",
                   n, cores, opts.num_threads > 0 ? "--cpu-threads" : "cores");
    tp->local = make_local_group(n);
    tp->comm = tp->local[0].get();
    for (int32_t r = 1; r < n; ++r) {
      auto shard = shard_weights(weights, r, n);
      if (!shard) return shard.err();
      tp->workers.push_back(
          std::make_unique<tp_worker>(std::move(*shard), setup, *tp->local[size_t(r)], per));
    }
    auto shard = shard_weights(weights, 0, n);
    if (!shard) return shard.err();
    weights = std::move(*shard);
    for (size_t i = 0; i < tp->workers.size(); ++i)
      tp->threads.emplace_back([w = tp->workers[i].get(), c = tp->local[i + 1].get()] {
        // A rank that fails releases the others (their collectives fail instead of waiting for it);
        // rank 0's next step then fails the engine.
        std::string why;
        try {
          if (auto r = w->serve(); !r) why = r.err().message;
        } catch (const std::exception& e) {
          why = std::string("forward pass: ") + e.what();
        }
        if (!why.empty()) {
          std::fprintf(stderr, "coserve: tensor parallel rank %d stopped: %s\n",
                       w->weights().shard.rank, why.c_str());
          c->abort(why);
        }
      });
  }
  std::unique_ptr<cpu_executor> ex(new cpu_executor(std::move(weights), std::move(gen), o));
  ex->forward_.set_communicator(tp->comm);
  ex->stats_board_ = std::make_shared<rank_stats_board>();
  std::fprintf(stderr, "coserve rank 0/%d: %s; KV cache %zu MiB (%d blocks)\n", n,
               describe_shard(ex->weights_).c_str(), ex->cache_.bytes() >> 20, opts.num_kv_blocks);
  for (const auto& w : tp->workers)
    std::fprintf(stderr, "coserve rank %d/%d: %s; KV cache %zu MiB\n", w->weights().shard.rank, n,
                 describe_shard(w->weights()).c_str(), w->kv_cache_bytes() >> 20);
  ex->tp_ = std::move(tp);
  return ex;
}

cpu_executor::~cpu_executor() {
  {
    std::lock_guard lk(launch_mu_);
    stopping_ = true;  // the step now running ends; steps still queued are dropped
  }
  launch_cv_.notify_all();
  if (step_thread_.joinable()) step_thread_.join();
}

void cpu_executor::launch(step_plan plan, const asio::any_io_executor& ex,
                          std::function<void()> ready) {
  {
    std::lock_guard lk(launch_mu_);
    launched_.push_back({std::move(plan),
                         asio::prefer(ex, asio::execution::outstanding_work.tracked),
                         std::move(ready)});
    if (!step_thread_.joinable()) step_thread_ = std::thread([this] { step_thread_main(); });
  }
  launch_cv_.notify_one();
}

result<step_result> cpu_executor::collect() {
  std::lock_guard lk(launch_mu_);
  if (completed_.empty())
    return make_error("failed_precondition", "cpu executor: collect() before a step completed");
  result<step_result> r = std::move(completed_.front());
  completed_.pop_front();
  return r;
}

void cpu_executor::step_thread_main() {
  for (;;) {
    launched_step s;
    {
      std::unique_lock lk(launch_mu_);
      launch_cv_.wait(lk, [this] { return stopping_ || !launched_.empty(); });
      if (stopping_) return;
      s = std::move(launched_.front());
      launched_.pop_front();
    }
    failed_.filter(s.plan);
    result<step_result> r = execute(s.plan);
    failed_.on_step(s.plan, r.ok());
    {
      std::lock_guard lk(launch_mu_);
      completed_.push_back(std::move(r));
    }
    // Only posts: the owner collects on its own thread. The work-tracked executor travels inside
    // the handler (released on the owner's thread once `ready` has run) and the post goes through
    // an untracked copy, so nothing here touches the owner's context once the handler may run.
    const asio::any_io_executor post_ex =
        asio::prefer(s.ex, asio::execution::outstanding_work.untracked);
    asio::post(post_ex, [work = std::move(s.ex), ready = std::move(s.ready)]() mutable {
      ready();
      work = {};
    });
  }
}

result<void> cpu_executor::run_forward(const step_plan& plan,
                                       const std::vector<forward_seq>& batch) {
  if (!tp_) return forward_.run(batch, cache_, false, logits_);
  if (tp_->failed)
    return make_error(k_executor_fatal, "tensor parallel: a rank was lost in an earlier step");
  result<void> r;
  try {
    auto msg = encode_tp_step(plan.block_copies, batch);
    r = tp_->comm->broadcast(msg, 0);
    if (r) r = run_tp_step(plan.block_copies, batch, cache_, forward_, logits_);
  } catch (const std::exception& e) {
    // The other ranks may be inside a collective of this step: release them.
    tp_->comm->abort(std::string("forward pass: ") + e.what());
    r = make_error(k_executor_fatal,
                   std::string("tensor parallel rank 0: forward pass: ") + e.what());
  }
  if (!r && r.err().code == k_executor_fatal) tp_->failed = true;
  if (r && !forward_.tp_rank_stats().empty()) stats_board_->set(forward_.tp_rank_stats());
  return r;
}

result<std::unique_ptr<cpu_executor>> cpu_executor::load(const std::string& dir,
                                                         const cpu_executor_options& opts,
                                                         const load_progress& progress) {
  auto w = load_weights(dir, progress, opts.hf_overrides);
  auto g = w ? load_generation_config(dir) : result<generation_config>(w.err());
  if (!g) {
    // The other ranks of an MPI job wait for rank 0's setup: they get the error too.
    if (opts.world && opts.world->rank() == 0 && opts.tensor_parallel_size > 1)
      (void)tp_setup_exchange_root(*opts.world, g.err().message, tp_setup{});
    return g.err();
  }
  auto made = create(std::move(*w), std::move(*g), opts);
  if (!made || opts.draft_model_dir.empty()) return made;
  cpu_executor& ex = **made;
  auto dw = load_weights(opts.draft_model_dir, progress);
  if (!dw)
    return error{dw.err().code, "draft model " + opts.draft_model_dir + ": " + dw.err().message,
                 "model"};
  const model_config& dc = dw->config;
  if (dc.vocab_size != ex.weights_.config.vocab_size)
    return error{"invalid_argument",
                 "--speculative-config: 'model' " + opts.draft_model_dir + " has a vocabulary of " +
                     std::to_string(dc.vocab_size) + " tokens; the model's has " +
                     std::to_string(ex.weights_.config.vocab_size),
                 "model"};
  if (dc.max_position_embeddings < ex.opts_.max_model_len)
    return error{"invalid_argument",
                 "--speculative-config: 'model' " + opts.draft_model_dir + " has a context of " +
                     std::to_string(dc.max_position_embeddings) +
                     " tokens, less than max_model_len " + std::to_string(ex.opts_.max_model_len),
                 "model"};
  ex.draft_ = std::make_unique<draft_model>(std::move(*dw), ex.cache_.num_blocks(),
                                            ex.cache_.block_size(), ex.cache_.type(), ex.pool_);
  ex.draft_->forward.set_bf16_activations(ex.opts_.bf16_activations);
  return made;
}

executor_info cpu_executor::info() const {
  executor_info i;
  i.num_kv_blocks = cache_.num_blocks();
  i.block_size = cache_.block_size();
  i.vocab_size = weights_.config.vocab_size;
  i.max_model_len = opts_.max_model_len;
  i.verifies_proposals = true;
  i.computes_prompt_logprobs = true;
  if (!score_head_.empty()) {
    i.task = "score";
    i.pooled_size = weights_.config.num_labels;
  } else if (opts_.pooling) {
    i.task = "embed";
    i.pooled_size = weights_.config.hidden_size;
    i.matryoshka = opts_.matryoshka;
    i.matryoshka_dimensions = opts_.matryoshka_dimensions;
  }
  i.device =
      "cpu (" + std::to_string(pool_.num_threads()) + " threads, " + cpu_isa() + ", kv " +
      std::string(dtype_name(cache_.type())) +
      (forward_.bf16_activations() && weights_.lm_head.type == dtype::bf16 ? ", bf16 activations"
                                                                           : "") +
      (weights_.config.is_moe()
           ? ", " + std::to_string(weights_.config.num_experts) + " experts, top " +
                 std::to_string(weights_.config.num_experts_per_tok)
           : "") +
      (draft_
           ? ", draft model " + std::to_string(draft_->weights.config.num_hidden_layers) + " layers"
           : "") +
      (tp_ ? ", tensor parallel " + std::to_string(tp_->comm->size()) + " ranks over " +
                 (tp_->world ? "MPI, threads of rank 0" : "threads, threads per rank")
           : "") +
      ")";
  return i;
}

result<step_result> cpu_executor::execute(const step_plan& plan) {
  result<step_result> r = run_step(plan);
  for (seq_id_t id : plan.finished) seqs_.erase(id);
  return r;
}

result<step_result> cpu_executor::run_step(const step_plan& plan) {
  draft_q_.clear();
  register_new_seqs(plan);
  // Tensor parallel: every rank copies the blocks once the step is broadcast (run_forward).
  if (!tp_)
    if (auto r = copy_blocks(plan); !r) return r.err();
  std::vector<std::vector<int32_t>> inputs(plan.seqs.size());
  std::vector<forward_seq> batch(plan.seqs.size());
  if (auto r = lay_out_step(plan, inputs, batch); !r) return r.err();
  if (auto r = propose_drafts(batch, inputs, plan); !r) return r.err();
  if (auto r = run_forward(plan, batch); !r) return r.err();
  if (draft_)
    for (size_t i = 0; i < plan.seqs.size(); ++i)
      draft_->map.note_model(plan.seqs[i].seq_id, plan.seqs[i].block_table, plan.seqs[i].start_pos,
                             inputs[i].data(), int32_t(inputs[i].size()));
  const std::vector<size_t> first_row = logit_first_rows(batch);
  score_prompt_positions(plan, batch, first_row);
  step_result out = sample_step(plan, batch, inputs, first_row);
  // Prompt logprobs ask for a row per prefill position (512 x 152k floats is 311 MB): such a
  // buffer is handed back rather than kept for the decode steps, which need a row per sequence.
  if (logits_.size() > size_t(256) * size_t(weights_.config.vocab_size))
    std::vector<float>().swap(logits_);
  return out;
}

void cpu_executor::register_new_seqs(const step_plan& plan) {
  for (const new_seq& ns : plan.new_seqs) {
    seqs_.erase(ns.seq_id);
    seq_state st{
        sampling_state(ns.params, ns.seed, ns.prompt_ids, ns.output_ids, gen_.eos_token_ids),
        -1,
        {},
        {}};
    if (!ns.output_ids.empty()) st.last_token = ns.output_ids.back();
    if (ns.params.prompt_logprobs >= 0 && ns.output_ids.empty() && ns.prompt_ids.size() > 1)
      st.prompt = ns.prompt_ids;
    seqs_.emplace(ns.seq_id, std::move(st));
  }
}

result<void> cpu_executor::copy_blocks(const step_plan& plan) {
  for (auto [src, dst] : plan.block_copies) {
    if (!cache_.copy_block(src, dst) || (draft_ && !draft_->cache.copy_block(src, dst)))
      return make_error("invalid_argument", "block copy " + std::to_string(src) + " -> " +
                                                std::to_string(dst) + " outside the cache");
    if (draft_) draft_->map.note_copy(src, dst);
  }
  return {};
}

result<void> cpu_executor::lay_out_step(const step_plan& plan,
                                        std::vector<std::vector<int32_t>>& inputs,
                                        std::vector<forward_seq>& batch) {
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduled_seq& s = plan.seqs[i];
    auto it = seqs_.find(s.seq_id);
    if (it == seqs_.end())
      return make_error("invalid_argument",
                        "sequence " + std::to_string(s.seq_id) + " was never registered");
    inputs[i].assign(s.tokens.begin(), s.tokens.end());
    for (int32_t& t : inputs[i]) {
      if (t != k_token_from_last_step) continue;
      if (it->second.last_token < 0)
        return make_error("invalid_argument", "sequence " + std::to_string(s.seq_id) +
                                                  " has no token from a last step");
      t = it->second.last_token;
    }
    if (s.start_pos + int32_t(s.tokens.size()) > opts_.max_model_len)
      return make_error("invalid_argument", "sequence " + std::to_string(s.seq_id) +
                                                " exceeds max_model_len " +
                                                std::to_string(opts_.max_model_len));
    if (s.num_draft < 0 || s.num_draft >= int32_t(s.tokens.size()) ||
        (s.num_draft > 0 && !s.sample))
      return make_error("invalid_argument", "sequence " + std::to_string(s.seq_id) + " has " +
                                                std::to_string(s.num_draft) +
                                                " draft tokens in a slice of " +
                                                std::to_string(s.tokens.size()));
    const bool pooling = it->second.sampling.params.pooling.enabled;
    if (pooling != opts_.pooling.has_value())
      return make_error("invalid_request", pooling ? "the model serves generation, not embeddings"
                                                   : "the model serves embeddings (--task embed)");
    // A pooling request's last token gives its vector (last_hidden), not logits.
    batch[i] = forward_seq{inputs[i].data(), int32_t(inputs[i].size()), s.start_pos,
                           &s.block_table,   s.sample && !pooling,      1 + s.num_draft};
    if (const int32_t lora = it->second.sampling.params.lora_id; lora != 0) {
      if (lora < 0 || lora > int32_t(opts_.loras.size()))
        return make_error("invalid_request", "LoRA adapter " + std::to_string(lora) +
                                                 " is not loaded in this executor");
      batch[i].lora = opts_.loras[size_t(lora - 1)].get();
    }
    // Prompt logprobs: logits for every position of a chunk that still holds prompt positions.
    if (!it->second.prompt.empty() && s.start_pos < int32_t(it->second.prompt.size()) - 1) {
      if (s.num_draft > 0)
        return make_error("invalid_argument",
                          "sequence " + std::to_string(s.seq_id) +
                              " verifies proposals before its prompt logprobs are complete");
      batch[i].want_logits = true;
      batch[i].logit_rows = batch[i].num_tokens;
    }
  }
  return {};
}

result<void> cpu_executor::propose_drafts(const std::vector<forward_seq>& batch,
                                          std::vector<std::vector<int32_t>>& inputs,
                                          const step_plan& plan) {
  if (draft_) return run_draft(batch, inputs, plan);
  for (const auto& in : inputs)
    if (std::find(in.begin(), in.end(), k_token_from_draft) != in.end())
      return make_error("invalid_argument",
                        "a plan asks for draft proposals, and there is no draft model");
  return {};
}

// A sequence of the step that samples: its state and slice, the tokens computed (proposals filled
// in), the draft's distributions (sampled draft proposals), its first logits row to sample from,
// and what it sampled. A pooling request's has no state (st null) and its vector in `outs`.
struct cpu_executor::sampled_seq {
  seq_state* st;
  const scheduled_seq* seq;
  const std::vector<int32_t>* input;
  const std::vector<std::vector<float>>* draft_q;
  size_t first_row;
  std::vector<seq_output> outs;
};

std::vector<float> cpu_executor::classify(const std::vector<float>& hidden) const {
  const size_t h = hidden.size(), labels = score_head_.size() / h;
  std::vector<float> out(labels);
  for (size_t l = 0; l < labels; ++l) {
    double sum = 0;
    for (size_t i = 0; i < h; ++i) sum += double(score_head_[l * h + i]) * hidden[i];
    out[l] = float(sum);
  }
  return out;
}

step_result cpu_executor::sample_step(const step_plan& plan, const std::vector<forward_seq>& batch,
                                      const std::vector<std::vector<int32_t>>& inputs,
                                      const std::vector<size_t>& first_row) {
  std::vector<sampled_seq> rows;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduled_seq& s = plan.seqs[i];
    if (!s.sample) continue;
    if (const sampling_params& p = seqs_.at(s.seq_id).sampling.params; p.pooling.enabled) {
      // A pooling request: its vector, in batch order with the sampled ones.
      seq_output o;
      o.seq_id = s.seq_id;
      o.embedding = forward_.last_hidden(i, batch);
      if (score_head_.empty())
        finish_pooled_vector(o.embedding, p.pooling, opts_.pooling->normalize);
      else
        o.embedding = classify(o.embedding);
      rows.push_back({nullptr, &s, nullptr, nullptr, 0, {}});
      rows.back().outs.push_back(std::move(o));
      continue;
    }
    const auto q = draft_q_.find(s.seq_id);
    const size_t sampled_at = first_row[i] +
                              size_t(std::clamp(batch[i].logit_rows, 1, batch[i].num_tokens)) -
                              size_t(1 + s.num_draft);
    rows.push_back({&seqs_.at(s.seq_id),
                    &s,
                    &inputs[i],
                    q == draft_q_.end() ? nullptr : &q->second,
                    sampled_at,
                    {}});
  }
  // Each row has its own state, so rows sample in parallel on the forward pass's pool.
  pool_.parallel_for(int64_t(rows.size()), [&](int64_t r) {
    if (rows[size_t(r)].st != nullptr) sample_seq(rows[size_t(r)]);
  });
  step_result out;
  out.step_id = plan.step_id;
  out.outputs.reserve(rows.size());
  for (sampled_seq& sm : rows)
    for (seq_output& o : sm.outs) out.outputs.push_back(std::move(o));
  return out;
}

void cpu_executor::sample_seq(sampled_seq& sm) {
  const size_t vocab = size_t(weights_.config.vocab_size);
  seq_state& st = *sm.st;
  const scheduled_seq& s = *sm.seq;
  const std::vector<int32_t>& in = *sm.input;
  const size_t draft_at = in.size() - size_t(s.num_draft);
  for (int32_t j = 0; j <= s.num_draft; ++j) {
    std::span<const float> logits(logits_.data() + (sm.first_row + size_t(j)) * vocab, vocab);
    bool accepted = false;
    const std::vector<float>* q = nullptr;
    if (j < s.num_draft && sm.draft_q != nullptr && size_t(j) < sm.draft_q->size())
      q = &(*sm.draft_q)[size_t(j)];
    sample_output so =
        j >= s.num_draft ? sample_token(logits, st.sampling)
        : q != nullptr ? verify_token_q(logits, st.sampling, in[draft_at + size_t(j)], *q, accepted)
                       : verify_token(logits, st.sampling, in[draft_at + size_t(j)], accepted);
    st.sampling.accept(so.token);
    st.last_token = so.token;
    seq_output o;
    o.seq_id = s.seq_id;
    o.token = so.token;
    o.logprob = so.logprob;
    o.top_logprobs = std::move(so.top_logprobs);
    if (opts_.return_logits) o.logits.assign(logits.begin(), logits.end());
    if (j == 0 && !st.prompt.empty()) {  // the first token: the prompt's entries go with it
      o.prompt_logprobs = std::move(st.prompt_lps);
      st.prompt.clear();
      st.prompt_lps.clear();
    }
    sm.outs.push_back(std::move(o));
    if (j < s.num_draft && !accepted) break;
  }
}

void cpu_executor::score_prompt_positions(const step_plan& plan,
                                          const std::vector<forward_seq>& batch,
                                          const std::vector<size_t>& first_row) {
  // Position p's logits score the prompt token at p + 1, for p in the chunk and below the last
  // prompt position (whose logits give the first generated token).
  struct job {
    seq_state* st;
    size_t row;
    int32_t pos;
  };
  std::vector<job> jobs;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    seq_state& st = seqs_.at(plan.seqs[i].seq_id);
    if (st.prompt.empty() || !batch[i].want_logits || batch[i].logit_rows != batch[i].num_tokens)
      continue;
    const int32_t start = batch[i].start_pos;
    const int32_t end = std::min(start + batch[i].num_tokens, int32_t(st.prompt.size()) - 1);
    // Positions before this chunk were scored by earlier chunks (prefill runs in order).
    if (start != int32_t(st.prompt_lps.size())) continue;
    st.prompt_lps.resize(size_t(std::max(end, start)));
    for (int32_t p = start; p < end; ++p)
      jobs.push_back({&st, first_row[i] + size_t(p - start), p});
  }
  const size_t vocab = size_t(weights_.config.vocab_size);
  pool_.parallel_for(int64_t(jobs.size()), [&](int64_t k) {
    const job& j = jobs[size_t(k)];
    std::span<const float> logits(logits_.data() + j.row * vocab, vocab);
    j.st->prompt_lps[size_t(j.pos)] = score_prompt_token(logits, j.st->prompt[size_t(j.pos) + 1],
                                                         j.st->sampling.params.prompt_logprobs);
  });
}

}  // namespace coserve
