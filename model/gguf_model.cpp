#include "model/gguf_model.hpp"

#include "model/json/value.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>

namespace coserve {
namespace {

error gerr(const gguf_file& f, const std::string& what) { return make_error("invalid_model", f.path() + ": " + what); }
error gunsupported(const gguf_file& f, const std::string& what) {
  return make_error("unsupported", f.path() + ": " + what);
}

// An int metadata value that must fit int32 and be positive (when required).
result<int32_t> get_i32(const gguf_file& f, const std::string& key, std::optional<int32_t> fallback) {
  auto v = f.get_int(key);
  if (!v) return v.err();
  if (!*v) {
    if (fallback) return *fallback;
    if (const gguf_value* raw = f.find(key); raw && raw->kind == gguf_kind::array)
      return gunsupported(f, "metadata " + key + " is a per-layer array (one value for all layers is read)");
    return gerr(f, "metadata " + key + " is missing");
  }
  if (**v <= 0 || **v > (int64_t{1} << 30)) return gerr(f, "metadata " + key + " = " + std::to_string(**v) + " is out of range");
  return int32_t(**v);
}

std::string json_escape(std::string_view s) {
  std::string out = "\"";
  json::append_escaped(out, s);
  out += '"';
  return out;
}

// ggml token types.
constexpr int64_t k_tok_normal = 1, k_tok_unknown = 2, k_tok_control = 3, k_tok_user = 4;

// Hugging Face pre-tokenizers for the names llama.cpp's converter writes to tokenizer.ggml.pre.
struct bpe_pre {
  const char* names[6];
  const char* pre_tokenizer;  // tokenizer.json "pre_tokenizer"
  const char* normalizer;     // tokenizer.json "normalizer" ("null" for none)
  bool ignore_merges;
};

constexpr const char* k_byte_level_regex =
    R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";
// Digits(individual_digits) as a split of every \p{N} character, then GPT-2's byte-level regex.
constexpr const char* k_digits_byte_level =
    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\p{N}"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]})";
constexpr const char* k_llama3_split =
    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]})";
constexpr const char* k_qwen2_split =
    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]})";

const bpe_pre k_bpe_pres[] = {
    {{"gpt-2", "phi-2", nullptr}, k_byte_level_regex, "null", false},
    {{"starcoder", "refact", nullptr}, k_digits_byte_level, "null", false},
    {{"mpt", "gpt-neox", "olmo", nullptr}, k_byte_level_regex, R"({"type":"NFC"})", false},
    {{"llama-bpe", "llama3", "llama-v3", "falcon3", nullptr}, k_llama3_split, "null", true},
    {{"qwen2", "deepseek-r1-qwen", nullptr}, k_qwen2_split, R"({"type":"NFC"})", false},
};

std::string supported_pres() {
  std::string s;
  for (const auto& p : k_bpe_pres)
    for (const char* const* n = p.names; *n; ++n) s += (s.empty() ? "" : ", ") + std::string(*n);
  return s;
}

// Merges from SentencePiece scores, as transformers' SentencePieceExtractor derives them: every
// split of every piece into two pieces of the vocabulary (ordered by the ids of the halves), all
// of them ordered by the merged piece's score, highest first (stable).
std::vector<std::pair<std::string_view, std::string_view>> merges_from_scores(
    const std::vector<std::string_view>& tokens, const std::vector<double>& scores) {
  std::unordered_map<std::string_view, int32_t> id;
  id.reserve(tokens.size() * 2);
  for (size_t i = 0; i < tokens.size(); ++i) id.emplace(tokens[i], int32_t(i));
  struct merge {
    std::string_view l, r;
    double score;
    int32_t il, ir;
  };
  std::vector<merge> all;
  std::vector<merge> local;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string_view p = tokens[i];
    local.clear();
    for (size_t cut = 1; cut < p.size(); ++cut) {
      if ((static_cast<unsigned char>(p[cut]) & 0xC0) == 0x80) continue;  // inside a UTF-8 sequence
      auto l = id.find(p.substr(0, cut)), r = id.find(p.substr(cut));
      if (l != id.end() && r != id.end()) local.push_back({l->first, r->first, scores[i], l->second, r->second});
    }
    std::sort(local.begin(), local.end(), [](const merge& a, const merge& b) {
      return a.il != b.il ? a.il < b.il : a.ir < b.ir;
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const merge& a, const merge& b) { return a.score > b.score; });
  std::vector<std::pair<std::string_view, std::string_view>> out;
  out.reserve(all.size());
  for (const merge& m : all) out.emplace_back(m.l, m.r);
  return out;
}

}  // namespace

result<model_config> gguf_model_config(const gguf_file& f) {
  auto arch_v = f.get_string("general.architecture");
  if (!arch_v) return arch_v.err();
  if (!*arch_v) return gerr(f, "metadata general.architecture is missing");
  const std::string arch = **arch_v;
  model_config c;
  if (arch == "llama" || arch == "mistral") {
    c.architecture = arch == "llama" ? "LlamaForCausalLM" : "MistralForCausalLM";
    c.model_type = arch;
    c.rope_interleaved = true;
  } else if (arch == "qwen2") {
    c.architecture = "Qwen2ForCausalLM";
    c.model_type = "qwen2";
    c.qkv_bias = true;
  } else if (arch == "qwen3") {
    c.architecture = "Qwen3ForCausalLM";
    c.model_type = "qwen3";
    c.qk_norm = true;
  } else {
    return gunsupported(f, "general.architecture '" + arch + "' is not supported (supported: llama, mistral, qwen2, qwen3)");
  }
  const std::string a = arch + ".";
  auto hidden = get_i32(f, a + "embedding_length", std::nullopt);
  auto inter = get_i32(f, a + "feed_forward_length", std::nullopt);
  auto layers = get_i32(f, a + "block_count", std::nullopt);
  auto heads = get_i32(f, a + "attention.head_count", std::nullopt);
  for (auto* r : {&hidden, &inter, &layers, &heads})
    if (!*r) return r->err();
  c.hidden_size = *hidden;
  c.intermediate_size = *inter;
  c.num_hidden_layers = *layers;
  c.num_attention_heads = *heads;
  auto kv = get_i32(f, a + "attention.head_count_kv", c.num_attention_heads);
  if (!kv) return kv.err();
  c.num_key_value_heads = *kv;
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return gerr(f, a + "attention.head_count must be a multiple of " + a + "attention.head_count_kv");
  if (c.hidden_size % c.num_attention_heads != 0 && !f.find(a + "attention.key_length"))
    return gerr(f, a + "embedding_length is not a multiple of " + a + "attention.head_count");
  auto kl = get_i32(f, a + "attention.key_length", c.hidden_size / std::max(1, c.num_attention_heads));
  if (!kl) return kl.err();
  c.head_dim = *kl;
  auto vl = get_i32(f, a + "attention.value_length", c.head_dim);
  if (!vl) return vl.err();
  if (*vl != c.head_dim) return gunsupported(f, a + "attention.value_length differs from key_length");
  if (c.head_dim % 2 != 0) return gerr(f, "head dimension " + std::to_string(c.head_dim) + " must be even for RoPE");
  auto rd = get_i32(f, a + "rope.dimension_count", c.head_dim);
  if (!rd) return rd.err();
  if (*rd != c.head_dim)
    return gunsupported(f, a + "rope.dimension_count " + std::to_string(*rd) + " (partial rotary) is not supported");
  auto ctx = get_i32(f, a + "context_length", 2048);
  if (!ctx) return ctx.err();
  c.max_position_embeddings = *ctx;
  auto eps = f.get_float(a + "attention.layer_norm_rms_epsilon");
  if (!eps) return eps.err();
  if (!*eps) return gerr(f, "metadata " + a + "attention.layer_norm_rms_epsilon is missing");
  c.rms_norm_eps = float(**eps);
  auto base = f.get_float(a + "rope.freq_base");
  if (!base) return base.err();
  c.rope_theta = *base ? float(**base) : 10000.0f;
  if (!(c.rope_theta > 0)) return gerr(f, a + "rope.freq_base must be positive");
  auto scaling = f.get_string(a + "rope.scaling.type");
  if (!scaling) return scaling.err();
  if (*scaling && **scaling != "none") {
    auto factor = f.get_float(a + "rope.scaling.factor");
    if (!factor) return factor.err();
    const double fac = *factor ? **factor : 1.0;
    if (**scaling == "linear" && fac > 0.0) {
      c.rope_scaling.kind = rope_kind::linear;
      c.rope_scaling.factor = float(fac);
    } else if (**scaling == "yarn" && fac > 0.0) {
      // As convert_hf_to_gguf.py writes it from Hugging Face's rope_scaling: factor and the original
      // context; the attention factor is then 0.1 ln(factor) + 1, as transformers and llama.cpp use.
      auto orig = get_i32(f, a + "rope.scaling.original_context_length", c.max_position_embeddings);
      if (!orig) return orig.err();
      if (*orig <= 0) return gerr(f, a + "rope.scaling.original_context_length must be positive");
      c.rope_scaling.kind = rope_kind::yarn;
      c.rope_scaling.factor = float(fac);
      c.rope_scaling.original_max_position_embeddings = *orig;
      c.rope_scaling.attention_factor = fac <= 1.0 ? 1.0f : float(0.1 * std::log(fac) + 1.0);
    } else if (fac != 1.0) {
      return gunsupported(f, a + "rope.scaling.type '" + **scaling +
                                 "' is not supported (none, linear, yarn, or Llama 3's rope_freqs.weight)");
    }
  }
  if (const gguf_tensor* rf = f.tensor("rope_freqs.weight")) {
    if (rf->type != dtype::f32 || rf->numel() != c.head_dim / 2)
      return gerr(f, "rope_freqs.weight must be F32 with " + std::to_string(c.head_dim / 2) + " values");
    c.rope_freq_factors.resize(size_t(c.head_dim / 2));
    std::memcpy(c.rope_freq_factors.data(), rf->data, c.rope_freq_factors.size() * 4);
    for (float x : c.rope_freq_factors)
      if (!(x > 0) || !std::isfinite(x)) return gerr(f, "rope_freqs.weight holds a non-positive factor");
  }

  const gguf_tensor* embd = f.tensor("token_embd.weight");
  if (!embd) return gerr(f, "tensor token_embd.weight is missing");
  if (embd->dims.size() != 2 || embd->dims[0] != c.hidden_size)
    return gerr(f, "tensor token_embd.weight is not [" + std::to_string(c.hidden_size) + ", vocab]");
  auto vocab = get_i32(f, a + "vocab_size", int32_t(embd->dims[1]));
  if (!vocab) return vocab.err();
  c.vocab_size = *vocab;
  c.tie_word_embeddings = f.tensor("output.weight") == nullptr;
  if (c.qkv_bias && !f.tensor("blk.0.attn_q.bias")) c.qkv_bias = false;
  if (!c.qkv_bias && f.tensor("blk.0.attn_q.bias")) c.qkv_bias = true;
  c.o_bias = f.tensor("blk.0.attn_output.bias") != nullptr;
  if (f.tensor("blk.0.ffn_up.bias")) return gunsupported(f, "MLP biases (blk.N.ffn_up.bias) are not supported");

  auto bos = f.get_int("tokenizer.ggml.bos_token_id");
  if (!bos) return bos.err();
  if (*bos && **bos >= 0 && **bos < c.vocab_size) c.bos_token_id = int32_t(**bos);
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    auto e = f.get_int(key);
    if (!e) return e.err();
    if (*e && **e >= 0 && **e < c.vocab_size &&
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), int32_t(**e)) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(int32_t(**e));
  }
  c.torch_dtype = embd->type == dtype::f32 ? dtype::f32 : embd->type == dtype::f16 ? dtype::f16 : dtype::bf16;
  return c;
}

result<generation_config> gguf_generation_config(const gguf_file& f) {
  auto c = gguf_model_config(f);
  if (!c) return c.err();
  generation_config g;
  g.eos_token_ids = c->eos_token_ids;
  g.bos_token_id = c->bos_token_id;
  return g;
}

result<model_weights> load_gguf_weights(std::shared_ptr<const gguf_file> file, const load_progress& progress) {
  const gguf_file& f = *file;
  auto cfg = gguf_model_config(f);
  if (!cfg) return cfg.err();
  model_weights w;
  w.config = *cfg;
  w.gguf = file;
  const model_config& c = w.config;
  const int64_t h = c.hidden_size, d = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t inter = c.intermediate_size, vocab = c.vocab_size;
  const size_t total = f.tensors().size();
  size_t done = 0, bytes = 0;
  auto tick = [&](const gguf_tensor& t) {
    ++done;
    bytes += t.nbytes;
    if (progress) progress(done, total, bytes);
  };
  auto get = [&](const std::string& name, int64_t rows, int64_t cols) -> result<const gguf_tensor*> {
    const gguf_tensor* t = f.tensor(name);
    if (!t) return gerr(f, "tensor " + name + " is missing");
    const bool vec = rows == 0;
    const bool ok = vec ? (t->dims.size() == 1 && t->dims[0] == cols)
                        : (t->dims.size() == 2 && t->dims[0] == cols && t->dims[1] == rows);
    if (!ok) {
      std::string dims;
      for (int64_t x : t->dims) dims += (dims.empty() ? "" : ", ") + std::to_string(x);
      return gerr(f, "tensor " + name + " has dims [" + dims + "], expected [" + std::to_string(cols) +
                         (vec ? "" : ", " + std::to_string(rows)) + "]");
    }
    tick(*t);
    return t;
  };
  auto map = [&](const std::string& name, int64_t rows, int64_t cols, weight_ref& out) -> result<void> {
    auto t = get(name, rows, cols);
    if (!t) return t.err();
    out.type = (*t)->type;
    out.data = (*t)->data;
    out.rows = rows;
    out.cols = cols;
    return {};
  };
  auto append = [&](const std::string& name, int64_t n, std::vector<float>& out) -> result<void> {
    auto t = get(name, 0, n);
    if (!t) return t.err();
    const size_t old = out.size();
    out.resize(old + size_t(n));
    convert_to_f32((*t)->type, (*t)->data, out.data() + old, size_t(n));
    return {};
  };

  if (auto r = map("token_embd.weight", vocab, h, w.embed); !r) return r.err();
  w.layers.resize(size_t(c.num_hidden_layers));
  for (int32_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    layer_weights& L = w.layers[size_t(i)];
    for (auto r : {append(p + "attn_norm.weight", h, L.input_norm), map(p + "attn_q.weight", nh * d, h, L.q),
                   map(p + "attn_k.weight", nkv * d, h, L.k), map(p + "attn_v.weight", nkv * d, h, L.v),
                   map(p + "attn_output.weight", h, nh * d, L.o), append(p + "ffn_norm.weight", h, L.post_norm),
                   map(p + "ffn_gate.weight", inter, h, L.gate), map(p + "ffn_up.weight", inter, h, L.up),
                   map(p + "ffn_down.weight", h, inter, L.down)})
      if (!r) return r.err();
    if (c.qkv_bias)
      for (auto r : {append(p + "attn_q.bias", nh * d, L.qkv_bias), append(p + "attn_k.bias", nkv * d, L.qkv_bias),
                     append(p + "attn_v.bias", nkv * d, L.qkv_bias)})
        if (!r) return r.err();
    if (c.o_bias)
      if (auto r = append(p + "attn_output.bias", h, L.o_bias); !r) return r.err();
    if (c.qk_norm)
      for (auto r : {append(p + "attn_q_norm.weight", d, L.q_norm), append(p + "attn_k_norm.weight", d, L.k_norm)})
        if (!r) return r.err();
  }
  if (auto r = append("output_norm.weight", h, w.final_norm); !r) return r.err();
  if (!c.tie_word_embeddings) {
    if (auto r = map("output.weight", vocab, h, w.lm_head); !r) return r.err();
  } else {
    w.lm_head = w.embed;
  }
  return w;
}

result<gguf_tokenizer_documents> gguf_tokenizer_json(const gguf_file& f) {
  auto model_v = f.get_string("tokenizer.ggml.model");
  if (!model_v) return model_v.err();
  if (!*model_v) return gerr(f, "metadata tokenizer.ggml.model is missing (the file has no tokenizer)");
  const std::string model = **model_v;
  if (model != "gpt2" && model != "llama")
    return gunsupported(f, "tokenizer.ggml.model '" + model + "' is not supported (supported: gpt2, llama)");
  const gguf_value* tokens_v = f.find("tokenizer.ggml.tokens");
  if (!tokens_v || tokens_v->kind != gguf_kind::array || tokens_v->elem != gguf_kind::string)
    return gerr(f, "metadata tokenizer.ggml.tokens must be an array of strings");
  const std::vector<std::string_view>& tokens = tokens_v->strings;
  if (tokens.empty() || tokens.size() > (size_t(1) << 24)) return gerr(f, "tokenizer.ggml.tokens is empty or too large");
  std::vector<int64_t> types(tokens.size(), k_tok_normal);
  if (const gguf_value* tt = f.find("tokenizer.ggml.token_type")) {
    if (tt->kind != gguf_kind::array || tt->ints.size() != tokens.size())
      return gerr(f, "metadata tokenizer.ggml.token_type must be an integer array as long as tokenizer.ggml.tokens");
    types = tt->ints;
  }
  auto token_id = [&](const char* key) -> result<std::optional<int32_t>> {
    auto v = f.get_int(key);
    if (!v) return v.err();
    if (!*v || **v < 0) return std::optional<int32_t>{};
    if (**v >= int64_t(tokens.size())) return gerr(f, std::string("metadata ") + key + " is not a token id");
    return std::optional<int32_t>(int32_t(**v));
  };
  auto bos = token_id("tokenizer.ggml.bos_token_id");
  auto eos = token_id("tokenizer.ggml.eos_token_id");
  auto unk = token_id("tokenizer.ggml.unknown_token_id");
  for (auto* r : {&bos, &eos, &unk})
    if (!*r) return r->err();
  const bool spm = model == "llama";
  auto add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  auto add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
  auto add_space = f.get_bool("tokenizer.ggml.add_space_prefix");
  for (auto* r : {&add_bos, &add_eos, &add_space})
    if (!*r) return r->err();
  const bool want_bos = add_bos->value_or(spm) && *bos;
  const bool want_eos = add_eos->value_or(false) && *eos;

  std::string j;
  j.reserve(tokens.size() * 24);
  // GGUF has no per-token strip attributes; llama.cpp sets them by model name, as here: Phi-3's
  // special tokens and </s> swallow the whitespace after them (as its tokenizer.json says).
  auto name_v = f.get_string("general.name");
  if (!name_v) return name_v.err();
  std::string name = name_v->value_or("");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  const bool phi3 = name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;
  j += "{\"version\":\"1.0\",\"added_tokens\":[";
  bool first = true;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t t = types[i];
    if (t != k_tok_control && t != k_tok_user && t != k_tok_unknown) continue;
    bool rstrip = false;
    if (phi3) {
      rstrip = t == k_tok_control || tokens[i] == "</s>";
      if (tokens[i] == "<unk>" || tokens[i] == "<s>" || tokens[i] == "<|endoftext|>") rstrip = false;
    }
    if (!first) j += ',';
    first = false;
    j += "{\"id\":" + std::to_string(i) + ",\"content\":" + json_escape(tokens[i]) +
         ",\"single_word\":false,\"lstrip\":false,\"rstrip\":" + (rstrip ? "true" : "false") +
         ",\"normalized\":false,\"special\":" + (t == k_tok_user ? "false" : "true") + "}";
  }
  j += "],";
  std::string post = "null";
  if (want_bos || want_eos) {
    post = "{\"type\":\"TemplateProcessing\",\"single\":[";
    std::string specials;
    if (want_bos) {
      post += "{\"SpecialToken\":{\"id\":" + json_escape(tokens[size_t(**bos)]) + ",\"type_id\":0}},";
      specials += json_escape(tokens[size_t(**bos)]) + ":{\"id\":" + json_escape(tokens[size_t(**bos)]) +
                  ",\"ids\":[" + std::to_string(**bos) + "],\"tokens\":[" + json_escape(tokens[size_t(**bos)]) + "]}";
    }
    post += "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}";
    if (want_eos) {
      post += ",{\"SpecialToken\":{\"id\":" + json_escape(tokens[size_t(**eos)]) + ",\"type_id\":0}}";
      if (!specials.empty()) specials += ',';
      specials += json_escape(tokens[size_t(**eos)]) + ":{\"id\":" + json_escape(tokens[size_t(**eos)]) +
                  ",\"ids\":[" + std::to_string(**eos) + "],\"tokens\":[" + json_escape(tokens[size_t(**eos)]) + "]}";
    }
    post += "],\"special_tokens\":{" + specials + "}}";
  }

  std::vector<std::pair<std::string_view, std::string_view>> merges;
  bool ignore_merges = false;
  if (spm) {
    const gguf_value* sc = f.find("tokenizer.ggml.scores");
    if (!sc || sc->kind != gguf_kind::array || sc->floats.size() != tokens.size())
      return gerr(f, "metadata tokenizer.ggml.scores must be a float array as long as tokenizer.ggml.tokens");
    merges = merges_from_scores(tokens, sc->floats);
    const bool prefix = add_space->value_or(true);
    j += std::string("\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[") +
         (prefix ? "{\"type\":\"Prepend\",\"prepend\":\"\u2581\"}," : "") +
         "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\u2581\"}]},"
         "\"pre_tokenizer\":null,\"post_processor\":" + post + ","
         "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\u2581\"},"
         "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}" +
         (prefix ? ",{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}" : "") + "]},";
  } else {
    auto pre_v = f.get_string("tokenizer.ggml.pre");
    if (!pre_v) return pre_v.err();
    const std::string pre = pre_v->value_or("default");
    const bpe_pre* chosen = nullptr;
    for (const auto& p : k_bpe_pres)
      for (const char* const* n = p.names; *n; ++n)
        if (pre == *n) chosen = &p;
    if (!chosen)
      return gunsupported(f, "tokenizer.ggml.pre '" + pre + "' is not supported (supported: " + supported_pres() + ")");
    ignore_merges = chosen->ignore_merges;
    const gguf_value* mv = f.find("tokenizer.ggml.merges");
    if (!mv || mv->kind != gguf_kind::array || mv->elem != gguf_kind::string)
      return gerr(f, "metadata tokenizer.ggml.merges must be an array of strings");
    merges.reserve(mv->strings.size());
    for (std::string_view m : mv->strings) {
      const size_t sp = m.find(' ', 1);
      if (sp == std::string_view::npos) return gerr(f, "tokenizer.ggml.merges entry without a space: " + std::string(m));
      merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
    j += std::string("\"normalizer\":") + chosen->normalizer + ",\"pre_tokenizer\":" + chosen->pre_tokenizer +
         ",\"post_processor\":" + post +
         ",\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},";
  }
  j += "\"model\":{\"type\":\"BPE\",\"dropout\":null,";
  if (spm && *unk) j += "\"unk_token\":" + json_escape(tokens[size_t(**unk)]) + ",";
  j += std::string("\"fuse_unk\":") + (spm ? "true" : "false") + ",\"byte_fallback\":" + (spm ? "true" : "false") +
       ",\"ignore_merges\":" + (ignore_merges ? "true" : "false") + ",\"vocab\":{";
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) j += ',';
    j += json_escape(tokens[i]) + ":" + std::to_string(i);
  }
  j += "},\"merges\":[";
  for (size_t i = 0; i < merges.size(); ++i) {
    if (i) j += ',';
    j += "[" + json_escape(merges[i].first) + "," + json_escape(merges[i].second) + "]";
  }
  j += "]}}";

  std::string cfg = "{";
  if (*bos) cfg += "\"bos_token\":" + json_escape(tokens[size_t(**bos)]);
  if (*eos) cfg += std::string(*bos ? "," : "") + "\"eos_token\":" + json_escape(tokens[size_t(**eos)]);
  cfg += "}";
  return gguf_tokenizer_documents{std::move(j), std::move(cfg)};
}

result<tokenizer> load_gguf_tokenizer(const gguf_file& f) {
  auto docs = gguf_tokenizer_json(f);
  if (!docs) return docs.err();
  auto t = tokenizer::from_json(docs->tokenizer_json, docs->tokenizer_config_json);
  if (!t) return make_error(t.err().code, f.path() + ": tokenizer.ggml.*: " + t.err().message);
  return t;
}

std::string gguf_summary(const gguf_file& f) {
  std::map<std::string, int> types;
  for (const gguf_tensor& t : f.tensors()) ++types[std::string(dtype_name(t.type))];
  std::string s = "GGUF v" + std::to_string(f.version());
  if (const gguf_value* a = f.find("general.architecture"); a && a->kind == gguf_kind::string) s += ", " + std::string(a->str);
  s += ", " + std::to_string(f.tensors().size()) + " tensors (";
  bool first = true;
  for (const auto& [name, n] : types) {
    s += (first ? "" : ", ") + name + " " + std::to_string(n);
    first = false;
  }
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f MiB", double(f.file_size()) / (1 << 20));
  return s + "), " + mib;
}

result<std::string> gguf_chat_template(const gguf_file& f) {
  auto t = f.get_string("tokenizer.chat_template");
  if (!t) return t.err();
  if (!*t) return make_error("not_found", f.path() + " has no tokenizer.chat_template");
  return std::move(**t);
}

}  // namespace coserve
