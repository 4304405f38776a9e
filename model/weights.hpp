// A model folder's weights for the CPU executor, in the file's own precision (F32, F16 or BF16):
// every matrix is a weight_ref into the mapped safetensors files, which model_weights keeps open,
// so loading copies nothing and the resident size is the pages the forward pass touches. Only the
// small vectors (norms, biases) are converted to fp32 arrays, and the fp8 matrices of fp8
// checkpoints with block scales are dequantized to bf16 copies (model/fp8.hpp).
// Matrices keep the Hugging Face layout [out_features, in_features], row-major.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "model/config.hpp"
#include "model/cpu_kernels.hpp"

namespace coserve {

class safetensors_set;
class gguf_file;

struct layer_weights {
  std::vector<float> input_norm;      // [hidden]
  weight_ref q, k, v;                 // [H D, hidden], [KVH D, hidden], [KVH D, hidden]
  std::vector<float> qkv_bias;        // [(H + 2 KVH) D] (q, k, v biases in that order) or empty
  weight_ref o;                       // [hidden, H D]
  std::vector<float> o_bias;          // [hidden] or empty
  std::vector<float> q_norm, k_norm;  // [D] each (Qwen3's per-head RMSNorm weights) or empty
  std::vector<float> post_norm;       // [hidden]
  weight_ref gate, up;                // [I, hidden] each (dense MLP layers)
  weight_ref down;                    // [hidden, I]
  // Mixture-of-experts layers (model_config::moe_layer): the router and each expert's SwiGLU
  // matrices, I being moe_intermediate_size; gate/up/down above are then empty.
  struct expert {
    weight_ref gate, up;  // [I, hidden] each
    weight_ref down;      // [hidden, I]
  };
  weight_ref router;            // [num_experts, hidden]
  std::vector<expert> experts;  // num_experts of them
  expert shared;  // Qwen2-MoE's shared expert (I = shared_expert_intermediate_size) or empty
  weight_ref shared_gate;  // [1, hidden]: its sigmoid gate, or empty

  // Every matrix of the layer (q, k, v, o, then the MLP's: gate, up, down or the router, each
  // expert's three and the shared expert's gate and matrices), for passes over all of them.
  template <class F>
  void each_matrix(F&& f) {
    for (weight_ref* w : {&q, &k, &v, &o}) f(*w);
    if (experts.empty()) {
      for (weight_ref* w : {&gate, &up, &down}) f(*w);
      return;
    }
    f(router);
    for (expert& e : experts)
      for (weight_ref* w : {&e.gate, &e.up, &e.down}) f(*w);
    if (shared_gate.rows > 0)
      for (weight_ref* w : {&shared_gate, &shared.gate, &shared.up, &shared.down}) f(*w);
  }
  template <class F>
  void each_matrix(F&& f) const {
    const_cast<layer_weights*>(this)->each_matrix([&](const weight_ref& w) { f(w); });
  }
};

// A rank's part of a tensor-parallel model (Megatron-style, model/tensor_parallel.hpp). size 1:
// the whole model. The config stays the whole model's; these are the rank's own counts.
struct tensor_shard {
  int32_t rank = 0;
  int32_t size = 1;
  int32_t num_heads = 0;              // query heads of this rank
  int32_t num_kv_heads = 0;           // KV heads it holds
  int32_t intermediate_size = 0;      // its gate/up rows, down columns
  int32_t moe_intermediate_size = 0;  // the same of each expert (mixture-of-experts models)
  int32_t shared_expert_intermediate_size = 0;  // and of the shared expert (Qwen2-MoE)
  int32_t vocab_begin = 0;                      // its LM-head rows [vocab_begin, vocab_end)
  int32_t vocab_end = 0;
};

struct model_weights {
  model_config config;
  // The rank's counts; all zero (the default) means the whole model.
  tensor_shard shard;
  weight_ref embed;               // [vocab, hidden]
  std::vector<float> final_norm;  // [hidden]
  weight_ref lm_head;             // [vocab, hidden]; the embedding when tied
  // A base model's checkpoint (tensors without "model.", no lm_head.weight) of an untied model:
  // lm_head is the embedding as a stand-in, and the model serves embeddings only.
  bool headless = false;
  // A sequence classifier's `score.weight` [num_labels, hidden] (model_config::classifier()
  // without classifier_from_token); empty otherwise.
  weight_ref score;
  std::vector<layer_weights> layers;
  std::shared_ptr<const safetensors_set> files;  // the mapped files the weight_refs point into
  std::shared_ptr<const gguf_file> gguf;         // or the mapped GGUF file
  // Matrices a tensor-parallel shard holds as copies (column slices of o and down): weight_refs
  // point into these.
  std::vector<std::shared_ptr<const std::vector<unsigned char>>> owned;
  // fp8 checkpoints: the layer matrices kept as fp8 codes (weight_ref::row_scale), those
  // dequantized to bf16 at load (block scales, the embedding / LM head; kept in `owned`), and the
  // bytes of both in the files.
  size_t fp8_kept = 0;
  size_t fp8_dequantized = 0;
  size_t fp8_bytes = 0;

  // Bytes of every matrix (what a forward pass over all layers reads once, the LM head included);
  // without `experts`, those of the experts left out (a step reads only the experts it routes to).
  size_t matrix_bytes(bool experts = true) const noexcept;
};

// Called after each tensor: (tensors loaded, tensors total, bytes read so far).
using load_progress = std::function<void(size_t, size_t, size_t)>;

// Loads config.json and the safetensors of `dir`, or a GGUF file when `dir` is one. Errors name
// the file and tensor.
// hf_overrides: vLLM's --hf-overrides for config.json (load_model_config).
result<model_weights> load_weights(const std::string& dir, const load_progress& progress = {},
                                   std::string_view hf_overrides = {});

// For the CPU executors: every Q4_0 matrix repacked into 16-row tiles (quant.hpp,
// pack_q4_0_tiles; kept in `owned`, the refs' `packed` pointing there), and the GGUF file's pages
// of the originals released (gguf_file::release_pages), so resident memory stays about one copy.
// Returns the bytes repacked.
size_t pack_for_cpu(model_weights& w);

// For startup logs: "fp8 checkpoint (compressed-tensors, 12 MiB of fp8): 7 matrices kept in fp8
// with per-row scales", empty when the model has no fp8 matrices.
std::string describe_fp8(const model_weights& w);

// A copy of the matrix in fp32 (tests and the CUDA upload use it).
std::vector<float> to_f32(const weight_ref& w);

// Rows [first, first + n) of w, a view of the same bytes (no repacked tiles).
weight_ref weight_rows(const weight_ref& w, int64_t first, int64_t n);

// Phi-3's fused tensors as L's views: q, k, v the row ranges of qkv; gate then up the halves of
// gate_up.
void split_fused(const model_config& c, const weight_ref& qkv, const weight_ref& gate_up,
                 layer_weights& L);

}  // namespace coserve
