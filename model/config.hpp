// model_config (config.json) and generation_config (generation_config.json) of a Hugging Face
// model folder. The architectures read are those of model/architectures.hpp (RMSNorm, RoPE, GQA,
// SwiGLU, and what each adds: biases, q/k norms, fused tensors, windows, mixtures of experts);
// anything else is an error naming what is unsupported.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "model/dtype.hpp"
#include "model/sampling_params.hpp"

namespace coserve {

enum class rope_kind : uint8_t { standard, llama3, linear, yarn, longrope };

struct rope_scaling_config {
  rope_kind kind = rope_kind::standard;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int32_t original_max_position_embeddings = 8192;
  // yarn (transformers' _compute_yarn_parameters): the correction range's rotations, whether it is
  // rounded outward, and the factor cos and sin are multiplied by (from factor, mscale and
  // mscale_all_dim unless given as attention_factor).
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  bool truncate = true;
  float attention_factor = 1.0f;
  // longrope (Phi-3.5 / Phi-4, transformers' _compute_longrope_parameters): inverse frequency i is
  // divided by short_factor[i] at positions below original_max_position_embeddings and by
  // long_factor[i] from there on; cos and sin are multiplied by attention_factor.
  std::vector<float> short_factor, long_factor;
};

// config.json's quantization_config, for the fp8 checkpoints coserve reads: "fp8" (vLLM / Hugging
// Face FP8: per-tensor `weight_scale`, or `weight_scale_inv` per weight_block_size block as in
// DeepSeek-V3 and Qwen3-FP8) and "compressed-tensors" with float8 weights (llm-compressor's
// FP8 / FP8_DYNAMIC / FP8_BLOCK: `weight_scale` per tensor, channel or block). Anything else
// (GPTQ, AWQ, int4 compressed-tensors, ...) is a config error naming it.
struct quantization_config {
  std::string method;      // "" (none), "fp8" or "compressed-tensors"
  int32_t block_rows = 0;  // scales per block of block_rows x block_cols weights, when given
  int32_t block_cols = 0;
  bool static_activations = false;  // the checkpoint carries input_scale (activation_scheme static)
};

struct model_config {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string model_type;    // "llama", "mistral", "qwen2"
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_hidden_layers = 0;
  int32_t num_attention_heads = 0;
  int32_t num_key_value_heads = 0;
  int32_t head_dim = 0;  // hidden_size / num_attention_heads unless given
  int32_t vocab_size = 0;
  int32_t max_position_embeddings = 2048;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  rope_scaling_config rope_scaling;
  // Dimensions of each q/k head that RoPE rotates (the first ones, rotate_half over them); the rest
  // pass through. head_dim unless partial_rotary_factor (Phi-4-mini: 0.75) says fewer; 0 =
  // head_dim.
  int32_t rotary_dim = 0;
  // GGUF llama-architecture files: q/k heads hold interleaved pairs (2i, 2i + 1) rather than
  // (i, i + D/2); the rotation pairs them the same way (the attention products are unchanged).
  bool rope_interleaved = false;
  // GGUF rope_freqs.weight (Llama 3.1 scaling): inverse frequency i is divided by factor i.
  std::vector<float> rope_freq_factors;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // attention_bias (Llama) or always (Qwen2)
  bool o_bias = false;    // attention_bias on o_proj (Llama with attention_bias=true)
  bool qk_norm =
      false;  // Qwen3: an RMSNorm (weights [head_dim]) over each q and k head before RoPE
  bool fused_projections = false;  // Phi-3: one qkv_proj and one gate_up_proj tensor per layer
  std::vector<uint8_t>
      rope_layers;  // SmolLM3: per layer, 1 = RoPE applied, 0 = none (NoPE); empty: all
  // Sliding-window attention (Mistral, Phi-3, Qwen2/3 with use_sliding_window): a windowed layer's
  // query at position q sees keys k with q - sliding_window < k <= q (transformers' mask). 0: none.
  // sliding_layers: per layer, 1 = windowed; empty: every layer.
  int32_t sliding_window = 0;
  std::vector<uint8_t> sliding_layers;
  bool mlp_bias = false;
  // Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): the MLP of a sparse layer is num_experts
  // SwiGLU experts of moe_intermediate_size; each token goes to the num_experts_per_tok experts
  // with the largest softmax(router logits), whose outputs are summed weighted by those
  // probabilities (divided by their sum when norm_topk_prob). moe_layers: per layer, 1 = sparse, 0
  // = the dense MLP of intermediate_size (Qwen2/3-MoE's mlp_only_layers / decoder_sparse_step);
  // empty when num_experts is 0 (a dense model).
  int32_t num_experts = 0;
  int32_t num_experts_per_tok = 0;
  int32_t moe_intermediate_size = 0;
  // Qwen2-MoE: a shared expert (a SwiGLU MLP of this width) beside the routed ones on each sparse
  // layer, its output scaled by sigmoid(shared_expert_gate . x) and added; 0: none.
  int32_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;
  std::vector<uint8_t> moe_layers;
  bool is_moe() const noexcept { return num_experts > 0; }
  bool moe_layer(int32_t l) const noexcept { return num_experts > 0 && moe_layers[size_t(l)] != 0; }
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
  dtype torch_dtype = dtype::f32;
  quantization_config quantization;
  // A decoder served as a sequence classifier (a reranker): `architectures` names
  // <causal architecture>ForSequenceClassification (Qwen3ForSequenceClassification, ...). Its
  // head, on the last token's final hidden state, is the checkpoint's `score.weight`
  // [num_labels, hidden] (transformers' layout: id2label's size, else num_labels, else 2 labels),
  // or, with classifier_from_token (vLLM's --hf-overrides for checkpoints that are language models,
  // Qwen3-Reranker's ["no", "yes"]), rows of the LM head: method "from_2_way_softmax" (the default
  // for two tokens) gives one label, the second token's row minus the first's, whose sigmoid is
  // the softmax of the two tokens' logits; "no_post_processing" (the default otherwise) one label
  // per token, its row. 0: a language model.
  int32_t num_labels = 0;
  std::vector<std::string> classifier_from_token;
  bool two_way_softmax = false;  // from_2_way_softmax
  bool classifier() const noexcept { return num_labels > 0; }
};

struct generation_config {
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;
  std::optional<float> repetition_penalty;
  std::optional<bool> do_sample;
  std::optional<float> min_p;
  std::optional<int32_t> max_new_tokens;
};

// The sampling defaults vLLM takes from a generation config (temperature, top_p, top_k, min_p,
// repetition_penalty; max_new_tokens as max_tokens; do_sample is not read), `over`'s fields
// winning; an error names a field whose value no request could give.
result<sampling_defaults> sampling_defaults_of(const generation_config& g,
                                               const generation_config& over = {});
// A human-readable list of what is set ("temperature=0.7, top_p=0.8"), for startup logs.
std::string describe(const sampling_defaults& d);

// Parses config.json text; `origin` names the file in error messages.
result<model_config> parse_model_config(std::string_view json, std::string_view origin);
// `model_dir`/config.json, or the metadata of a GGUF file when `model_dir` is one. hf_overrides:
// vLLM's --hf-overrides, merged into config.json first (model/hf_overrides.hpp; not for GGUF).
result<model_config> load_model_config(const std::string& model_dir,
                                       std::string_view hf_overrides = {});

// A missing generation_config.json yields an empty generation_config (not an error); a GGUF
// file gives its bos/eos/eot/eom token ids.
result<generation_config> parse_generation_config(std::string_view json, std::string_view origin);
result<generation_config> load_generation_config(const std::string& model_dir);

// Reads a whole file; error "io" naming the path when it cannot.
result<std::string> read_text_file(const std::string& path);

}  // namespace coserve
