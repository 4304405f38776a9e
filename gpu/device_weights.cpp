#include "gpu/device_weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "gpu/kernels.hpp"
#include "model/dtype.hpp"
#include "model/gguf_model.hpp"

namespace coserve::gpu {

namespace {

struct tensor_spec {
  device_buffer* dst;
  int64_t n;       // elements
  int32_t fan_in;  // > 0: random matrix; 0: constant `value`
  float value;
  // Host data for upload_weights: an fp32 vector (norms, biases) or matrices in file precision,
  // concatenated by rows (q/k/v and gate/up are fused on the device). Neither: no host data.
  const std::vector<float>* vec = nullptr;
  std::vector<const weight_ref*> mats;
  // Per matrix: its rows are heads of this size stored with interleaved RoPE pairs (GGUF llama
  // layout), restored to the Hugging Face order on upload; 0: as stored.
  std::vector<int64_t> interleaved_head;
  std::shared_ptr<std::vector<float>> owned_vec;  // vec, when it had to be reordered
  device_buffer* fp8_scale = nullptr;  // a layer matrix: its per-row scales when stored in fp8
};

// The spec's host elements as bf16 (matrices already in bf16 are copied as they are).
bool host_to_bf16(const tensor_spec& t, std::vector<uint16_t>& out) {
  out.resize(size_t(t.n));
  if (t.vec) {
    if (int64_t(t.vec->size()) != t.n) return false;
    for (int64_t k = 0; k < t.n; ++k) out[size_t(k)] = f32_to_bf16((*t.vec)[size_t(k)]);
    return true;
  }
  size_t at = 0;
  std::vector<float> row;
  for (size_t mi = 0; mi < t.mats.size(); ++mi) {
    const weight_ref* m = t.mats[mi];
    const int64_t head = mi < t.interleaved_head.size() ? t.interleaved_head[mi] : 0;
    const size_t n = size_t(m->rows) * size_t(m->cols);
    if (at + n > out.size()) return false;
    if (head > 0 && m->rows % head != 0) return false;
    // Row r of the upload comes from row src(r) of the matrix.
    auto src = [&](int64_t r) {
      return head > 0 ? r / head * head + interleaved_row(r % head, head) : r;
    };
    if (m->type == dtype::bf16 && head == 0) {
      std::memcpy(out.data() + at, m->data, n * 2);
    } else {
      row.resize(size_t(m->cols));
      for (int64_t r = 0; r < m->rows; ++r) {
        convert_to_f32(m->type, m->row(src(r)), row.data(), row.size());
        if (m->row_scale != nullptr)  // fp8 codes kept by the CPU loader: their values
          for (float& v : row) v *= m->row_scale[src(r)];
        for (size_t k = 0; k < row.size(); ++k)
          out[at + size_t(r) * row.size() + k] = f32_to_bf16(row[k]);
      }
    }
    at += n;
  }
  return at == out.size() && !t.mats.empty();
}

std::vector<tensor_spec> specs(device_weights& d, const model_config& c, const model_weights* w,
                               bool lm_head) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim, V = c.vocab_size;
  const int64_t qkv_rows = (int64_t(c.num_attention_heads) + 2 * c.num_key_value_heads) * D;
  const int64_t attn = int64_t(c.num_attention_heads) * D;
  std::vector<tensor_spec> s;
  using mats = std::vector<const weight_ref*>;
  s.push_back({&d.embed, V * H, int32_t(H), 0, nullptr, w ? mats{&w->embed} : mats{}});
  for (int32_t l = 0; l < c.num_hidden_layers; ++l) {
    device_layer& L = d.layers[size_t(l)];
    const layer_weights* lw = w ? &w->layers[size_t(l)] : nullptr;
    s.push_back({&L.input_norm, H, 0, 1.0f, lw ? &lw->input_norm : nullptr, {}});
    const int64_t il =
        c.rope_interleaved ? D : 0;  // q and k rows restored to the Hugging Face order
    s.push_back({&L.qkv,
                 qkv_rows * H,
                 int32_t(H),
                 0,
                 nullptr,
                 lw ? mats{&lw->q, &lw->k, &lw->v} : mats{},
                 {il, il, 0},
                 nullptr,
                 &L.qkv_scale});
    if (c.qkv_bias) {
      tensor_spec b{&L.qkv_bias, qkv_rows, 0, 0.0f, lw ? &lw->qkv_bias : nullptr, {}, {}, nullptr};
      if (lw && il > 0 && int64_t(lw->qkv_bias.size()) == qkv_rows) {
        b.owned_vec = std::make_shared<std::vector<float>>(lw->qkv_bias);
        const int64_t qk = (int64_t(c.num_attention_heads) + c.num_key_value_heads) * D;
        for (int64_t r = 0; r < qk; ++r)
          (*b.owned_vec)[size_t(r)] = lw->qkv_bias[size_t(r / D * D + interleaved_row(r % D, D))];
        b.vec = b.owned_vec.get();
      }
      s.push_back(std::move(b));
    }
    if (c.qk_norm)
      for (auto [dst, src] : {std::pair{&L.q_norm, lw ? &lw->q_norm : nullptr},
                              std::pair{&L.k_norm, lw ? &lw->k_norm : nullptr}}) {
        tensor_spec nrm{dst, D, 0, 1.0f, src, {}};
        if (src && il > 0 &&
            int64_t(src->size()) == D) {  // dimensions follow the rows' restored order
          nrm.owned_vec = std::make_shared<std::vector<float>>(*src);
          for (int64_t r = 0; r < D; ++r)
            (*nrm.owned_vec)[size_t(r)] = (*src)[size_t(interleaved_row(r, D))];
          nrm.vec = nrm.owned_vec.get();
        }
        s.push_back(std::move(nrm));
      }
    s.push_back({&L.o,
                 H * attn,
                 int32_t(attn),
                 0,
                 nullptr,
                 lw ? mats{&lw->o} : mats{},
                 {},
                 nullptr,
                 &L.o_scale});
    if (c.o_bias) s.push_back({&L.o_bias, H, 0, 0.0f, lw ? &lw->o_bias : nullptr, {}});
    s.push_back({&L.post_norm, H, 0, 1.0f, lw ? &lw->post_norm : nullptr, {}});
    s.push_back({&L.gate_up,
                 2 * I * H,
                 int32_t(H),
                 0,
                 nullptr,
                 lw ? mats{&lw->gate, &lw->up} : mats{},
                 {},
                 nullptr,
                 &L.gate_up_scale});
    s.push_back({&L.down,
                 H * I,
                 int32_t(I),
                 0,
                 nullptr,
                 lw ? mats{&lw->down} : mats{},
                 {},
                 nullptr,
                 &L.down_scale});
  }
  s.push_back({&d.final_norm, H, 0, 1.0f, w ? &w->final_norm : nullptr, {}});
  if (!c.tie_word_embeddings && lm_head)
    s.push_back({&d.lm_head, V * H, int32_t(H), 0, nullptr, w ? mats{&w->lm_head} : mats{}});
  return s;
}

result<void> check_config(const model_config& c, bool fp8) {
  if (c.hidden_size <= 0 || c.num_hidden_layers <= 0 || c.num_attention_heads <= 0 ||
      c.num_key_value_heads <= 0 || c.head_dim <= 0 || c.vocab_size <= 0 ||
      c.intermediate_size <= 0)
    return make_error("invalid_argument", "gpu: model config has a zero dimension");
  if (c.mlp_bias)
    return make_error("unsupported", "gpu: mlp_bias is not supported by the CUDA executor");
  if (c.is_moe())
    return make_error("unsupported",
                      "gpu: mixture-of-experts models (" + c.model_type +
                          ") are not supported by the CUDA executor; serve them with --device cpu");
  if (c.qk_norm && c.head_dim > 256)
    return make_error("unsupported", "gpu: q/k RMSNorm per head supports head_dim up to 256");
  if (fp8 && (c.hidden_size % 16 != 0 || c.intermediate_size % 16 != 0 ||
              (c.num_attention_heads * c.head_dim) % 16 != 0))
    return make_error(
        "unsupported",
        "gpu: fp8 GEMMs need hidden_size, intermediate_size and heads x head_dim to be "
        "multiples of 16");
  return {};
}

// Finishes tensor t whose bf16 values are in `bf16_values` on the device: stored as they are, or,
// for a layer matrix under fp8, quantized per row into E4M3 codes and scales. Returns the bytes
// kept.
result<int64_t> store(const tensor_spec& t, device_buffer bf16_values, bool fp8,
                      cudaStream_t stream) {
  if (!fp8 || t.fp8_scale == nullptr) {
    *t.dst = std::move(bf16_values);
    return t.n * 2;
  }
  const int64_t rows = t.n / t.fan_in;
  auto codes = device_buffer::allocate(size_t(t.n));
  if (!codes) return std::move(codes).err();
  auto scales = device_buffer::allocate(size_t(rows) * 4);
  if (!scales) return std::move(scales).err();
  COSERVE_CUDA_TRY(launch_quantize_rows_e4m3(codes.value().as<uint8_t>(),
                                             scales.value().as<float>(), bf16_values.as<bf16>(),
                                             rows, t.fan_in, stream));
  // The bf16 copy is freed on return: wait for the kernel reading it.
  COSERVE_CUDA_TRY(cuda_check(cudaStreamSynchronize(stream), "fp8 weight quantization"));
  *t.dst = std::move(codes.value());
  *t.fp8_scale = std::move(scales.value());
  return t.n + rows * 4;
}

}  // namespace

result<device_weights> upload_weights(const model_weights& w, cudaStream_t stream,
                                      const load_progress& progress, bool fp8, bool lm_head) {
  COSERVE_CUDA_TRY(check_config(w.config, fp8));
  device_weights d;
  d.config = w.config;
  d.fp8 = fp8;
  d.layers.resize(size_t(w.config.num_hidden_layers));
  auto all = specs(d, w.config, &w, lm_head);
  std::vector<uint16_t> staging;
  for (size_t i = 0; i < all.size(); ++i) {
    const tensor_spec& t = all[i];
    if (!host_to_bf16(t, staging))
      return make_error("invalid_argument", "gpu: host weight tensor " + std::to_string(i) +
                                                " does not have the " + std::to_string(t.n) +
                                                " elements the config implies");
    auto b = device_buffer::allocate(size_t(t.n) * 2);
    if (!b) return std::move(b).err();
    if (fp8 && t.fp8_scale != nullptr) {
      // On the stream the quantization kernel runs on, so it reads the whole copy. A copy from
      // pageable memory has taken the staging vector's bytes when it returns: it can be reused.
      COSERVE_CUDA_TRY(cuda_check(cudaMemcpyAsync(b.value().get(), staging.data(), size_t(t.n) * 2,
                                                  cudaMemcpyHostToDevice, stream),
                                  "upload weights"));
    } else {
      // Synchronous copy from pageable memory: the staging vector is reused for the next tensor.
      COSERVE_CUDA_TRY(cuda_check(
          cudaMemcpy(b.value().get(), staging.data(), size_t(t.n) * 2, cudaMemcpyHostToDevice),
          "upload weights"));
    }
    auto kept = store(t, std::move(b.value()), fp8, stream);
    if (!kept) return std::move(kept).err();
    d.bytes += kept.value();
    if (progress) progress(i + 1, all.size(), size_t(d.bytes));
  }
  return d;
}

result<device_weights> dummy_weights(const model_config& c, uint64_t seed, cudaStream_t stream,
                                     const load_progress& progress, bool fp8, bool lm_head) {
  COSERVE_CUDA_TRY(check_config(c, fp8));
  device_weights d;
  d.config = c;
  d.fp8 = fp8;
  d.layers.resize(size_t(c.num_hidden_layers));
  auto all = specs(d, c, nullptr, lm_head);
  for (size_t i = 0; i < all.size(); ++i) {
    const tensor_spec& t = all[i];
    auto b = device_buffer::allocate(size_t(t.n) * 2);
    if (!b) return std::move(b).err();
    if (t.fan_in > 0)
      COSERVE_CUDA_TRY(launch_fill_random_bf16(b.value().as<bf16>(), t.n,
                                               1.0f / std::sqrt(float(t.fan_in)),
                                               seed * 1000003ull + i, stream));
    else
      COSERVE_CUDA_TRY(launch_fill_bf16(b.value().as<bf16>(), t.n, t.value, stream));
    auto kept = store(t, std::move(b.value()), fp8, stream);
    if (!kept) return std::move(kept).err();
    d.bytes += kept.value();
    if (progress) progress(i + 1, all.size(), size_t(d.bytes));
  }
  COSERVE_CUDA_TRY(cuda_check(cudaStreamSynchronize(stream), "dummy weights"));
  return d;
}

}  // namespace coserve::gpu
