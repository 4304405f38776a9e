// The configs the CUDA executor's tensor-parallel ranks upload and run with, against the split the
// CPU executor's ranks use (model/tensor_parallel.hpp).
#include <catch2/catch.hpp>

#include "gpu/rank_config.hpp"
#include "model/tensor_parallel.hpp"

using namespace coserve;

TEST_CASE(
    "rank_config: each GPU rank's heads, KV heads and MLP width, o_proj's bias on rank 0 only",
    "[gpu_host][tp]") {
  model_config c;
  c.hidden_size = 512;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.intermediate_size = 1376;
  c.vocab_size = 2000;
  c.num_hidden_layers = 2;
  c.o_bias = true;
  c.qkv_bias = true;
  for (int32_t n : {1, 2, 4, 8}) {
    int32_t heads = 0, width = 0, biases = 0;
    for (int32_t r = 0; r < n; ++r) {
      CAPTURE(n, r);
      const tensor_shard sh = n > 1 ? shard_shape(c, r, n) : tensor_shard{};
      const model_config rc = gpu::rank_config(c, sh);
      CHECK(rc.num_attention_heads == c.num_attention_heads / n);
      // 2 KV heads: split at 2 ranks, each held by n / 2 ranks beyond.
      CHECK(rc.num_key_value_heads == (n == 1 ? 2 : 1));
      CHECK(rc.num_attention_heads % rc.num_key_value_heads == 0);
      CHECK(rc.intermediate_size == c.intermediate_size / n);
      CHECK(rc.hidden_size == c.hidden_size);
      CHECK(rc.vocab_size == c.vocab_size);
      CHECK(rc.qkv_bias);  // split with the heads, on every rank
      heads += rc.num_attention_heads;
      width += rc.intermediate_size;
      biases += rc.o_bias;
    }
    CHECK(heads == c.num_attention_heads);
    CHECK(width == c.intermediate_size);
    CHECK(biases == 1);
  }
}
