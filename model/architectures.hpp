// The model architectures coserve reads, one table entry each (model/architectures.cpp): the
// names an architecture goes by (config.json's `architectures` and `model_type`, GGUF's
// `general.architecture`), the rules its config.json and GGUF metadata are read by, what the demo
// model writes for it, the executors that serve it and its description. Config parsing
// (model/config.cpp), the GGUF mapping (model/gguf_model.cpp), the demo model
// (model/demo_model.cpp), the --help lists of `coserve serve` and `coserve make-demo-model` and
// the table of docs/models.md (`coserve architectures --markdown`) are derived from the table.
//
// The rules name what the readers and the forward pass implement; an architecture made of them is
// one entry. One needing a rule of its own adds it here and where it is read.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace coserve {

// Which attention projections carry biases.
enum class attention_bias_rule : uint8_t {
  attention_bias,  // config.json's attention_bias (default false) on q/k/v and o_proj
  always_qkv,      // q/k/v always, o_proj never (Qwen2)
  qkv_bias_field,  // config.json's qkv_bias (default true) on q/k/v, o_proj never (Qwen2-MoE)
};

// Which layers config.json's sliding_window windows. A window at least as long as the context is
// left out; so is a per-layer choice that windows no layer.
enum class sliding_window_rule : uint8_t {
  none,                  // sliding_window is not read
  every_layer,           // every layer (Mistral, Phi-3, Mixtral)
  opted_in_every_layer,  // every layer, with use_sliding_window (Qwen3-MoE)
  // With use_sliding_window: the layers layer_types marks "sliding_attention", else those from
  // max_window_layers on (Qwen2, Qwen3) ...
  opted_in_upper_layers,
  // ... else the even layers below max_window_layers (Qwen2-MoE).
  opted_in_even_lower_layers,
  // With use_sliding_window, the window caps max_position_embeddings (SmolLM3, whose window is on
  // its layers without RoPE only).
  caps_context,
};

// How a mixture of experts is configured and stored.
enum class expert_layout : uint8_t {
  none,  // a dense model
  // num_local_experts experts as wide as intermediate_size on every layer, the top-k probabilities
  // always renormalized; tensors block_sparse_moe.gate and block_sparse_moe.experts.N.w1/w3/w2.
  mixtral,
  // num_experts (or num_local_experts) experts of moe_intermediate_size, norm_topk_prob, a dense
  // MLP on mlp_only_layers and the layers l with (l + 1) % decoder_sparse_step != 0; tensors
  // mlp.gate and mlp.experts.N.gate_proj/up_proj/down_proj.
  qwen,
};

struct expert_rules {
  expert_layout layout = expert_layout::none;
  // The defaults of transformers' config class for what config.json leaves out.
  int32_t num_experts = 0;
  int32_t num_experts_per_tok = 0;
  int32_t moe_intermediate_size = 0;  // qwen layout (mixtral's experts are intermediate_size wide)
  bool norm_topk_prob = false;
  // A shared expert beside the routed ones (mlp.shared_expert.*, scaled by
  // sigmoid(mlp.shared_expert_gate . x)): the default of shared_expert_intermediate_size, which
  // config.json may set and must keep positive; 0: none.
  int32_t shared_expert_intermediate_size = 0;
};

// How config.json is read (model/config.cpp).
struct config_rules {
  attention_bias_rule bias = attention_bias_rule::attention_bias;
  sliding_window_rule sliding_window = sliding_window_rule::none;
  expert_rules experts;
  int32_t head_dim = 0;              // the default head_dim; 0: hidden_size / num_attention_heads
  bool tie_word_embeddings = false;  // the default of tie_word_embeddings
  bool qk_norm = false;              // an RMSNorm over each q and k head before RoPE
  bool fused_projections = false;    // one qkv_proj and one gate_up_proj tensor per layer
  bool partial_rotary = false;       // partial_rotary_factor is read (elsewhere only 1 is accepted)
  bool no_rope_layers = false;       // no_rope_layers / no_rope_layer_interval are read
};

// How a GGUF file is read (model/gguf_model.cpp). Metadata keys are `{general.architecture}.*`;
// tensors are llama.cpp's names (attn_q, ffn_gate_exps, ...), fused ones (attn_qkv, ffn_up of gate
// then up rows) with config_rules::fused_projections.
struct gguf_rules {
  std::string_view name;  // general.architecture read as this architecture; "": none
  // A file of this general.architecture with expert_count > 0 is read as the architecture of this
  // name (llama -> mixtral); "": such a file is refused unless `experts`.
  std::string_view with_experts;
  bool experts = false;           // expert_count and expert_feed_forward_length are required
  bool norm_topk_prob = true;     // the routing weights renormalized, as llama.cpp does
  bool rope_interleaved = false;  // q/k rows permuted by llama.cpp's converter (its llama layout)
  bool window_and_longrope = false;  // attention.sliding_window, rope_factors_long/short.weight
};

// config.json keys the demo model writes beyond those that follow from the config rules.
struct demo_rules {
  bool attention_bias = false;                    // "attention_bias"
  bool mlp_bias = false;                          // "mlp_bias": false
  bool original_max_position_embeddings = false;  // at the top level (Phi-3's place for it)
  bool pad_token_id = false;  // the eos id (the config class's default lies outside small vocabs)
};

struct architecture {
  std::string_view name;         // model_type and the demo model's --architecture ("qwen2_moe")
  std::string_view hf_name;      // config.json's architectures ("Qwen2MoeForCausalLM")
  std::string_view title;        // for prose ("Qwen2-MoE")
  std::string_view summary;      // one line, for --help
  std::string_view differences;  // what differs from Llama (Markdown), docs/models.md's table
  bool cuda = true;  // the CUDA executor serves it (the CPU executor serves every architecture)
  config_rules config;
  gguf_rules gguf;
  demo_rules demo;
};

// Every architecture, in the order lists and the docs table show them.
std::span<const architecture> architectures() noexcept;

// By config.json's architectures name, by model_type (the demo model's name), by GGUF
// general.architecture; nullptr when none has it.
const architecture* find_architecture(std::string_view hf_name) noexcept;
const architecture* find_architecture_by_model_type(std::string_view model_type) noexcept;
const architecture* find_gguf_architecture(std::string_view gguf_name) noexcept;

// "LlamaForCausalLM, MistralForCausalLM, ...", "llama, mistral, ..." (GGUF names), "llama,
// mistral, ..." (model types): every architecture that has one, in table order, comma-separated.
std::string hf_architecture_list();
std::string gguf_architecture_list();
std::string model_type_list();

// `text` with these placeholders replaced, each line holding one rewrapped to 100 columns at that
// line's indentation:
//   {architectures}       the config.json names, those the CUDA executor does not serve last
//                         ("... and Qwen3MoeForCausalLM on --device cpu")
//   {gguf_architectures}  the GGUF names
//   {demo_architectures}  one line per architecture: its model type and summary
std::string with_architecture_lists(std::string_view text);

// docs/models.md's table: `architectures`, GGUF, what differs from Llama, executors.
std::string architecture_table_markdown();

}  // namespace coserve
