// The executor of encoder models (model/encoder_model.hpp) on the CPU: each step's sequences are
// whole prompts of pooling requests, run through encoder_forward in one batch, and each output
// carries the sequence's pooled vector (or a cross-encoder's class logits) in
// seq_output::embedding.
//
// No KV cache: an encoder computes a sequence in one pass and keeps nothing, so the scheduler's
// block tables (its bookkeeping of token budgets) are ignored; the scheduler hands every prompt
// whole (planner_config::whole_prompts). A plan scheduling part of a prompt, a decode, or a
// request that is not a pooling one fails the step with an error naming it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <unordered_map>

#include "model/encoder_forward.hpp"
#include "model/encoder_model.hpp"
#include "model/executor.hpp"

namespace coserve {

struct encoder_executor_options {
  int32_t num_threads = 0;    // threads of the forward pass, the calling one included (0: cores)
  int32_t max_model_len = 0;  // 0: the model's (sentence_bert_config.json's max_seq_length first)
  int32_t block_size = 16;
  // The scheduler's block count (bookkeeping only: no memory stands behind a block).
  int32_t num_kv_blocks = 0;
};

class encoder_executor final : public executor {
 public:
  // Loads the folder's config, pooling and weights. The default pooling, where the folder has no
  // sentence-transformers files: the first token's vector, normalised (vLLM's for these models).
  static result<std::unique_ptr<encoder_executor>> load(const std::filesystem::path& dir,
                                                        const encoder_executor_options& opts);

  result<step_result> execute(const step_plan& plan) override;
  executor_info info() const override;

  const encoder_config& config() const noexcept { return weights_.config; }
  const pooling_config& pooling() const noexcept { return pooling_; }
  int32_t max_model_len() const noexcept { return max_model_len_; }
  // The block count info() reports (encoder_executor_options::num_kv_blocks).
  void set_num_kv_blocks(int32_t n) noexcept { opts_.num_kv_blocks = n; }

 private:
  encoder_executor(encoder_weights w, pooling_config p, const encoder_executor_options& opts);

  encoder_weights weights_;
  pooling_config pooling_;
  encoder_executor_options opts_;
  int32_t max_model_len_ = 0;
  worker_pool pool_;
  encoder_forward forward_;
  std::unordered_map<seq_id_t, pooling_params> seqs_;  // registered, not yet finished
};

}  // namespace coserve
