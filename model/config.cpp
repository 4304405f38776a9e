// config.json (and generation_config.json) into model_config: the fields of the architecture's
// rules (model/architectures.hpp), RoPE scaling, sliding windows, quantization_config. Over 500
// lines: one parse of one document whose sections read each other (the rope dimensions need
// head_dim, longrope the unwindowed context), one step per section.
#include "model/config.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "model/architectures.hpp"
#include "model/gguf_model.hpp"
#include "model/hf_overrides.hpp"

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

// One parse of config.json: the document, the architecture's rules and the config being filled,
// with what one step reads for a later one.
struct config_reader {
  const object& o;
  const architecture& arch;
  model_config& c;
  bool attention_bias = false;      // config.json's attention_bias
  bool use_sliding_window = false;  // config.json's use_sliding_window
  int32_t raw_max_positions = 0;    // max_position_embeddings before a sliding window caps it
};

// Each step below reads one section of config.json into the config: "" or what is wrong.

// The architecture named by `architectures` (its first string), else by model_type.
const architecture* identify_architecture(const object& o, model_config& c) {
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
  const architecture* arch = c.architecture.empty() ? find_architecture_by_model_type(c.model_type)
                                                    : find_architecture(c.architecture);
  // A sequence classifier on a causal architecture: its layers are the language model's.
  constexpr std::string_view k_seq_cls = "ForSequenceClassification";
  if (!arch && c.architecture.ends_with(k_seq_cls)) {
    arch = find_architecture(c.architecture.substr(0, c.architecture.size() - k_seq_cls.size()) +
                             "ForCausalLM");
    if (arch) c.num_labels = 2;  // transformers' default; read_classifier reads the rest
  }
  if (!arch) return nullptr;
  if (c.model_type.empty()) c.model_type = std::string(arch->name);
  c.tie_word_embeddings = arch->config.tie_word_embeddings;
  c.fused_projections = arch->config.fused_projections;
  c.qk_norm = arch->config.qk_norm;
  return arch;
}

// A sequence classifier's labels and, for a language model's checkpoint, the LM-head rows its head
// is made of (model_config::classifier_from_token).
std::string read_classifier(config_reader& r) {
  model_config& c = r.c;
  if (!c.classifier()) return {};
  const object& o = r.o;
  simdjson::dom::object labels;
  if (!o["id2label"].get_object().get(labels) && labels.size() > 0)
    c.num_labels = int32_t(labels.size());
  std::string err;
  if (!get_int(o, "num_labels", c.num_labels, err)) return err;
  if (c.num_labels <= 0) return "num_labels must be positive";
  simdjson::dom::element tokens;
  if (o["classifier_from_token"].get(tokens) || tokens.is_null()) return {};
  simdjson::dom::array list;
  if (tokens.get_array().get(list) || list.size() == 0)
    return "classifier_from_token must be a non-empty list of token strings";
  for (element t : list) {
    std::string_view s;
    if (t.get_string().get(s) || s.empty())
      return "classifier_from_token must be a non-empty list of token strings";
    c.classifier_from_token.emplace_back(s);
  }
  const size_t n = c.classifier_from_token.size();
  std::string method = get_string(o, "method");
  if (method.empty()) method = n == 2 ? "from_2_way_softmax" : "no_post_processing";
  if (method == "from_2_way_softmax") {
    if (n != 2)
      return "classifier_from_token: method from_2_way_softmax takes two tokens (the negative "
             "label's, then the positive's), not " +
             std::to_string(n);
    c.two_way_softmax = true;
    c.num_labels = 1;
  } else if (method == "no_post_processing") {
    c.num_labels = int32_t(n);
  } else {
    return "method '" + method +
           "' is not one of from_2_way_softmax, no_post_processing (how classifier_from_token's "
           "LM-head rows become the head)";
  }
  return {};
}

// The fields every architecture has.
std::string read_common_fields(config_reader& r) {
  const object& o = r.o;
  model_config& c = r.c;
  std::string err;
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
      !get_bool(o, "attention_bias", r.attention_bias, err) ||
      !get_bool(o, "mlp_bias", c.mlp_bias, err) ||
      !get_id_list(o, "eos_token_id", c.eos_token_ids, err))
    return err;
  int32_t bos = -1;
  if (!get_int(o, "bos_token_id", bos, err)) return err;
  if (bos >= 0) c.bos_token_id = bos;
  return {};
}

// Positive sizes, whole heads, the head size, and the SiLU-gated MLP without biases.
std::string check_shapes(config_reader& r) {
  model_config& c = r.c;
  for (auto [name, v] : {std::pair{"hidden_size", c.hidden_size},
                         {"intermediate_size", c.intermediate_size},
                         {"num_hidden_layers", c.num_hidden_layers},
                         {"num_attention_heads", c.num_attention_heads},
                         {"vocab_size", c.vocab_size}})
    if (v <= 0) return std::string("missing or non-positive '") + name + "'";
  if (c.num_key_value_heads <= 0) c.num_key_value_heads = c.num_attention_heads;
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return "num_attention_heads must be a multiple of num_key_value_heads";
  if (c.head_dim <= 0 && r.arch.config.head_dim > 0) c.head_dim = r.arch.config.head_dim;
  if (c.head_dim <= 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      return "hidden_size is not a multiple of num_attention_heads";
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) return "head_dim must be even for RoPE";
  if (c.mlp_bias) return "unsupported option mlp_bias=true";
  // The MLP is SiLU-gated (SwiGLU): another activation would run as SiLU and give wrong outputs.
  if (element act; !r.o["hidden_act"].get(act) && !act.is_null()) {
    std::string_view name;
    if (act.get_string().get(name)) return "field 'hidden_act' must be a string";
    if (name != "silu" && name != "swish")
      return "unsupported hidden_act '" + std::string(name) + "' (supported: silu)";
  }
  return {};
}

// The expert fields of a mixture of experts (expert_rules has the layouts and defaults).
std::string read_experts(config_reader& r) {
  const expert_rules& x = r.arch.config.experts;
  if (x.layout == expert_layout::none) return {};
  const object& o = r.o;
  model_config& c = r.c;
  std::string err;
  const bool mixtral = x.layout == expert_layout::mixtral;
  c.num_experts = x.num_experts;
  c.num_experts_per_tok = x.num_experts_per_tok;
  c.moe_intermediate_size = mixtral ? c.intermediate_size : x.moe_intermediate_size;
  c.shared_expert_intermediate_size = x.shared_expert_intermediate_size;
  c.norm_topk_prob = x.norm_topk_prob;
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
  if (x.shared_expert_intermediate_size > 0) {
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

std::string read_attention_biases(config_reader& r) {
  model_config& c = r.c;
  std::string err;
  switch (r.arch.config.bias) {
    case attention_bias_rule::always_qkv:
      c.qkv_bias = true;
      break;
    case attention_bias_rule::qkv_bias_field:
      c.qkv_bias = true;
      if (!get_bool(r.o, "qkv_bias", c.qkv_bias, err)) return err;
      break;
    case attention_bias_rule::attention_bias:
      c.qkv_bias = r.attention_bias;
      c.o_bias = r.attention_bias;
      break;
  }
  return {};
}

// The windowed layers of the per-layer rules: layer_types when given, else by max_window_layers.
std::string read_window_layers(config_reader& r) {
  model_config& c = r.c;
  simdjson::dom::array types;
  if (!r.o["layer_types"].get_array().get(types)) {
    for (element t : types) {
      std::string_view name;
      if (t.get_string().get(name) || (name != "sliding_attention" && name != "full_attention"))
        return "layer_types entries must be \"sliding_attention\" or \"full_attention\"";
      c.sliding_layers.push_back(name == "sliding_attention" ? 1 : 0);
    }
    if (int32_t(c.sliding_layers.size()) != c.num_hidden_layers)
      return "layer_types has " + std::to_string(c.sliding_layers.size()) + " entries for " +
             std::to_string(c.num_hidden_layers) + " layers";
  } else {
    std::string err;
    int32_t window_layers = 28;  // Qwen2Config's / Qwen2MoeConfig's max_window_layers default
    if (!get_int(r.o, "max_window_layers", window_layers, err)) return err;
    const bool even_lower =
        r.arch.config.sliding_window == sliding_window_rule::opted_in_even_lower_layers;
    for (int32_t l = 0; l < c.num_hidden_layers; ++l)
      c.sliding_layers.push_back(even_lower ? l % 2 == 0 && l < window_layers : l >= window_layers);
  }
  if (std::find(c.sliding_layers.begin(), c.sliding_layers.end(), uint8_t(1)) ==
      c.sliding_layers.end()) {
    c.sliding_window = 0;  // no layer is windowed
    c.sliding_layers.clear();
  }
  return {};
}

// Sliding-window attention as sliding_window_rule says. A window that never bites (>= the context
// length) is left out.
std::string read_sliding_window(config_reader& r) {
  model_config& c = r.c;
  std::string err;
  r.raw_max_positions = c.max_position_embeddings;
  if (!get_bool(r.o, "use_sliding_window", r.use_sliding_window, err)) return err;
  const sliding_window_rule rule = r.arch.config.sliding_window;
  const bool per_layer = rule == sliding_window_rule::opted_in_upper_layers ||
                         rule == sliding_window_rule::opted_in_even_lower_layers;
  const bool windowed =
      rule == sliding_window_rule::every_layer ||
      ((per_layer || rule == sliding_window_rule::opted_in_every_layer) && r.use_sliding_window);
  if (!windowed) return {};
  int32_t window = 0;
  if (!get_int(r.o, "sliding_window", window, err)) return err;
  if (window < 0) return "sliding_window must not be negative";
  if (window > 0 && window < c.max_position_embeddings) {
    c.sliding_window = window;
    if (per_layer) return read_window_layers(r);
  }
  return {};
}

// Layers without RoPE: no_rope_layers (1 = RoPE, 0 = none, one per layer) or, without it, every
// no_rope_layer_interval-th layer (SmolLM3Config).
std::string read_no_rope_layers(config_reader& r) {
  if (!r.arch.config.no_rope_layers) return {};
  model_config& c = r.c;
  std::string err;
  std::vector<int32_t> flags;
  int32_t interval = 4;
  if (!get_id_list(r.o, "no_rope_layers", flags, err) ||
      !get_int(r.o, "no_rope_layer_interval", interval, err))
    return err;
  if (flags.empty()) {
    if (interval <= 0) return "no_rope_layer_interval must be positive";
    for (int32_t l = 0; l < c.num_hidden_layers; ++l)
      flags.push_back((l + 1) % interval != 0 ? 1 : 0);
  }
  if (int32_t(flags.size()) != c.num_hidden_layers)
    return "no_rope_layers has " + std::to_string(flags.size()) + " entries for " +
           std::to_string(c.num_hidden_layers) + " layers";
  for (int32_t f : flags) c.rope_layers.push_back(f != 0 ? 1 : 0);
  return {};
}

// sliding_window_rule::caps_context: with use_sliding_window, the window caps the context, as a
// window on every layer would.
std::string cap_context_by_window(config_reader& r) {
  if (r.arch.config.sliding_window != sliding_window_rule::caps_context) return {};
  std::string err;
  int32_t window = 0;
  if (!get_int(r.o, "sliding_window", window, err)) return err;
  if (r.use_sliding_window && window > 0 && window < r.c.max_position_embeddings)
    r.c.max_position_embeddings = window;
  return {};
}

// "Phi-3 models only": the architectures that read partial_rotary_factor.
std::string partial_rotary_architectures() {
  std::string out;
  for (const architecture& a : architectures())
    if (a.config.partial_rotary) out += (out.empty() ? "" : ", ") + std::string(a.title);
  return out + " models only";
}

// partial_rotary_factor (Phi-4-mini: 0.75): RoPE over the first int(head_dim * factor)
// dimensions of each head, at the top level or (transformers 5) inside rope_parameters.
std::string read_partial_rotary(config_reader& r) {
  model_config& c = r.c;
  std::string err;
  c.rotary_dim = c.head_dim;
  float partial = 1.0f;
  object rp;
  if (!get_float(r.o, "partial_rotary_factor", partial, err)) return err;
  if (!r.o["rope_parameters"].get_object().get(rp) &&
      !get_float(rp, "partial_rotary_factor", partial, err))
    return "rope_parameters: " + err;
  if (partial == 1.0f) return {};
  if (!r.arch.config.partial_rotary)
    return "unsupported option partial_rotary_factor=" + std::to_string(partial) + " for " +
           c.model_type + " (" + partial_rotary_architectures() + ")";
  const auto dim = int32_t(double(c.head_dim) * double(partial));
  if (!(partial > 0.0f && partial <= 1.0f) || dim <= 0 || dim % 2 != 0)
    return "partial_rotary_factor " + std::to_string(partial) +
           " must give an even number of rotated dimensions of head_dim " +
           std::to_string(c.head_dim);
  c.rotary_dim = dim;
  return {};
}

std::string parse_llama3(const object& r, rope_scaling_config& s) {
  std::string err;
  s.kind = rope_kind::llama3;
  if (!get_float(r, "factor", s.factor, err) ||
      !get_float(r, "low_freq_factor", s.low_freq_factor, err) ||
      !get_float(r, "high_freq_factor", s.high_freq_factor, err) ||
      !get_int(r, "original_max_position_embeddings", s.original_max_position_embeddings, err))
    return err;
  if (s.high_freq_factor <= s.low_freq_factor)
    return "high_freq_factor must exceed low_freq_factor";
  return {};
}

std::string parse_linear(const object& r, rope_scaling_config& s) {
  std::string err;
  s.kind = rope_kind::linear;
  if (!get_float(r, "factor", s.factor, err)) return err;
  if (!(s.factor > 0.0f)) return "factor must be positive";
  return {};
}

// transformers' _compute_longrope_parameters; original_max_position_embeddings at the top level
// (Phi-3's configs) or inside the rope dict `r`. Errors other than the original context's are
// about `r`; `rope_key` names it.
std::string parse_longrope(config_reader& rd, const object& r, const std::string& rope_key) {
  rope_scaling_config& s = rd.c.rope_scaling;
  std::string err;
  s.kind = rope_kind::longrope;
  int32_t original = rd.raw_max_positions;
  float factor = 0.0f, attention = 0.0f;
  if (!get_int(rd.o, "original_max_position_embeddings", original, err) ||
      !get_int(r, "original_max_position_embeddings", original, err) ||
      !get_float(r, "factor", factor, err) || !get_float(r, "attention_factor", attention, err) ||
      !get_float_list(r, "short_factor", s.short_factor, err) ||
      !get_float_list(r, "long_factor", s.long_factor, err))
    return rope_key + ": " + err;
  const size_t pairs = size_t(rd.c.rotary_dim / 2);
  if (s.short_factor.size() != pairs || s.long_factor.size() != pairs)
    return rope_key + ": short_factor and long_factor need " + std::to_string(pairs) +
           " entries (rotary dimensions / 2), not " + std::to_string(s.short_factor.size()) +
           " and " + std::to_string(s.long_factor.size());
  for (float f : s.short_factor)
    if (!(f > 0.0f)) return rope_key + ": short_factor entries must be positive";
  for (float f : s.long_factor)
    if (!(f > 0.0f)) return rope_key + ": long_factor entries must be positive";
  if (original <= 0) return "original_max_position_embeddings must be positive";
  s.original_max_position_embeddings = original;
  if (factor <= 0.0f) factor = float(rd.raw_max_positions) / float(original);
  s.factor = factor;
  s.attention_factor =
      attention > 0.0f ? attention
      : factor <= 1.0f
          ? 1.0f
          : float(std::sqrt(1.0 + std::log(double(factor)) / std::log(double(original))));
  return {};
}

// RoPE: `rope_scaling` (transformers 4) or `rope_parameters` (transformers 5, which also moves
// rope_theta inside it). Both hold rope_type (or the older `type`) and the type's fields.
std::string read_rope_scaling(config_reader& rd) {
  model_config& c = rd.c;
  element rs;
  std::string rope_key = "rope_scaling";
  if (!rd.o["rope_parameters"].get(rs) && !rs.is_null())
    rope_key = "rope_parameters";
  else if (rd.o["rope_scaling"].get(rs) || rs.is_null())
    return {};
  object r;
  if (rs.get_object().get(r)) return rope_key + " must be an object";
  std::string err;
  if (!get_float(r, "rope_theta", c.rope_theta, err)) return rope_key + ": " + err;
  std::string type = get_string(r, "rope_type");
  if (type.empty()) type = get_string(r, "type");
  std::string e;
  if (type == "llama3")
    e = parse_llama3(r, c.rope_scaling);
  else if (type == "linear")
    e = parse_linear(r, c.rope_scaling);
  else if (type == "yarn")
    e = parse_yarn(r, rd.raw_max_positions, c.rope_scaling);
  else if (type == "longrope" || type == "su")
    return parse_longrope(rd, r, rope_key);
  else if (type != "default" && !type.empty())
    return "unsupported " + rope_key + " type '" + type +
           "' (supported: default, llama3, linear, yarn, longrope)";
  return e.empty() ? e : rope_key + ": " + e;
}

// Values transformers would turn into NaN logits or an empty context are refused here, by name.
std::string check_values(config_reader& r) {
  const model_config& c = r.c;
  if (!(c.rope_theta > 0.0f) || !std::isfinite(c.rope_theta))
    return "rope_theta must be a positive number, got " + std::to_string(c.rope_theta);
  if (!(c.rms_norm_eps >= 0.0f) || !std::isfinite(c.rms_norm_eps))
    return "rms_norm_eps must be a non-negative number, got " + std::to_string(c.rms_norm_eps);
  if (c.max_position_embeddings <= 0)
    return "max_position_embeddings must be positive, got " +
           std::to_string(c.max_position_embeddings);
  return {};
}

std::string read_dtype_and_quantization(config_reader& r) {
  std::string td = get_string(r.o, "torch_dtype");
  if (td.empty()) td = get_string(r.o, "dtype");
  r.c.torch_dtype = td == "bfloat16" ? dtype::bf16 : td == "float16" ? dtype::f16 : dtype::f32;
  return parse_quantization(r.o, r.c.quantization);
}

}  // namespace

result<model_config> parse_model_config(std::string_view json, std::string_view origin) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  object o;
  if (auto e = parser.parse(padded).get_object().get(o))
    return config_error(origin, std::string("not a JSON object: ") + simdjson::error_message(e));
  model_config c;
  const architecture* arch = identify_architecture(o, c);
  if (!arch)
    return config_error(origin, "unsupported architecture '" +
                                    (c.architecture.empty() ? c.model_type : c.architecture) +
                                    "' (supported: " + hf_architecture_list() + ")");
  config_reader reader{o, *arch, c};
  // In this order: a later step reads what an earlier one set (the head size, the rotated
  // dimensions, the context before a window caps it).
  for (auto* step :
       {read_common_fields, check_shapes, read_experts, read_attention_biases, read_sliding_window,
        read_no_rope_layers, cap_context_by_window, read_partial_rotary, read_rope_scaling,
        check_values, read_dtype_and_quantization, read_classifier})
    if (std::string e = step(reader); !e.empty()) return config_error(origin, e);
  return c;
}

result<model_config> load_model_config(const std::string& model_dir,
                                       std::string_view hf_overrides) {
  if (is_gguf_file(model_dir)) {
    if (!hf_overrides.empty())
      return error{"invalid_argument",
                   "--hf-overrides applies to Hugging Face folders, not GGUF files",
                   "hf_overrides"};
    auto f = gguf_file::open(model_dir);
    if (!f) return f.err();
    return gguf_model_config(**f);
  }
  auto text = read_config_json(model_dir, hf_overrides);
  if (!text) return text.err();
  return parse_model_config(*text, model_dir + "/config.json");
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
