// The config a tensor-parallel rank's device weights are uploaded and run with (gpu/tp_peer.hpp):
// the model's, with the rank's query heads, KV heads and MLP width (model/tensor_parallel.hpp's
// split); the o_proj bias only on rank 0, which adds it once before the all-reduce. Host-only.
#pragma once

#include "model/config.hpp"
#include "model/weights.hpp"

namespace coserve::gpu {

inline model_config rank_config(const model_config& c, const tensor_shard& shard) {
  model_config r = c;
  if (shard.size <= 1) return r;
  r.num_attention_heads = shard.num_heads;
  r.num_key_value_heads = shard.num_kv_heads;
  r.intermediate_size = shard.intermediate_size;
  r.o_bias = c.o_bias && shard.rank == 0;
  return r;
}

}  // namespace coserve::gpu
