#include <catch2/catch.hpp>

#include "gpu/kernels.hpp"
#include "gpu/kv_cache_sizing.hpp"

using namespace coserve::gpu;

TEST_CASE("KV block bytes for Llama-3-8B", "[gpu_host][kv_sizing]") {
  kv_cache_shape s{32, 8, 128, 16, 2};
  CHECK(kv_block_bytes(s) == 2LL * 32 * 16 * 8 * 128 * 2);  // 2 MiB per 16-token block
}

TEST_CASE("an fp8 KV cache holds twice the blocks of a bf16 one in the same memory",
          "[gpu_host][kv_sizing][fp8]") {
  const kv_cache_shape bf{32, 8, 128, 16, kv_elem_bytes(kv_elem::bf16)};
  const kv_cache_shape f8{32, 8, 128, 16, kv_elem_bytes(kv_elem::fp8_e4m3)};
  CHECK(kv_elem_bytes(kv_elem::fp8_e5m2) == 1);
  CHECK(kv_block_bytes(bf) == 2 * kv_block_bytes(f8));
  const int64_t gib = int64_t(1) << 30;
  kv_budget_input in;
  in.total_bytes = 80 * gib;
  in.free_bytes = 60 * gib;
  in.utilization = 0.9;
  in.reserve_bytes = gib;
  auto a = kv_cache_num_blocks(bf, in), b = kv_cache_num_blocks(f8, in);
  REQUIRE((a.ok() && b.ok()));
  CHECK(*b >= 2 * *a);
  CHECK(*b <= 2 * *a + 1);
}

TEST_CASE("KV blocks from gpu_memory_utilization", "[gpu_host][kv_sizing]") {
  kv_cache_shape s{32, 8, 128, 16, 2};
  const int64_t gib = int64_t(1) << 30;
  kv_budget_input in;
  in.total_bytes = 80 * gib;
  in.free_bytes = 80 * gib - 17 * gib;  // weights + context
  in.utilization = 0.9;
  in.reserve_bytes = 1 * gib;
  auto n = kv_cache_num_blocks(s, in);
  REQUIRE(n.ok());
  const int64_t expect = (int64_t(80.0 * 0.9 * double(gib)) - 17 * gib - gib) / kv_block_bytes(s);
  CHECK(*n == expect);
  // lower utilization, fewer blocks
  in.utilization = 0.5;
  auto m = kv_cache_num_blocks(s, in);
  REQUIRE(m.ok());
  CHECK(*m < *n);
  // budget capped by what is actually free (another process uses memory)
  in.utilization = 1.0;
  in.free_bytes = 2 * gib;
  in.reserve_bytes = 0;
  auto f = kv_cache_num_blocks(s, in);
  REQUIRE(f.ok());
  CHECK(*f == 2 * gib / kv_block_bytes(s));
}

TEST_CASE("KV sizing errors", "[gpu_host][kv_sizing]") {
  kv_cache_shape s{32, 8, 128, 16, 2};
  kv_budget_input in{int64_t(1) << 30, int64_t(1) << 20, 0.9, 0};
  CHECK_FALSE(kv_cache_num_blocks(s, in).ok());  // 1 MiB free < one 2 MiB block
  in.free_bytes = in.total_bytes;
  in.utilization = 0.0;
  CHECK_FALSE(kv_cache_num_blocks(s, in).ok());
  in.utilization = 1.5;
  CHECK_FALSE(kv_cache_num_blocks(s, in).ok());
  in.utilization = 0.9;
  CHECK(kv_cache_num_blocks(s, in).ok());
}
