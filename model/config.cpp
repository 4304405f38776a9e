// config.json (and generation_config.json) into model_config: each architecture's fields, RoPE
// scaling, sliding windows, quantization_config. Over 500 lines: one parse of one document whose
// sections read each other (the rope dimensions need head_dim, longrope the unwindowed context), so
// split files would pass most of model_config back and forth.
#include "model/config.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "model/gguf_model.hpp"

namespace coserve {
namespace {

using simdjson::dom::element;
using simdjson::dom::object;

error config_error(std::string_view origin, const std::string& what) {
  return make_error("invalid_model", std::string(origin) + ": " + what);
}

// Optional numeric fields: absent or null keeps the default; a wrong type is an error.
bool get_int(const object& o, const char* key, int32_t& out, std::string& err) {
  element e;
  if (o[key].get(e)) return true;
  if (e.is_null()) return true;
  int64_t v;
  if (e.get_int64().get(v)) {
    double d;
    if (e.get_double().get(d) || d != std::floor(d)) {
      err = std::string("field '") + key + "' must be an integer";
      return false;
    }
    v = int64_t(d);
  }
  out = int32_t(v);
  return true;
}

bool get_float(const object& o, const char* key, float& out, std::string& err) {
  element e;
  if (o[key].get(e)) return true;
  if (e.is_null()) return true;
  double d;
  if (e.get_double().get(d)) {
    err = std::string("field '") + key + "' must be a number";
    return false;
  }
  out = float(d);
  return true;
}

bool get_bool(const object& o, const char* key, bool& out, std::string& err);

// rope_scaling of type yarn, as transformers reads it (_compute_yarn_parameters): factor defaults
// to max_position_embeddings / original_max_position_embeddings, original_max_position_embeddings
// to max_position_embeddings, beta_fast / beta_slow to 32 / 1 (also when 0), and the attention
// factor to 0.1 ln(factor) + 1 (above factor 1), or the mscale / mscale_all_dim ratio of that form.
std::string parse_yarn(const object& r, int32_t max_positions, rope_scaling_config& s) {
  std::string err;
  s = rope_scaling_config{};
  s.kind = rope_kind::yarn;
  s.original_max_position_embeddings = max_positions;
  float factor = 0.0f, attention_factor = 0.0f, mscale = 0.0f, mscale_all_dim = 0.0f;
  float beta_fast = 0.0f, beta_slow = 0.0f;
  if (!get_int(r, "original_max_position_embeddings", s.original_max_position_embeddings, err) ||
      !get_float(r, "factor", factor, err) ||
      !get_float(r, "attention_factor", attention_factor, err) ||
      !get_float(r, "mscale", mscale, err) ||
      !get_float(r, "mscale_all_dim", mscale_all_dim, err) ||
      !get_float(r, "beta_fast", beta_fast, err) || !get_float(r, "beta_slow", beta_slow, err) ||
      !get_bool(r, "truncate", s.truncate, err))
    return err;
  if (s.original_max_position_embeddings <= 0)
    return "original_max_position_embeddings must be positive";
  s.factor = factor != 0.0f
                 ? factor
                 : float(double(max_positions) / double(s.original_max_position_embeddings));
  if (!(s.factor > 0.0f)) return "factor must be positive";
  if (attention_factor < 0.0f) return "attention_factor must not be negative";
  auto get_mscale = [](double scale, double m) {
    return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
  };
  if (attention_factor != 0.0f)
    s.attention_factor = attention_factor;
  else if (mscale != 0.0f && mscale_all_dim != 0.0f)
    s.attention_factor = float(get_mscale(s.factor, mscale) / get_mscale(s.factor, mscale_all_dim));
  else
    s.attention_factor = float(get_mscale(s.factor, 1.0));
  s.beta_fast = beta_fast != 0.0f ? beta_fast : 32.0f;
  s.beta_slow = beta_slow != 0.0f ? beta_slow : 1.0f;
  return {};
}

bool get_bool(const object& o, const char* key, bool& out, std::string& err) {
  element e;
  if (o[key].get(e)) return true;
  if (e.is_null()) return true;
  if (e.get_bool().get(out)) {
    err = std::string("field '") + key + "' must be a boolean";
    return false;
  }
  return true;
}

// A list of numbers (longrope's factors).
bool get_float_list(const object& o, const char* key, std::vector<float>& out, std::string& err) {
  element e;
  simdjson::dom::array a;
  if (o[key].get(e) || e.get_array().get(a)) {
    err = std::string("field '") + key + "' must be a list of numbers";
    return false;
  }
  out.clear();
  for (element x : a) {
    double d;
    if (x.get_double().get(d)) {
      int64_t i;
      if (x.get_int64().get(i)) {
        err = std::string("field '") + key + "' must hold numbers";
        return false;
      }
      d = double(i);
    }
    out.push_back(float(d));
  }
  return true;
}

// eos_token_id: int or list of ints.
bool get_id_list(const object& o, const char* key, std::vector<int32_t>& out, std::string& err) {
  element e;
  if (o[key].get(e) || e.is_null()) return true;
  int64_t v;
  if (!e.get_int64().get(v)) {
    out = {int32_t(v)};
    return true;
  }
  simdjson::dom::array a;
  if (e.get_array().get(a)) {
    err = std::string("field '") + key + "' must be an integer or a list of integers";
    return false;
  }
  out.clear();
  for (element x : a) {
    if (x.get_int64().get(v)) {
      err = std::string("field '") + key + "' must hold integers";
      return false;
    }
    out.push_back(int32_t(v));
  }
  return true;
}

std::string get_string(const object& o, const char* key) {
  std::string_view s;
  if (o[key].get_string().get(s)) return {};
  return std::string(s);
}

}  // namespace

result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("io", "cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error("io", "cannot read " + path);
  return ss.str();
}

// A [rows, cols] pair of positive ints (weight_block_size, block_structure).
bool get_block(element e, int32_t& rows, int32_t& cols) {
  simdjson::dom::array a;
  if (e.get_array().get(a) || a.size() != 2) return false;
  int64_t v[2];
  for (size_t i = 0; i < 2; ++i)
    if (a.at(i).get_int64().get(v[i]) || v[i] <= 0 || v[i] > (1 << 20)) return false;
  rows = int32_t(v[0]);
  cols = int32_t(v[1]);
  return true;
}

// quantization_config: what model_config::quantization documents; an error message, or empty.
std::string parse_quantization(const object& o, quantization_config& q) {
  element e;
  if (o["quantization_config"].get(e) || e.is_null()) return {};
  object qc;
  if (e.get_object().get(qc)) return "quantization_config must be an object";
  q.method = get_string(qc, "quant_method");
  if (q.method == "fp8") {
    const std::string fmt = get_string(qc, "fmt");
    if (!fmt.empty() && fmt != "e4m3" && fmt != "e5m2")
      return "quantization_config: fp8 format '" + fmt +
             "' is not supported (supported: e4m3, e5m2)";
    const std::string act = get_string(qc, "activation_scheme");
    if (!act.empty() && act != "dynamic" && act != "static")
      return "quantization_config: activation_scheme '" + act +
             "' is not supported (supported: dynamic, static)";
    q.static_activations = act == "static";
    element b;
    if (!qc["weight_block_size"].get(b) && !b.is_null() &&
        !get_block(b, q.block_rows, q.block_cols))
      return "quantization_config: weight_block_size must be two positive integers";
    return {};
  }
  if (q.method == "compressed-tensors") {
    const std::string format = get_string(qc, "format");
    if (format != "float-quantized")
      return "quantization_config: compressed-tensors format '" + format +
             "' is not supported (supported: float-quantized, the fp8 checkpoints of "
             "llm-compressor)";
    object groups;
    if (qc["config_groups"].get_object().get(groups))
      return "quantization_config: config_groups must be an object";
    for (auto [name, g] : groups) {
      const std::string where = "quantization_config: config_groups." + std::string(name);
      object grp, wq;
      if (g.get_object().get(grp) || grp["weights"].get_object().get(wq))
        return where + ".weights must be an object";
      int64_t bits = 0;
      if (wq["num_bits"].get_int64().get(bits) || bits != 8 || get_string(wq, "type") != "float")
        return where + ": only 8-bit float weights are supported (num_bits 8, type float)";
      const std::string strategy = get_string(wq, "strategy");
      if (strategy == "block") {
        element b;
        if (wq["block_structure"].get(b) || !get_block(b, q.block_rows, q.block_cols))
          return where + ": block_structure must be two positive integers";
      } else if (strategy != "tensor" && strategy != "channel") {
        return where + ": weight strategy '" + strategy +
               "' is not supported (supported: tensor, channel, block)";
      }
      object act;
      bool dynamic = true;
      if (!grp["input_activations"].get_object().get(act) &&
          act["dynamic"].get_bool().get(dynamic) == simdjson::SUCCESS && !dynamic)
        q.static_activations = true;
    }
    return {};
  }
  if (q.method.empty()) return "quantization_config has no quant_method";
  return "quantization method '" + q.method +
         "' is not supported (supported: fp8, compressed-tensors float8)";
}

namespace {

enum class moe_family { mixtral, qwen2_moe, qwen3_moe };

// Mixtral's, Qwen2-MoE's and Qwen3-MoE's expert fields (transformers' MixtralConfig /
// Qwen2MoeConfig / Qwen3MoeConfig, their defaults where a field is absent); "" or what is wrong.
std::string parse_moe(const object& o, moe_family fam, model_config& c) {
  std::string err;
  // Mixtral: num_local_experts experts of intermediate_size, every layer sparse, the top-k
  // probabilities always renormalized. Qwen2/3-MoE: num_experts (or num_local_experts) of
  // moe_intermediate_size, the dense MLP on mlp_only_layers and on layers l with
  // (l + 1) % decoder_sparse_step != 0; Qwen2-MoE adds a shared expert of
  // shared_expert_intermediate_size on every sparse layer.
  const bool mixtral = fam == moe_family::mixtral, qwen2 = fam == moe_family::qwen2_moe;
  c.num_experts = mixtral ? 8 : qwen2 ? 60 : 128;
  c.num_experts_per_tok = mixtral ? 2 : qwen2 ? 4 : 8;
  c.moe_intermediate_size = mixtral ? c.intermediate_size : qwen2 ? 1408 : 768;
  c.shared_expert_intermediate_size = qwen2 ? 5632 : 0;
  c.norm_topk_prob = mixtral;
  int32_t sparse_step = 1;
  std::vector<int32_t> dense_layers;
  if (!get_int(o, "num_local_experts", c.num_experts, err) ||
      (!mixtral && !get_int(o, "num_experts", c.num_experts, err)) ||
      !get_int(o, "num_experts_per_tok", c.num_experts_per_tok, err))
    return err;
  if (!mixtral && (!get_int(o, "moe_intermediate_size", c.moe_intermediate_size, err) ||
                   !get_bool(o, "norm_topk_prob", c.norm_topk_prob, err) ||
                   !get_int(o, "decoder_sparse_step", sparse_step, err) ||
                   !get_id_list(o, "mlp_only_layers", dense_layers, err)))
    return err;
  if (qwen2) {
    if (!get_int(o, "shared_expert_intermediate_size", c.shared_expert_intermediate_size, err))
      return err;
    if (c.shared_expert_intermediate_size <= 0)
      return "shared_expert_intermediate_size must be positive, got " +
             std::to_string(c.shared_expert_intermediate_size);
  }
  if (c.num_experts <= 0)
    return "the number of experts must be positive, got " + std::to_string(c.num_experts);
  if (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_experts)
    return "num_experts_per_tok must be between 1 and the " + std::to_string(c.num_experts) +
           " experts, got " + std::to_string(c.num_experts_per_tok);
  if (c.moe_intermediate_size <= 0)
    return "moe_intermediate_size must be positive, got " + std::to_string(c.moe_intermediate_size);
  if (sparse_step <= 0)
    return "decoder_sparse_step must be positive, got " + std::to_string(sparse_step);
  c.moe_layers.assign(size_t(c.num_hidden_layers), 0);
  for (int32_t l = 0; l < c.num_hidden_layers; ++l)
    c.moe_layers[size_t(l)] =
        (l + 1) % sparse_step == 0 &&
        std::find(dense_layers.begin(), dense_layers.end(), l) == dense_layers.end();
  return {};
}

}  // namespace

result<model_config> parse_model_config(std::string_view json, std::string_view origin) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  object o;
  if (auto e = parser.parse(padded).get_object().get(o))
    return config_error(origin, std::string("not a JSON object: ") + simdjson::error_message(e));

  model_config c;
  c.model_type = get_string(o, "model_type");
  simdjson::dom::array archs;
  if (!o["architectures"].get_array().get(archs)) {
    for (element a : archs) {
      std::string_view s;
      if (!a.get_string().get(s)) {
        c.architecture = std::string(s);
        break;
      }
    }
  }
  const std::string& a = c.architecture;
  const bool llama = a == "LlamaForCausalLM" || (a.empty() && c.model_type == "llama");
  const bool mistral = a == "MistralForCausalLM" || (a.empty() && c.model_type == "mistral");
  const bool qwen2 = a == "Qwen2ForCausalLM" || (a.empty() && c.model_type == "qwen2");
  const bool qwen3 = a == "Qwen3ForCausalLM" || (a.empty() && c.model_type == "qwen3");
  const bool phi3 = a == "Phi3ForCausalLM" || (a.empty() && c.model_type == "phi3");
  const bool smollm3 = a == "SmolLM3ForCausalLM" || (a.empty() && c.model_type == "smollm3");
  const bool mixtral = a == "MixtralForCausalLM" || (a.empty() && c.model_type == "mixtral");
  const bool qwen3_moe = a == "Qwen3MoeForCausalLM" || (a.empty() && c.model_type == "qwen3_moe");
  const bool qwen2_moe = a == "Qwen2MoeForCausalLM" || (a.empty() && c.model_type == "qwen2_moe");
  if (!llama && !mistral && !qwen2 && !qwen3 && !phi3 && !smollm3 && !mixtral && !qwen3_moe &&
      !qwen2_moe)
    return config_error(
        origin, "unsupported architecture '" + (a.empty() ? c.model_type : a) +
                    "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                    "Qwen3ForCausalLM, Phi3ForCausalLM, SmolLM3ForCausalLM, MixtralForCausalLM, "
                    "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM)");
  if (c.model_type.empty())
    c.model_type = llama       ? "llama"
                   : mistral   ? "mistral"
                   : qwen2     ? "qwen2"
                   : qwen3     ? "qwen3"
                   : phi3      ? "phi3"
                   : mixtral   ? "mixtral"
                   : qwen3_moe ? "qwen3_moe"
                   : qwen2_moe ? "qwen2_moe"
                               : "smollm3";
  if (smollm3) c.tie_word_embeddings = true;  // SmolLM3Config's default
  c.fused_projections = phi3;

  std::string err;
  bool attention_bias = false;
  if (!get_int(o, "hidden_size", c.hidden_size, err) ||
      !get_int(o, "intermediate_size", c.intermediate_size, err) ||
      !get_int(o, "num_hidden_layers", c.num_hidden_layers, err) ||
      !get_int(o, "num_attention_heads", c.num_attention_heads, err) ||
      !get_int(o, "num_key_value_heads", c.num_key_value_heads, err) ||
      !get_int(o, "head_dim", c.head_dim, err) || !get_int(o, "vocab_size", c.vocab_size, err) ||
      !get_int(o, "max_position_embeddings", c.max_position_embeddings, err) ||
      !get_float(o, "rms_norm_eps", c.rms_norm_eps, err) ||
      !get_float(o, "rope_theta", c.rope_theta, err) ||
      !get_bool(o, "tie_word_embeddings", c.tie_word_embeddings, err) ||
      !get_bool(o, "attention_bias", attention_bias, err) ||
      !get_bool(o, "mlp_bias", c.mlp_bias, err) ||
      !get_id_list(o, "eos_token_id", c.eos_token_ids, err))
    return config_error(origin, err);
  int32_t bos = -1;
  if (!get_int(o, "bos_token_id", bos, err)) return config_error(origin, err);
  if (bos >= 0) c.bos_token_id = bos;

  for (auto [name, v] : {std::pair{"hidden_size", c.hidden_size},
                         {"intermediate_size", c.intermediate_size},
                         {"num_hidden_layers", c.num_hidden_layers},
                         {"num_attention_heads", c.num_attention_heads},
                         {"vocab_size", c.vocab_size}})
    if (v <= 0) return config_error(origin, std::string("missing or non-positive '") + name + "'");
  if (c.num_key_value_heads <= 0) c.num_key_value_heads = c.num_attention_heads;
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return config_error(origin, "num_attention_heads must be a multiple of num_key_value_heads");
  if (c.head_dim <= 0 && qwen3) c.head_dim = 128;  // transformers' Qwen3Config default
  if (c.head_dim <= 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      return config_error(origin, "hidden_size is not a multiple of num_attention_heads");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) return config_error(origin, "head_dim must be even for RoPE");
  if (c.mlp_bias) return config_error(origin, "unsupported option mlp_bias=true");
  // The MLP is SiLU-gated (SwiGLU): another activation would run as SiLU and give wrong outputs.
  if (element act; !o["hidden_act"].get(act) && !act.is_null()) {
    std::string_view name;
    if (act.get_string().get(name))
      return config_error(origin, "field 'hidden_act' must be a string");
    if (name != "silu" && name != "swish")
      return config_error(origin,
                          "unsupported hidden_act '" + std::string(name) + "' (supported: silu)");
  }
  if (mixtral || qwen3_moe || qwen2_moe)
    if (std::string e = parse_moe(o,
                                  mixtral     ? moe_family::mixtral
                                  : qwen2_moe ? moe_family::qwen2_moe
                                              : moe_family::qwen3_moe,
                                  c);
        !e.empty())
      return config_error(origin, e);
  if (qwen2) {
    c.qkv_bias = true;  // Qwen2 always has q/k/v biases and none on o_proj
  } else if (qwen2_moe) {
    c.qkv_bias = true;  // Qwen2MoeConfig's qkv_bias (default true); none on o_proj
    if (!get_bool(o, "qkv_bias", c.qkv_bias, err)) return config_error(origin, err);
  } else {
    // Llama, Mistral, Qwen3: attention_bias puts biases on q/k/v and o_proj.
    c.qkv_bias = attention_bias;
    c.o_bias = attention_bias;
  }

  const int32_t raw_max_positions = c.max_position_embeddings;  // before a sliding window caps it

  // Sliding-window attention: Mistral and Phi-3 window every layer; Qwen2/3 only with
  // use_sliding_window, on the layers layer_types marks "sliding_attention" (transformers 5) or
  // from max_window_layers on. A window that never bites (>= the context length) is left out.
  bool use_sliding = false;
  if (!get_bool(o, "use_sliding_window", use_sliding, err)) return config_error(origin, err);
  if (mistral || phi3 || mixtral || ((qwen2 || qwen3 || qwen3_moe || qwen2_moe) && use_sliding)) {
    int32_t window = 0;
    if (!get_int(o, "sliding_window", window, err)) return config_error(origin, err);
    if (window < 0) return config_error(origin, "sliding_window must not be negative");
    if (window > 0 && window < c.max_position_embeddings) {
      c.sliding_window = window;
      if (qwen2 || qwen3 || qwen2_moe) {
        simdjson::dom::array types;
        if (!o["layer_types"].get_array().get(types)) {
          for (element t : types) {
            std::string_view name;
            if (t.get_string().get(name) ||
                (name != "sliding_attention" && name != "full_attention"))
              return config_error(
                  origin,
                  "layer_types entries must be \"sliding_attention\" or \"full_attention\"");
            c.sliding_layers.push_back(name == "sliding_attention" ? 1 : 0);
          }
          if (int32_t(c.sliding_layers.size()) != c.num_hidden_layers)
            return config_error(
                origin, "layer_types has " + std::to_string(c.sliding_layers.size()) +
                            " entries for " + std::to_string(c.num_hidden_layers) + " layers");
        } else {
          int32_t window_layers = 28;  // Qwen2Config's / Qwen2MoeConfig's max_window_layers default
          if (!get_int(o, "max_window_layers", window_layers, err))
            return config_error(origin, err);
          // Qwen2: the layers from max_window_layers on; Qwen2-MoE: the even layers below it.
          for (int32_t l = 0; l < c.num_hidden_layers; ++l)
            c.sliding_layers.push_back(qwen2_moe ? l % 2 == 0 && l < window_layers
                                                 : l >= window_layers);
        }
        if (std::find(c.sliding_layers.begin(), c.sliding_layers.end(), uint8_t(1)) ==
            c.sliding_layers.end()) {
          c.sliding_window = 0;  // no layer is windowed
          c.sliding_layers.clear();
        }
      }
    }
  }
  c.qk_norm = qwen3 || qwen3_moe;
  if (smollm3) {
    // Layers without RoPE: no_rope_layers (1 = RoPE, 0 = none, one per layer) or, without it,
    // every no_rope_layer_interval-th layer (SmolLM3Config). Its sliding window (NoPE layers only)
    // caps the context, as Mistral's does.
    std::vector<int32_t> flags;
    int32_t interval = 4;
    if (!get_id_list(o, "no_rope_layers", flags, err) ||
        !get_int(o, "no_rope_layer_interval", interval, err))
      return config_error(origin, err);
    if (flags.empty()) {
      if (interval <= 0) return config_error(origin, "no_rope_layer_interval must be positive");
      for (int32_t l = 0; l < c.num_hidden_layers; ++l)
        flags.push_back((l + 1) % interval != 0 ? 1 : 0);
    }
    if (int32_t(flags.size()) != c.num_hidden_layers)
      return config_error(origin, "no_rope_layers has " + std::to_string(flags.size()) +
                                      " entries for " + std::to_string(c.num_hidden_layers) +
                                      " layers");
    for (int32_t f : flags) c.rope_layers.push_back(f != 0 ? 1 : 0);
    int32_t window = 0;
    if (!get_int(o, "sliding_window", window, err)) return config_error(origin, err);
    if (use_sliding && window > 0 && window < c.max_position_embeddings)
      c.max_position_embeddings = window;
  }
  c.rotary_dim = c.head_dim;
  {
    // partial_rotary_factor (Phi-4-mini: 0.75): RoPE over the first int(head_dim * factor)
    // dimensions of each head, at the top level or (transformers 5) inside rope_parameters.
    float partial = 1.0f;
    object rp;
    if (!get_float(o, "partial_rotary_factor", partial, err)) return config_error(origin, err);
    if (!o["rope_parameters"].get_object().get(rp) &&
        !get_float(rp, "partial_rotary_factor", partial, err))
      return config_error(origin, "rope_parameters: " + err);
    if (partial != 1.0f) {
      if (!phi3)
        return config_error(origin,
                            "unsupported option partial_rotary_factor=" + std::to_string(partial) +
                                " for " + c.model_type + " (Phi-3 models only)");
      const auto dim = int32_t(double(c.head_dim) * double(partial));
      if (!(partial > 0.0f && partial <= 1.0f) || dim <= 0 || dim % 2 != 0)
        return config_error(origin,
                            "partial_rotary_factor " + std::to_string(partial) +
                                " must give an even number of rotated dimensions of head_dim " +
                                std::to_string(c.head_dim));
      c.rotary_dim = dim;
    }
  }

  // RoPE: `rope_scaling` (transformers 4) or `rope_parameters` (transformers 5, which also moves
  // rope_theta inside it). Both hold rope_type (or the older `type`) and the llama3 fields.
  element rs;
  const char* rope_key = "rope_scaling";
  bool have_rope = false;
  if (!o["rope_parameters"].get(rs) && !rs.is_null()) {
    rope_key = "rope_parameters";
    have_rope = true;
  } else if (!o["rope_scaling"].get(rs) && !rs.is_null()) {
    have_rope = true;
  }
  if (have_rope) {
    object r;
    if (rs.get_object().get(r))
      return config_error(origin, std::string(rope_key) + " must be an object");
    if (!get_float(r, "rope_theta", c.rope_theta, err))
      return config_error(origin, std::string(rope_key) + ": " + err);
    std::string type = get_string(r, "rope_type");
    if (type.empty()) type = get_string(r, "type");
    if (type == "llama3") {
      c.rope_scaling.kind = rope_kind::llama3;
      if (!get_float(r, "factor", c.rope_scaling.factor, err) ||
          !get_float(r, "low_freq_factor", c.rope_scaling.low_freq_factor, err) ||
          !get_float(r, "high_freq_factor", c.rope_scaling.high_freq_factor, err) ||
          !get_int(r, "original_max_position_embeddings",
                   c.rope_scaling.original_max_position_embeddings, err))
        return config_error(origin, std::string(rope_key) + ": " + err);
      if (c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor)
        return config_error(
            origin, std::string(rope_key) + ": high_freq_factor must exceed low_freq_factor");
    } else if (type == "linear") {
      c.rope_scaling.kind = rope_kind::linear;
      if (!get_float(r, "factor", c.rope_scaling.factor, err))
        return config_error(origin, std::string(rope_key) + ": " + err);
      if (!(c.rope_scaling.factor > 0.0f))
        return config_error(origin, std::string(rope_key) + ": factor must be positive");
    } else if (type == "yarn") {
      if (auto e = parse_yarn(r, raw_max_positions, c.rope_scaling); !e.empty())
        return config_error(origin, std::string(rope_key) + ": " + e);
    } else if (type == "longrope" || type == "su") {
      // transformers' _compute_longrope_parameters; original_max_position_embeddings at the top
      // level (Phi-3's configs) or inside the rope dict.
      auto& rs_ = c.rope_scaling;
      rs_.kind = rope_kind::longrope;
      int32_t original = raw_max_positions;
      float factor = 0.0f, attention = 0.0f;
      if (!get_int(o, "original_max_position_embeddings", original, err) ||
          !get_int(r, "original_max_position_embeddings", original, err) ||
          !get_float(r, "factor", factor, err) ||
          !get_float(r, "attention_factor", attention, err) ||
          !get_float_list(r, "short_factor", rs_.short_factor, err) ||
          !get_float_list(r, "long_factor", rs_.long_factor, err))
        return config_error(origin, std::string(rope_key) + ": " + err);
      const size_t pairs = size_t(c.rotary_dim / 2);
      if (rs_.short_factor.size() != pairs || rs_.long_factor.size() != pairs)
        return config_error(origin, std::string(rope_key) + ": short_factor and long_factor need " +
                                        std::to_string(pairs) +
                                        " entries (rotary dimensions / 2), not " +
                                        std::to_string(rs_.short_factor.size()) + " and " +
                                        std::to_string(rs_.long_factor.size()));
      for (float f : rs_.short_factor)
        if (!(f > 0.0f))
          return config_error(origin,
                              std::string(rope_key) + ": short_factor entries must be positive");
      for (float f : rs_.long_factor)
        if (!(f > 0.0f))
          return config_error(origin,
                              std::string(rope_key) + ": long_factor entries must be positive");
      if (original <= 0)
        return config_error(origin, "original_max_position_embeddings must be positive");
      rs_.original_max_position_embeddings = original;
      if (factor <= 0.0f) factor = float(raw_max_positions) / float(original);
      rs_.factor = factor;
      rs_.attention_factor =
          attention > 0.0f ? attention
          : factor <= 1.0f
              ? 1.0f
              : float(std::sqrt(1.0 + std::log(double(factor)) / std::log(double(original))));
    } else if (type != "default" && !type.empty()) {
      return config_error(origin, "unsupported " + std::string(rope_key) + " type '" + type +
                                      "' (supported: default, llama3, linear, yarn, longrope)");
    }
  }

  // Values transformers would turn into NaN logits or an empty context are refused here, by name.
  if (!(c.rope_theta > 0.0f) || !std::isfinite(c.rope_theta))
    return config_error(
        origin, "rope_theta must be a positive number, got " + std::to_string(c.rope_theta));
  if (!(c.rms_norm_eps >= 0.0f) || !std::isfinite(c.rms_norm_eps))
    return config_error(origin, "rms_norm_eps must be a non-negative number, got " +
                                    std::to_string(c.rms_norm_eps));
  if (c.max_position_embeddings <= 0)
    return config_error(origin, "max_position_embeddings must be positive, got " +
                                    std::to_string(c.max_position_embeddings));

  std::string td = get_string(o, "torch_dtype");
  if (td.empty()) td = get_string(o, "dtype");
  if (td == "bfloat16")
    c.torch_dtype = dtype::bf16;
  else if (td == "float16")
    c.torch_dtype = dtype::f16;
  else
    c.torch_dtype = dtype::f32;
  if (std::string qerr = parse_quantization(o, c.quantization); !qerr.empty())
    return config_error(origin, qerr);
  return c;
}

result<model_config> load_model_config(const std::string& model_dir) {
  if (is_gguf_file(model_dir)) {
    auto f = gguf_file::open(model_dir);
    if (!f) return f.err();
    return gguf_model_config(**f);
  }
  const std::string path = model_dir + "/config.json";
  auto text = read_text_file(path);
  if (!text) return text.err();
  return parse_model_config(*text, path);
}

result<generation_config> parse_generation_config(std::string_view json, std::string_view origin) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  object o;
  if (auto e = parser.parse(padded).get_object().get(o))
    return config_error(origin, std::string("not a JSON object: ") + simdjson::error_message(e));
  generation_config g;
  std::string err;
  if (!get_id_list(o, "eos_token_id", g.eos_token_ids, err)) return config_error(origin, err);
  int32_t bos = -1, top_k = -1, max_new = -1;
  float t = -1, p = -1, rp = -1, mp = -1;
  bool do_sample = false;
  bool has_do_sample = o["do_sample"].error() == simdjson::SUCCESS;
  if (!get_int(o, "bos_token_id", bos, err) || !get_int(o, "top_k", top_k, err) ||
      !get_float(o, "temperature", t, err) || !get_float(o, "top_p", p, err) ||
      !get_float(o, "repetition_penalty", rp, err) || !get_bool(o, "do_sample", do_sample, err) ||
      !get_float(o, "min_p", mp, err) || !get_int(o, "max_new_tokens", max_new, err))
    return config_error(origin, err);
  if (mp >= 0) g.min_p = mp;
  if (max_new >= 0) g.max_new_tokens = max_new;
  if (bos >= 0) g.bos_token_id = bos;
  if (top_k >= 0) g.top_k = top_k;
  if (t >= 0) g.temperature = t;
  if (p >= 0) g.top_p = p;
  if (rp >= 0) g.repetition_penalty = rp;
  if (has_do_sample) g.do_sample = do_sample;
  return g;
}

result<sampling_defaults> sampling_defaults_of(const generation_config& g,
                                               const generation_config& over) {
  sampling_defaults d;
  auto pick = [](const auto& a, const auto& b) { return b ? b : a; };
  d.temperature = pick(g.temperature, over.temperature);
  d.top_p = pick(g.top_p, over.top_p);
  d.top_k = pick(g.top_k, over.top_k);
  d.min_p = pick(g.min_p, over.min_p);
  d.repetition_penalty = pick(g.repetition_penalty, over.repetition_penalty);
  d.max_tokens = pick(g.max_new_tokens, over.max_new_tokens);
  auto bad = [](const char* field, const char* range) {
    return make_error("invalid_argument",
                      std::string("generation config: '") + field + "' must be " + range);
  };
  if (d.temperature && !(*d.temperature >= 0.0f && *d.temperature <= 2.0f))
    return bad("temperature", "in [0, 2]");
  if (d.top_p && !(*d.top_p > 0.0f && *d.top_p <= 1.0f)) return bad("top_p", "in (0, 1]");
  if (d.min_p && !(*d.min_p >= 0.0f && *d.min_p <= 1.0f)) return bad("min_p", "in [0, 1]");
  if (d.repetition_penalty && !(*d.repetition_penalty > 0.0f && *d.repetition_penalty <= 2.0f))
    return bad("repetition_penalty", "in (0, 2]");
  if (d.max_tokens && *d.max_tokens < 1) return bad("max_new_tokens", "at least 1");
  return d;
}

std::string describe(const sampling_defaults& d) {
  std::string out;
  auto add = [&](const char* name, const std::string& v) {
    if (!out.empty()) out += ", ";
    out.append(name).append("=").append(v);
  };
  auto num = [](float x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", double(x));
    return std::string(buf);
  };
  if (d.temperature) add("temperature", num(*d.temperature));
  if (d.top_p) add("top_p", num(*d.top_p));
  if (d.top_k) add("top_k", std::to_string(*d.top_k));
  if (d.min_p) add("min_p", num(*d.min_p));
  if (d.repetition_penalty) add("repetition_penalty", num(*d.repetition_penalty));
  if (d.max_tokens) add("max_tokens", std::to_string(*d.max_tokens));
  return out;
}

result<generation_config> load_generation_config(const std::string& model_dir) {
  if (is_gguf_file(model_dir)) {
    auto f = gguf_file::open(model_dir);
    if (!f) return f.err();
    return gguf_generation_config(**f);
  }
  const std::string path = model_dir + "/generation_config.json";
  std::ifstream probe(path);
  if (!probe) return generation_config{};
  auto text = read_text_file(path);
  if (!text) return text.err();
  return parse_generation_config(*text, path);
}

}  // namespace coserve
