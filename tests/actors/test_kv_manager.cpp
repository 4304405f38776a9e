// kv_manager, the KV allocator's pure core: drafts in, plans and allocations out.
#include <algorithm>
#include <catch2/catch.hpp>

#include "actors/kv_manager.hpp"
#include "model/held_block_tables.hpp"

using namespace coserve;
using namespace coserve::actors;

namespace {

draft_entry admit(step_draft& d, seq_id_t id, std::vector<int32_t> prompt, int32_t tokens) {
  draft_entry e;
  e.seq_id = id;
  e.admit = true;
  e.count_query = true;
  e.num_tokens = static_cast<int32_t>(prompt.size());
  e.tokens = tokens;
  new_seq ns;
  ns.seq_id = id;
  ns.prompt_ids = prompt;
  e.announce = static_cast<int32_t>(d.announcements.size());
  d.announcements.push_back(ns);
  e.append_begin = static_cast<uint32_t>(d.appended.size());
  e.append_count = static_cast<uint32_t>(prompt.size());
  d.appended.insert(d.appended.end(), prompt.begin(), prompt.end());
  return e;
}

// `admit` with the request's cache_salt (sampling_params::cache_salt).
draft_entry admit_salted(step_draft& d, seq_id_t id, std::vector<int32_t> prompt, uint64_t salt) {
  const int32_t n = static_cast<int32_t>(prompt.size());
  draft_entry e = admit(d, id, std::move(prompt), n);
  d.announcements.back().params.cache_salt = salt;
  return e;
}

draft_entry decode(seq_id_t id, int32_t num_tokens) {
  draft_entry e;
  e.seq_id = id;
  e.num_tokens = num_tokens;
  e.tokens = 1;
  return e;
}

bool contains(const std::vector<seq_id_t>& v, seq_id_t id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

}  // namespace

TEST_CASE("kv_manager: an admission that does not fit is deferred, and every later one with it",
          "[actors][kv]") {
  kv_manager kv({.num_blocks = 4, .block_size = 4, .enable_prefix_caching = true, .hash = {}});
  step_draft d;
  d.step_id = 1;
  d.entries.push_back(admit(d, 1, {1, 2, 3, 4, 5, 6, 7, 8, 9}, 9));  // 3 blocks
  d.entries.push_back(admit(d, 2, {9, 9, 9, 9, 9}, 5));              // 2 blocks: does not fit
  d.entries.push_back(admit(d, 3, {7}, 1));                          // 1 block would fit, but FCFS
  auto [plan, alloc] = kv.resolve(std::move(d));
  REQUIRE(alloc.seqs.size() == 1);
  CHECK(alloc.seqs[0].seq_id == 1);
  CHECK(alloc.deferred == std::vector<seq_id_t>{2, 3});
  CHECK(plan.new_seqs.size() == 1);
  CHECK(plan.seqs.at(0).block_table.size() == 3);
  CHECK(plan.seqs.at(0).sample);
  CHECK(kv.pool().num_free() == 1);
  CHECK(kv.block_table(2) == nullptr);
  kv.release(1);
  CHECK(kv.pool().num_free() == 4);
  CHECK(kv.has_drops());  // the executor knew it: dropped with the next plan
  CHECK(kv.take_drops() == std::vector<seq_id_t>{1});
}

TEST_CASE("kv_manager: a running sequence that needs a block preempts the newest holder",
          "[actors][kv]") {
  kv_manager kv({.num_blocks = 4, .block_size = 4, .enable_prefix_caching = false, .hash = {}});
  {
    step_draft d;
    d.step_id = 1;
    d.entries.push_back(admit(d, 1, {1, 2, 3, 4}, 4));             // fills block 1 exactly
    d.entries.push_back(admit(d, 2, {5, 6, 7, 8, 9, 10, 11}, 7));  // 2 blocks
    auto [plan, alloc] = kv.resolve(std::move(d));
    REQUIRE(alloc.seqs.size() == 2);
    CHECK(kv.pool().num_free() == 1);
  }
  {
    step_draft d;
    d.step_id = 2;
    d.entries.push_back(decode(1, 5));  // position 4: a new block (the last free one)
    d.entries.push_back(decode(2, 8));  // position 7: fits in its second block
    auto [plan, alloc] = kv.resolve(std::move(d));
    CHECK(alloc.preempted.empty());
    CHECK(kv.pool().num_free() == 0);
  }
  {
    step_draft d;
    d.step_id = 3;
    d.entries.push_back(decode(1, 6));  // position 5: in its second block, no new block
    d.entries.push_back(decode(2, 9));  // position 8: a third block; none free; it is the newest
    auto [plan, alloc] = kv.resolve(std::move(d));
    CHECK(alloc.preempted == std::vector<seq_id_t>{2});
    CHECK(contains(plan.finished, 2));  // the executor drops it (recomputed on readmission)
    REQUIRE(alloc.seqs.size() == 1);
    CHECK(alloc.seqs[0].seq_id == 1);
    CHECK(kv.pool().num_free() == 2);
  }
  {
    step_draft d;
    d.step_id = 4;
    d.entries.push_back(decode(1, 7));
    d.entries.push_back(admit(d, 2, {5, 6, 7, 8, 9, 10, 11, 12}, 8));  // readmitted: recompute
    auto [plan, alloc] = kv.resolve(std::move(d));
    CHECK(alloc.preempted.empty());
    REQUIRE(alloc.seqs.size() == 2);
    CHECK(alloc.seqs[1].start_pos == 0);
    CHECK(alloc.seqs[1].tokens == 8);
    CHECK(plan.new_seqs.size() == 1);
    CHECK(kv.pool().num_free() == 0);
  }
  kv.release(1);
  kv.release(2);
  CHECK(kv.pool().num_free() == 4);
}

TEST_CASE("kv_manager: prefix hits are counted once and leave the last token to compute",
          "[actors][kv]") {
  kv_manager kv({.num_blocks = 8, .block_size = 4, .enable_prefix_caching = true, .hash = {}});
  const std::vector<int32_t> prompt{1, 2, 3, 4, 5, 6, 7, 8};
  {
    step_draft d;
    d.step_id = 1;
    d.entries.push_back(admit(d, 1, prompt, 8));
    auto [plan, alloc] = kv.resolve(std::move(d));
    CHECK(alloc.seqs.at(0).cached_tokens == 0);
  }
  kv.step_outcome(1, true);  // the step succeeded: its full blocks enter the prefix cache
  kv.release(1);
  step_draft d;
  d.step_id = 2;
  d.entries.push_back(admit(d, 2, prompt, 8));
  auto [plan, alloc] = kv.resolve(std::move(d));
  REQUIRE(alloc.seqs.size() == 1);
  CHECK(alloc.seqs[0].cached_tokens == 4);  // the second block holds the last token: recomputed
  CHECK(alloc.seqs[0].start_pos == 4);
  CHECK(alloc.seqs[0].tokens == 4);
  CHECK(plan.seqs.at(0).tokens == std::vector<int32_t>{5, 6, 7, 8});
  CHECK(alloc.prefix_queries == 16);
  CHECK(alloc.prefix_hits == 4);
}

TEST_CASE("kv_manager: blocks are shared only between requests of the same cache salt",
          "[actors][kv]") {
  kv_manager kv({.num_blocks = 16, .block_size = 4, .enable_prefix_caching = true, .hash = {}});
  const std::vector<int32_t> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9};
  const uint64_t a = cache_salt_hash("tenant-a"), b = cache_salt_hash("tenant-b");
  CHECK(a != b);
  CHECK(cache_salt_hash("") != 0);
  uint64_t step = 0;
  seq_id_t id = 0;
  // Runs the prompt under `salt` to its end and releases it; returns the tokens found cached.
  auto run = [&](uint64_t salt) {
    step_draft d;
    d.step_id = ++step;
    d.entries.push_back(admit_salted(d, ++id, prompt, salt));
    auto [plan, alloc] = kv.resolve(std::move(d));
    REQUIRE(alloc.seqs.size() == 1);
    kv.step_outcome(step, true);
    kv.release(id);
    return alloc.seqs[0].cached_tokens;
  };
  CHECK(run(a) == 0);
  CHECK(run(a) == 8);  // two full blocks, the last token recomputed
  CHECK(run(b) == 0);
  CHECK(run(0) == 0);  // unsalted: none of the salted blocks
  CHECK(run(0) == 8);
  CHECK(run(b) == 8);
}

TEST_CASE(
    "kv_manager: blocks of a failed step never enter the prefix cache and those of a pending one "
    "not yet",
    "[actors][kv]") {
  kv_manager kv({.num_blocks = 8, .block_size = 4, .enable_prefix_caching = true, .hash = {}});
  const std::vector<int32_t> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto run = [&](uint64_t step, seq_id_t id) {
    step_draft d;
    d.step_id = step;
    d.entries.push_back(admit(d, id, prompt, 9));
    auto [plan, alloc] = kv.resolve(std::move(d));
    REQUIRE(alloc.seqs.size() == 1);
    return alloc.seqs[0].cached_tokens;
  };
  CHECK(run(1, 1) == 0);
  CHECK(kv.steps_pending() == 1);
  CHECK(run(2, 2) == 0);  // step 1 has not succeeded yet: nothing to reuse
  kv.step_outcome(1, false);
  kv.release(1);
  CHECK(run(3, 3) == 0);  // step 1 failed: its blocks were never registered
  kv.step_outcome(2, true);
  kv.release(2);
  kv.step_outcome(3, true);
  kv.release(3);
  CHECK(kv.steps_pending() == 0);
  CHECK(run(4, 4) == 8);  // steps 2 and 3 succeeded: two full blocks are reused
}

TEST_CASE(
    "kv_manager: proposals follow the known tokens, are never cached, and roll back when rejected",
    "[actors][kv][speculation]") {
  kv_manager kv({.num_blocks = 8, .block_size = 4, .enable_prefix_caching = true, .hash = {}});
  {
    step_draft d;
    d.step_id = 1;
    d.entries.push_back(admit(d, 1, {1, 2, 3, 4, 5, 6}, 6));
    auto [plan, alloc] = kv.resolve(std::move(d));
    kv.step_outcome(1, true);
  }
  {
    // Sampled 7 (known now); the step computes it and proposals 8, 9, 10 at positions 7..9.
    step_draft d;
    d.step_id = 2;
    draft_entry e = decode(1, 7 + 3);
    e.tokens = 4;
    e.num_computed = 6;
    e.append_begin = 0;
    e.append_count = 1;
    d.appended = {7};
    e.proposal_begin = 0;
    e.proposal_count = 3;
    d.proposals = {8, 9, 10};
    d.entries.push_back(e);
    auto [plan, alloc] = kv.resolve(std::move(d));
    REQUIRE(plan.seqs.size() == 1);
    CHECK(plan.seqs[0].start_pos == 6);
    CHECK(plan.seqs[0].tokens == std::vector<int32_t>{7, 8, 9, 10});
    CHECK(plan.seqs[0].num_draft == 3);
    CHECK(plan.seqs[0].sample);
    // Positions 0..9: a third block, sent as a change to the two the executor holds.
    CHECK(plan.seqs[0].table_kept == 2);
    CHECK(plan.seqs[0].block_table.size() == 1);
    kv.step_outcome(2, true);
  }
  {
    // Only 8 was accepted, then the model's own 11: known 1..8, 11; computed through position 7.
    step_draft d;
    d.step_id = 3;
    draft_entry e = decode(1, 10);
    e.num_computed = 8;
    e.append_begin = 0;
    e.append_count = 2;
    d.appended = {8, 11};
    d.entries.push_back(e);
    auto [plan, alloc] = kv.resolve(std::move(d));
    REQUIRE(plan.seqs.size() == 1);
    CHECK(plan.seqs[0].start_pos == 8);  // position 8 (proposal 9's) is computed again, as 11
    CHECK(plan.seqs[0].tokens == std::vector<int32_t>{11});
    CHECK(plan.seqs[0].num_draft == 0);
    kv.step_outcome(3, true);
  }
  kv.release(1);
  // What the cache holds is the known tokens' blocks: [1..4] and [5 6 7 8]; a prompt with the
  // rejected proposals there finds only the first block.
  step_draft d;
  d.step_id = 4;
  d.entries.push_back(admit(d, 2, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 10));
  auto [plan, alloc] = kv.resolve(std::move(d));
  REQUIRE(alloc.seqs.size() == 1);
  CHECK(alloc.seqs[0].cached_tokens == 8);
  step_draft d2;
  d2.step_id = 5;
  kv.release(2);
  d2.entries.push_back(admit(d2, 3, {1, 2, 3, 4, 5, 6, 7, 11, 12}, 9));
  auto [plan2, alloc2] = kv.resolve(std::move(d2));
  REQUIRE(alloc2.seqs.size() == 1);
  CHECK(alloc2.seqs[0].cached_tokens == 4);
}

TEST_CASE("kv_manager: proposals after a token still being sampled follow the placeholder",
          "[actors][kv][speculation]") {
  kv_manager kv({.num_blocks = 8, .block_size = 4, .enable_prefix_caching = true, .hash = {}});
  step_draft d;
  d.step_id = 1;
  d.entries.push_back(admit(d, 1, {1, 2, 3, 4, 5}, 5));
  kv.resolve(std::move(d));
  step_draft d2;
  d2.step_id = 2;
  draft_entry e = decode(1, 5 + 1 + 2);  // the token step 1 samples, then two proposals
  e.tokens = 3;
  e.num_computed = 5;
  e.proposal_begin = 0;
  e.proposal_count = 2;
  d2.proposals = {8, 9};
  d2.entries.push_back(e);
  auto [plan, alloc] = kv.resolve(std::move(d2));
  REQUIRE(plan.seqs.size() == 1);
  CHECK(plan.seqs[0].start_pos == 5);
  CHECK(plan.seqs[0].tokens == std::vector<int32_t>{k_token_from_last_step, 8, 9});
  CHECK(plan.seqs[0].num_draft == 2);
  CHECK(plan.seqs[0].sample);
}

TEST_CASE("kv_manager: block tables go out as changes, which held_block_tables expands",
          "[actors][kv]") {
  kv_manager kv({.num_blocks = 16, .block_size = 4, .enable_prefix_caching = false, .hash = {}});
  held_block_tables held;
  auto run = [&](step_draft d) {
    auto [plan, alloc] = kv.resolve(std::move(d));
    step_plan whole = plan;
    held.expand(whole);
    for (size_t i = 0; i < whole.seqs.size(); ++i) {
      CAPTURE(whole.seqs[i].seq_id);
      CHECK(whole.seqs[i].table_kept == 0);
      CHECK(whole.seqs[i].block_table == *kv.block_table(whole.seqs[i].seq_id));
    }
    return plan;
  };
  step_draft d;
  d.step_id = 1;
  d.entries.push_back(admit(d, 1, {1, 2, 3, 4, 5, 6}, 6));  // 2 blocks, sent whole
  step_plan p = run(std::move(d));
  CHECK(p.seqs[0].table_kept == 0);
  CHECK(p.seqs[0].block_table.size() == 2);
  kv.step_outcome(1, true);
  d = {};
  d.step_id = 2;
  d.entries.push_back(decode(1, 7));  // position 6: in its second block, nothing new to send
  p = run(std::move(d));
  CHECK(p.seqs[0].table_kept == 2);
  CHECK(p.seqs[0].block_table.empty());
  kv.step_outcome(2, true);
  d = {};
  d.step_id = 3;
  d.entries.push_back(decode(1, 8));  // position 7: the block fills, still nothing new
  p = run(std::move(d));
  CHECK(p.seqs[0].block_table.empty());
  kv.step_outcome(3, true);
  d = {};
  d.step_id = 4;
  d.entries.push_back(decode(1, 9));  // position 8: a third block, the only change
  p = run(std::move(d));
  CHECK(p.seqs[0].table_kept == 2);
  CHECK(p.seqs[0].block_table.size() == 1);
  kv.step_outcome(4, true);
  // A fork shares the partial third block; the parent's next write copies it: the change starts
  // at the copied block.
  d = {};
  d.step_id = 5;
  draft_fork f;
  f.child = 2;
  f.parent = 1;
  f.shared_tokens = 9;
  f.announce.seq_id = 2;
  f.announce.prompt_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  d.forks.push_back(f);
  d.entries.push_back(decode(1, 10));
  p = run(std::move(d));
  REQUIRE(p.block_copies.size() == 1);
  CHECK(p.seqs[0].table_kept == 2);
  CHECK(p.seqs[0].block_table == std::vector<int32_t>{p.block_copies[0].second});
  // Preempted and readmitted: a new registration, its table whole again.
  kv.release(1);
  CHECK(kv.take_drops() == std::vector<seq_id_t>{1});
  step_plan drop;
  drop.finished = {1};
  held.expand(drop);  // forgets it
  d = {};
  d.step_id = 6;
  d.entries.push_back(admit(d, 1, {1, 2, 3, 4, 5}, 5));
  p = run(std::move(d));
  CHECK(p.seqs[0].table_kept == 0);
  CHECK(p.seqs[0].block_table.size() == 2);
  // A change that keeps more than is held is refused.
  step_plan bad;
  bad.seqs.push_back(scheduled_seq{.seq_id = 99, .tokens = {1}, .start_pos = 0, .table_kept = 3});
  CHECK_THROWS_AS(held.expand(bad), std::logic_error);
}

TEST_CASE(
    "kv_manager: blocks many sequences fill on one step are registered over the next steps, "
    "and a lookup or a release still finds every one",
    "[actors][kv]") {
  kv_manager kv({.num_blocks = 256, .block_size = 4, .enable_prefix_caching = true, .hash = {}});
  constexpr int32_t n = 100;
  auto prompt_of = [](int32_t i) {
    std::vector<int32_t> p;
    for (int32_t k = 0; k < 8; ++k) p.push_back(1000 * (i + 1) + k);  // two full blocks each
    return p;
  };
  step_draft d;
  d.step_id = 1;
  for (int32_t i = 0; i < n; ++i)
    d.entries.push_back(admit(d, static_cast<seq_id_t>(i + 1), prompt_of(i), 8));
  auto first = kv.resolve(std::move(d));
  REQUIRE(first.second.seqs.size() == n);
  auto cached_blocks = [&] {
    int32_t c = 0;
    for (int32_t i = 0; i < n; ++i)
      if (const auto* t = kv.block_table(static_cast<seq_id_t>(i + 1)))
        for (int32_t b : *t) c += kv.pool().is_cached(b) ? 1 : 0;
    return c;
  };
  kv.step_outcome(1, true);
  CHECK(cached_blocks() == 0);  // queued, not yet registered
  step_draft idle;
  idle.step_id = 2;
  kv.resolve(std::move(idle));
  const int32_t after_one = cached_blocks();
  CHECK(after_one >= 32);
  CHECK(after_one < 2 * n);  // paced: not all on one step
  // Releasing a sequence registers its queued blocks first: they stay findable as cached-free.
  kv.release(static_cast<seq_id_t>(n));
  CHECK(kv.pool().num_cached_free() == 2);
  // A new request sharing sequence n-1's prompt finds both of its blocks: the lookup drains the
  // queue first.
  step_draft again;
  again.step_id = 3;
  std::vector<int32_t> p = prompt_of(n - 2);
  p.push_back(7);
  again.entries.push_back(admit(again, 1000, p, 9));
  auto [plan, alloc] = kv.resolve(std::move(again));
  REQUIRE(alloc.seqs.size() == 1);
  CHECK(alloc.seqs[0].cached_tokens == 8);
  CHECK(cached_blocks() == 2 * (n - 1));
}
