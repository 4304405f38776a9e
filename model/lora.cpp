#include "model/lora.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "model/safetensors.hpp"
#include "model/text/json/value.hpp"

namespace coserve {

namespace {

error bad(const std::filesystem::path& dir, const std::string& field, const std::string& why) {
  return error{"invalid_argument", "LoRA adapter " + dir.string() + ": " + field + " " + why,
               field};
}

struct target_info {
  std::string_view module;  // the projection's name in the checkpoint
  std::string_view block;   // "self_attn" or "mlp"
  lora_target target;
};
constexpr target_info k_targets[] = {
    {"q_proj", "self_attn", lora_target::q},      {"k_proj", "self_attn", lora_target::k},
    {"v_proj", "self_attn", lora_target::v},      {"o_proj", "self_attn", lora_target::o},
    {"qkv_proj", "self_attn", lora_target::qkv},  {"gate_proj", "mlp", lora_target::gate},
    {"up_proj", "mlp", lora_target::up},          {"down_proj", "mlp", lora_target::down},
    {"gate_up_proj", "mlp", lora_target::gate_up}};

// The projection's (in, out) on `layer` of the base model, or an error saying why it has none.
result<std::pair<int32_t, int32_t>> projection_shape(const model_config& c, lora_target t,
                                                     int32_t layer) {
  const bool fused = c.fused_projections;
  const int32_t hd = c.head_dim, q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
  const bool is_fused_target = t == lora_target::qkv || t == lora_target::gate_up;
  if (fused != is_fused_target && t != lora_target::o && t != lora_target::down)
    return error{"", fused ? "the base model fuses its projections (qkv_proj, gate_up_proj)"
                           : "the base model has no fused projection of that name"};
  const bool mlp = t == lora_target::gate || t == lora_target::up || t == lora_target::down ||
                   t == lora_target::gate_up;
  if (mlp && c.moe_layer(layer))
    return error{"", "layer " + std::to_string(layer) +
                         " is a mixture of experts (LoRA on experts is not supported)"};
  const int32_t h = c.hidden_size, i = c.intermediate_size;
  switch (t) {
    case lora_target::q:
      return std::pair{h, q};
    case lora_target::k:
    case lora_target::v:
      return std::pair{h, kv};
    case lora_target::o:
      return std::pair{q, h};
    case lora_target::qkv:
      return std::pair{h, q + 2 * kv};
    case lora_target::gate:
    case lora_target::up:
      return std::pair{h, i};
    case lora_target::gate_up:
      return std::pair{h, 2 * i};
    case lora_target::down:
      return std::pair{i, h};
  }
  return error{"", "unknown target"};
}

result<json::value> read_config(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "adapter_config.json";
  std::ifstream in(file);
  if (!in) return bad(dir, "adapter_config.json", "not found");
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = json::parse(text.str());
  if (!parsed || !parsed->is_object())
    return bad(dir, "adapter_config.json", "is not a JSON object");
  return std::move(*parsed);
}

// The config's checks and numbers (rank, alpha, rsLoRA, base model) into `out`.
result<void> read_settings(const std::filesystem::path& dir, const json::value& cfg,
                           int32_t max_rank, lora_adapter& out) {
  auto field = [&](const char* key) -> const json::value* {
    const json::value* v = cfg.find(key);
    return v == nullptr || v->is_null() ? nullptr : v;
  };
  auto truthy = [&](const char* key) {
    const json::value* v = field(key);
    return v != nullptr && !(v->is_bool() && !v->as_bool()) &&
           !(v->is_array() && v->as_array().empty()) && !(v->is_object() && v->as_object().empty());
  };
  if (const json::value* t = field("peft_type"); t && (!t->is_string() || t->as_string() != "LORA"))
    return bad(dir, "peft_type", "must be \"LORA\"");
  if (truthy("use_dora")) return bad(dir, "use_dora", "is set: DoRA adapters are not supported");
  if (truthy("modules_to_save"))
    return bad(dir, "modules_to_save",
               "is set: adapters that replace whole modules are not supported");
  if (truthy("fan_in_fan_out"))
    return bad(dir, "fan_in_fan_out", "is set: Conv1D (GPT-2 style) layouts are not supported");
  if (truthy("rank_pattern") || truthy("alpha_pattern"))
    return bad(dir, truthy("rank_pattern") ? "rank_pattern" : "alpha_pattern",
               "is set: per-module ranks and alphas are not supported");
  // Variants that change what the adapter computes (bias terms on B, replicated layers, adapted
  // parameters beyond the projections, trainable token rows, quantization-aware or activated
  // LoRA, block-diagonal LoRA).
  for (const char* key :
       {"lora_bias", "layer_replication", "target_parameters", "trainable_token_indices",
        "use_qalora", "alora_invocation_tokens", "use_bdlora"})
    if (truthy(key)) return bad(dir, key, "is set: this LoRA variant is not supported");
  if (const json::value* b = field("bias"); b && (!b->is_string() || b->as_string() != "none"))
    return bad(dir, "bias", "must be \"none\" (adapters with bias terms are not supported)");
  const json::value* r = field("r");
  if (r == nullptr || !r->is_int() || r->as_int() < 1)
    return bad(dir, "r", "must be a positive integer");
  max_rank = std::min(max_rank, k_max_lora_rank);
  if (r->as_int() > max_rank)
    return bad(dir, "r",
               "is " + std::to_string(r->as_int()) + ", above --max-lora-rank " +
                   std::to_string(max_rank));
  out.rank = static_cast<int32_t>(r->as_int());
  const json::value* alpha = field("lora_alpha");
  if (alpha != nullptr && !alpha->is_number()) return bad(dir, "lora_alpha", "must be a number");
  out.alpha = alpha ? alpha->as_double() : 8.0;  // peft's default lora_alpha
  out.rslora = truthy("use_rslora");
  out.scaling = static_cast<float>(out.rslora ? out.alpha / std::sqrt(double(out.rank))
                                              : out.alpha / out.rank);
  if (const json::value* b = field("base_model_name_or_path"); b && b->is_string())
    out.base_model = b->as_string();
  return {};
}

// One tensor's name split into (layer, target, "A" or "B"), or an error naming it.
struct tensor_key {
  int32_t layer;
  lora_target target;
  char factor;
};
result<tensor_key> parse_name(const std::filesystem::path& dir, const std::string& name) {
  static const std::regex re(
      R"(^(?:base_model\.model\.)?(?:model\.)?layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$)");
  std::smatch m;
  if (std::regex_match(name, m, re)) {
    for (const target_info& t : k_targets)
      if (m[3].str() == t.module && m[2].str() == t.block)
        return tensor_key{std::stoi(m[1]), t.target, m[4].str()[0]};
    return bad(dir, name,
               "targets " + m[2].str() + "." + m[3].str() +
                   ", not a supported projection (q/k/v/o_proj, gate/up/down_proj, "
                   "qkv_proj, gate_up_proj)");
  }
  if (name.find("lora_embedding") != std::string::npos ||
      name.find("embed_tokens") != std::string::npos)
    return bad(dir, name, "targets the embeddings, which is not supported");
  if (name.find("lm_head") != std::string::npos)
    return bad(dir, name, "targets lm_head, which is not supported");
  if (name.find("experts") != std::string::npos || name.find("shared_expert") != std::string::npos)
    return bad(dir, name, "targets a mixture-of-experts layer's experts, which is not supported");
  if (name.find("lora_magnitude_vector") != std::string::npos)
    return bad(dir, name, "is a DoRA magnitude: DoRA adapters are not supported");
  return bad(dir, name, "is not a LoRA factor of a decoder layer's projection");
}

std::vector<float> to_f32(const tensor_view& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(t.type, t.data, out.data(), out.size());
  return out;
}

}  // namespace

result<lora_module> parse_lora_module(std::string_view text) {
  auto refuse = [&](const std::string& why) {
    return error{"invalid_argument", "--lora-modules '" + std::string(text) + "': " + why,
                 "lora_modules"};
  };
  lora_module m;
  if (!text.empty() && text.front() == '{') {
    auto parsed = json::parse(text);
    if (!parsed || !parsed->is_object()) return refuse("not a JSON object");
    for (const auto& [key, v] : parsed->as_object()) {
      if (!v.is_string()) return refuse("'" + key + "' must be a string");
      if (key == "name")
        m.name = v.as_string();
      else if (key == "path")
        m.path = v.as_string();
      else if (key == "base_model_name")
        m.base_model_name = v.as_string();
      else
        return refuse("'" + key + "' is not a known key (name, path, base_model_name)");
    }
  } else {
    const size_t eq = text.find('=');
    if (eq == std::string_view::npos) return refuse("expected name=path or a JSON object");
    m.name = std::string(text.substr(0, eq));
    m.path = std::string(text.substr(eq + 1));
  }
  if (m.name.empty()) return refuse("the adapter's name is empty");
  if (m.path.empty()) return refuse("the adapter's path is empty");
  return m;
}

std::string_view lora_target_name(lora_target t) noexcept {
  for (const target_info& i : k_targets)
    if (i.target == t) return i.module;
  return "?";
}

result<lora_adapter> load_lora_adapter(const std::filesystem::path& dir, const model_config& base,
                                       int32_t max_rank) {
  lora_adapter out;
  out.dir = dir;
  auto cfg = read_config(dir);
  if (!cfg) return cfg.err();
  if (auto r = read_settings(dir, *cfg, max_rank, out); !r) return r.err();
  const std::filesystem::path file = dir / "adapter_model.safetensors";
  if (!std::filesystem::exists(file)) {
    if (std::filesystem::exists(dir / "adapter_model.bin"))
      return bad(dir, "adapter_model.bin",
                 "is a pickled PyTorch file, which is not read (it can run code); convert it to "
                 "adapter_model.safetensors (peft: save_pretrained(..., safe_serialization=True))");
    return bad(dir, "adapter_model.safetensors", "not found");
  }
  auto st = safetensors_file::open(file.string());
  if (!st) return st.err();
  std::map<std::pair<int32_t, lora_target>, std::pair<const tensor_view*, const tensor_view*>>
      pairs;
  for (const auto& [name, view] : st->tensors()) {
    auto key = parse_name(dir, name);
    if (!key) return key.err();
    if (key->layer >= base.num_hidden_layers)
      return bad(dir, name,
                 "is for layer " + std::to_string(key->layer) + "; the base model has " +
                     std::to_string(base.num_hidden_layers));
    if (view.type != dtype::f32 && view.type != dtype::bf16 && view.type != dtype::f16)
      return bad(
          dir, name,
          "has dtype " + std::string(dtype_name(view.type)) + " (F32, BF16 or F16 expected)");
    auto& slot = pairs[{key->layer, key->target}];
    (key->factor == 'A' ? slot.first : slot.second) = &view;
  }
  if (pairs.empty()) return bad(dir, "adapter_model.safetensors", "holds no LoRA factors");
  for (const auto& [key, ab] : pairs) {
    const auto [layer, target] = key;
    const std::string where =
        "layers." + std::to_string(layer) + "." + std::string(lora_target_name(target));
    if (ab.first == nullptr || ab.second == nullptr)
      return bad(dir, where,
                 std::string("has lora_") + (ab.first ? "A" : "B") + " without lora_" +
                     (ab.first ? "B" : "A"));
    auto shape = projection_shape(base, target, layer);
    if (!shape) return bad(dir, where, "cannot be adapted: " + shape.err().message);
    const auto [in, outd] = *shape;
    const std::vector<int64_t> want_a{out.rank, in}, want_b{outd, out.rank};
    if (ab.first->shape != want_a || ab.second->shape != want_b)
      return bad(dir, where,
                 "has lora_A " + shape_string(ab.first->shape) + " and lora_B " +
                     shape_string(ab.second->shape) +
                     "; the base model and r = " + std::to_string(out.rank) + " need " +
                     shape_string(want_a) + " and " + shape_string(want_b));
    out.factors.push_back(
        {layer, target, in, outd, out.rank, to_f32(*ab.first), to_f32(*ab.second)});
  }
  out.index.assign(static_cast<size_t>(base.num_hidden_layers) * lora_adapter::k_lora_targets, -1);
  for (size_t i = 0; i < out.factors.size(); ++i)
    out.index[static_cast<size_t>(out.factors[i].layer) * lora_adapter::k_lora_targets +
              static_cast<size_t>(out.factors[i].target)] = static_cast<int32_t>(i);
  return out;
}

}  // namespace coserve
