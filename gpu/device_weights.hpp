// A model's weights resident on one GPU as bf16 (the layer matrices optionally E4M3), in the
// Hugging Face layout ([out_features, in_features] row-major), with q/k/v fused into one matrix and
// gate/up into another. Two ways in:
//   upload_weights: from host model_weights (matrices in file precision, mapped; bf16 ones copied
//                   as they are, others converted, GGUF quantized types dequantized; q/k/v and
//                   gate/up concatenated; q/k rows of GGUF llama-layout files put back in the
//                   Hugging Face order), tensor by tensor, with progress after each tensor;
//   dummy_weights:  --load-format dummy, random bf16 generated on the device from a seed (no
//                   checkpoint, no host transfer): uniform(-1/sqrt(in), 1/sqrt(in)) matrices, unit
//                   norms, zero biases.
// Thread: built and read by the executor's thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu/device_buffer.hpp"
#include "gpu/launch_params.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace coserve::gpu {

struct device_layer {
  device_buffer input_norm, qkv, qkv_bias, o, o_bias, post_norm, gate_up, down;
  device_buffer q_norm, k_norm;  // Qwen3's per-head RMSNorm weights [head_dim], or empty
  // fp8: qkv, o, gate_up and down hold E4M3 codes, these their per-row fp32 scales.
  device_buffer qkv_scale, o_scale, gate_up_scale, down_scale;
};

struct device_weights {
  model_config config;
  // The four layer matrices in fp8 (E4M3 per output channel, quantized on the device at load:
  // --quantization fp8, or an fp8 checkpoint); embedding, LM head, norms and biases stay bf16.
  bool fp8 = false;
  gemv_rows gemv;  // small steps through the GEMV kernels (gpu_executor_options::gemv)
  device_buffer embed, final_norm, lm_head;  // lm_head empty when tied
  std::vector<device_layer> layers;
  int64_t bytes = 0;

  const void* lm_head_data() const noexcept {
    return lm_head.empty() ? embed.get() : lm_head.get();
  }
};

// Tensors (and bytes) the model has; progress reports (done, total, bytes so far). fp8: the layer
// matrices quantized per output channel (launch_quantize_rows_e4m3) from their bf16 values.
// lm_head false: no LM head is uploaded (a tensor-parallel rank other than 0, which never samples).
// The sizes come from w.config (for a tensor-parallel shard, the rank's: gpu/tp_peer.hpp).
result<device_weights> upload_weights(const model_weights& w, cudaStream_t stream,
                                      const load_progress& progress = {}, bool fp8 = false,
                                      bool lm_head = true);
result<device_weights> dummy_weights(const model_config& c, uint64_t seed, cudaStream_t stream,
                                     const load_progress& progress = {}, bool fp8 = false,
                                     bool lm_head = true);

}  // namespace coserve::gpu
