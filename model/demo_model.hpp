// The built-in demo model: a complete Hugging Face folder (config.json, model.safetensors,
// generation_config.json, tokenizer files) with deterministic random weights from seq_rng.
// Same options and seed => byte-identical files. Weights are scaled so activations stay O(1)
// through the residual stream and the logits have a spread of a few units (greedy text varies).
#pragma once

#include <cstdint>
#include <string>

#include "base/result.hpp"
#include "model/dtype.hpp"

namespace coserve {

struct demo_options {
  uint64_t seed = 0;
  std::string
      tokenizer_dir;  // empty: the default GPT-2 test tokenizer (see find_default_tokenizer)
  bool copy_tokenizer = true;          // false: no tokenizer files (then vocab_size is required)
  std::string architecture = "llama";  // a model type of model/architectures.hpp
  int32_t hidden_size = 256;
  int32_t intermediate_size = 688;
  int32_t num_layers = 4;
  int32_t num_heads = 8;
  int32_t num_kv_heads = 2;
  int32_t head_dim = 0;  // 0: hidden_size / num_heads (and not written to config.json)
  float rope_theta = 10000.0f;
  std::string rope_type;  // rope scaling: "" (none), llama3, linear, yarn or longrope, with the
                          // fields below
  float rope_factor = 8.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int32_t rope_original_max_position_embeddings = 8192;
  float partial_rotary_factor = 1.0f;  // phi3: RoPE over the first head_dim * factor dimensions
  int32_t sliding_window =
      0;  // mistral, phi3: every layer; qwen2, qwen3: layers from max_window_layers on
  int32_t max_window_layers = 0;
  // mixtral, qwen2_moe, qwen3_moe: experts per sparse layer, experts per token, each expert's MLP
  // width (qwen2/3_moe; mixtral's experts are intermediate_size wide), norm_topk_prob (qwen2/3_moe;
  // mixtral always renormalizes), and decoder_sparse_step (qwen2/3_moe: layer l is sparse when
  // (l + 1) % step == 0, else a dense MLP of intermediate_size).
  int32_t num_experts = 8;
  int32_t num_experts_per_tok = 2;
  int32_t moe_intermediate_size = 0;  // 0: intermediate_size
  bool norm_topk_prob = false;
  int32_t decoder_sparse_step = 1;
  int32_t shared_expert_intermediate_size =
      0;  // qwen2_moe: the shared expert's width (0: intermediate_size)
  bool tie_embeddings = false;
  bool qkv_bias = false;  // qwen2 always has it
  dtype weight_dtype = dtype::bf16;
  int32_t vocab_size = 0;  // 0: the tokenizer's vocabulary size
  int32_t max_position_embeddings = 2048;
  float rms_norm_eps = 1e-5f;
};

// The default tokenizer folder: ../shared/testdata/tokenizers/gpt2 relative to the working
// directory, else relative to the source tree this binary was built from. Error if neither exists.
result<std::string> find_default_tokenizer();

// Writes the folder (created if needed). Errors: bad options, unreadable tokenizer, I/O.
result<void> make_demo_model(const std::string& dir, const demo_options& opts);

}  // namespace coserve
