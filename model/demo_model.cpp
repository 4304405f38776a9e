#include "model/demo_model.hpp"

#include <simdjson.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

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
  const std::string arch = o.architecture;
  if (arch != "llama" && arch != "mistral" && arch != "qwen2" && arch != "qwen3" &&
      arch != "phi3" && arch != "smollm3" && arch != "mixtral" && arch != "qwen2_moe" &&
      arch != "qwen3_moe")
    return make_error("invalid_argument",
                      "unsupported architecture '" + arch +
                          "' (llama, mistral, qwen2, qwen3, phi3, smollm3, mixtral, qwen2_moe, "
                          "qwen3_moe)");
  const bool moe = arch == "mixtral" || arch == "qwen2_moe" || arch == "qwen3_moe";
  const int32_t shared_inter = o.shared_expert_intermediate_size > 0
                                   ? o.shared_expert_intermediate_size
                                   : o.intermediate_size;
  const bool qk_norm = arch == "qwen3" || arch == "qwen3_moe";
  const int32_t moe_inter = arch == "mixtral" || o.moe_intermediate_size <= 0
                                ? o.intermediate_size
                                : o.moe_intermediate_size;
  if (moe && (o.num_experts <= 0 || o.num_experts_per_tok <= 0 ||
              o.num_experts_per_tok > o.num_experts || o.decoder_sparse_step <= 0))
    return make_error("invalid_argument",
                      "num_experts and decoder_sparse_step must be positive and "
                      "num_experts_per_tok in [1, num_experts]");
  if (arch == "phi3" && o.qkv_bias)
    return make_error("invalid_argument", "phi3 has no attention biases");
  if (o.hidden_size <= 0 || o.intermediate_size <= 0 || o.num_layers <= 0 || o.num_heads <= 0 ||
      o.num_kv_heads <= 0 || o.num_heads % o.num_kv_heads != 0)
    return make_error("invalid_argument",
                      "sizes must be positive and num_heads a multiple of num_kv_heads");
  const int32_t head_dim = o.head_dim > 0 ? o.head_dim : o.hidden_size / o.num_heads;
  if (o.head_dim <= 0 && o.hidden_size % o.num_heads != 0)
    return make_error("invalid_argument",
                      "hidden_size must be a multiple of num_heads (or give head_dim)");
  if (head_dim % 2 != 0) return make_error("invalid_argument", "head_dim must be even");

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
  const int32_t vocab = o.vocab_size > 0 ? o.vocab_size : tok.vocab_size;
  if (vocab <= 0)
    return make_error("invalid_argument", "vocab_size is required without a tokenizer");
  int32_t eos = tok.eos >= 0 && tok.eos < vocab ? tok.eos : vocab - 1;
  int32_t bos = tok.bos >= 0 && tok.bos < vocab ? tok.bos : eos;

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error("io", "cannot create " + dir + ": " + ec.message());

  const bool qkv_bias = o.qkv_bias || arch == "qwen2" || arch == "qwen2_moe";
  const int64_t h = o.hidden_size, inter = o.intermediate_size, d = head_dim;
  const int64_t nh = o.num_heads, nkv = o.num_kv_heads;
  weight_writer w(o.seed, o.weight_dtype);
  // Embedding rows and the LM head with std 2/sqrt(h): logits of a unit-RMS state spread by ~2.
  const double emb_std = 2.0 / std::sqrt(double(h));
  w.normal("model.embed_tokens.weight", {vocab, h}, emb_std);
  for (int32_t l = 0; l < o.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w.around_one(p + "input_layernorm.weight", {h}, 0.1);
    if (arch == "phi3") {  // q, k and v rows in one tensor
      w.normal(p + "self_attn.qkv_proj.weight", {(nh + 2 * nkv) * d, h},
               1.0 / std::sqrt(double(h)));
    } else {
      w.normal(p + "self_attn.q_proj.weight", {nh * d, h}, 1.0 / std::sqrt(double(h)));
      w.normal(p + "self_attn.k_proj.weight", {nkv * d, h}, 1.0 / std::sqrt(double(h)));
      w.normal(p + "self_attn.v_proj.weight", {nkv * d, h}, 1.0 / std::sqrt(double(h)));
    }
    if (qkv_bias) {
      w.normal(p + "self_attn.q_proj.bias", {nh * d}, 0.1);
      w.normal(p + "self_attn.k_proj.bias", {nkv * d}, 0.1);
      w.normal(p + "self_attn.v_proj.bias", {nkv * d}, 0.1);
    }
    w.normal(p + "self_attn.o_proj.weight", {h, nh * d},
             1.0 / std::sqrt(double(nh * d * o.num_layers)));
    if (qkv_bias && arch != "qwen2" && arch != "qwen2_moe")
      w.normal(p + "self_attn.o_proj.bias", {h}, 0.1);  // attention_bias
    if (qk_norm) {
      w.around_one(p + "self_attn.q_norm.weight", {d}, 0.1);
      w.around_one(p + "self_attn.k_norm.weight", {d}, 0.1);
    }
    w.around_one(p + "post_attention_layernorm.weight", {h}, 0.1);
    if (moe && (arch == "mixtral" || (l + 1) % o.decoder_sparse_step == 0)) {
      // The router with logits of spread ~1, so tokens spread over the experts; the experts as
      // the dense MLP's matrices, in the checkpoints' per-expert names.
      const bool mx = arch == "mixtral";
      const std::string m = p + (mx ? "block_sparse_moe." : "mlp.");
      w.normal(m + "gate.weight", {o.num_experts, h}, 1.0 / std::sqrt(double(h)));
      for (int32_t j = 0; j < o.num_experts; ++j) {
        const std::string e = m + "experts." + std::to_string(j) + ".";
        w.normal(e + (mx ? "w1.weight" : "gate_proj.weight"), {moe_inter, h},
                 1.0 / std::sqrt(double(h)));
        w.normal(e + (mx ? "w3.weight" : "up_proj.weight"), {moe_inter, h},
                 1.0 / std::sqrt(double(h)));
        w.normal(e + (mx ? "w2.weight" : "down_proj.weight"), {h, moe_inter},
                 1.0 / std::sqrt(double(int64_t(moe_inter) * o.num_layers)));
      }
      if (arch == "qwen2_moe") {
        w.normal(m + "shared_expert_gate.weight", {1, h}, 1.0 / std::sqrt(double(h)));
        w.normal(m + "shared_expert.gate_proj.weight", {shared_inter, h},
                 1.0 / std::sqrt(double(h)));
        w.normal(m + "shared_expert.up_proj.weight", {shared_inter, h}, 1.0 / std::sqrt(double(h)));
        w.normal(m + "shared_expert.down_proj.weight", {h, shared_inter},
                 1.0 / std::sqrt(double(int64_t(shared_inter) * o.num_layers)));
      }
      continue;
    }
    if (arch == "phi3") {  // gate rows, then up rows
      w.normal(p + "mlp.gate_up_proj.weight", {2 * inter, h}, 1.0 / std::sqrt(double(h)));
    } else {
      w.normal(p + "mlp.gate_proj.weight", {inter, h}, 1.0 / std::sqrt(double(h)));
      w.normal(p + "mlp.up_proj.weight", {inter, h}, 1.0 / std::sqrt(double(h)));
    }
    w.normal(p + "mlp.down_proj.weight", {h, inter}, 1.0 / std::sqrt(double(inter * o.num_layers)));
  }
  w.around_one("model.norm.weight", {h}, 0.1);
  if (!o.tie_embeddings) w.normal("lm_head.weight", {vocab, h}, emb_std);
  if (auto r = write_safetensors((fs::path(dir) / "model.safetensors").string(), w.tensors()); !r)
    return r;

  const char* arch_name = arch == "llama"       ? "LlamaForCausalLM"
                          : arch == "mistral"   ? "MistralForCausalLM"
                          : arch == "qwen2"     ? "Qwen2ForCausalLM"
                          : arch == "qwen3"     ? "Qwen3ForCausalLM"
                          : arch == "phi3"      ? "Phi3ForCausalLM"
                          : arch == "mixtral"   ? "MixtralForCausalLM"
                          : arch == "qwen3_moe" ? "Qwen3MoeForCausalLM"
                          : arch == "qwen2_moe" ? "Qwen2MoeForCausalLM"
                                                : "SmolLM3ForCausalLM";
  std::string c = "{\n";
  c += "  \"architectures\": [\"" + std::string(arch_name) + "\"],\n";
  c += "  \"model_type\": \"" + arch + "\",\n";
  c += "  \"hidden_size\": " + std::to_string(h) + ",\n";
  c += "  \"intermediate_size\": " + std::to_string(inter) + ",\n";
  c += "  \"num_hidden_layers\": " + std::to_string(o.num_layers) + ",\n";
  c += "  \"num_attention_heads\": " + std::to_string(nh) + ",\n";
  c += "  \"num_key_value_heads\": " + std::to_string(nkv) + ",\n";
  if (o.head_dim > 0 || arch == "qwen3") c += "  \"head_dim\": " + std::to_string(head_dim) + ",\n";
  if (arch == "mixtral")
    c += "  \"num_local_experts\": " + std::to_string(o.num_experts) +
         ",\n  \"num_experts_per_tok\": " + std::to_string(o.num_experts_per_tok) + ",\n";
  if (arch == "qwen2_moe")
    c += "  \"shared_expert_intermediate_size\": " + std::to_string(shared_inter) + ",\n";
  if (arch == "qwen3_moe" || arch == "qwen2_moe")
    c += "  \"num_experts\": " + std::to_string(o.num_experts) +
         ",\n  \"num_experts_per_tok\": " + std::to_string(o.num_experts_per_tok) +
         ",\n  \"moe_intermediate_size\": " + std::to_string(moe_inter) +
         ",\n  \"norm_topk_prob\": " + (o.norm_topk_prob ? "true" : "false") +
         ",\n  \"decoder_sparse_step\": " + std::to_string(o.decoder_sparse_step) +
         ",\n  \"mlp_only_layers\": [],\n";
  c += "  \"hidden_act\": \"silu\",\n";
  c += "  \"vocab_size\": " + std::to_string(vocab) + ",\n";
  c += "  \"max_position_embeddings\": " + std::to_string(o.max_position_embeddings) + ",\n";
  c += "  \"rms_norm_eps\": " + fmt_float(o.rms_norm_eps) + ",\n";
  c += "  \"rope_theta\": " + fmt_float(o.rope_theta) + ",\n";
  if (o.rope_type == "llama3") {
    c += "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": " + fmt_float(o.rope_factor) +
         ", \"low_freq_factor\": " + fmt_float(o.rope_low_freq_factor) +
         ", \"high_freq_factor\": " + fmt_float(o.rope_high_freq_factor) +
         ", \"original_max_position_embeddings\": " +
         std::to_string(o.rope_original_max_position_embeddings) + "},\n";
  } else if (o.rope_type == "linear") {
    c += "  \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": " + fmt_float(o.rope_factor) +
         "},\n";
  } else if (o.rope_type == "yarn") {
    c += "  \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": " + fmt_float(o.rope_factor) +
         ", \"original_max_position_embeddings\": " +
         std::to_string(o.rope_original_max_position_embeddings) + "},\n";
  } else if (o.rope_type == "longrope") {
    // Deterministic factors per rotated pair; original_max_position_embeddings is written at the
    // top level below, as Phi-3.5's config has it.
    const int32_t rotated = o.partial_rotary_factor != 1.0f
                                ? int32_t(float(head_dim) * o.partial_rotary_factor)
                                : head_dim;
    std::string sf, lf;
    for (int32_t i = 0; i < rotated / 2; ++i) {
      sf += std::string(i ? ", " : "") + fmt_float(1.0f + float(i) / 8.0f);
      lf += std::string(i ? ", " : "") + fmt_float(2.0f + float(i));
    }
    c += "  \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [" + sf +
         "], \"long_factor\": [" + lf + "]},\n";
  } else {
    c += "  \"rope_scaling\": null,\n";
  }
  if (o.partial_rotary_factor != 1.0f)
    c += "  \"partial_rotary_factor\": " + fmt_float(o.partial_rotary_factor) + ",\n";
  if (arch == "llama" || qk_norm || arch == "smollm3")
    c += std::string("  \"attention_bias\": ") + (qkv_bias ? "true" : "false") + ",\n";
  if (arch == "llama" || arch == "smollm3") c += "  \"mlp_bias\": false,\n";
  if (arch ==
      "smollm3") {  // RoPE on every layer but each 4th (SmolLM3Config's no_rope_layer_interval)
    c += "  \"no_rope_layers\": [";
    for (int32_t l = 0; l < o.num_layers; ++l)
      c += std::string(l ? ", " : "") + ((l + 1) % 4 != 0 ? "1" : "0");
    c += "],\n";
  }
  if (arch == "mistral" || arch == "phi3" || arch == "mixtral")
    c += "  \"sliding_window\": " +
         (o.sliding_window > 0 ? std::to_string(o.sliding_window) : std::string("null")) + ",\n";
  if (arch == "qwen3_moe" && o.sliding_window > 0)
    c += "  \"sliding_window\": " + std::to_string(o.sliding_window) + ",\n";
  if ((arch == "qwen2" || arch == "qwen3" || arch == "qwen2_moe") && o.sliding_window > 0)
    c += "  \"sliding_window\": " + std::to_string(o.sliding_window) +
         ",\n  \"max_window_layers\": " + std::to_string(o.max_window_layers) + ",\n";
  if (arch == "phi3")
    c += "  \"original_max_position_embeddings\": " +
         std::to_string(o.rope_type == "longrope" ? o.rope_original_max_position_embeddings
                                                  : o.max_position_embeddings) +
         ",\n";
  if (arch == "qwen2" || qk_norm || arch == "smollm3" || arch == "qwen2_moe")
    c += std::string("  \"use_sliding_window\": ") +
         (o.sliding_window > 0 && arch != "smollm3" ? "true" : "false") + ",\n";
  c += std::string("  \"tie_word_embeddings\": ") + (o.tie_embeddings ? "true" : "false") + ",\n";
  c += "  \"bos_token_id\": " + std::to_string(bos) + ",\n";
  c += "  \"eos_token_id\": " + std::to_string(eos) + ",\n";
  if (arch == "phi3" ||
      arch == "smollm3")  // their configs' defaults (32000, 128004) lie outside small vocabularies
    c += "  \"pad_token_id\": " + std::to_string(eos) + ",\n";
  c += "  \"torch_dtype\": \"" + torch_dtype_name(o.weight_dtype) + "\"\n}\n";
  if (auto r = write_text(fs::path(dir) / "config.json", c); !r) return r;
  std::string g = "{\n  \"bos_token_id\": " + std::to_string(bos) +
                  ",\n  \"eos_token_id\": " + std::to_string(eos) +
                  ",\n  \"do_sample\": true,\n  \"temperature\": 0.8,\n  \"top_p\": 0.95\n}\n";
  if (auto r = write_text(fs::path(dir) / "generation_config.json", g); !r) return r;

  if (o.copy_tokenizer) {
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
  }
  return {};
}

}  // namespace coserve
