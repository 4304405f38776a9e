// The CPU executor: the forward pass (weights in file precision, fp32 activations) over a paged
// KV cache plus sampling, behind `executor`.
// Keeps each sequence's sampling state from its new_seq until it appears in `finished` (of any
// plan, whether that step succeeds or fails), and the token it sampled last (substituted for
// k_token_from_last_step in its next decode). Verifies proposals (scheduled_seq::num_draft): the
// n-gram lookup's, or its draft model's (options.draft_model_dir).
// Threads: execute() runs on the caller's thread (one caller at a time); launched steps
// (launch/collect, model/executor.hpp) run on the executor's step thread, started by the first
// launch, one after another in launch order, up to two launched and not yet collected: the step
// thread resolves k_token_from_last_step from the step before it, so step N+1 waits in its queue,
// not in the caller, while N runs. Either way the forward pass and the sampling of a step's rows
// fan out to one worker pool (num_threads - 1 workers plus the thread running the step).
// Tensor parallel (options.tensor_parallel_size > 1, model/tensor_parallel.hpp): this executor is
// rank 0, holding its shard; the other ranks are threads of this process, each with its shard,
// KV cache slice and worker pool (num_threads split evenly among the ranks), or, with
// options.world, the other processes of an MPI job (each running run_tp_rank). Every step rank 0
// broadcasts the resolved batch, all ranks run the forward pass together, and rank 0 samples.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "model/communicator.hpp"
#include "model/config.hpp"
#include "model/cpu_forward.hpp"
#include "model/draft_kv_map.hpp"
#include "model/encoder_model.hpp"
#include "model/executor.hpp"
#include "model/kv_cache.hpp"
#include "model/sampler.hpp"
#include "model/tensor_parallel.hpp"
#include "model/weights.hpp"
#include "model/worker_pool.hpp"

namespace coserve {

struct cpu_executor_options {
  int32_t num_kv_blocks = 256;
  int32_t block_size = 16;
  int32_t num_threads =
      0;  // threads of the forward pass, the calling one included (0: physical cores)
  dtype kv_cache_dtype = dtype::bf16;
  // Activations of matrix products with bf16 weights rounded to bf16 (--dtype auto/bfloat16, the
  // default); false keeps them fp32 (--dtype float32). Other weights always take fp32 activations.
  bool bf16_activations = true;
  bool return_logits = false;  // copy each sampled row's raw logits into seq_output::logits
  int32_t max_model_len = 0;   // 0: the model's max_position_embeddings
  // Speculative decoding with a draft model: its folder ("": none). It runs beside the model on
  // the same block tables with a KV cache of its own (same blocks, block size and element type),
  // computes every token the model computes, and proposes where a plan asks for
  // k_token_from_draft (greedy requests: its argmax; sampled: a draw from its distribution,
  // accepted by the speculative-sampling rule). Its vocabulary must be the model's.
  std::string draft_model_dir;
  // Tensor parallel ranks (1: none). Not with a draft model.
  int32_t tensor_parallel_size = 1;
  // The job's communicator, this process rank 0 of it (an MPI launch); null: the ranks are threads
  // of this process. Its size must be tensor_parallel_size.
  std::shared_ptr<communicator> world;
  // Embeddings (--task embed): pooling requests get the last token's final hidden state
  // (last-token pooling, the only pooling a causal model's chunked prefill computes), normalised
  // as this says; other requests are refused. Unset: generation only.
  std::optional<pooling_config> pooling;
  bool matryoshka = false;  // requests may ask for fewer dimensions (executor_info)
  std::vector<int32_t> matryoshka_dimensions;
  // vLLM's --hf-overrides, merged into the model's config.json (not the draft's).
  std::string hf_overrides;
  // A sequence classifier (model_config::classifier(), task "score"): pooling requests get its
  // head's logits on the last token's final hidden state. With classifier_from_token, the ids of
  // those tokens in its order (the engine looks them up in the model's tokenizer).
  std::vector<int32_t> classifier_token_ids;
  // LoRA adapters (--lora-modules), in order: a sequence with sampling_params::lora_id k runs with
  // loras[k - 1] (model/lora.hpp). Not with tensor parallelism.
  std::vector<std::shared_ptr<const lora_adapter>> loras;
};

class cpu_executor final : public executor {
 public:
  static result<std::unique_ptr<cpu_executor>> create(model_weights weights, generation_config gen,
                                                      const cpu_executor_options& opts);
  // With opts.tensor_parallel_size > 1, `weights` is the whole model: create() shards it (errors
  // name the sizes that work) and starts the other ranks (threads, or the MPI setup exchange).
  // Loads a model folder (config, generation config, weights) and creates the executor; with
  // opts.draft_model_dir, loads the draft too (errors name the draft: a vocabulary that is not the
  // model's, a context shorter than max_model_len).
  static result<std::unique_ptr<cpu_executor>> load(const std::string& dir,
                                                    const cpu_executor_options& opts,
                                                    const load_progress& progress = {});

  ~cpu_executor() override;
  result<step_result> execute(const step_plan& plan) override;
  void launch(step_plan plan, const asio::any_io_executor& ex,
              std::function<void()> ready) override;
  result<step_result> collect() override;
  int32_t max_in_flight() const override { return 2; }
  bool can_launch_ahead(const step_plan&) const override { return true; }
  executor_info info() const override;
  std::shared_ptr<const rank_stats_board> rank_stats() const override { return stats_board_; }

  void set_return_logits(bool on) noexcept { opts_.return_logits = on; }
  const model_config& config() const noexcept { return weights_.config; }
  const model_weights& weights() const noexcept { return weights_; }
  dtype kv_cache_dtype() const noexcept { return cache_.type(); }
  const generation_config& generation() const noexcept { return gen_; }
  size_t num_live_sequences() const noexcept { return seqs_.size(); }
  // Time per phase of the forward pass (see cpu_forward::profile).
  const forward_profile& profile() const noexcept { return forward_.profile(); }
  void reset_profile() noexcept { forward_.reset_profile(); }

 private:
  struct seq_state {
    sampling_state sampling;
    int32_t last_token = -1;
    // params.prompt_logprobs >= 0 and nothing generated yet: the prompt, and the entries of the
    // positions computed so far (handed out with the first sampled token).
    std::vector<int32_t> prompt;
    std::vector<prompt_logprob> prompt_lps;
  };

  cpu_executor(model_weights weights, generation_config gen, const cpu_executor_options& opts);
  // Prompt logprobs of the positions a step computed (seq_state::prompt_lps), from the logits
  // rows laid out from first_row[i] for batch[i].
  void score_prompt_positions(const step_plan& plan, const std::vector<forward_seq>& batch,
                              const std::vector<size_t>& first_row);
  // The forward pass of a step: here, or broadcast to every tensor-parallel rank and run together.
  result<void> run_forward(const step_plan& plan, const std::vector<forward_seq>& batch);
  // The step without dropping `finished` (execute() drops them whatever the outcome).
  result<step_result> run_step(const step_plan& plan);
  // The steps of run_step: sampling states for the plan's new sequences; its block copies (not
  // tensor parallel: run_forward copies there); each sequence's input tokens (the placeholder
  // k_token_from_last_step resolved) and forward_seq, checked; the draft model's proposals (or a
  // refusal of proposals without a draft model); sampling (or verifying proposals) on every
  // sequence that samples, in parallel.
  void register_new_seqs(const step_plan& plan);
  result<void> copy_blocks(const step_plan& plan);
  result<void> lay_out_step(const step_plan& plan, std::vector<std::vector<int32_t>>& inputs,
                            std::vector<forward_seq>& batch);
  result<void> propose_drafts(const std::vector<forward_seq>& batch,
                              std::vector<std::vector<int32_t>>& inputs, const step_plan& plan);
  struct sampled_seq;
  step_result sample_step(const step_plan& plan, const std::vector<forward_seq>& batch,
                          const std::vector<std::vector<int32_t>>& inputs,
                          const std::vector<size_t>& first_row);
  // One sequence's 1 + num_draft rows: each proposal verified in order, then a token sampled
  // after the last accepted one.
  void sample_seq(sampled_seq& sm);
  // The draft model's share of a step. The draft computes only what its proposals need: for each
  // sequence it proposes for, the positions its cache lacks up to the proposals (caught up in one
  // pass from the tokens the model computed there), then each k_token_from_draft proposal, one
  // position at a time (computing each proposal's K/V too, so accepted ones need no catching up):
  // its argmax for greedy requests, a draw from its distribution for sampled ones (kept in
  // draft_q_ for the acceptance rule). Prompt chunks are computed as they come (so a first
  // proposal never waits for a whole prompt); a sequence's plain decode steps are not (while its
  // proposals are backed off or switched off by batch size, the draft costs nothing).
  result<void> run_draft(const std::vector<forward_seq>& batch,
                         std::vector<std::vector<int32_t>>& inputs, const step_plan& plan);

  struct draft_model {
    model_weights weights;
    kv_cache cache;
    cpu_forward forward;
    std::vector<float> logits;
    draft_kv_map map;  // which of the draft's cache positions are valid
    draft_model(model_weights w, int32_t blocks, int32_t block_size, dtype kv, worker_pool& pool)
        : weights(std::move(w)),
          cache(weights.config.num_hidden_layers, blocks, block_size,
                weights.config.num_key_value_heads, weights.config.head_dim, kv),
          forward(weights, pool),
          map(blocks, block_size) {
      pack_for_cpu(weights);
    }
  };

  model_weights weights_;
  generation_config gen_;
  cpu_executor_options opts_;
  worker_pool pool_;
  kv_cache cache_;
  cpu_forward forward_;
  std::unordered_map<seq_id_t, seq_state> seqs_;
  std::vector<float> logits_;
  std::unique_ptr<draft_model> draft_;
  // This step's draft distributions per sequence (sampled requests), one per proposal.
  std::unordered_map<seq_id_t, std::vector<std::vector<float>>> draft_q_;
  struct tp_ranks;  // the other ranks and rank 0's communicator (tensor parallel only)
  std::unique_ptr<tp_ranks> tp_;
  std::shared_ptr<rank_stats_board> stats_board_;  // tensor parallel only
  // A sequence classifier's head in fp32, [num_labels, hidden] (cpu_executor_options); empty for a
  // language model.
  std::vector<float> score_head_;
  // The head's logits for one final hidden state.
  std::vector<float> classify(const std::vector<float>& hidden) const;

  // launch/collect: steps waiting for the step thread, and outcomes waiting for collect().
  struct launched_step {
    step_plan plan;
    asio::any_io_executor
        ex;  // tracks outstanding work until `ready` has run (moved into its handler)
    std::function<void()> ready;
  };
  void step_thread_main();
  std::mutex launch_mu_;
  std::condition_variable launch_cv_;
  std::deque<launched_step> launched_;
  std::deque<result<step_result>> completed_;
  bool stopping_ = false;
  failed_sequences failed_;  // the step thread's (launched steps only)
  std::thread step_thread_;  // started by the first launch()
};

// A rank other than 0 of an MPI tensor-parallel job: loads the model folder, takes its shard,
// exchanges the setup with rank 0 (a failure on any rank ends every rank with that error), then
// runs every step rank 0 broadcasts until rank 0 stops. `threads`: of its forward pass (0:
// physical cores). Logs its shard on stderr.
result<void> run_tp_rank(const std::string& dir, communicator& world, int32_t threads,
                         const load_progress& progress = {});
// Rank 0's half of that exchange: every rank's load error (or none), then the setup; an error when
// any rank failed. `my_error`: rank 0's own load failure ("" when it loaded).
result<void> tp_setup_exchange_root(communicator& world, const std::string& my_error,
                                    const tp_setup& setup);

}  // namespace coserve
