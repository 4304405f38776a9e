// The part of the CUDA forward pass every tensor-parallel rank runs alike: the embedding gather and
// the decoder layers, over one rank's weights, scratch buffers and KV cache. The CUDA executor
// (rank 0) runs it and then the final norm, LM head and sampling; the other ranks of a
// tensor-parallel group (gpu/tp_peer.hpp) run it and then take the sampled ids from rank 0.
//
// Tensor parallel: the weights are one rank's shard (model/tensor_parallel.hpp's split, uploaded
// with a config whose head and MLP counts are the rank's), so q/k/v and gate/up produce the rank's
// heads and columns, and o and down produce partial sums that `all_reduce` adds up in place
// (NCCL, bf16) before the residual. Without a group `all_reduce` is null and nothing is reduced.
// Thread: one thread per rank at a time, on that rank's device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "gpu/batch_plan.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/device_weights.hpp"
#include "gpu/flashinfer_attention.hpp"
#include "gpu/gemm.hpp"
#include "gpu/kernels.hpp"
#include "model/config.hpp"

namespace coserve::gpu {

// Activations of the layer loop, sized for max_tokens tokens of one rank's shard.
struct layer_scratch {
  device_buffer hidden, residual, normed, qkv, attn, gate_up, act;
  device_buffer partial_o, partial_lse;  // split-KV attention workspace (k_max_partial_rows rows)
  device_buffer xq, xscale;              // fp8: an activation's E4M3 codes and per-token scales
  device_buffer fi_tmp_v, fi_tmp_s;      // FlashInfer's split-KV workspace (fi_tmp_rows rows)
  int32_t max_tokens = 0;
  int64_t fi_tmp_rows = 0;
  // c: the rank's config (its heads and MLP width); fi_tmp_rows > 0 sizes FlashInfer's workspace.
  result<void> allocate(const model_config& c, int32_t max_tokens, bool fp8,
                        int64_t fi_tmp_rows = 0);
};

constexpr int32_t k_max_partial_rows = 4096;  // split-KV workspace rows

// The RoPE tables the CPU executor uses (model/rope.cpp: every scaling type), on the device.
struct rope_tables {
  device_buffer inv_freq, inv_freq_long;  // LongRoPE: the long table from long_from on
  int32_t long_from = 0x7fffffff;
  float scale = 1.0f;      // YaRN / LongRoPE attention factor on cos and sin
  int32_t rotary_dim = 0;  // partial rotary (0: the whole head)
  result<void> upload(const model_config& c);
};

// One rank's paged KV cache: [layer][K|V][num_blocks + 1, block_size, kv_heads, head_dim]; the
// block after the allocator's is the zeroed scratch block CUDA-graph padding rows attend over.
struct kv_store {
  device_buffer data;
  kv_elem type = kv_elem::bf16;
  int32_t block_size = 16;
  int32_t num_blocks = 0;      // the allocator's blocks (the scratch block not counted)
  int64_t layer_elems = 0;     // elements of one layer's K (== V)
  size_t block_bytes_one = 0;  // one block of one layer's K (or V)
  size_t layer_bytes() const { return size_t(layer_elems) * size_t(kv_elem_bytes(type)); }
  // Allocates num_blocks + 1 blocks and zeroes the scratch block (synchronous: startup only).
  result<void> allocate(const model_config& c, int32_t block_size, int32_t num_blocks,
                        kv_elem type);
  // Zeroes the scratch block again on `s` (after graph capture wrote it).
  result<void> zero_scratch_block(int32_t num_layers, cudaStream_t s) const;
  // Copies block src to dst in every layer, K and V (copy-on-write), on `s`.
  result<void> copy_block(int32_t num_layers, int32_t src, int32_t dst, cudaStream_t s) const;
};

// The KV blocks that fit in what is left on the current device (startup); extra_block_bytes: what
// each block costs besides this model's (a draft model's cache over the same block ids).
result<int32_t> kv_blocks_that_fit(const model_config& c, int32_t block_size, kv_elem type,
                                   double gpu_memory_utilization, int64_t extra_block_bytes = 0);

// What one forward pass reads besides the weights: device addresses of the step's metadata, and
// its sizes (capacities when attn_counts points at the step's real counts: graphs).
struct layer_inputs {
  const int32_t *ids = nullptr, *positions = nullptr, *slots = nullptr, *cu_seqlens = nullptr,
                *kv_lens = nullptr;
  const int32_t *bt_offsets = nullptr, *block_tables = nullptr;
  const attn_work_item* work = nullptr;
  const attn_merge_item* merges = nullptr;
  const int32_t* attn_counts = nullptr;
  int32_t num_tokens = 0, num_work = 0, num_merges = 0;
  // FlashInfer's plan of the step (--attention-backend flashinfer); fi.on false: our kernels.
  fi_step fi;
};

// The address p would have in a copy of the buffer at `from` placed at `to` (null stays null).
template <class T>
T* rebase_ptr(T* p, const void* from, const void* to) {
  if (p == nullptr) return p;
  const auto off = reinterpret_cast<const char*>(p) - static_cast<const char*>(from);
  return reinterpret_cast<T*>(const_cast<char*>(static_cast<const char*>(to)) + off);
}
// The same inputs at another copy of the metadata: every address moved from `from` to `to`.
layer_inputs rebase(const layer_inputs& in, const void* from, const void* to);

// data[0, n) summed over the group's ranks in place, on the stream (tensor parallel).
using all_reduce_fn = std::function<result<void>(bf16* data, size_t n, cudaStream_t s)>;

// The embedding gather (ids < 0 read `last_tokens`) and every decoder layer; the output is
// scratch.hidden (the last MLP's output) and scratch.residual, whose sum is the hidden state.
result<void> run_layers(const device_weights& w, gemm_runner& gemm, const layer_scratch& scratch,
                        const kv_store& kv, const rope_tables& rope, const layer_inputs& in,
                        const int32_t* last_tokens, const all_reduce_fn& all_reduce,
                        cudaStream_t s);

// Runs `pass` once eagerly (cuBLASLt plans for its sizes, lazy module loading, NCCL connections)
// and waits for it, then captures the same launches on `s` into an instantiated graph. Startup
// only.
result<cudaGraphExec_t> capture_graph(cudaStream_t s, const std::function<result<void>()>& pass);

// The GEMM shapes of the layer loop (layer 0's operands stand for every layer's), for
// gemm_runner::tune; fp8 zeroes the activation codes first (timing does not depend on them).
result<std::vector<gemm_runner::shape>> layer_gemm_shapes(const device_weights& w,
                                                          const layer_scratch& scratch);

}  // namespace coserve::gpu
