#include <catch2/catch.hpp>
#include <vector>

#include "actors/block_pool.hpp"

using namespace coserve::actors;

TEST_CASE("block_pool: allocate/free and reference counts", "[actors][block_pool]") {
  block_pool pool({.num_blocks = 4, .block_size = 4, .enable_prefix_caching = true, .hash = {}});
  CHECK(pool.num_free() == 4);
  CHECK(pool.can_allocate(4));
  CHECK_FALSE(pool.can_allocate(5));
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(pool.allocate());
  CHECK(pool.allocate() == -1);
  CHECK(pool.num_free() == 0);
  CHECK(pool.usage() == Approx(1.0));
  pool.incref(got[0]);
  CHECK(pool.ref_count(got[0]) == 2);
  pool.free(got[0]);
  CHECK(pool.num_free() == 0);
  pool.free(got[0]);
  CHECK(pool.num_free() == 1);
  for (int i = 1; i < 4; ++i) pool.free(got[static_cast<size_t>(i)]);
  CHECK(pool.num_free() == 4);
}

TEST_CASE("block_pool: prefix hit then LRU eviction of freed cached blocks",
          "[actors][block_pool]") {
  block_pool pool({.num_blocks = 3, .block_size = 2, .enable_prefix_caching = true, .hash = {}});
  const std::vector<int32_t> a{1, 2}, b{3, 4}, c{5, 6};
  int32_t ba = pool.allocate(), bb = pool.allocate(), bc = pool.allocate();
  uint64_t ha = pool.hash_block(0, a), hb = pool.hash_block(ha, b), hc = pool.hash_block(0, c);
  pool.register_full(ba, ha, 0, a);
  pool.register_full(bb, hb, ha, b);
  pool.register_full(bc, hc, 0, c);
  // Free order a, c, b: LRU order of eviction is a, c, b.
  pool.free(ba);
  pool.free(bc);
  pool.free(bb);
  CHECK(pool.num_free() == 3);
  // Hit on a (revives it: not free any more).
  CHECK(pool.lookup(ha, 0, a) == ba);
  CHECK(pool.num_free() == 2);
  // Same tokens, different parent: no hit.
  CHECK(pool.lookup(pool.hash_block(hc, b), hc, b) == -1);
  // Allocation evicts the least recently freed cached block still free: c.
  int32_t fresh = pool.allocate();
  CHECK(fresh == bc);
  CHECK_FALSE(pool.is_cached(bc));
  CHECK(pool.lookup(hc, 0, c) == -1);
  CHECK(pool.lookup(hb, ha, b) == bb);  // b survived
}

TEST_CASE("block_pool: a forced hash collision is not a hit", "[actors][block_pool]") {
  block_pool pool({.num_blocks = 4,
                   .block_size = 2,
                   .enable_prefix_caching = true,
                   .hash = [](uint64_t, std::span<const int32_t>) -> uint64_t { return 42; }});
  const std::vector<int32_t> x{1, 2}, y{7, 8};
  int32_t bx = pool.allocate();
  pool.register_full(bx, pool.hash_block(0, x), 0, x);
  pool.free(bx);
  CHECK(pool.hash_block(0, y) == pool.hash_block(0, x));
  CHECK(pool.lookup(pool.hash_block(0, y), 0, y) == -1);
  CHECK(pool.lookup(pool.hash_block(0, x), 0, x) == bx);
}

TEST_CASE("block_pool: caching disabled never hits", "[actors][block_pool]") {
  block_pool pool({.num_blocks = 2, .block_size = 2, .enable_prefix_caching = false, .hash = {}});
  const std::vector<int32_t> x{1, 2};
  int32_t b = pool.allocate();
  pool.register_full(b, pool.hash_block(0, x), 0, x);
  pool.free(b);
  CHECK(pool.lookup(pool.hash_block(0, x), 0, x) == -1);
}
