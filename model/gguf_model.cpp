// A GGUF file as a model: the config from its metadata by the architecture's gguf_rules, the
// weights as views of its tensors, the generation defaults, summary and chat template. Over 500
// lines: the metadata's reading and the tensors' mapping are one mapping of llama.cpp's names to
// the model's, one step per part, sharing its error helpers.
#include "model/gguf_model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>

#include "model/architectures.hpp"
#include "model/text/json/value.hpp"

namespace coserve {
namespace {

error gerr(const gguf_file& f, const std::string& what) {
  return make_error("invalid_model", f.path() + ": " + what);
}
error gunsupported(const gguf_file& f, const std::string& what) {
  return make_error("unsupported", f.path() + ": " + what);
}

// An int metadata value that must fit int32 and be positive (when required).
result<int32_t> get_i32(const gguf_file& f, const std::string& key,
                        std::optional<int32_t> fallback) {
  auto v = f.get_int(key);
  if (!v) return v.err();
  if (!*v) {
    if (fallback) return *fallback;
    if (const gguf_value* raw = f.find(key); raw && raw->kind == gguf_kind::array)
      return gunsupported(
          f, "metadata " + key + " is a per-layer array (one value for all layers is read)");
    return gerr(f, "metadata " + key + " is missing");
  }
  if (**v <= 0 || **v > (int64_t{1} << 30))
    return gerr(f, "metadata " + key + " = " + std::to_string(**v) + " is out of range");
  return int32_t(**v);
}

// One read of a GGUF file's metadata into a config: the file, the architecture's rules (a llama
// file with experts switches to Mixtral's), the metadata key prefix and the config being filled.
struct gguf_config_reader {
  const gguf_file& f;
  const architecture* arch;
  std::string a;  // "{general.architecture}."
  model_config& c;
};

// Each step below reads a part of the metadata into the config.

// embedding_length, block_count and head_count: required.
result<void> read_gguf_sizes(gguf_config_reader& r) {
  auto hidden = get_i32(r.f, r.a + "embedding_length", std::nullopt);
  auto layers = get_i32(r.f, r.a + "block_count", std::nullopt);
  auto heads = get_i32(r.f, r.a + "attention.head_count", std::nullopt);
  for (auto* v : {&hidden, &layers, &heads})
    if (!*v) return v->err();
  r.c.hidden_size = *hidden;
  r.c.num_hidden_layers = *layers;
  r.c.num_attention_heads = *heads;
  return {};
}

// Mixture of experts: files of architectures whose rules require experts (qwen2moe, qwen3moe),
// and those whose experts make another architecture (llama with expert_count: Mixtral). Experts of
// expert_feed_forward_length (required ones) or feed_forward_length (Mixtral); a layer with
// ffn_gate_inp.weight is sparse, one without it dense. The top-k weights are renormalized as
// llama.cpp does (gguf_rules::norm_topk_prob); a shared expert is
// expert_shared_feed_forward_length wide (feed_forward_length without it, as in llama.cpp).
result<void> read_gguf_experts(gguf_config_reader& r) {
  const gguf_file& f = r.f;
  const std::string& a = r.a;
  model_config& c = r.c;
  const bool own_moe = r.arch->gguf.experts;
  auto experts = f.get_int(a + "expert_count");
  if (!experts) return experts.err();
  if (own_moe || (*experts && **experts > 0)) {
    auto n = get_i32(f, a + "expert_count", std::nullopt);
    auto used = get_i32(f, a + "expert_used_count", std::nullopt);
    for (auto* v : {&n, &used})
      if (!*v) return v->err();
    if (*used > *n) return gerr(f, a + "expert_used_count exceeds " + a + "expert_count");
    if (!own_moe) {
      const architecture* moe = find_architecture_by_model_type(r.arch->gguf.with_experts);
      if (!moe)
        return gunsupported(f, "experts (" + a + "expert_count) in a " +
                                   std::string(r.arch->gguf.name) + " file are not supported");
      r.arch = moe;
      c.architecture = std::string(moe->hf_name);
      c.model_type = std::string(moe->name);
    }
    c.num_experts = *n;
    c.num_experts_per_tok = *used;
    c.norm_topk_prob = r.arch->gguf.norm_topk_prob;
    c.moe_layers.assign(size_t(c.num_hidden_layers), 0);
    for (int32_t l = 0; l < c.num_hidden_layers; ++l)
      c.moe_layers[size_t(l)] =
          f.tensor("blk." + std::to_string(l) + ".ffn_gate_inp.weight") != nullptr;
  }
  if (own_moe) {
    auto mi = get_i32(f, a + "expert_feed_forward_length", std::nullopt);
    if (!mi) return mi.err();
    c.moe_intermediate_size = *mi;
  }
  // Files of only sparse layers need no dense width: the experts' stands in.
  auto inter = get_i32(f, a + "feed_forward_length",
                       own_moe ? std::optional(c.moe_intermediate_size) : std::nullopt);
  if (!inter) return inter.err();
  c.intermediate_size = *inter;
  const expert_rules& x = r.arch->config.experts;
  if (x.shared_expert_intermediate_size > 0) {
    auto si = get_i32(f, a + "expert_shared_feed_forward_length", c.intermediate_size);
    if (!si) return si.err();
    c.shared_expert_intermediate_size = *si;
  }
  if (x.layout == expert_layout::mixtral) c.moe_intermediate_size = c.intermediate_size;
  return {};
}

// Key/value heads, the head size, the rotated dimensions and the context length.
result<void> read_gguf_heads(gguf_config_reader& r) {
  const gguf_file& f = r.f;
  const std::string& a = r.a;
  model_config& c = r.c;
  auto kv = get_i32(f, a + "attention.head_count_kv", c.num_attention_heads);
  if (!kv) return kv.err();
  c.num_key_value_heads = *kv;
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return gerr(f,
                a + "attention.head_count must be a multiple of " + a + "attention.head_count_kv");
  if (c.hidden_size % c.num_attention_heads != 0 && !f.find(a + "attention.key_length"))
    return gerr(f, a + "embedding_length is not a multiple of " + a + "attention.head_count");
  auto kl =
      get_i32(f, a + "attention.key_length", c.hidden_size / std::max(1, c.num_attention_heads));
  if (!kl) return kl.err();
  c.head_dim = *kl;
  auto vl = get_i32(f, a + "attention.value_length", c.head_dim);
  if (!vl) return vl.err();
  if (*vl != c.head_dim)
    return gunsupported(f, a + "attention.value_length differs from key_length");
  if (c.head_dim % 2 != 0)
    return gerr(f, "head dimension " + std::to_string(c.head_dim) + " must be even for RoPE");
  auto rd = get_i32(f, a + "rope.dimension_count", c.head_dim);
  if (!rd) return rd.err();
  if (*rd != c.head_dim) {
    // Phi-4-mini (partial_rotary_factor): RoPE over the first dimension_count dimensions of each
    // head, halves rotated as in the folder.
    if (!r.arch->config.partial_rotary) {
      std::string names;
      for (const architecture& p : architectures())
        if (p.config.partial_rotary && !p.gguf.name.empty())
          names += (names.empty() ? "" : ", ") + std::string(p.gguf.name);
      return gunsupported(f, a + "rope.dimension_count " + std::to_string(*rd) +
                                 " (partial rotary) is supported for " + names + " only");
    }
    if (*rd <= 0 || *rd > c.head_dim || *rd % 2 != 0)
      return gerr(f, a + "rope.dimension_count " + std::to_string(*rd) +
                         " must be even and at most the head size " + std::to_string(c.head_dim));
    c.rotary_dim = *rd;
  }
  auto ctx = get_i32(f, a + "context_length", 2048);
  if (!ctx) return ctx.err();
  c.max_position_embeddings = *ctx;
  return {};
}

// gguf_rules::window_and_longrope (phi3): the sliding window (0: none), as in the folder's
// config.json, and LongRoPE (Phi-3.5 / Phi-4's 128k variants) as convert_hf_to_gguf.py writes it:
// the factors as rope_factors_long/short.weight, the original context and the attention factor as
// metadata.
result<void> read_gguf_window_and_longrope(gguf_config_reader& r) {
  if (!r.arch->gguf.window_and_longrope) return {};
  const gguf_file& f = r.f;
  const std::string& a = r.a;
  model_config& c = r.c;
  auto window = f.get_int(a + "attention.sliding_window");
  if (!window) return window.err();
  if (*window && **window < 0)
    return gerr(f, "metadata " + a + "attention.sliding_window is negative");
  if (*window && **window > 0 && **window < c.max_position_embeddings)
    c.sliding_window = int32_t(**window);
  const gguf_tensor* lf = f.tensor("rope_factors_long.weight");
  const gguf_tensor* sf = f.tensor("rope_factors_short.weight");
  if (!lf && !sf) return {};
  const int32_t pairs = (c.rotary_dim > 0 ? c.rotary_dim : c.head_dim) / 2;
  for (const gguf_tensor* t : {lf, sf})
    if (!t || t->type != dtype::f32 || t->numel() != pairs)
      return gerr(f,
                  "rope_factors_long.weight and rope_factors_short.weight must both be F32 with " +
                      std::to_string(pairs) + " values");
  auto& rs = c.rope_scaling;
  rs.kind = rope_kind::longrope;
  rs.long_factor.resize(size_t(pairs));
  rs.short_factor.resize(size_t(pairs));
  std::memcpy(rs.long_factor.data(), lf->data, size_t(pairs) * 4);
  std::memcpy(rs.short_factor.data(), sf->data, size_t(pairs) * 4);
  for (const auto* v : {&rs.long_factor, &rs.short_factor})
    for (float x : *v)
      if (!(x > 0) || !std::isfinite(x))
        return gerr(f, "rope_factors_long/short.weight hold a non-positive factor");
  const int32_t ctx = c.max_position_embeddings;
  auto orig = get_i32(f, a + "rope.scaling.original_context_length", ctx);
  if (!orig) return orig.err();
  if (*orig <= 0) return gerr(f, a + "rope.scaling.original_context_length must be positive");
  rs.original_max_position_embeddings = *orig;
  rs.factor = float(ctx) / float(*orig);
  auto attn = f.get_float(a + "rope.scaling.attn_factor");
  if (!attn) return attn.err();
  rs.attention_factor =
      *attn && **attn > 0 ? float(**attn)
      : rs.factor <= 1.0f
          ? 1.0f
          : float(std::sqrt(1.0 + std::log(double(rs.factor)) / std::log(double(*orig))));
  return {};
}

// The norm epsilon, RoPE's base and scaling (linear, yarn), Llama 3's rope_freqs.weight.
result<void> read_gguf_rope(gguf_config_reader& r) {
  const gguf_file& f = r.f;
  const std::string& a = r.a;
  model_config& c = r.c;
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
      // As convert_hf_to_gguf.py writes it from Hugging Face's rope_scaling: factor and the
      // original context; the attention factor is then 0.1 ln(factor) + 1, as transformers and
      // llama.cpp use.
      auto orig = get_i32(f, a + "rope.scaling.original_context_length", c.max_position_embeddings);
      if (!orig) return orig.err();
      if (*orig <= 0) return gerr(f, a + "rope.scaling.original_context_length must be positive");
      c.rope_scaling.kind = rope_kind::yarn;
      c.rope_scaling.factor = float(fac);
      c.rope_scaling.original_max_position_embeddings = *orig;
      c.rope_scaling.attention_factor = fac <= 1.0 ? 1.0f : float(0.1 * std::log(fac) + 1.0);
    } else if (fac != 1.0) {
      return gunsupported(
          f, a + "rope.scaling.type '" + **scaling +
                 "' is not supported (none, linear, yarn, or Llama 3's rope_freqs.weight)");
    }
  }
  if (const gguf_tensor* rf = f.tensor("rope_freqs.weight")) {
    if (rf->type != dtype::f32 || rf->numel() != c.head_dim / 2)
      return gerr(
          f, "rope_freqs.weight must be F32 with " + std::to_string(c.head_dim / 2) + " values");
    c.rope_freq_factors.resize(size_t(c.head_dim / 2));
    std::memcpy(c.rope_freq_factors.data(), rf->data, c.rope_freq_factors.size() * 4);
    for (float x : c.rope_freq_factors)
      if (!(x > 0) || !std::isfinite(x))
        return gerr(f, "rope_freqs.weight holds a non-positive factor");
  }
  return {};
}

// The vocabulary from token_embd.weight, tied embeddings and biases from the tensors present.
result<void> read_gguf_tensor_facts(gguf_config_reader& r) {
  const gguf_file& f = r.f;
  model_config& c = r.c;
  const gguf_tensor* embd = f.tensor("token_embd.weight");
  if (!embd) return gerr(f, "tensor token_embd.weight is missing");
  if (embd->dims.size() != 2 || embd->dims[0] != c.hidden_size)
    return gerr(f,
                "tensor token_embd.weight is not [" + std::to_string(c.hidden_size) + ", vocab]");
  auto vocab = get_i32(f, r.a + "vocab_size", int32_t(embd->dims[1]));
  if (!vocab) return vocab.err();
  c.vocab_size = *vocab;
  c.tie_word_embeddings = f.tensor("output.weight") == nullptr;
  if (c.qkv_bias && !f.tensor("blk.0.attn_q.bias")) c.qkv_bias = false;
  if (!c.qkv_bias && f.tensor("blk.0.attn_q.bias")) c.qkv_bias = true;
  c.o_bias = f.tensor("blk.0.attn_output.bias") != nullptr;
  if (f.tensor("blk.0.ffn_up.bias"))
    return gunsupported(f, "MLP biases (blk.N.ffn_up.bias) are not supported");
  c.torch_dtype = embd->type == dtype::f32   ? dtype::f32
                  : embd->type == dtype::f16 ? dtype::f16
                                             : dtype::bf16;
  return {};
}

// bos, and eos / eot / eom as end-of-sequence ids, each once.
result<void> read_gguf_token_ids(gguf_config_reader& r) {
  const gguf_file& f = r.f;
  model_config& c = r.c;
  auto bos = f.get_int("tokenizer.ggml.bos_token_id");
  if (!bos) return bos.err();
  if (*bos && **bos >= 0 && **bos < c.vocab_size) c.bos_token_id = int32_t(**bos);
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    auto e = f.get_int(key);
    if (!e) return e.err();
    if (*e && **e >= 0 && **e < c.vocab_size &&
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), int32_t(**e)) ==
            c.eos_token_ids.end())
      c.eos_token_ids.push_back(int32_t(**e));
  }
  return {};
}

}  // namespace

result<model_config> gguf_model_config(const gguf_file& f) {
  auto arch_v = f.get_string("general.architecture");
  if (!arch_v) return arch_v.err();
  if (!*arch_v) return gerr(f, "metadata general.architecture is missing");
  const std::string name = **arch_v;
  const architecture* arch = find_gguf_architecture(name);
  if (!arch)
    return gunsupported(f, "general.architecture '" + name +
                               "' is not supported (supported: " + gguf_architecture_list() + ")");
  model_config c;
  c.architecture = std::string(arch->hf_name);
  c.model_type = std::string(arch->name);
  c.rope_interleaved = arch->gguf.rope_interleaved;
  c.qkv_bias = arch->config.bias != attention_bias_rule::attention_bias;
  c.qk_norm = arch->config.qk_norm;
  c.fused_projections = arch->config.fused_projections;  // attn_qkv, ffn_up holding gate then up
  gguf_config_reader reader{f, arch, name + ".", c};
  // In this order: a later step reads what an earlier one set (the layer count, the head size,
  // the context length, the vocabulary size).
  for (auto* step :
       {read_gguf_sizes, read_gguf_experts, read_gguf_heads, read_gguf_window_and_longrope,
        read_gguf_rope, read_gguf_tensor_facts, read_gguf_token_ids})
    if (auto r = step(reader); !r) return r.err();
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

namespace {

// The file's tensors as weight views, checked against the shapes the config gives; counts the
// tensors and bytes mapped for the progress callback.
class gguf_weight_mapper {
 public:
  gguf_weight_mapper(const gguf_file& f, const load_progress& progress)
      : f_(f), progress_(progress), total_(f.tensors().size()) {}

  // A matrix of [rows, cols] (GGUF dims [cols, rows]), or a vector of cols when rows is 0.
  result<const gguf_tensor*> get(const std::string& name, int64_t rows, int64_t cols) {
    const gguf_tensor* t = f_.tensor(name);
    if (!t) return gerr(f_, "tensor " + name + " is missing");
    const bool vec = rows == 0;
    const bool ok = vec ? (t->dims.size() == 1 && t->dims[0] == cols)
                        : (t->dims.size() == 2 && t->dims[0] == cols && t->dims[1] == rows);
    if (!ok)
      return gerr(f_, "tensor " + name + " has dims [" + dims_of(*t) + "], expected [" +
                          std::to_string(cols) + (vec ? "" : ", " + std::to_string(rows)) + "]");
    tick(*t);
    return t;
  }

  result<void> map(const std::string& name, int64_t rows, int64_t cols, weight_ref& out) {
    auto t = get(name, rows, cols);
    if (!t) return t.err();
    out.type = (*t)->type;
    out.data = (*t)->data;
    out.rows = rows;
    out.cols = cols;
    return {};
  }

  // A [n, rows, cols] stack of matrices (GGUF dims [cols, rows, n]) as one [n rows, cols] matrix.
  result<void> map3(const std::string& name, int64_t n, int64_t rows, int64_t cols,
                    weight_ref& out) {
    const gguf_tensor* t = f_.tensor(name);
    if (!t) return gerr(f_, "tensor " + name + " is missing");
    if (t->dims.size() != 3 || t->dims[0] != cols || t->dims[1] != rows || t->dims[2] != n)
      return gerr(f_, "tensor " + name + " has dims [" + dims_of(*t) + "], expected [" +
                          std::to_string(cols) + ", " + std::to_string(rows) + ", " +
                          std::to_string(n) + "]");
    tick(*t);
    out.type = t->type;
    out.data = t->data;
    out.rows = n * rows;
    out.cols = cols;
    return {};
  }

  // A vector of n values appended to `out` as f32.
  result<void> append(const std::string& name, int64_t n, std::vector<float>& out) {
    auto t = get(name, 0, n);
    if (!t) return t.err();
    const size_t old = out.size();
    out.resize(old + size_t(n));
    convert_to_f32((*t)->type, (*t)->data, out.data() + old, size_t(n));
    return {};
  }

 private:
  static std::string dims_of(const gguf_tensor& t) {
    std::string dims;
    for (int64_t x : t.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(x);
    return dims;
  }
  void tick(const gguf_tensor& t) {
    ++done_;
    bytes_ += t.nbytes;
    if (progress_) progress_(done_, total_, bytes_);
  }

  const gguf_file& f_;
  const load_progress& progress_;
  size_t total_, done_ = 0, bytes_ = 0;
};

// The first error of `steps`, or none.
result<void> first_error(std::initializer_list<result<void>> steps) {
  for (const result<void>& r : steps)
    if (!r) return r.err();
  return {};
}

// Phi-3's fused layer: attn_qkv holding q, k and v rows, ffn_up holding gate then up rows.
result<void> map_fused_layer(gguf_weight_mapper& m, const model_config& c, const std::string& p,
                             layer_weights& L) {
  const int64_t h = c.hidden_size, d = c.head_dim, nh = c.num_attention_heads,
                nkv = c.num_key_value_heads, inter = c.intermediate_size;
  weight_ref qkv, gate_up;
  if (auto r = first_error({m.append(p + "attn_norm.weight", h, L.input_norm),
                            m.map(p + "attn_qkv.weight", (nh + 2 * nkv) * d, h, qkv),
                            m.map(p + "attn_output.weight", h, nh * d, L.o),
                            m.append(p + "ffn_norm.weight", h, L.post_norm),
                            m.map(p + "ffn_up.weight", 2 * inter, h, gate_up),
                            m.map(p + "ffn_down.weight", h, inter, L.down)});
      !r)
    return r;
  split_fused(c, qkv, gate_up, L);
  return {};
}

// A sparse layer's router and experts. ffn_gate_exps / ffn_up_exps [hidden, I, experts] and
// ffn_down_exps [I, hidden, experts]: expert j's matrix is rows [j I, (j + 1) I) of the
// [experts I, cols] view. qwen2moe's shared expert beside them, ffn_gate_inp_shexp [hidden].
result<void> map_experts(gguf_weight_mapper& m, const model_config& c, const std::string& p,
                         layer_weights& L) {
  const int64_t h = c.hidden_size, ne = c.num_experts, mi = c.moe_intermediate_size;
  weight_ref gate, up, down;
  if (auto r = first_error({m.map(p + "ffn_gate_inp.weight", ne, h, L.router),
                            m.map3(p + "ffn_gate_exps.weight", ne, mi, h, gate),
                            m.map3(p + "ffn_up_exps.weight", ne, mi, h, up),
                            m.map3(p + "ffn_down_exps.weight", ne, h, mi, down)});
      !r)
    return r;
  L.experts.resize(size_t(ne));
  for (int64_t j = 0; j < ne; ++j) {
    L.experts[size_t(j)].gate = weight_rows(gate, j * mi, mi);
    L.experts[size_t(j)].up = weight_rows(up, j * mi, mi);
    L.experts[size_t(j)].down = weight_rows(down, j * h, h);
  }
  if (c.shared_expert_intermediate_size <= 0) return {};
  const int64_t si = c.shared_expert_intermediate_size;
  auto g = m.get(p + "ffn_gate_inp_shexp.weight", 0, h);
  if (!g) return g.err();
  L.shared_gate = {(*g)->type, (*g)->data, 1, h};
  return first_error({m.map(p + "ffn_gate_shexp.weight", si, h, L.shared.gate),
                      m.map(p + "ffn_up_shexp.weight", si, h, L.shared.up),
                      m.map(p + "ffn_down_shexp.weight", h, si, L.shared.down)});
}

// A layer of separate q/k/v projections: attention, the MLP or the experts, biases and q/k norms.
result<void> map_layer(gguf_weight_mapper& m, const model_config& c, int32_t i, layer_weights& L) {
  const std::string p = "blk." + std::to_string(i) + ".";
  const int64_t h = c.hidden_size, d = c.head_dim, nh = c.num_attention_heads,
                nkv = c.num_key_value_heads, inter = c.intermediate_size;
  if (auto r = first_error({m.append(p + "attn_norm.weight", h, L.input_norm),
                            m.map(p + "attn_q.weight", nh * d, h, L.q),
                            m.map(p + "attn_k.weight", nkv * d, h, L.k),
                            m.map(p + "attn_v.weight", nkv * d, h, L.v),
                            m.map(p + "attn_output.weight", h, nh * d, L.o),
                            m.append(p + "ffn_norm.weight", h, L.post_norm)});
      !r)
    return r;
  if (c.moe_layer(i)) {
    if (auto r = map_experts(m, c, p, L); !r) return r;
  } else if (auto r = first_error({m.map(p + "ffn_gate.weight", inter, h, L.gate),
                                   m.map(p + "ffn_up.weight", inter, h, L.up),
                                   m.map(p + "ffn_down.weight", h, inter, L.down)});
             !r) {
    return r;
  }
  if (c.qkv_bias)
    if (auto r = first_error({m.append(p + "attn_q.bias", nh * d, L.qkv_bias),
                              m.append(p + "attn_k.bias", nkv * d, L.qkv_bias),
                              m.append(p + "attn_v.bias", nkv * d, L.qkv_bias)});
        !r)
      return r;
  if (c.o_bias)
    if (auto r = m.append(p + "attn_output.bias", h, L.o_bias); !r) return r;
  if (c.qk_norm)
    return first_error({m.append(p + "attn_q_norm.weight", d, L.q_norm),
                        m.append(p + "attn_k_norm.weight", d, L.k_norm)});
  return {};
}

}  // namespace

result<model_weights> load_gguf_weights(std::shared_ptr<const gguf_file> file,
                                        const load_progress& progress) {
  const gguf_file& f = *file;
  auto cfg = gguf_model_config(f);
  if (!cfg) return cfg.err();
  model_weights w;
  w.config = *cfg;
  w.gguf = file;
  const model_config& c = w.config;
  const int64_t h = c.hidden_size, vocab = c.vocab_size;
  gguf_weight_mapper m(f, progress);
  if (auto r = m.map("token_embd.weight", vocab, h, w.embed); !r) return r.err();
  w.layers.resize(size_t(c.num_hidden_layers));
  for (int32_t i = 0; i < c.num_hidden_layers; ++i) {
    layer_weights& L = w.layers[size_t(i)];
    auto r = c.fused_projections ? map_fused_layer(m, c, "blk." + std::to_string(i) + ".", L)
                                 : map_layer(m, c, i, L);
    if (!r) return r.err();
  }
  if (auto r = m.append("output_norm.weight", h, w.final_norm); !r) return r.err();
  if (!c.tie_word_embeddings) {
    if (auto r = m.map("output.weight", vocab, h, w.lm_head); !r) return r.err();
  } else {
    w.lm_head = w.embed;
  }
  return w;
}

std::string gguf_summary(const gguf_file& f) {
  std::map<std::string, int> types;
  for (const gguf_tensor& t : f.tensors()) ++types[std::string(dtype_name(t.type))];
  std::string s = "GGUF v" + std::to_string(f.version());
  if (const gguf_value* a = f.find("general.architecture"); a && a->kind == gguf_kind::string)
    s += ", " + std::string(a->str);
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
