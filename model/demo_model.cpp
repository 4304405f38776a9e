#include "model/demo_model.hpp"

#include <simdjson.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/architectures.hpp"
#include "model/config.hpp"
#include "model/rng.hpp"
#include "model/safetensors.hpp"

namespace coserve {
namespace {

namespace fs = std::filesystem;

struct tokenizer_facts {
  int32_t vocab_size = 0;
  int32_t bos = -1;
  int32_t eos = -1;
};

// Vocabulary size (max id + 1 over model.vocab and added_tokens) and bos/eos ids of a tokenizer.
result<tokenizer_facts> read_tokenizer_facts(const std::string& dir) {
  auto text = read_text_file(dir + "/tokenizer.json");
  if (!text) return text.err();
  simdjson::dom::parser parser;
  simdjson::padded_string padded(*text);
  simdjson::dom::element root;
  if (parser.parse(padded).get(root))
    return make_error("invalid_model", dir + "/tokenizer.json: bad JSON");
  tokenizer_facts f;
  std::map<std::string, int32_t> ids;
  simdjson::dom::object vocab;
  if (!root["model"]["vocab"].get_object().get(vocab))
    for (auto [k, v] : vocab) {
      int64_t id;
      if (!v.get_int64().get(id)) {
        f.vocab_size = std::max(f.vocab_size, int32_t(id + 1));
        if (k.size() < 32) ids[std::string(k)] = int32_t(id);
      }
    }
  simdjson::dom::array added;
  if (!root["added_tokens"].get_array().get(added))
    for (auto t : added) {
      int64_t id;
      std::string_view content;
      if (!t["id"].get_int64().get(id) && !t["content"].get_string().get(content)) {
        f.vocab_size = std::max(f.vocab_size, int32_t(id + 1));
        ids[std::string(content)] = int32_t(id);
      }
    }
  if (f.vocab_size <= 0) return make_error("invalid_model", dir + "/tokenizer.json: no vocabulary");
  // Special tokens named in tokenizer_config.json (string or {"content": ...}).
  auto cfg = read_text_file(dir + "/tokenizer_config.json");
  if (cfg) {
    simdjson::padded_string pc(*cfg);
    simdjson::dom::parser p2;
    simdjson::dom::element c;
    if (!p2.parse(pc).get(c)) {
      auto lookup = [&](const char* key) {
        std::string_view s;
        if (c[key].get_string().get(s) && c[key]["content"].get_string().get(s)) return -1;
        auto it = ids.find(std::string(s));
        return it == ids.end() ? -1 : it->second;
      };
      f.bos = lookup("bos_token");
      f.eos = lookup("eos_token");
    }
  }
  return f;
}

std::vector<std::byte> encode(const std::vector<float>& v, dtype t) {
  std::vector<std::byte> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == dtype::f32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = t == dtype::bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      out[2 * i] = std::byte(h & 0xff);
      out[2 * i + 1] = std::byte(h >> 8);
    }
  }
  return out;
}

class weight_writer {
 public:
  weight_writer(uint64_t seed, dtype t) : rng_(seed), type_(t) {}

  void normal(const std::string& name, std::vector<int64_t> shape, double stddev) {
    std::vector<float> v(numel(shape));
    for (float& x : v) x = float(rng_.normal() * stddev);
    add(name, std::move(shape), v);
  }
  void around_one(const std::string& name, std::vector<int64_t> shape, double spread) {
    std::vector<float> v(numel(shape));
    for (float& x : v) x = float(1.0 + spread * (2.0 * rng_.uniform() - 1.0));
    add(name, std::move(shape), v);
  }
  std::vector<tensor_data>& tensors() { return tensors_; }

 private:
  static size_t numel(const std::vector<int64_t>& s) {
    size_t n = 1;
    for (int64_t d : s) n *= size_t(d);
    return n;
  }
  void add(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    tensors_.push_back({name, type_, std::move(shape), encode(v, type_)});
  }

  seq_rng rng_;
  dtype type_;
  std::vector<tensor_data> tensors_;
};

std::string torch_dtype_name(dtype t) {
  return t == dtype::bf16 ? "bfloat16" : t == dtype::f16 ? "float16" : "float32";
}

result<void> write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) return make_error("io", "cannot write " + path.string());
  return {};
}

std::string fmt_float(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.7g", v);  // floats given as short decimals print back as such
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// The demo model's shape: the options with the architecture's rules and defaults applied.
struct demo_shape {
  const demo_options& o;
  const architecture& arch;
  int32_t head_dim = 0;
  int32_t moe_inter = 0;     // each routed expert's width
  int32_t shared_inter = 0;  // the shared expert's width (an architecture with one)
  bool qkv_bias = false;     // on q/k/v ...
  bool o_bias = false;       // ... and on o_proj
  int32_t vocab = 0;
  int32_t bos = 0, eos = 0;

  bool moe() const { return arch.config.experts.layout != expert_layout::none; }
  bool mixtral() const { return arch.config.experts.layout == expert_layout::mixtral; }
  bool shared_expert() const { return arch.config.experts.shared_expert_intermediate_size > 0; }
  // Mixtral's layers are all sparse; the qwen layout's every decoder_sparse_step-th.
  bool sparse_layer(int32_t l) const {
    return moe() && (mixtral() || (l + 1) % o.decoder_sparse_step == 0);
  }
};

// The options' architecture and sizes checked; the derived sizes and biases filled in.
result<void> check_options(demo_shape& s) {
  const demo_options& o = s.o;
  const bool bias_rule = s.arch.config.bias == attention_bias_rule::attention_bias;
  s.shared_inter = o.shared_expert_intermediate_size > 0 ? o.shared_expert_intermediate_size
                                                         : o.intermediate_size;
  s.moe_inter =
      s.mixtral() || o.moe_intermediate_size <= 0 ? o.intermediate_size : o.moe_intermediate_size;
  s.qkv_bias = o.qkv_bias || !bias_rule;
  s.o_bias = s.qkv_bias && bias_rule;  // attention_bias
  if (s.moe() && (o.num_experts <= 0 || o.num_experts_per_tok <= 0 ||
                  o.num_experts_per_tok > o.num_experts || o.decoder_sparse_step <= 0))
    return make_error("invalid_argument",
                      "num_experts and decoder_sparse_step must be positive and "
                      "num_experts_per_tok in [1, num_experts]");
  if (s.arch.config.fused_projections && o.qkv_bias)
    return make_error("invalid_argument", std::string(s.arch.name) + " has no attention biases");
  if (o.hidden_size <= 0 || o.intermediate_size <= 0 || o.num_layers <= 0 || o.num_heads <= 0 ||
      o.num_kv_heads <= 0 || o.num_heads % o.num_kv_heads != 0)
    return make_error("invalid_argument",
                      "sizes must be positive and num_heads a multiple of num_kv_heads");
  s.head_dim = o.head_dim > 0 ? o.head_dim : o.hidden_size / o.num_heads;
  if (o.head_dim <= 0 && o.hidden_size % o.num_heads != 0)
    return make_error("invalid_argument",
                      "hidden_size must be a multiple of num_heads (or give head_dim)");
  if (s.head_dim % 2 != 0) return make_error("invalid_argument", "head_dim must be even");
  return {};
}

// The tokenizer folder to copy (empty without one) and the vocabulary size and bos/eos ids.
result<std::string> choose_tokenizer(demo_shape& s) {
  const demo_options& o = s.o;
  tokenizer_facts tok;
  std::string tok_dir;
  if (o.copy_tokenizer) {
    if (o.tokenizer_dir.empty()) {
      auto d = find_default_tokenizer();
      if (!d) return d.err();
      tok_dir = *d;
    } else {
      tok_dir = o.tokenizer_dir;
    }
    auto f = read_tokenizer_facts(tok_dir);
    if (!f) return f.err();
    tok = *f;
  }
  s.vocab = o.vocab_size > 0 ? o.vocab_size : tok.vocab_size;
  if (s.vocab <= 0)
    return make_error("invalid_argument", "vocab_size is required without a tokenizer");
  s.eos = tok.eos >= 0 && tok.eos < s.vocab ? tok.eos : s.vocab - 1;
  s.bos = tok.bos >= 0 && tok.bos < s.vocab ? tok.bos : s.eos;
  return tok_dir;
}

// Layer l's attention: q/k/v (fused or not), their biases, o_proj (and its bias), q/k norms.
void write_attention(weight_writer& w, const demo_shape& s, const std::string& p) {
  const int64_t h = s.o.hidden_size, d = s.head_dim, nh = s.o.num_heads, nkv = s.o.num_kv_heads;
  if (s.arch.config.fused_projections) {  // q, k and v rows in one tensor
    w.normal(p + "self_attn.qkv_proj.weight", {(nh + 2 * nkv) * d, h}, 1.0 / std::sqrt(double(h)));
  } else {
    w.normal(p + "self_attn.q_proj.weight", {nh * d, h}, 1.0 / std::sqrt(double(h)));
    w.normal(p + "self_attn.k_proj.weight", {nkv * d, h}, 1.0 / std::sqrt(double(h)));
    w.normal(p + "self_attn.v_proj.weight", {nkv * d, h}, 1.0 / std::sqrt(double(h)));
  }
  if (s.qkv_bias) {
    w.normal(p + "self_attn.q_proj.bias", {nh * d}, 0.1);
    w.normal(p + "self_attn.k_proj.bias", {nkv * d}, 0.1);
    w.normal(p + "self_attn.v_proj.bias", {nkv * d}, 0.1);
  }
  w.normal(p + "self_attn.o_proj.weight", {h, nh * d},
           1.0 / std::sqrt(double(nh * d * s.o.num_layers)));
  if (s.o_bias) w.normal(p + "self_attn.o_proj.bias", {h}, 0.1);
  if (s.arch.config.qk_norm) {
    w.around_one(p + "self_attn.q_norm.weight", {d}, 0.1);
    w.around_one(p + "self_attn.k_norm.weight", {d}, 0.1);
  }
}

// A sparse layer: the router with logits of spread ~1, so tokens spread over the experts; the
// experts as the dense MLP's matrices, in the checkpoints' per-expert names; a shared expert
// behind its gate.
void write_experts(weight_writer& w, const demo_shape& s, const std::string& p) {
  const int64_t h = s.o.hidden_size, mi = s.moe_inter, si = s.shared_inter;
  const int32_t layers = s.o.num_layers;
  const bool mx = s.mixtral();
  const std::string m = p + (mx ? "block_sparse_moe." : "mlp.");
  w.normal(m + "gate.weight", {s.o.num_experts, h}, 1.0 / std::sqrt(double(h)));
  for (int32_t j = 0; j < s.o.num_experts; ++j) {
    const std::string e = m + "experts." + std::to_string(j) + ".";
    w.normal(e + (mx ? "w1.weight" : "gate_proj.weight"), {mi, h}, 1.0 / std::sqrt(double(h)));
    w.normal(e + (mx ? "w3.weight" : "up_proj.weight"), {mi, h}, 1.0 / std::sqrt(double(h)));
    w.normal(e + (mx ? "w2.weight" : "down_proj.weight"), {h, mi},
             1.0 / std::sqrt(double(mi * layers)));
  }
  if (!s.shared_expert()) return;
  w.normal(m + "shared_expert_gate.weight", {1, h}, 1.0 / std::sqrt(double(h)));
  w.normal(m + "shared_expert.gate_proj.weight", {si, h}, 1.0 / std::sqrt(double(h)));
  w.normal(m + "shared_expert.up_proj.weight", {si, h}, 1.0 / std::sqrt(double(h)));
  w.normal(m + "shared_expert.down_proj.weight", {h, si}, 1.0 / std::sqrt(double(si * layers)));
}

// A dense layer's MLP: gate and up (fused: gate rows, then up rows), down.
void write_mlp(weight_writer& w, const demo_shape& s, const std::string& p) {
  const int64_t h = s.o.hidden_size, inter = s.o.intermediate_size;
  if (s.arch.config.fused_projections) {
    w.normal(p + "mlp.gate_up_proj.weight", {2 * inter, h}, 1.0 / std::sqrt(double(h)));
  } else {
    w.normal(p + "mlp.gate_proj.weight", {inter, h}, 1.0 / std::sqrt(double(h)));
    w.normal(p + "mlp.up_proj.weight", {inter, h}, 1.0 / std::sqrt(double(h)));
  }
  w.normal(p + "mlp.down_proj.weight", {h, inter}, 1.0 / std::sqrt(double(inter * s.o.num_layers)));
}

// model.safetensors: every tensor drawn from one generator in a fixed order.
result<void> write_weights(const std::string& dir, const demo_shape& s) {
  const demo_options& o = s.o;
  const int64_t h = o.hidden_size;
  weight_writer w(o.seed, o.weight_dtype);
  // Embedding rows and the LM head with std 2/sqrt(h): logits of a unit-RMS state spread by ~2.
  const double emb_std = 2.0 / std::sqrt(double(h));
  w.normal("model.embed_tokens.weight", {s.vocab, h}, emb_std);
  for (int32_t l = 0; l < o.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w.around_one(p + "input_layernorm.weight", {h}, 0.1);
    write_attention(w, s, p);
    w.around_one(p + "post_attention_layernorm.weight", {h}, 0.1);
    if (s.sparse_layer(l))
      write_experts(w, s, p);
    else
      write_mlp(w, s, p);
  }
  w.around_one("model.norm.weight", {h}, 0.1);
  if (!o.tie_embeddings) w.normal("lm_head.weight", {s.vocab, h}, emb_std);
  return write_safetensors((fs::path(dir) / "model.safetensors").string(), w.tensors());
}

// config.json's expert fields, in the layout's names.
std::string experts_json(const demo_shape& s) {
  const demo_options& o = s.o;
  std::string c;
  if (s.mixtral())
    c += "  \"num_local_experts\": " + std::to_string(o.num_experts) +
         ",\n  \"num_experts_per_tok\": " + std::to_string(o.num_experts_per_tok) + ",\n";
  if (s.shared_expert())
    c += "  \"shared_expert_intermediate_size\": " + std::to_string(s.shared_inter) + ",\n";
  if (s.arch.config.experts.layout == expert_layout::qwen)
    c += "  \"num_experts\": " + std::to_string(o.num_experts) +
         ",\n  \"num_experts_per_tok\": " + std::to_string(o.num_experts_per_tok) +
         ",\n  \"moe_intermediate_size\": " + std::to_string(s.moe_inter) +
         ",\n  \"norm_topk_prob\": " + (o.norm_topk_prob ? "true" : "false") +
         ",\n  \"decoder_sparse_step\": " + std::to_string(o.decoder_sparse_step) +
         ",\n  \"mlp_only_layers\": [],\n";
  return c;
}

// config.json's rope_scaling (null without one).
std::string rope_scaling_json(const demo_shape& s) {
  const demo_options& o = s.o;
  if (o.rope_type == "llama3")
    return "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": " +
           fmt_float(o.rope_factor) +
           ", \"low_freq_factor\": " + fmt_float(o.rope_low_freq_factor) +
           ", \"high_freq_factor\": " + fmt_float(o.rope_high_freq_factor) +
           ", \"original_max_position_embeddings\": " +
           std::to_string(o.rope_original_max_position_embeddings) + "},\n";
  if (o.rope_type == "linear")
    return "  \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": " +
           fmt_float(o.rope_factor) + "},\n";
  if (o.rope_type == "yarn")
    return "  \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": " + fmt_float(o.rope_factor) +
           ", \"original_max_position_embeddings\": " +
           std::to_string(o.rope_original_max_position_embeddings) + "},\n";
  if (o.rope_type == "longrope") {
    // Deterministic factors per rotated pair; original_max_position_embeddings is written at the
    // top level, as Phi-3.5's config has it.
    const int32_t rotated = o.partial_rotary_factor != 1.0f
                                ? int32_t(float(s.head_dim) * o.partial_rotary_factor)
                                : s.head_dim;
    std::string sf, lf;
    for (int32_t i = 0; i < rotated / 2; ++i) {
      sf += std::string(i ? ", " : "") + fmt_float(1.0f + float(i) / 8.0f);
      lf += std::string(i ? ", " : "") + fmt_float(2.0f + float(i));
    }
    return "  \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [" + sf +
           "], \"long_factor\": [" + lf + "]},\n";
  }
  return "  \"rope_scaling\": null,\n";
}

// config.json's sliding-window fields, as the architecture's rule reads them.
std::string sliding_window_json(const demo_shape& s) {
  const demo_options& o = s.o;
  const std::string window = std::to_string(o.sliding_window);
  switch (s.arch.config.sliding_window) {
    case sliding_window_rule::every_layer:
      return "  \"sliding_window\": " + (o.sliding_window > 0 ? window : std::string("null")) +
             ",\n";
    case sliding_window_rule::opted_in_every_layer:
      return o.sliding_window > 0 ? "  \"sliding_window\": " + window + ",\n" : "";
    case sliding_window_rule::opted_in_upper_layers:
    case sliding_window_rule::opted_in_even_lower_layers:
      return o.sliding_window > 0
                 ? "  \"sliding_window\": " + window +
                       ",\n  \"max_window_layers\": " + std::to_string(o.max_window_layers) + ",\n"
                 : "";
    case sliding_window_rule::none:
    case sliding_window_rule::caps_context:
      break;
  }
  return {};
}

// use_sliding_window, where the architecture reads it (true with a window, except where the
// window would cap the context).
std::string use_sliding_window_json(const demo_shape& s) {
  const sliding_window_rule rule = s.arch.config.sliding_window;
  if (rule == sliding_window_rule::none || rule == sliding_window_rule::every_layer) return {};
  const bool use = s.o.sliding_window > 0 && rule != sliding_window_rule::caps_context;
  return std::string("  \"use_sliding_window\": ") + (use ? "true" : "false") + ",\n";
}

// config.json: the sizes, then the architecture's fields.
std::string config_json(const demo_shape& s) {
  const demo_options& o = s.o;
  const architecture& a = s.arch;
  std::string c = "{\n";
  c += "  \"architectures\": [\"" + std::string(a.hf_name) + "\"],\n";
  c += "  \"model_type\": \"" + std::string(a.name) + "\",\n";
  c += "  \"hidden_size\": " + std::to_string(o.hidden_size) + ",\n";
  c += "  \"intermediate_size\": " + std::to_string(o.intermediate_size) + ",\n";
  c += "  \"num_hidden_layers\": " + std::to_string(o.num_layers) + ",\n";
  c += "  \"num_attention_heads\": " + std::to_string(o.num_heads) + ",\n";
  c += "  \"num_key_value_heads\": " + std::to_string(o.num_kv_heads) + ",\n";
  if (o.head_dim > 0 || a.config.head_dim > 0)  // given, or else the config's default would differ
    c += "  \"head_dim\": " + std::to_string(s.head_dim) + ",\n";
  c += experts_json(s);
  c += "  \"hidden_act\": \"silu\",\n";
  c += "  \"vocab_size\": " + std::to_string(s.vocab) + ",\n";
  c += "  \"max_position_embeddings\": " + std::to_string(o.max_position_embeddings) + ",\n";
  c += "  \"rms_norm_eps\": " + fmt_float(o.rms_norm_eps) + ",\n";
  c += "  \"rope_theta\": " + fmt_float(o.rope_theta) + ",\n";
  c += rope_scaling_json(s);
  if (o.partial_rotary_factor != 1.0f)
    c += "  \"partial_rotary_factor\": " + fmt_float(o.partial_rotary_factor) + ",\n";
  if (a.demo.attention_bias)
    c += std::string("  \"attention_bias\": ") + (s.qkv_bias ? "true" : "false") + ",\n";
  if (a.demo.mlp_bias) c += "  \"mlp_bias\": false,\n";
  if (a.config.no_rope_layers) {  // RoPE on every layer but each 4th (no_rope_layer_interval 4)
    c += "  \"no_rope_layers\": [";
    for (int32_t l = 0; l < o.num_layers; ++l)
      c += std::string(l ? ", " : "") + ((l + 1) % 4 != 0 ? "1" : "0");
    c += "],\n";
  }
  c += sliding_window_json(s);
  if (a.demo.original_max_position_embeddings)
    c += "  \"original_max_position_embeddings\": " +
         std::to_string(o.rope_type == "longrope" ? o.rope_original_max_position_embeddings
                                                  : o.max_position_embeddings) +
         ",\n";
  c += use_sliding_window_json(s);
  c += std::string("  \"tie_word_embeddings\": ") + (o.tie_embeddings ? "true" : "false") + ",\n";
  c += "  \"bos_token_id\": " + std::to_string(s.bos) + ",\n";
  c += "  \"eos_token_id\": " + std::to_string(s.eos) + ",\n";
  if (a.demo.pad_token_id) c += "  \"pad_token_id\": " + std::to_string(s.eos) + ",\n";
  c += "  \"torch_dtype\": \"" + torch_dtype_name(o.weight_dtype) + "\"\n}\n";
  return c;
}

// The tokenizer files there are in `tok_dir`, copied writable.
result<void> copy_tokenizer(const std::string& tok_dir, const std::string& dir) {
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "vocab.json", "merges.txt"}) {
    const fs::path src = fs::path(tok_dir) / name;
    if (!fs::exists(src, ec)) continue;
    fs::copy_file(src, fs::path(dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return make_error("io", "cannot copy " + src.string() + ": " + ec.message());
    // Sources may be read-only (shared test data); the copy must stay rewritable.
    fs::permissions(fs::path(dir) / name, fs::perms::owner_read | fs::perms::owner_write,
                    fs::perm_options::add, ec);
  }
  return {};
}

}  // namespace

result<std::string> find_default_tokenizer() {
  const std::string rel = "../shared/testdata/tokenizers/gpt2";
  std::vector<std::string> candidates = {rel};
#ifdef COSERVE_SOURCE_DIR
  candidates.push_back(std::string(COSERVE_SOURCE_DIR) + "/" + rel);
#endif
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::exists(fs::path(c) / "tokenizer.json", ec)) return c;
  }
  return make_error("not_found",
                    "default tokenizer not found (looked for " + rel +
                        " from the working directory and the source tree); pass --tokenizer PATH");
}

result<void> make_demo_model(const std::string& dir, const demo_options& o) {
  const architecture* arch = find_architecture_by_model_type(o.architecture);
  if (!arch)
    return make_error("invalid_argument", "unsupported architecture '" + o.architecture + "' (" +
                                              model_type_list() + ")");
  demo_shape s{o, *arch};
  if (auto r = check_options(s); !r) return r;
  auto tok_dir = choose_tokenizer(s);
  if (!tok_dir) return tok_dir.err();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error("io", "cannot create " + dir + ": " + ec.message());
  if (auto r = write_weights(dir, s); !r) return r;
  if (auto r = write_text(fs::path(dir) / "config.json", config_json(s)); !r) return r;
  const std::string g =
      "{\n  \"bos_token_id\": " + std::to_string(s.bos) +
      ",\n  \"eos_token_id\": " + std::to_string(s.eos) +
      ",\n  \"do_sample\": true,\n  \"temperature\": 0.8,\n  \"top_p\": 0.95\n}\n";
  if (auto r = write_text(fs::path(dir) / "generation_config.json", g); !r) return r;
  if (o.copy_tokenizer) return copy_tokenizer(*tok_dir, dir);
  return {};
}

}  // namespace coserve
