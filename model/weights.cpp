#include "model/weights.hpp"

#include <cstring>

#include "model/fp8.hpp"
#include "model/gguf_model.hpp"
#include "model/quant.hpp"
#include "model/safetensors.hpp"

namespace coserve {
namespace {

class loader {
 public:
  loader(const safetensors_set& set, size_t total, const load_progress& progress, model_weights& w)
      : set_(set), total_(total), progress_(progress), w_(w) {
    // A base model's checkpoint (saved from LlamaModel, Qwen3Model, ...: sentence-transformers
    // folders, Qwen3-Embedding) names its tensors without the "model." of the causal LM's.
    base_model_ = set.find("model.embed_tokens.weight") == nullptr &&
                  set.find("embed_tokens.weight") != nullptr;
  }

  bool base_model() const noexcept { return base_model_; }
  // The checkpoint's name of the causal LM's tensor `name`.
  std::string resolve(const std::string& name) const {
    return base_model_ && name.rfind("model.", 0) == 0 ? name.substr(6) : name;
  }

  // Tensor `name` (checked against `shape`) as a view into the mapped file. An fp8 matrix with one
  // scale per tensor or row stays a view of its codes when `keep_fp8` (row_scale beside it, in
  // w.owned); otherwise it is dequantized to bf16 with its scale (model/fp8.hpp), held in w.owned.
  result<void> map(const std::string& name, const std::vector<int64_t>& shape, weight_ref& out,
                   bool keep_fp8 = false) {
    auto t = set_.get(resolve(name), shape);
    if (!t) return t.err();
    const tensor_view& v = **t;
    out.type = v.type;
    out.data = v.data;
    out.rows = shape[0];
    out.cols = shape.size() > 1 ? shape[1] : 1;
    if (dtype_is_fp8(v.type)) {
      const tensor_view* scale = find_fp8_scale(set_, name);
      if (scale == nullptr)
        return make_error("invalid_model", v.file + ": fp8 tensor '" + name + "' has no '" + name +
                                               "_scale' or '" + name + "_scale_inv' beside it");
      const quantization_config& q = w_.config.quantization;
      auto rs = fp8_row_scales(v, *scale, q.block_rows, q.block_cols);
      if (!rs) return rs.err();
      if (keep_fp8 && !rs->empty()) {
        auto buf = std::make_shared<std::vector<unsigned char>>(rs->size() * sizeof(float));
        std::memcpy(buf->data(), rs->data(), buf->size());
        out.row_scale = reinterpret_cast<const float*>(buf->data());
        w_.owned.push_back(std::move(buf));
        ++w_.fp8_kept;
        w_.fp8_bytes += v.nbytes;
        tick(v.nbytes);
        return {};
      }
      auto bf = dequantize_fp8(v, *scale, q.block_rows, q.block_cols);
      if (!bf) return bf.err();
      auto buf = std::make_shared<std::vector<unsigned char>>(bf->size() * 2);
      std::memcpy(buf->data(), bf->data(), buf->size());
      out.type = dtype::bf16;
      out.data = buf->data();
      w_.owned.push_back(std::move(buf));
      set_.release_pages(v.data, v.nbytes);
      ++w_.fp8_dequantized;
      w_.fp8_bytes += v.nbytes;
    }
    tick(v.nbytes);
    return {};
  }

  // Tensor `name` (checked against `shape`) appended as fp32 to `out`.
  result<void> append(const std::string& name, const std::vector<int64_t>& shape,
                      std::vector<float>& out) {
    auto t = set_.get(resolve(name), shape);
    if (!t) return t.err();
    const tensor_view& v = **t;
    if (dtype_is_fp8(v.type))
      return make_error("invalid_model", v.file + ": '" + name + "' is " +
                                             std::string(dtype_name(v.type)) +
                                             "; norms and biases must be F32, F16 or BF16");
    const size_t old = out.size();
    out.resize(old + size_t(v.numel()));
    convert_to_f32(v.type, v.data, out.data() + old, size_t(v.numel()));
    tick(v.nbytes);
    return {};
  }

 private:
  void tick(size_t bytes) {
    ++done_;
    bytes_ += bytes;
    if (progress_) progress_(done_, total_, bytes_);
  }

  const safetensors_set& set_;
  size_t total_;
  const load_progress& progress_;
  model_weights& w_;
  size_t done_ = 0;
  size_t bytes_ = 0;
  bool base_model_ = false;
};

}  // namespace

size_t model_weights::matrix_bytes(bool experts) const noexcept {
  size_t b = lm_head.bytes();
  for (const auto& L : layers) L.each_matrix([&](const weight_ref& w) { b += w.bytes(); });
  if (!experts)
    for (const auto& L : layers)
      for (const auto& e : L.experts)
        b -= e.gate.bytes() + e.up.bytes() + e.down.bytes();  // the shared one stays
  return b;
}

size_t pack_for_cpu(model_weights& w) {
  size_t bytes = 0;
  auto pack = [&](weight_ref& r) {
    if (r.type != dtype::q4_0 || r.packed || r.rows <= 0) return;
    auto buf = std::make_shared<std::vector<unsigned char>>(pack_q4_0_tiles(r));
    r.packed = buf->data();
    bytes += buf->size();
    w.owned.push_back(std::move(buf));
    if (w.gguf) w.gguf->release_pages(r.data, r.bytes());
  };
  for (auto& L : w.layers) L.each_matrix(pack);
  pack(w.lm_head);
  return bytes;
}

std::string describe_fp8(const model_weights& w) {
  if (w.fp8_kept + w.fp8_dequantized == 0) return {};
  const std::string& m = w.config.quantization.method;
  std::string out = "fp8 checkpoint (" + (m.empty() ? std::string("no quantization_config") : m) +
                    ", " + std::to_string(w.fp8_bytes >> 20) + " MiB of fp8): ";
  if (w.fp8_kept > 0)
    out += std::to_string(w.fp8_kept) + " matrices kept in fp8 with per-row scales";
  if (w.fp8_kept > 0 && w.fp8_dequantized > 0) out += ", ";
  if (w.fp8_dequantized > 0)
    out += std::to_string(w.fp8_dequantized) + " matrices dequantized to bf16 at load";
  if (w.config.quantization.static_activations) out += "; its input_scale tensors are not used";
  return out;
}

weight_ref weight_rows(const weight_ref& w, int64_t first, int64_t n) {
  weight_ref s = w;
  s.data = w.row(first);
  s.rows = n;
  s.packed = nullptr;
  if (s.row_scale != nullptr) s.row_scale += first;
  return s;
}

void split_fused(const model_config& c, const weight_ref& qkv, const weight_ref& gate_up,
                 layer_weights& L) {
  const int64_t d = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads,
                inter = c.intermediate_size;
  L.q = weight_rows(qkv, 0, nh * d);
  L.k = weight_rows(qkv, nh * d, nkv * d);
  L.v = weight_rows(qkv, (nh + nkv) * d, nkv * d);
  L.gate = weight_rows(gate_up, 0, inter);
  L.up = weight_rows(gate_up, inter, inter);
}

std::vector<float> to_f32(const weight_ref& w) {
  std::vector<float> out(size_t(w.rows) * size_t(w.cols));
  if (!out.empty()) convert_to_f32(w.type, w.data, out.data(), out.size());
  if (w.row_scale != nullptr)
    for (int64_t r = 0; r < w.rows; ++r)
      for (int64_t c = 0; c < w.cols; ++c) out[size_t(r * w.cols + c)] *= w.row_scale[r];
  return out;
}

result<model_weights> load_weights(const std::string& dir, const load_progress& progress,
                                   std::string_view hf_overrides) {
  if (is_gguf_file(dir) && hf_overrides.empty()) {
    auto f = gguf_file::open(dir);
    if (!f) return f.err();
    return load_gguf_weights(std::move(*f), progress);
  }
  auto cfg = load_model_config(dir, hf_overrides);
  if (!cfg) return cfg.err();
  auto set = safetensors_set::open_dir(dir);
  if (!set) return set.err();
  model_weights w;
  w.config = *cfg;
  w.files = std::make_shared<const safetensors_set>(std::move(*set));
  const safetensors_set& files = *w.files;
  const model_config& c = w.config;
  const int64_t h = c.hidden_size, d = c.head_dim, nh = c.num_attention_heads,
                nkv = c.num_key_value_heads;
  const int64_t inter = c.intermediate_size, vocab = c.vocab_size;
  // A sequence classifier's checkpoint has its `score` head instead of an LM head.
  const bool score_head = c.classifier() && c.classifier_from_token.empty();
  const bool has_lm_head =  // tied: the embedding is the head, as transformers ties it
      !c.tie_word_embeddings && !score_head;
  const size_t per_layer = (c.fused_projections ? 6 : 9) + (c.qkv_bias ? 3 : 0) +
                           (c.o_bias ? 1 : 0) + (c.qk_norm ? 2 : 0);
  size_t total =
      2 + (has_lm_head ? 1 : 0) + (score_head ? 1 : 0) + per_layer * size_t(c.num_hidden_layers);
  for (int32_t i = 0; i < c.num_hidden_layers; ++i)
    if (c.moe_layer(
            i))  // the router and the experts' for gate/up/down; the shared expert and its gate
      total += 1 + 3 * size_t(c.num_experts) - 3 + (c.shared_expert_intermediate_size > 0 ? 4 : 0);
  loader ld(files, total, progress, w);

  if (auto r = ld.map("model.embed_tokens.weight", {vocab, h}, w.embed); !r) return r.err();
  w.layers.resize(size_t(c.num_hidden_layers));
  for (int32_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    layer_weights& L = w.layers[size_t(i)];
    if (c.fused_projections) {
      // Phi-3: q, k and v are row ranges of qkv_proj; gate and up the two halves of gate_up_proj.
      weight_ref qkv, gate_up;
      for (auto r : {ld.append(p + "input_layernorm.weight", {h}, L.input_norm),
                     ld.map(p + "self_attn.qkv_proj.weight", {(nh + 2 * nkv) * d, h}, qkv, true),
                     ld.map(p + "self_attn.o_proj.weight", {h, nh * d}, L.o, true),
                     ld.append(p + "post_attention_layernorm.weight", {h}, L.post_norm),
                     ld.map(p + "mlp.gate_up_proj.weight", {2 * inter, h}, gate_up, true),
                     ld.map(p + "mlp.down_proj.weight", {h, inter}, L.down, true)})
        if (!r) return r.err();
      split_fused(c, qkv, gate_up, L);
      continue;
    }
    for (auto r : {ld.append(p + "input_layernorm.weight", {h}, L.input_norm),
                   ld.map(p + "self_attn.q_proj.weight", {nh * d, h}, L.q, true),
                   ld.map(p + "self_attn.k_proj.weight", {nkv * d, h}, L.k, true),
                   ld.map(p + "self_attn.v_proj.weight", {nkv * d, h}, L.v, true),
                   ld.map(p + "self_attn.o_proj.weight", {h, nh * d}, L.o, true),
                   ld.append(p + "post_attention_layernorm.weight", {h}, L.post_norm)})
      if (!r) return r.err();
    if (c.moe_layer(i)) {
      // Mixtral: block_sparse_moe.gate and experts.j.w1 (gate), w3 (up), w2 (down); Qwen2/3-MoE:
      // mlp.gate and experts.j.gate_proj / up_proj / down_proj, Qwen2-MoE also mlp.shared_expert.*
      // and mlp.shared_expert_gate. The router stays in the file's
      // precision (fp8 checkpoints leave it in bf16).
      const bool mixtral = c.model_type == "mixtral";
      const std::string m = p + (mixtral ? "block_sparse_moe." : "mlp.");
      const int64_t mi = c.moe_intermediate_size;
      if (auto r = ld.map(m + "gate.weight", {c.num_experts, h}, L.router); !r) return r.err();
      L.experts.resize(size_t(c.num_experts));
      for (int32_t j = 0; j < c.num_experts; ++j) {
        const std::string e = m + "experts." + std::to_string(j) + ".";
        layer_weights::expert& E = L.experts[size_t(j)];
        for (auto r :
             {ld.map(e + (mixtral ? "w1.weight" : "gate_proj.weight"), {mi, h}, E.gate, true),
              ld.map(e + (mixtral ? "w3.weight" : "up_proj.weight"), {mi, h}, E.up, true),
              ld.map(e + (mixtral ? "w2.weight" : "down_proj.weight"), {h, mi}, E.down, true)})
          if (!r) return r.err();
      }
      if (c.shared_expert_intermediate_size > 0) {  // Qwen2-MoE
        const int64_t si = c.shared_expert_intermediate_size;
        for (auto r : {ld.map(m + "shared_expert_gate.weight", {1, h}, L.shared_gate),
                       ld.map(m + "shared_expert.gate_proj.weight", {si, h}, L.shared.gate, true),
                       ld.map(m + "shared_expert.up_proj.weight", {si, h}, L.shared.up, true),
                       ld.map(m + "shared_expert.down_proj.weight", {h, si}, L.shared.down, true)})
          if (!r) return r.err();
      }
    } else {
      for (auto r : {ld.map(p + "mlp.gate_proj.weight", {inter, h}, L.gate, true),
                     ld.map(p + "mlp.up_proj.weight", {inter, h}, L.up, true),
                     ld.map(p + "mlp.down_proj.weight", {h, inter}, L.down, true)})
        if (!r) return r.err();
    }
    if (c.qkv_bias) {
      for (auto r : {ld.append(p + "self_attn.q_proj.bias", {nh * d}, L.qkv_bias),
                     ld.append(p + "self_attn.k_proj.bias", {nkv * d}, L.qkv_bias),
                     ld.append(p + "self_attn.v_proj.bias", {nkv * d}, L.qkv_bias)})
        if (!r) return r.err();
    }
    if (c.o_bias)
      if (auto r = ld.append(p + "self_attn.o_proj.bias", {h}, L.o_bias); !r) return r.err();
    if (c.qk_norm)
      for (auto r : {ld.append(p + "self_attn.q_norm.weight", {d}, L.q_norm),
                     ld.append(p + "self_attn.k_norm.weight", {d}, L.k_norm)})
        if (!r) return r.err();
  }
  if (auto r = ld.append("model.norm.weight", {h}, w.final_norm); !r) return r.err();
  if (score_head) {
    if (auto r = ld.map("score.weight", {c.num_labels, h}, w.score); !r) return r.err();
    w.lm_head = w.embed;  // a stand-in: the model serves scores only
    w.headless = !c.tie_word_embeddings;
  } else if (has_lm_head && !(ld.base_model() && files.find("lm_head.weight") == nullptr)) {
    if (auto r = ld.map("lm_head.weight", {vocab, h}, w.lm_head); !r) return r.err();
  } else {
    w.lm_head = w.embed;
    // A base model's checkpoint without a head of its own: its hidden states only (embeddings).
    w.headless = has_lm_head;
  }
  return w;
}

}  // namespace coserve
