// A model folder's weights as fp32 CPU arrays (converted from F32/F16/BF16 safetensors).
// Matrices keep the Hugging Face layout [out_features, in_features], row-major; q/k/v are fused
// into one [(H + 2 * KVH) * D, hidden] matrix and gate/up into one [2 * I, hidden] so each layer
// runs two GEMMs where it would run five.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "runtime/expected.hpp"

namespace coserve {

struct layer_weights {
  std::vector<float> input_norm;     // [hidden]
  std::vector<float> qkv;            // [(H + 2 KVH) D, hidden]
  std::vector<float> qkv_bias;       // [(H + 2 KVH) D] or empty
  std::vector<float> o;              // [hidden, H D]
  std::vector<float> o_bias;         // [hidden] or empty
  std::vector<float> post_norm;      // [hidden]
  std::vector<float> gate_up;        // [2 I, hidden]
  std::vector<float> down;           // [hidden, I]
};

struct model_weights {
  model_config config;
  std::vector<float> embed;          // [vocab, hidden]
  std::vector<float> final_norm;     // [hidden]
  std::vector<float> lm_head;        // [vocab, hidden]; empty when tied to embed
  std::vector<layer_weights> layers;

  const float* lm_head_data() const noexcept { return lm_head.empty() ? embed.data() : lm_head.data(); }
};

// Called after each tensor: (tensors loaded, tensors total, bytes read so far).
using load_progress = std::function<void(size_t, size_t, size_t)>;

// Loads config.json and the safetensors of `dir`. Errors name the file and tensor.
result<model_weights> load_weights(const std::string& dir, const load_progress& progress = {});

}  // namespace coserve
