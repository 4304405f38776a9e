// KV-cache events: what block_pool records, that replaying them rebuilds the prefix cache under a
// running workload (evictions, salts, a reset mid-run), the flag's parser, and the msgpack batch.
// The ZMQ publisher is tested in test_kv_event_publisher.cpp; the wire format against vLLM's
// Python decoder in tests/python/test_kv_events.py.
#include <catch2/catch.hpp>
#include <map>
#include <msgpack.hpp>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "actors/batch_planner.hpp"
#include "actors/kv_event_publisher.hpp"
#include "sim_executor.hpp"

using namespace coserve;
using namespace coserve::actors;

namespace {

block_pool_options recording(int32_t blocks, int32_t block_size) {
  return {.num_blocks = blocks,
          .block_size = block_size,
          .enable_prefix_caching = true,
          .hash = {},
          .record_events = true};
}

// The cached hashes a subscriber holds after applying `events` (checking each as it goes: a
// stored hash is new, a removed one is held). A stored chain's parent need not be held: a block
// computed by two sequences at once is cached once, and the copy that was may be evicted before
// the other sequence registers the next block.
struct replica {
  std::set<uint64_t> held;
  int32_t block_size = 0;
  void apply(const std::vector<kv_cache_event>& events) {
    for (const kv_cache_event& e : events) {
      if (const auto* s = std::get_if<kv_block_stored>(&e)) {
        REQUIRE_FALSE(s->hashes.empty());
        REQUIRE(s->tokens.size() == s->hashes.size() * static_cast<size_t>(block_size));
        for (uint64_t h : s->hashes) CHECK(held.insert(h).second);
      } else if (const auto* r = std::get_if<kv_block_removed>(&e)) {
        for (uint64_t h : r->hashes) CHECK(held.erase(h) == 1);
      } else {
        held.clear();
      }
    }
  }
};

std::set<uint64_t> cached_hashes(const block_pool& pool) {
  std::set<uint64_t> out;
  for (const auto& b : pool.cached_blocks()) out.insert(b.hash);
  return out;
}

}  // namespace

TEST_CASE("kv events: a chain registered in order is one BlockStored, evictions one BlockRemoved",
          "[actors][kv_events]") {
  block_pool pool(recording(4, 2));
  const std::vector<int32_t> a{1, 2}, b{3, 4}, c{5, 6};
  const int32_t ba = pool.allocate(), bb = pool.allocate(), bc = pool.allocate();
  const uint64_t salt = 77;
  const uint64_t ha = pool.hash_block(salt, a), hb = pool.hash_block(ha, b);
  const uint64_t hc = pool.hash_block(0, c);
  pool.register_full(ba, ha, salt, a, true);
  pool.register_full(bb, hb, ha, b);
  pool.register_full(ba, ha, salt, a, true);  // already registered: nothing recorded
  pool.register_full(bc, hc, 0, c, true);     // a new chain: a new event
  std::vector<kv_cache_event> ev = pool.take_events();
  REQUIRE(ev.size() == 2);
  const auto& first = std::get<kv_block_stored>(ev[0]);
  CHECK(first.hashes == std::vector<uint64_t>{ha, hb});
  CHECK_FALSE(first.parent.has_value());  // the salt is not a parent block
  CHECK(first.tokens == std::vector<int32_t>{1, 2, 3, 4});
  CHECK(std::get<kv_block_stored>(ev[1]).hashes == std::vector<uint64_t>{hc});
  CHECK(pool.take_events().empty());

  // A block continuing a chain stored in an earlier batch names its parent.
  const int32_t bd = pool.allocate();
  const std::vector<int32_t> d{7, 8};
  const uint64_t hd = pool.hash_block(hb, d);
  pool.register_full(bd, hd, hb, d);
  ev = pool.take_events();
  REQUIRE(ev.size() == 1);
  CHECK(std::get<kv_block_stored>(ev[0]).parent == hb);

  // Freed in the order c, a, b, d: allocation evicts in that order.
  for (int32_t id : {bc, ba, bb, bd}) pool.free(id);
  CHECK(pool.allocate() == bc);
  CHECK(pool.allocate() == ba);
  ev = pool.take_events();
  REQUIRE(ev.size() == 1);
  CHECK(std::get<kv_block_removed>(ev[0]).hashes == std::vector<uint64_t>{hc, ha});
}

TEST_CASE("kv events: reset_prefix_cache drops every cached block, in use or free",
          "[actors][kv_events]") {
  block_pool pool(recording(4, 2));
  const std::vector<int32_t> a{1, 2}, b{3, 4};
  const int32_t ba = pool.allocate(), bb = pool.allocate();
  const uint64_t ha = pool.hash_block(0, a), hb = pool.hash_block(ha, b);
  pool.register_full(ba, ha, 0, a, true);
  pool.register_full(bb, hb, ha, b);
  pool.free(ba);  // free and cached; bb stays in use
  (void)pool.take_events();
  CHECK(pool.reset_prefix_cache() == 2);
  CHECK(pool.cached_blocks().empty());
  CHECK(pool.num_cached_free() == 0);
  CHECK(pool.num_free() == 3);
  CHECK(pool.lookup(ha, 0, a) == -1);
  CHECK(pool.ref_count(bb) == 1);  // its sequence still holds it
  const std::vector<kv_cache_event> ev = pool.take_events();
  REQUIRE(ev.size() == 1);
  CHECK(std::holds_alternative<kv_all_blocks_cleared>(ev[0]));
  // Every free block is allocatable once, none twice.
  std::set<int32_t> got;
  for (int i = 0; i < 3; ++i) CHECK(got.insert(pool.allocate()).second);
  CHECK(pool.allocate() == -1);
  CHECK(got.count(bb) == 0);
  // Nothing is recorded without record_events.
  block_pool quiet({.num_blocks = 2, .block_size = 2, .enable_prefix_caching = true, .hash = {}});
  const int32_t q = quiet.allocate();
  quiet.register_full(q, ha, 0, a, true);
  CHECK(quiet.take_events().empty());
}

TEST_CASE(
    "kv events: replaying them rebuilds the prefix cache through a workload with evictions, "
    "salts and a reset",
    "[actors][kv_events]") {
  constexpr int32_t bs = 4, blocks = 40, vocab = 50;
  planner_config cfg{
      .max_num_seqs = 6, .max_num_batched_tokens = 24, .max_model_len = 96, .eos_id = -1};
  batch_planner planner(cfg, recording(blocks, bs));
  test::sim_executor ex(blocks, bs, vocab);
  replica sub{.held = {}, .block_size = bs};
  std::mt19937 rng(12345);
  const std::vector<std::vector<int32_t>> prefixes = {
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {20, 21, 22, 23, 24, 25, 26, 27}, {30, 31, 32, 33}};
  seq_id_t next_id = 1;
  int32_t stored = 0, removed = 0, cleared = 0;
  std::optional<step_plan> inflight;
  for (int iter = 0; iter < 4000; ++iter) {
    if (iter < 3000 && planner.num_waiting() + planner.num_running() < 5 && rng() % 3 == 0) {
      sequence s;
      s.id = s.request_id = s.arrival = next_id++;
      s.prompt = prefixes[rng() % prefixes.size()];
      for (uint32_t n = rng() % 9; n > 0; --n) s.prompt.push_back(static_cast<int32_t>(rng() % 40));
      s.params.max_tokens = 1 + static_cast<int32_t>(rng() % 8);
      s.params.temperature = 0.0f;
      s.params.cache_salt = rng() % 3 == 0 ? cache_salt_hash("tenant") : 0;
      s.seed = s.id;
      planner.add(std::move(s));
    }
    if (iter == 1500) planner.pool().reset_prefix_cache();  // with sequences running
    step_plan next = planner.plan();
    if (inflight) (void)planner.on_result(ex.execute(*inflight));
    const bool empty = next.seqs.empty() && next.finished.empty() && next.new_seqs.empty();
    inflight = empty ? std::nullopt : std::optional<step_plan>(std::move(next));
    const std::vector<kv_cache_event> events = planner.pool().take_events();
    for (const auto& e : events) {
      stored += std::holds_alternative<kv_block_stored>(e);
      removed += std::holds_alternative<kv_block_removed>(e);
      cleared += std::holds_alternative<kv_all_blocks_cleared>(e);
    }
    sub.apply(events);
    REQUIRE(sub.held == cached_hashes(planner.pool()));
  }
  CHECK_FALSE(planner.has_work());
  CHECK(stored > 20);
  CHECK(removed > 5);  // 40 blocks for this many prompts: evictions happened
  CHECK(cleared == 1);
  CHECK(planner.pool().prefix_hits() > 0);
}

TEST_CASE("kv events: --kv-events-config parses vLLM's keys and names the bad one",
          "[actors][kv_events]") {
  auto c = parse_kv_events_config(R"({"enable_kv_cache_events": true, "endpoint": "tcp://*:6000",
      "replay_endpoint": "tcp://*:6001", "topic": "kv", "buffer_steps": 5})");
  REQUIRE(c);
  CHECK(c->publishes());
  CHECK(c->publisher == "zmq");  // vLLM's default once enabled
  CHECK(c->endpoint == "tcp://*:6000");
  CHECK(c->replay_endpoint == "tcp://*:6001");
  CHECK(c->topic == "kv");
  CHECK(c->buffer_steps == 5);
  CHECK(c->hwm == 100000);
  auto off = parse_kv_events_config(R"({"publisher": "zmq"})");
  REQUIRE(off);
  CHECK_FALSE(off->publishes());
  auto null_pub =
      parse_kv_events_config(R"({"enable_kv_cache_events": true, "publisher": "null"})");
  REQUIRE(null_pub);
  CHECK_FALSE(null_pub->publishes());
  for (const char* bad :
       {R"({"enable_kv_cache_events": 1})", R"({"publisher": "kafka"})", R"({"endpoint": "5557"})",
        R"({"buffer_steps": 0})", R"({"hwm": "many"})", R"({"endpiont": "tcp://*:1"})"}) {
    auto r = parse_kv_events_config(bad);
    REQUIRE_FALSE(r);
    CHECK(r.err().message.find("--kv-events-config: '") == 0);
    CHECK_FALSE(r.err().param.empty());
  }
  CHECK_FALSE(parse_kv_events_config("[]"));
  CHECK_FALSE(parse_kv_events_config("{"));
}

TEST_CASE("kv events: the batch is msgspec's array-like KVEventBatch", "[actors][kv_events]") {
  const uint64_t big = 0xfedcba9876543210ull;  // above 2^63: stays an unsigned 64-bit integer
  const std::vector<kv_cache_event> events = {
      kv_block_stored{{big, 5}, std::nullopt, {1, 2, 3, 4, 5, 6, 7, 8}},
      kv_block_stored{{9}, big, {-1, 70000, 3, 4}}, kv_block_removed{{big}},
      kv_all_blocks_cleared{}};
  const std::string bytes = encode_kv_event_batch(1234.5, events, 4, "CPU", 0);
  msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& o = oh.get();
  REQUIRE(o.type == msgpack::type::ARRAY);
  REQUIRE(o.via.array.size == 3);
  CHECK(o.via.array.ptr[0].type == msgpack::type::FLOAT64);
  CHECK(o.via.array.ptr[0].as<double>() == 1234.5);
  CHECK(o.via.array.ptr[2].as<int>() == 0);
  const msgpack::object& list = o.via.array.ptr[1];
  REQUIRE(list.via.array.size == 4);
  const msgpack::object* s = list.via.array.ptr[0].via.array.ptr;
  REQUIRE(list.via.array.ptr[0].via.array.size == 7);
  CHECK(s[0].as<std::string>() == "BlockStored");
  CHECK(s[1].as<std::vector<uint64_t>>() == std::vector<uint64_t>{big, 5});
  CHECK(s[2].is_nil());
  CHECK(s[3].as<std::vector<int32_t>>() == std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(s[4].as<int>() == 4);
  CHECK(s[5].is_nil());
  CHECK(s[6].as<std::string>() == "CPU");
  const msgpack::object* s2 = list.via.array.ptr[1].via.array.ptr;
  CHECK(s2[2].as<uint64_t>() == big);
  CHECK(s2[3].as<std::vector<int32_t>>() == std::vector<int32_t>{-1, 70000, 3, 4});
  const msgpack::object& r = list.via.array.ptr[2];
  REQUIRE(r.via.array.size == 3);
  CHECK(r.via.array.ptr[0].as<std::string>() == "BlockRemoved");
  CHECK(r.via.array.ptr[2].as<std::string>() == "CPU");
  const msgpack::object& c = list.via.array.ptr[3];
  REQUIRE(c.via.array.size == 1);
  CHECK(c.via.array.ptr[0].as<std::string>() == "AllBlocksCleared");
}
