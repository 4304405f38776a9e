// The CUDA executor's draft model (speculative decoding, {"model": DIR, ...}): a second, smaller
// model with the same vocabulary on the same GPU and stream, with its own weights, activations and
// KV cache over the same block ids as the model's (one block table addresses both), and the
// draft_kv_map that says how much of each block the draft has computed. Each step it runs the
// passes gpu/draft_plan.hpp plans: the layer loop (gpu/forward_pass.hpp), then for the rows that
// propose, its final norm, LM head and a greedy pick written into the executor's last-token buffer
// at the proposal's slot. Nothing waits on the host.
// Thread: the executor's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gpu/device_buffer.hpp"
#include "gpu/device_weights.hpp"
#include "gpu/draft_plan.hpp"
#include "gpu/forward_pass.hpp"
#include "gpu/gemm.hpp"
#include "model/draft_kv_map.hpp"
#include "model/weights.hpp"

namespace coserve::gpu {

class gpu_draft_model {
 public:
  struct options {
    std::string dir;             // Hugging Face folder (safetensors)
    int32_t max_num_tokens = 0;  // tokens per pass at most (its activations)
    int32_t max_picks = 0;       // proposing sequences per pass at most
    int32_t block_size = 16;
    kv_elem kv_type = kv_elem::bf16;
    int32_t num_sms = 0;
  };
  // Loads and uploads the draft (bf16). Errors name the 'model' field: a different vocabulary, a
  // context shorter than max_model_len, an unsupported shape.
  static result<std::unique_ptr<gpu_draft_model>> load(const options& o, const model_config& target,
                                                       int32_t max_model_len, cudaStream_t s,
                                                       const load_progress& progress);
  // Bytes of one KV block of the draft (every layer, K and V): the executor sizes its blocks for
  // both.
  int64_t kv_block_bytes() const;
  // The draft's cache of num_blocks blocks (+ the scratch block), and an empty map of it.
  result<void> allocate_kv(int32_t num_blocks);
  draft_kv_map& map() { return *map_; }
  const kv_store& kv() const { return kv_; }
  const model_config& config() const { return w_.config; }
  int64_t weight_bytes() const { return w_.bytes; }

  // Enqueues every pass of `st` on `s`: their metadata packed into `staging` (pinned; its previous
  // upload must have run) and uploaded once, then per pass the layer loop and, for its proposing
  // rows, the greedy pick into last_tokens[out slot]. `logits` [max_picks, vocab] fp32 is scratch.
  result<void> run(const draft_step& st, pinned_buffer& staging, gemm_runner& gemm,
                   int32_t* last_tokens, float* logits, cudaStream_t s);

 private:
  gpu_draft_model() = default;
  options o_;
  device_weights w_;
  layer_scratch scratch_;
  rope_tables rope_;
  kv_store kv_;
  device_buffer final_, picks_, pick_lp_, meta_dev_;
  std::unique_ptr<draft_kv_map> map_;
};

}  // namespace coserve::gpu
