#include <algorithm>
#include <catch2/catch.hpp>

#include "gpu/launch_params.hpp"

using namespace coserve::gpu;

TEST_CASE("attention tiles fit the warps and shared memory", "[gpu_host][launch_params]") {
  for (int32_t gqa : {1, 2, 4, 5, 7, 8, 16, 32}) {
    INFO("gqa " << gqa);
    CHECK(attention_q_tile(gqa) >= 1);
    CHECK(attention_rows(gqa) <= k_attn_warps * k_attn_max_rows_per_warp);
    CHECK(attention_supported(gqa, 128));
    CHECK(attention_smem_bytes(gqa, 128) <= 48 * 1024);  // no opt-in attribute needed
  }
  CHECK(attention_q_tile(1) == 16);
  CHECK(attention_q_tile(4) == 4);
  CHECK(attention_q_tile(8) == 2);
  CHECK_FALSE(attention_supported(64, 128));
  CHECK_FALSE(attention_supported(4, 80));
  CHECK_FALSE(attention_supported(4, 256));
  for (int32_t d : {32, 64, 96, 128}) CHECK(attention_supported(4, d));
}

TEST_CASE("split-KV heuristic", "[gpu_host][launch_params]") {
  // multi-tile prefill chunks are never split
  CHECK(choose_num_splits(64, 8192, 4, 8, 132) == 1);
  // short contexts are not split
  CHECK(choose_num_splits(1, 511, 4, 8, 132) == 1);
  // a lone long decode is split up to the key-length limit
  CHECK(choose_num_splits(1, 1024, 4, 8, 132) == 4);
  CHECK(choose_num_splits(1, 32768, 4, 8, 132) == 32);
  CHECK(choose_num_splits(1, 32768, 4, 8, 132, 16) == 16);
  // a full GPU is not split further
  CHECK(choose_num_splits(1, 32768, 4, 264, 132) == 1);
  // 66 blocks: two splits give two blocks per SM
  CHECK(choose_num_splits(1, 32768, 4, 132, 132) == 2);
}

TEST_CASE("elementwise grid covers and caps", "[gpu_host][launch_params]") {
  CHECK(elementwise_grid(1, 132).blocks == 1);
  CHECK(elementwise_grid(257, 132).blocks == 2);
  CHECK(elementwise_grid(int64_t(1) << 40, 132).blocks == 132 * 16);
}

TEST_CASE("gemm row buckets: powers of two up to max_m, ascending, every m under one",
          "[gpu_host][launch_params]") {
  CHECK(gemm_m_buckets(1) == std::vector<int32_t>{1});
  CHECK(gemm_m_buckets(8) == std::vector<int32_t>{1, 2, 4, 8});
  CHECK(gemm_m_buckets(100) == std::vector<int32_t>{1, 2, 4, 8, 16, 32, 64, 100});
  CHECK(gemm_m_buckets(0).empty());
  const auto b = gemm_m_buckets(2048);
  CHECK(std::is_sorted(b.begin(), b.end()));
  CHECK(b.back() == 2048);
  for (int32_t m = 1; m <= 2048; ++m) {  // the first bucket >= m is at most twice m
    const auto at = std::lower_bound(b.begin(), b.end(), m);
    REQUIRE(at != b.end());
    REQUIRE(*at < 2 * m);
  }
}
