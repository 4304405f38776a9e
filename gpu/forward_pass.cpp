#include "gpu/forward_pass.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "gpu/kv_cache_sizing.hpp"
#include "gpu/nvtx.hpp"
#include "model/rope.hpp"

namespace coserve::gpu {

namespace {
constexpr int64_t k_kv_reserve_bytes = int64_t(1) << 30;
}

result<void> layer_scratch::allocate(const model_config& c, int32_t tokens, bool fp8,
                                     int64_t fi_rows) {
  const size_t T = size_t(tokens);
  const size_t H = size_t(c.hidden_size), D = size_t(c.head_dim), I = size_t(c.intermediate_size);
  const size_t hq = size_t(c.num_attention_heads), hkv = size_t(c.num_key_value_heads);
  struct want {
    device_buffer* b;
    size_t bytes;
  };
  for (want x :
       {want{&hidden, T * H * 2}, want{&residual, T * H * 2}, want{&normed, T * H * 2},
        want{&qkv, T * (hq + 2 * hkv) * D * 2}, want{&attn, T * hq * D * 2},
        want{&gate_up, T * 2 * I * 2}, want{&act, T * I * 2},
        want{&partial_o, size_t(k_max_partial_rows) * hq * D * 4},
        want{&partial_lse, size_t(k_max_partial_rows) * hq * 4},
        want{&xq, fp8 ? T * std::max({H, I, hq * D}) : 0}, want{&xscale, fp8 ? T * 4 : 0},
        want{&fi_tmp_v, size_t(fi_rows) * hq * D * 2}, want{&fi_tmp_s, size_t(fi_rows) * hq * 4}}) {
    auto b = device_buffer::allocate(x.bytes);
    if (!b) return std::move(b).err();
    *x.b = std::move(b.value());
  }
  max_tokens = tokens;
  fi_tmp_rows = fi_rows;
  return {};
}

result<void> rope_tables::upload(const model_config& c) {
  const auto put = [&](const std::vector<float>& inv, device_buffer& to) -> result<void> {
    auto f = device_buffer::allocate(inv.size() * 4);
    if (!f) return std::move(f).err();
    to = std::move(f.value());
    COSERVE_CUDA_TRY(cuda_check(
        cudaMemcpy(to.get(), inv.data(), inv.size() * 4, cudaMemcpyHostToDevice), "inv_freq"));
    return {};
  };
  if (auto r = put(coserve::rope_inv_freq(c), inv_freq); !r) return r.err();
  rotary_dim = c.rotary_dim > 0 && c.rotary_dim < c.head_dim ? c.rotary_dim : 0;
  if (c.rope_scaling.kind == rope_kind::yarn || c.rope_scaling.kind == rope_kind::longrope)
    scale = c.rope_scaling.attention_factor;
  if (c.rope_scaling.kind == rope_kind::longrope) {
    long_from = c.rope_scaling.original_max_position_embeddings;
    if (auto r = put(coserve::rope_inv_freq(c, true), inv_freq_long); !r) return r.err();
  }
  return {};
}

result<void> kv_store::allocate(const model_config& c, int32_t bs, int32_t blocks, kv_elem t) {
  type = t;
  block_size = bs;
  num_blocks = blocks;
  kv_cache_shape shape{c.num_hidden_layers, c.num_key_value_heads, c.head_dim, bs,
                       kv_elem_bytes(t)};
  layer_elems = (int64_t(blocks) + 1) * bs * c.num_key_value_heads * c.head_dim;
  block_bytes_one =
      size_t(bs) * size_t(c.num_key_value_heads) * size_t(c.head_dim) * size_t(kv_elem_bytes(t));
  auto kv = device_buffer::allocate(size_t(blocks + 1) * size_t(kv_block_bytes(shape)));
  if (!kv) return std::move(kv).err();
  data = std::move(kv.value());
  for (int64_t half = 0; half < 2 * c.num_hidden_layers; ++half)
    COSERVE_CUDA_TRY(cuda_check(cudaMemset(data.as<char>() + size_t(half) * layer_bytes() +
                                               size_t(num_blocks) * block_bytes_one,
                                           0, block_bytes_one),
                                "scratch KV block"));
  return {};
}

result<void> kv_store::zero_scratch_block(int32_t num_layers, cudaStream_t s) const {
  for (int64_t half = 0; half < 2 * num_layers; ++half)
    COSERVE_CUDA_TRY(cuda_check(cudaMemsetAsync(data.as<char>() + size_t(half) * layer_bytes() +
                                                    size_t(num_blocks) * block_bytes_one,
                                                0, block_bytes_one, s),
                                "scratch KV block"));
  return {};
}

result<void> kv_store::copy_block(int32_t num_layers, int32_t src, int32_t dst,
                                  cudaStream_t s) const {
  if (src < 0 || dst < 0 || src >= num_blocks || dst >= num_blocks)
    return make_error("invalid_argument", "gpu: block copy out of range");
  for (int64_t half = 0; half < 2 * num_layers; ++half) {
    char* base = data.as<char>() + size_t(half) * layer_bytes();
    COSERVE_CUDA_TRY(cuda_check(
        cudaMemcpyAsync(base + size_t(dst) * block_bytes_one, base + size_t(src) * block_bytes_one,
                        block_bytes_one, cudaMemcpyDeviceToDevice, s),
        "block copy"));
  }
  return {};
}

result<int32_t> kv_blocks_that_fit(const model_config& c, int32_t block_size, kv_elem type,
                                   double gpu_memory_utilization, int64_t extra_block_bytes) {
  kv_cache_shape shape{c.num_hidden_layers, c.num_key_value_heads, c.head_dim, block_size,
                       kv_elem_bytes(type)};
  size_t free_b = 0, total_b = 0;
  COSERVE_CUDA_TRY(cuda_check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"));
  auto n = kv_cache_num_blocks(
      shape, {int64_t(total_b), int64_t(free_b), gpu_memory_utilization, k_kv_reserve_bytes});
  if (!n) return std::move(n).err();
  // The budget the model's blocks would take, shared with the extra bytes of each.
  const int64_t own = kv_block_bytes(shape);
  const int64_t blocks = extra_block_bytes > 0 ? *n * own / (own + extra_block_bytes) : *n;
  if (blocks < 1)
    return make_error("resource_exhausted",
                      "no memory left for the KV cache and the draft model's");
  return int32_t(std::min<int64_t>(blocks, INT32_MAX / block_size - 1));
}

layer_inputs rebase(const layer_inputs& in, const void* from, const void* to) {
  layer_inputs out = in;
  for (const int32_t** p : {&out.ids, &out.positions, &out.slots, &out.cu_seqlens, &out.kv_lens,
                            &out.bt_offsets, &out.block_tables, &out.attn_counts})
    *p = rebase_ptr(*p, from, to);
  out.work = rebase_ptr(in.work, from, to);
  out.merges = rebase_ptr(in.merges, from, to);
  fi_step& f = out.fi;
  for (const int32_t** p :
       {&f.qo_indptr, &f.kv_indptr, &f.kv_indices, &f.kv_last_page_len, &f.request_indices,
        &f.qo_tile_indices, &f.kv_tile_indices, &f.o_indptr, &f.merge_indptr, &f.kv_chunk_size})
    *p = rebase_ptr(*p, from, to);
  f.total_num_rows = rebase_ptr(f.total_num_rows, from, to);
  f.block_valid_mask = rebase_ptr(f.block_valid_mask, from, to);
  return out;
}

result<void> run_layers(const device_weights& w, gemm_runner& gemm, const layer_scratch& scratch,
                        const kv_store& kv, const rope_tables& rope, const layer_inputs& in,
                        const int32_t* last_tokens, const all_reduce_fn& all_reduce,
                        cudaStream_t s) {
  const model_config& c = w.config;
  const int32_t T = in.num_tokens, H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int32_t hq = c.num_attention_heads, hkv = c.num_key_value_heads;
  const int32_t qkv_n = (hq + 2 * hkv) * D;
  const float eps = c.rms_norm_eps;
  bf16 *hidden = scratch.hidden.as<bf16>(), *residual = scratch.residual.as<bf16>(),
       *normed = scratch.normed.as<bf16>();
  bf16 *qkv = scratch.qkv.as<bf16>(), *attn = scratch.attn.as<bf16>();
  // y [T, n] = x [T, k] w^T (+ bias): bf16 (GEMV up to w.gemv.bf16 tokens, else cuBLASLt); fp8
  // weights: W8A16 GEMV up to w.gemv.fp8 tokens, else W8A8 with x quantized per token first.
  auto linear = [&](bf16* y, const bf16* x, const device_buffer& m, const device_buffer& m_scale,
                    const device_buffer& bias, int32_t n, int32_t k) -> result<void> {
    if (!w.fp8) {
      if (T <= w.gemv.bf16)
        return launch_bf16_gemv(y, x, m.as<bf16>(), bias.as<bf16>(), T, n, k, s);
      return gemm.run(y, gemm_out::bf16, x, m.as<bf16>(), bias.as<bf16>(), T, n, k, s);
    }
    if (T <= w.gemv.fp8)
      return launch_fp8_gemv(y, x, m.as<uint8_t>(), m_scale.as<float>(), bias.as<bf16>(), T, n, k,
                             s);
    COSERVE_CUDA_TRY(launch_quantize_rows_e4m3(scratch.xq.as<uint8_t>(), scratch.xscale.as<float>(),
                                               x, T, k, s));
    return gemm.run_fp8(y, scratch.xq.as<uint8_t>(), scratch.xscale.as<float>(), m.as<uint8_t>(),
                        m_scale.as<float>(), bias.as<bf16>(), T, n, k, s);
  };
  // Row-parallel outputs (o, down) of a shard are partial sums: added up over the group.
  auto reduce = [&](bf16* y) -> result<void> {
    return all_reduce ? all_reduce(y, size_t(T) * size_t(H), s) : result<void>{};
  };
  const device_buffer no_bias;
  COSERVE_CUDA_TRY(
      launch_embedding(hidden, w.embed.as<bf16>(), in.ids, last_tokens, T, H, c.vocab_size, s));
  for (int32_t l = 0; l < c.num_hidden_layers; ++l) {
    const device_layer& L = w.layers[size_t(l)];
    // layer 0: residual = hidden; later layers: residual += hidden (the previous MLP output)
    // NVTX ranges per kernel family: norm + QKV GEMM, RoPE + KV write + attention, O GEMM + norm,
    // MLP (Nsight Systems projects each range onto the GPU work it launched).
    std::optional<nvtx_range> family(std::in_place, "qkv");
    COSERVE_CUDA_TRY(launch_rmsnorm(normed, hidden, residual, L.input_norm.as<bf16>(), nullptr, T,
                                    H, eps, l > 0, s));
    COSERVE_CUDA_TRY(linear(qkv, normed, L.qkv, L.qkv_scale, L.qkv_bias, qkv_n, H));
    if (!L.q_norm.empty())
      COSERVE_CUDA_TRY(launch_head_rmsnorm(qkv, L.q_norm.as<bf16>(), L.k_norm.as<bf16>(), T, hq,
                                           hkv, D, eps, s));
    family.reset();
    family.emplace("attention");
    char* kc = kv.data.as<char>() + size_t(2 * l) * kv.layer_bytes();
    char* vc = kc + kv.layer_bytes();
    COSERVE_CUDA_TRY(launch_rope_kv_write(
        rope_kv_args{qkv, in.positions, in.slots, rope.inv_freq.as<float>(), kc, vc, T, hq, hkv, D,
                     kv.type, rope.inv_freq_long.get() ? rope.inv_freq_long.as<float>() : nullptr,
                     rope.long_from, rope.scale, rope.rotary_dim,
                     c.rope_layers.empty() || c.rope_layers[size_t(l)] != 0 ? 1 : 0},
        s));
    attention_args a{qkv,
                     qkv_n,
                     kc,
                     vc,
                     attn,
                     scratch.partial_o.as<float>(),
                     scratch.partial_lse.as<float>(),
                     in.cu_seqlens,
                     in.kv_lens,
                     in.bt_offsets,
                     in.block_tables,
                     in.work,
                     in.merges,
                     in.num_work,
                     in.num_merges,
                     hq,
                     hkv,
                     D,
                     kv.block_size,
                     1.0f / std::sqrt(float(D)),
                     in.attn_counts,
                     kv.type};
    if (c.sliding_window > 0 && (c.sliding_layers.empty() || c.sliding_layers[size_t(l)] != 0))
      a.window = c.sliding_window;
    if (in.fi.on) {
      // FlashInfer's window keeps keys [pos - window_left, pos]; ours (pos - window, pos].
      const fi_attention_args fa{qkv,
                                 qkv_n,
                                 kc,
                                 vc,
                                 attn,
                                 scratch.fi_tmp_v.get(),
                                 scratch.fi_tmp_s.as<float>(),
                                 hq,
                                 hkv,
                                 D,
                                 kv.block_size,
                                 a.window > 0 ? a.window - 1 : -1,
                                 a.scale};
      COSERVE_CUDA_TRY(launch_flashinfer_attention(fa, in.fi, s));
    } else {
      COSERVE_CUDA_TRY(launch_attention(a, s));
    }
    family.reset();
    family.emplace("o_proj");
    COSERVE_CUDA_TRY(linear(hidden, attn, L.o, L.o_scale, L.o_bias, H, hq * D));
    COSERVE_CUDA_TRY(reduce(hidden));
    COSERVE_CUDA_TRY(launch_rmsnorm(normed, hidden, residual, L.post_norm.as<bf16>(), nullptr, T, H,
                                    eps, true, s));
    family.reset();
    family.emplace("mlp");
    COSERVE_CUDA_TRY(
        linear(scratch.gate_up.as<bf16>(), normed, L.gate_up, L.gate_up_scale, no_bias, 2 * I, H));
    COSERVE_CUDA_TRY(launch_silu_mul(scratch.act.as<bf16>(), scratch.gate_up.as<bf16>(), T, I, s));
    COSERVE_CUDA_TRY(linear(hidden, scratch.act.as<bf16>(), L.down, L.down_scale, no_bias, H, I));
    COSERVE_CUDA_TRY(reduce(hidden));
  }
  return {};
}

result<cudaGraphExec_t> capture_graph(cudaStream_t s, const std::function<result<void>()>& pass) {
  COSERVE_CUDA_TRY(pass());
  COSERVE_CUDA_TRY(cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize"));  // startup only
  cudaGraph_t graph = nullptr;
  COSERVE_CUDA_TRY(cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
                              "cudaStreamBeginCapture"));
  auto fr = pass();
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  if (!fr.ok()) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    return std::move(fr).err();
  }
  COSERVE_CUDA_TRY(cuda_check(end, "cudaStreamEndCapture"));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  COSERVE_CUDA_TRY(cuda_check(inst, "cudaGraphInstantiate"));
  return exec;
}

result<std::vector<gemm_runner::shape>> layer_gemm_shapes(const device_weights& w,
                                                          const layer_scratch& scratch) {
  const model_config& c = w.config;
  const device_layer& L = w.layers.front();
  const int32_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const int32_t hq = c.num_attention_heads, hkv = c.num_key_value_heads;
  if (w.fp8) {
    COSERVE_CUDA_TRY(
        cuda_check(cudaMemset(scratch.xq.get(), 0, scratch.xq.bytes()), "gemm tuning"));
    COSERVE_CUDA_TRY(
        cuda_check(cudaMemset(scratch.xscale.get(), 0, scratch.xscale.bytes()), "gemm tuning"));
  }
  auto layer = [&](int32_t n, int32_t k, const device_buffer& m, const device_buffer& scale,
                   const device_buffer& bias, const device_buffer& x, const device_buffer& y) {
    gemm_runner::shape sh;
    sh.n = n;
    sh.k = k;
    sh.w = m.get();
    sh.x = w.fp8 ? scratch.xq.get() : x.get();
    sh.y = y.get();
    sh.bias = bias.empty() ? nullptr : bias.as<bf16>();
    sh.fp8 = w.fp8;
    sh.w_scales = w.fp8 ? scale.as<float>() : nullptr;
    sh.x_scales = w.fp8 ? scratch.xscale.as<float>() : nullptr;
    sh.max_m = scratch.max_tokens;
    return sh;
  };
  const device_buffer none;
  return std::vector<gemm_runner::shape>{
      layer((hq + 2 * hkv) * D, H, L.qkv, L.qkv_scale, L.qkv_bias, scratch.normed, scratch.qkv),
      layer(H, hq * D, L.o, L.o_scale, L.o_bias, scratch.attn, scratch.hidden),
      layer(2 * I, H, L.gate_up, L.gate_up_scale, none, scratch.normed, scratch.gate_up),
      layer(H, I, L.down, L.down_scale, none, scratch.act, scratch.hidden)};
}

}  // namespace coserve::gpu
