#include "model/encoder_model.hpp"

#include <algorithm>
#include <cmath>

#include "model/config.hpp"
#include "model/hf_overrides.hpp"
#include "model/safetensors.hpp"
#include "model/text/json/value.hpp"

namespace coserve {

namespace {

result<json::value> read_json(const std::filesystem::path& file) {
  auto text = read_text_file(file.string());
  if (!text) return make_error("invalid_model", file.string() + ": cannot be read");
  auto v = json::parse(*text);
  if (!v) return make_error("invalid_model", file.string() + ": " + v.err().message);
  if (!v->is_object()) return make_error("invalid_model", file.string() + ": not a JSON object");
  return std::move(*v);
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// The module kind of a modules.json entry's type: the last component of the class path
// ("sentence_transformers.models.Pooling", "sentence_transformers.sentence_transformer.modules.
// Pooling" and the like all name Pooling).
std::string_view module_kind(std::string_view type) {
  const size_t dot = type.rfind('.');
  return dot == std::string_view::npos ? type : type.substr(dot + 1);
}

bool flag(const json::value& o, std::string_view key) {
  const json::value* v = o.find(key);
  return v != nullptr && v->is_bool() && v->as_bool();
}

result<pooling_type> read_pooling_module(const std::filesystem::path& file) {
  auto cfg = read_json(file);
  if (!cfg) return cfg.err();
  // The mode's names: current releases write pooling_mode (a name, or a list of names whose
  // vectors are concatenated); earlier ones one pooling_mode_* flag per mode.
  std::vector<std::string> names;
  if (const json::value* m = cfg->find("pooling_mode"); m && !m->is_null()) {
    if (m->is_string()) names.push_back(m->as_string());
    if (m->is_array())
      for (const json::value& x : m->as_array())
        names.push_back(x.is_string() ? x.as_string() : "?");
  } else {
    for (const char* k : {"pooling_mode_cls_token", "pooling_mode_max_tokens",
                          "pooling_mode_mean_tokens", "pooling_mode_mean_sqrt_len_tokens",
                          "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
      if (flag(*cfg, k)) names.emplace_back(k);
  }
  // Nothing set (no field, or every flag false): sentence-transformers' default.
  if (names.empty()) return pooling_type::mean;
  if (names.size() > 1)
    return make_error("invalid_model", file.string() +
                                           ": several pooling modes at once (their vectors "
                                           "concatenated) are not computed");
  const std::string& n = names.front();
  if (n == "cls" || n == "pooling_mode_cls_token") return pooling_type::cls;
  if (n == "mean" || n == "pooling_mode_mean_tokens") return pooling_type::mean;
  if (n == "lasttoken" || n == "pooling_mode_lasttoken") return pooling_type::last;
  return make_error("invalid_model", file.string() + ": pooling mode '" + n +
                                         "' is not one this server computes (cls, mean and "
                                         "lasttoken are)");
}

}  // namespace

void finish_pooled_vector(std::vector<float>& v, const pooling_params& p, bool model_normalizes) {
  if (p.dimensions > 0 && size_t(p.dimensions) < v.size()) v.resize(size_t(p.dimensions));
  if (!p.normalize.value_or(model_normalizes)) return;
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  const float inv = float(1.0 / std::max(std::sqrt(ss), 1e-12));
  for (float& x : v) x *= inv;
}

matryoshka_info read_matryoshka(const std::filesystem::path& dir) {
  matryoshka_info m;
  auto cfg = read_json(dir / "config.json");
  if (!cfg) return m;
  if (const json::value* d = cfg->find("matryoshka_dimensions"); d && d->is_array())
    for (const json::value& x : d->as_array())
      if (x.is_int() && x.as_int() > 0) m.dimensions.push_back(int32_t(x.as_int()));
  m.enabled = flag(*cfg, "is_matryoshka") || !m.dimensions.empty();
  return m;
}

std::string_view pooling_type_name(pooling_type t) noexcept {
  switch (t) {
    case pooling_type::cls:
      return "cls";
    case pooling_type::mean:
      return "mean";
    case pooling_type::last:
      return "last";
  }
  return "?";
}

bool read_do_lower_case(const std::filesystem::path& dir) {
  const auto sb = dir / "sentence_bert_config.json";
  if (!std::filesystem::exists(sb)) return false;
  auto cfg = read_json(sb);
  if (!cfg) return false;
  const json::value* v = cfg->find("do_lower_case");
  return v != nullptr && v->is_bool() && v->as_bool();
}

result<pooling_config> load_pooling_config(const std::filesystem::path& dir,
                                           const pooling_config& fallback) {
  int32_t max_seq_length = 0;
  if (const auto sb = dir / "sentence_bert_config.json"; std::filesystem::exists(sb)) {
    auto cfg = read_json(sb);
    if (!cfg) return cfg.err();
    if (const json::value* m = cfg->find("max_seq_length"); m && m->is_int() && m->as_int() > 0)
      max_seq_length = int32_t(std::min<int64_t>(m->as_int(), int64_t{1} << 30));
  }
  // Current sentence-transformers releases keep it as the tokenizer's model_max_length instead.
  if (const auto tc = dir / "tokenizer_config.json";
      max_seq_length == 0 && std::filesystem::exists(dir / "modules.json") &&
      std::filesystem::exists(tc)) {
    auto cfg = read_json(tc);
    if (!cfg) return cfg.err();
    if (const json::value* m = cfg->find("model_max_length");
        m && m->is_int() && m->as_int() > 0 && m->as_int() < (int64_t{1} << 30))
      max_seq_length = int32_t(m->as_int());
  }
  const std::filesystem::path modules_file = dir / "modules.json";
  if (!std::filesystem::exists(modules_file)) {
    pooling_config out = fallback;
    out.max_seq_length = max_seq_length;
    return out;
  }
  auto text = read_text_file(modules_file.string());
  if (!text) return make_error("invalid_model", modules_file.string() + ": cannot be read");
  auto modules = json::parse(*text);
  if (!modules || !modules->is_array())
    return make_error("invalid_model", modules_file.string() + ": not a JSON array of modules");
  pooling_config out;
  bool pooled = false;
  std::string source = "modules.json:";
  for (const json::value& m : modules->as_array()) {
    const json::value* type = m.find("type");
    if (!m.is_object() || type == nullptr || !type->is_string())
      return make_error("invalid_model", modules_file.string() + ": a module without a 'type'");
    const json::value* path = m.find("path");
    const std::string rel = path != nullptr && path->is_string() ? path->as_string() : "";
    const std::string_view kind = module_kind(type->as_string());
    if (kind == "Transformer" || kind == "Transformers") continue;
    if (kind == "Pooling") {
      if (pooled)
        return make_error("invalid_model",
                          modules_file.string() + ": more than one Pooling module");
      auto t = read_pooling_module(dir / rel / "config.json");
      if (!t) return t.err();
      out.type = *t;
      pooled = true;
      source += " " + rel + " (" + std::string(pooling_type_name(*t)) + ")";
    } else if (kind == "Normalize") {
      out.normalize = true;
      source += " " + (rel.empty() ? std::string("Normalize") : rel);
    } else {
      return make_error("invalid_model", modules_file.string() + ": module '" + type->as_string() +
                                             "' is not one this server runs (Transformer, "
                                             "Pooling and Normalize are)");
    }
  }
  if (!pooled) return make_error("invalid_model", modules_file.string() + ": no Pooling module");
  out.source = std::move(source);
  out.max_seq_length = max_seq_length;
  return out;
}

bool is_encoder_architecture(std::string_view a) {
  static constexpr std::string_view names[] = {"BertModel",
                                               "XLMRobertaModel",
                                               "RobertaModel",
                                               "BertForSequenceClassification",
                                               "XLMRobertaForSequenceClassification",
                                               "RobertaForSequenceClassification"};
  return std::find(std::begin(names), std::end(names), a) != std::end(names);
}

std::string read_architecture(const std::filesystem::path& dir, std::string_view hf_overrides) {
  auto text = read_config_json(dir, hf_overrides);
  if (!text) return {};
  auto cfg = json::parse(*text);
  if (!cfg) return {};
  const json::value* a = cfg->find("architectures");
  if (a == nullptr || !a->is_array() || a->as_array().empty() || !a->as_array()[0].is_string())
    return {};
  return a->as_array()[0].as_string();
}

result<encoder_config> parse_encoder_config(std::string_view text, std::string_view origin) {
  auto doc = json::parse(text);
  if (!doc || !doc->is_object())
    return make_error("invalid_model", std::string(origin) + ": not a JSON object");
  const json::value& o = *doc;
  auto fail = [&](const std::string& what) {
    return make_error("invalid_model", std::string(origin) + ": " + what);
  };
  encoder_config c;
  if (const json::value* a = o.find("architectures");
      a && a->is_array() && !a->as_array().empty() && a->as_array()[0].is_string())
    c.architecture = a->as_array()[0].as_string();
  if (!is_encoder_architecture(c.architecture))
    return fail("architecture '" + c.architecture + "' is not an encoder this server reads");
  if (const json::value* t = o.find("model_type"); t && t->is_string())
    c.model_type = t->as_string();
  auto get_int = [&](std::string_view key, int32_t& out, bool required) -> result<void> {
    const json::value* v = o.find(key);
    if (v == nullptr || v->is_null()) {
      if (required) return fail("field '" + std::string(key) + "' is missing");
      return {};
    }
    if (!v->is_int()) return fail("field '" + std::string(key) + "' must be an integer");
    out = int32_t(v->as_int());
    return {};
  };
  for (auto [key, out, required] :
       {std::tuple{"hidden_size", &c.hidden_size, true},
        std::tuple{"intermediate_size", &c.intermediate_size, true},
        std::tuple{"num_hidden_layers", &c.num_hidden_layers, true},
        std::tuple{"num_attention_heads", &c.num_attention_heads, true},
        std::tuple{"vocab_size", &c.vocab_size, true},
        std::tuple{"max_position_embeddings", &c.max_position_embeddings, false},
        std::tuple{"type_vocab_size", &c.type_vocab_size, false},
        std::tuple{"pad_token_id", &c.pad_token_id, false}})
    if (auto r = get_int(key, *out, required); !r) return r.err();
  if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads)
    return fail("hidden_size must be a positive multiple of num_attention_heads");
  if (c.intermediate_size <= 0 || c.num_hidden_layers <= 0 || c.vocab_size <= 0 ||
      c.max_position_embeddings <= 0 || c.type_vocab_size < 0)
    return fail("sizes must be positive");
  if (const json::value* e = o.find("layer_norm_eps"); e && e->is_number())
    c.layer_norm_eps = float(e->as_double());
  if (const json::value* p = o.find("position_embedding_type");
      p && p->is_string() && p->as_string() != "absolute")
    return fail("position_embedding_type '" + p->as_string() +
                "' is not read (absolute positions are)");
  if (const json::value* h = o.find("hidden_act"); h && h->is_string()) {
    const std::string& s = h->as_string();
    if (s == "gelu")
      c.hidden_act = encoder_activation::gelu;
    else if (s == "gelu_new" || s == "gelu_pytorch_tanh" || s == "gelu_fast")
      c.hidden_act = encoder_activation::gelu_tanh;
    else if (s == "relu")
      c.hidden_act = encoder_activation::relu;
    else if (s == "silu" || s == "swish")
      c.hidden_act = encoder_activation::silu;
    else
      return fail("hidden_act '" + s + "' is not computed (gelu, gelu_new, relu, silu are)");
  }
  const bool roberta = c.model_type == "roberta" || c.model_type == "xlm-roberta" ||
                       c.architecture.rfind("Roberta") != std::string::npos ||
                       c.architecture.rfind("XLMRoberta") != std::string::npos;
  if (roberta) c.position_offset = c.pad_token_id + 1;
  if (c.max_model_len() <= 0) return fail("max_position_embeddings leaves no position");
  if (ends_with(c.architecture, "ForSequenceClassification")) {
    c.num_labels = 2;  // transformers' default
    if (const json::value* l = o.find("id2label"); l && l->is_object() && l->size() > 0)
      c.num_labels = int32_t(l->size());
    if (auto r = get_int("num_labels", c.num_labels, false); !r) return r.err();
    if (c.num_labels <= 0) return fail("num_labels must be positive");
  }
  if (const json::value* m = o.find("matryoshka_dimensions"); m && m->is_array())
    for (const json::value& d : m->as_array())
      if (d.is_int() && d.as_int() > 0) c.matryoshka_dimensions.push_back(int32_t(d.as_int()));
  c.is_matryoshka = flag(o, "is_matryoshka") || !c.matryoshka_dimensions.empty();
  return c;
}

result<encoder_config> load_encoder_config(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "config.json";
  auto text = read_text_file(file.string());
  if (!text) return make_error("invalid_model", file.string() + ": cannot be read");
  return parse_encoder_config(*text, file.string());
}

namespace {

class encoder_loader {
 public:
  encoder_loader(const safetensors_set& set, std::string prefix)
      : set_(set), prefix_(std::move(prefix)) {}

  result<weight_ref> matrix(const std::string& name, int64_t rows, int64_t cols) {
    auto t = set_.get(prefix_ + name, {rows, cols});
    if (!t) return t.err();
    const tensor_view& v = **t;
    if (v.type != dtype::f32 && v.type != dtype::bf16 && v.type != dtype::f16)
      return make_error("invalid_model", v.file + ": '" + v.name + "' is " +
                                             std::string(dtype_name(v.type)) +
                                             "; encoder weights must be F32, F16 or BF16");
    return weight_ref{v.type, v.data, rows, cols};
  }
  result<std::vector<float>> vec(const std::string& name, int64_t n) {
    auto t = set_.get(prefix_ + name, {n});
    if (!t) return t.err();
    const tensor_view& v = **t;
    if (v.type != dtype::f32 && v.type != dtype::bf16 && v.type != dtype::f16)
      return make_error("invalid_model", v.file + ": '" + v.name + "' must be F32, F16 or BF16");
    std::vector<float> out(static_cast<size_t>(n));
    convert_to_f32(v.type, v.data, out.data(), out.size());
    return out;
  }
  void set_prefix(std::string p) { prefix_ = std::move(p); }

 private:
  const safetensors_set& set_;
  std::string prefix_;
};

#define COSERVE_TRY_ASSIGN(dst, expr) \
  do {                                \
    auto r_ = (expr);                 \
    if (!r_) return r_.err();         \
    (dst) = std::move(*r_);           \
  } while (0)

result<void> load_layer(encoder_loader& ld, const encoder_config& c, int32_t l, encoder_layer& L) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  const std::string p = "encoder.layer." + std::to_string(l) + ".";
  COSERVE_TRY_ASSIGN(L.q, ld.matrix(p + "attention.self.query.weight", h, h));
  COSERVE_TRY_ASSIGN(L.k, ld.matrix(p + "attention.self.key.weight", h, h));
  COSERVE_TRY_ASSIGN(L.v, ld.matrix(p + "attention.self.value.weight", h, h));
  for (const char* part : {"query", "key", "value"}) {
    std::vector<float> b;
    COSERVE_TRY_ASSIGN(b, ld.vec(p + "attention.self." + part + ".bias", h));
    L.qkv_bias.insert(L.qkv_bias.end(), b.begin(), b.end());
  }
  COSERVE_TRY_ASSIGN(L.o, ld.matrix(p + "attention.output.dense.weight", h, h));
  COSERVE_TRY_ASSIGN(L.o_bias, ld.vec(p + "attention.output.dense.bias", h));
  COSERVE_TRY_ASSIGN(L.attn_norm_w, ld.vec(p + "attention.output.LayerNorm.weight", h));
  COSERVE_TRY_ASSIGN(L.attn_norm_b, ld.vec(p + "attention.output.LayerNorm.bias", h));
  COSERVE_TRY_ASSIGN(L.up, ld.matrix(p + "intermediate.dense.weight", inter, h));
  COSERVE_TRY_ASSIGN(L.up_bias, ld.vec(p + "intermediate.dense.bias", inter));
  COSERVE_TRY_ASSIGN(L.down, ld.matrix(p + "output.dense.weight", h, inter));
  COSERVE_TRY_ASSIGN(L.down_bias, ld.vec(p + "output.dense.bias", h));
  COSERVE_TRY_ASSIGN(L.out_norm_w, ld.vec(p + "output.LayerNorm.weight", h));
  COSERVE_TRY_ASSIGN(L.out_norm_b, ld.vec(p + "output.LayerNorm.bias", h));
  return {};
}

// The classification head; the encoder's own tensors carry `base` ("bert.", "roberta.").
result<void> load_head(encoder_loader& ld, const encoder_config& c, const std::string& base,
                       encoder_weights& w) {
  const int64_t h = c.hidden_size;
  const bool bert = c.architecture.rfind("Bert", 0) == 0;
  const std::string dense = bert ? base + "pooler.dense." : "classifier.dense.";
  const std::string out = bert ? "classifier." : "classifier.out_proj.";
  ld.set_prefix("");
  COSERVE_TRY_ASSIGN(w.head_dense, ld.matrix(dense + "weight", h, h));
  COSERVE_TRY_ASSIGN(w.head_dense_bias, ld.vec(dense + "bias", h));
  COSERVE_TRY_ASSIGN(w.head_out, ld.matrix(out + "weight", c.num_labels, h));
  COSERVE_TRY_ASSIGN(w.head_out_bias, ld.vec(out + "bias", c.num_labels));
  return {};
}

}  // namespace

result<encoder_weights> load_encoder_weights(const std::filesystem::path& dir) {
  auto cfg = load_encoder_config(dir);
  if (!cfg) return cfg.err();
  auto set = safetensors_set::open_dir(dir.string());
  if (!set) return set.err();
  auto files = std::make_shared<const safetensors_set>(std::move(*set));
  encoder_weights w;
  w.config = *cfg;
  w.files = files;
  const encoder_config& c = w.config;
  std::string prefix;
  for (const char* p : {"", "bert.", "roberta.", "model."})
    if (files->find(std::string(p) + "embeddings.word_embeddings.weight") != nullptr) {
      prefix = p;
      break;
    }
  encoder_loader ld(*files, prefix);
  const int64_t h = c.hidden_size;
  COSERVE_TRY_ASSIGN(w.word_embeddings,
                     ld.matrix("embeddings.word_embeddings.weight", c.vocab_size, h));
  COSERVE_TRY_ASSIGN(w.position_embeddings, ld.matrix("embeddings.position_embeddings.weight",
                                                      c.max_position_embeddings, h));
  if (c.type_vocab_size > 0)
    COSERVE_TRY_ASSIGN(w.token_type_embeddings,
                       ld.matrix("embeddings.token_type_embeddings.weight", c.type_vocab_size, h));
  COSERVE_TRY_ASSIGN(w.embed_norm_w, ld.vec("embeddings.LayerNorm.weight", h));
  COSERVE_TRY_ASSIGN(w.embed_norm_b, ld.vec("embeddings.LayerNorm.bias", h));
  w.layers.resize(size_t(c.num_hidden_layers));
  for (int32_t l = 0; l < c.num_hidden_layers; ++l)
    if (auto r = load_layer(ld, c, l, w.layers[size_t(l)]); !r) return r.err();
  if (c.classifier())
    if (auto r = load_head(ld, c, prefix, w); !r) return r.err();
  return w;
}

#undef COSERVE_TRY_ASSIGN

}  // namespace coserve
