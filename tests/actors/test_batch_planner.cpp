#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "actors/batch_planner.hpp"
#include "sim_executor.hpp"

using namespace coserve;
using namespace coserve::actors;
using coserve::test::sim_executor;
using coserve::test::sim_next_token;

namespace {

constexpr int32_t k_vocab = 50;

sequence make_seq(seq_id_t id, std::vector<int32_t> prompt, int32_t max_tokens,
                  int32_t priority = 0) {
  sequence s;
  s.id = id;
  s.request_id = id;
  s.arrival = id;
  s.priority = priority;
  s.prompt = std::move(prompt);
  s.params.max_tokens = max_tokens;
  s.params.temperature = 0.0f;
  s.seed = id * 31 + 1;
  return s;
}

// The outputs a sequence must produce when run alone (no eos).
std::vector<int32_t> reference(const sequence& s, int32_t eos = -1) {
  std::vector<int32_t> hist = s.prompt, out;
  while (static_cast<int32_t>(out.size()) < s.params.max_tokens) {
    const int32_t t = sim_next_token(hist, s.seed, k_vocab);
    hist.push_back(t);
    out.push_back(t);
    if (t == eos && !s.params.ignore_eos) break;
  }
  return out;
}

struct run_stats {
  std::map<seq_id_t, std::vector<int32_t>> outputs;
  std::map<seq_id_t, finish_reason> finish;
  size_t copies = 0;
};

// Drives the planner with two steps in flight: plan N+1 before step N's result is applied.
run_stats drive(batch_planner& planner, sim_executor& ex, const planner_config& cfg) {
  run_stats st;
  std::optional<step_plan> inflight;
  for (int iter = 0; iter < 100000; ++iter) {
    if (!planner.has_work() && !inflight) break;
    step_plan next = planner.plan();
    int32_t total = 0;
    for (const auto& s : next.seqs) total += static_cast<int32_t>(s.tokens.size());
    REQUIRE(total <= cfg.max_num_batched_tokens);
    REQUIRE(static_cast<int32_t>(next.seqs.size()) <= cfg.max_num_seqs);
    st.copies += next.block_copies.size();
    if (inflight) {
      const step_result r = ex.execute(*inflight);
      for (const auto& e : planner.on_result(r)) {
        st.outputs[e.seq_id].push_back(e.token);
        if (e.finish != finish_reason::none) st.finish[e.seq_id] = e.finish;
      }
    }
    const bool empty = next.seqs.empty() && next.finished.empty() && next.new_seqs.empty();
    inflight = empty ? std::nullopt : std::optional<step_plan>(std::move(next));
  }
  return st;
}

}  // namespace

TEST_CASE("planner: chunked prefill within the token budget and sampling only at the end",
          "[actors][planner]") {
  planner_config cfg{
      .max_num_seqs = 8, .max_num_batched_tokens = 4, .max_model_len = 64, .eos_id = -1};
  batch_planner p(cfg,
                  {.num_blocks = 16, .block_size = 4, .enable_prefix_caching = false, .hash = {}});
  p.add(make_seq(1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2));
  auto a = p.plan();
  REQUIRE(a.seqs.size() == 1);
  CHECK(a.new_seqs.size() == 1);
  CHECK(a.seqs[0].tokens == std::vector<int32_t>{1, 2, 3, 4});
  CHECK_FALSE(a.seqs[0].sample);
  auto b = p.plan();
  CHECK(b.seqs[0].start_pos == 4);
  CHECK(b.new_seqs.empty());
  CHECK_FALSE(b.seqs[0].sample);
  auto c = p.plan();
  CHECK(c.seqs[0].start_pos == 8);
  CHECK(c.seqs[0].tokens.size() == 2);
  CHECK(c.seqs[0].sample);
  CHECK(c.seqs[0].block_table.size() == 3);
  // Two steps in flight: the next decode's input is the token c samples.
  auto d = p.plan();
  REQUIRE(d.seqs.size() == 1);
  CHECK(d.seqs[0].tokens == std::vector<int32_t>{k_token_from_last_step});
  CHECK(d.seqs[0].start_pos == 10);
}

TEST_CASE("planner: running decodes come before a new prefill in the same step",
          "[actors][planner]") {
  planner_config cfg{
      .max_num_seqs = 8, .max_num_batched_tokens = 6, .max_model_len = 64, .eos_id = -1};
  batch_planner p(cfg,
                  {.num_blocks = 32, .block_size = 4, .enable_prefix_caching = false, .hash = {}});
  sim_executor ex(32, 4, k_vocab);
  p.add(make_seq(1, {1, 2}, 10));
  p.add(make_seq(2, {3, 4}, 10));
  auto s1 = p.plan();  // both prefills (4 tokens)
  CHECK(s1.seqs.size() == 2);
  p.on_result(ex.execute(s1));
  p.add(make_seq(3, std::vector<int32_t>(20, 5), 10));
  auto s2 = p.plan();
  REQUIRE(s2.seqs.size() == 3);
  CHECK(s2.seqs[0].seq_id == 1);
  CHECK(s2.seqs[0].tokens.size() == 1);
  CHECK(s2.seqs[1].seq_id == 2);
  CHECK(s2.seqs[2].seq_id == 3);
  CHECK(s2.seqs[2].tokens.size() == 4);  // the remaining budget, chunked
  CHECK_FALSE(s2.seqs[2].sample);
}

TEST_CASE("planner: priority orders admission and ties are FCFS", "[actors][planner]") {
  planner_config cfg{
      .max_num_seqs = 1, .max_num_batched_tokens = 64, .max_model_len = 64, .eos_id = -1};
  batch_planner p(cfg,
                  {.num_blocks = 32, .block_size = 4, .enable_prefix_caching = false, .hash = {}});
  p.add(make_seq(1, {1}, 1, 5));
  p.add(make_seq(2, {2}, 1, 0));
  p.add(make_seq(3, {3}, 1, 0));
  CHECK(p.plan().seqs.at(0).seq_id == 2);
  CHECK(p.num_waiting() == 2);
}

TEST_CASE("planner: stop on eos and stop token ids and max_tokens with ignore_eos and min_tokens",
          "[actors][planner]") {
  planner_config cfg{
      .max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64, .eos_id = 7};
  batch_planner p(cfg,
                  {.num_blocks = 32, .block_size = 4, .enable_prefix_caching = false, .hash = {}});
  p.add(make_seq(1, {1}, 10));
  auto st = p.plan();
  step_result r{.step_id = st.step_id,
                .outputs = {seq_output{
                    .seq_id = 1, .token = 7, .logprob = 0, .top_logprobs = {}, .logits = {}}}};
  auto ev = p.on_result(r);
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].finish == finish_reason::stop);
  CHECK(p.pool().num_free() == 32);

  sequence s2 = make_seq(2, {1}, 3);
  s2.params.stop_token_ids = {9};
  s2.params.min_tokens = 2;
  p.add(s2);
  st = p.plan();
  r = {.step_id = st.step_id,
       .outputs = {
           seq_output{.seq_id = 2, .token = 9, .logprob = 0, .top_logprobs = {}, .logits = {}}}};
  CHECK(p.on_result(r).at(0).finish == finish_reason::none);  // min_tokens masks it
  st = p.plan();
  r = {.step_id = st.step_id,
       .outputs = {
           seq_output{.seq_id = 2, .token = 9, .logprob = 0, .top_logprobs = {}, .logits = {}}}};
  CHECK(p.on_result(r).at(0).finish == finish_reason::stop);

  sequence s3 = make_seq(3, {1}, 2);
  s3.params.ignore_eos = true;
  p.add(s3);
  st = p.plan();
  r = {.step_id = st.step_id,
       .outputs = {
           seq_output{.seq_id = 3, .token = 7, .logprob = 0, .top_logprobs = {}, .logits = {}}}};
  CHECK(p.on_result(r).at(0).finish == finish_reason::none);
  st = p.plan();
  r = {.step_id = st.step_id,
       .outputs = {
           seq_output{.seq_id = 3, .token = 7, .logprob = 0, .top_logprobs = {}, .logits = {}}}};
  CHECK(p.on_result(r).at(0).finish == finish_reason::length);
  auto last = p.plan();
  CHECK(last.finished.size() == 1);
  CHECK_FALSE(p.has_work());
}

TEST_CASE("planner: random workload with preemption matches each sequence run alone",
          "[actors][planner]") {
  for (int32_t blocks : {12, 40, 400}) {
    CAPTURE(blocks);
    planner_config cfg{
        .max_num_seqs = 6, .max_num_batched_tokens = 16, .max_model_len = 128, .eos_id = 3};
    batch_planner p(
        cfg, {.num_blocks = blocks, .block_size = 4, .enable_prefix_caching = true, .hash = {}});
    sim_executor ex(blocks, 4, k_vocab);
    std::mt19937 rng(static_cast<uint32_t>(blocks));
    std::map<seq_id_t, sequence> added;
    const std::vector<int32_t> shared_prefix{11, 12, 13, 14, 15, 16, 17, 18};
    for (seq_id_t id = 1; id <= 30; ++id) {
      std::vector<int32_t> prompt;
      if (id % 3 == 0) prompt = shared_prefix;
      const int len = 1 + static_cast<int>(rng() % 20);
      for (int k = 0; k < len; ++k) prompt.push_back(static_cast<int32_t>(rng() % k_vocab));
      sequence s = make_seq(id, prompt, 1 + static_cast<int32_t>(rng() % 12),
                            static_cast<int32_t>(rng() % 2));
      added[id] = s;
      p.add(std::move(s));
    }
    run_stats st = drive(p, ex, cfg);
    for (const auto& [id, s] : added) {
      CAPTURE(id);
      CHECK(st.outputs[id] == reference(s, cfg.eos_id));
      CHECK(st.finish.count(id) == 1);
    }
    CHECK(p.pool().num_free() == blocks);
    CHECK(ex.live() == 0);
    CHECK_FALSE(p.has_work());
    if (blocks == 12) CHECK(p.num_preemptions() > 0);
    if (blocks == 400) CHECK(p.pool().prefix_hits() > 0);
  }
}

TEST_CASE(
    "planner: long decodes, with and without prefix caching, feed each step the right tokens while "
    "the KV manager drops the ones it no longer reads",
    "[actors][planner]") {
  // Outputs of 40-120 tokens over blocks of 4: each sequence's token window in the KV manager
  // drops its leading blocks many times; a wrong input token anywhere changes what the simulated
  // model samples next. Few blocks: preemption re-admits sequences with their whole history.
  for (const bool caching : {true, false}) {
    for (int32_t blocks : {48, 600}) {
      CAPTURE(caching, blocks);
      planner_config cfg{
          .max_num_seqs = 8, .max_num_batched_tokens = 24, .max_model_len = 256, .eos_id = -1};
      batch_planner p(
          cfg,
          {.num_blocks = blocks, .block_size = 4, .enable_prefix_caching = caching, .hash = {}});
      sim_executor ex(blocks, 4, k_vocab);
      std::mt19937 rng(static_cast<uint32_t>(blocks + (caching ? 1 : 0)));
      std::map<seq_id_t, sequence> added;
      for (seq_id_t id = 1; id <= 12; ++id) {
        std::vector<int32_t> prompt;
        const int len = 1 + static_cast<int>(rng() % 30);
        for (int k = 0; k < len; ++k) prompt.push_back(static_cast<int32_t>(rng() % k_vocab));
        sequence s = make_seq(id, prompt, 40 + static_cast<int32_t>(rng() % 80));
        added[id] = s;
        p.add(std::move(s));
      }
      run_stats st = drive(p, ex, cfg);
      for (const auto& [id, s] : added) {
        CAPTURE(id);
        CHECK(st.outputs[id] == reference(s));
        CHECK(st.finish[id] == finish_reason::length);
      }
      CHECK(p.pool().num_free() == blocks);
      CHECK(ex.live() == 0);
      if (blocks == 48) CHECK(p.num_preemptions() > 0);
    }
  }
}

TEST_CASE("planner: prefix cache hit skips computed blocks and counts hits", "[actors][planner]") {
  planner_config cfg{
      .max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64, .eos_id = -1};
  batch_planner p(cfg,
                  {.num_blocks = 16, .block_size = 4, .enable_prefix_caching = true, .hash = {}});
  sim_executor ex(16, 4, k_vocab);
  const std::vector<int32_t> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  p.add(make_seq(1, prompt, 2));
  auto run = drive(p, ex, cfg);
  CHECK(run.outputs[1].size() == 2);
  sequence s2 = make_seq(2, prompt, 2);
  s2.prompt.push_back(42);
  p.add(s2);
  auto plan = p.plan();
  REQUIRE(plan.seqs.size() == 1);
  CHECK(plan.seqs[0].start_pos == 8);  // two full blocks reused
  CHECK(p.find(2)->num_cached_prompt == 8);
  CHECK(p.pool().prefix_hits() == 8);
  CHECK(p.pool().prefix_queries() == 10 + 11);
  p.on_result(ex.execute(plan));
  auto rest = drive(p, ex, cfg);
  CHECK(rest.outputs[2].size() + 1 == 2);
}

TEST_CASE("planner: n > 1 forks share prompt blocks with copy-on-write", "[actors][planner]") {
  planner_config cfg{
      .max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64, .eos_id = -1};
  batch_planner p(cfg,
                  {.num_blocks = 16, .block_size = 4, .enable_prefix_caching = false, .hash = {}});
  sim_executor ex(16, 4, k_vocab);
  const std::vector<int32_t> prompt{1, 2, 3, 4, 5, 6};  // last block partial: shared, then copied
  std::vector<sequence> seqs;
  for (seq_id_t id = 1; id <= 3; ++id) {
    sequence s = make_seq(id, prompt, 5);
    s.request_id = 1;
    s.index = static_cast<int32_t>(id - 1);
    if (id > 1) s.fork_parent = 1;
    seqs.push_back(s);
    p.add(s);
  }
  auto first = p.plan();
  REQUIRE(first.seqs.size() == 1);  // the children wait for the parent's prompt
  auto second = p.plan();           // children fork now
  CHECK(second.block_copies.size() == 2);
  CHECK(p.block_table(2)->at(0) == p.block_table(1)->at(0));
  CHECK(p.pool().ref_count(p.block_table(1)->at(0)) == 3);
  p.on_result(ex.execute(first));
  std::optional<step_plan> pending(std::move(second));
  run_stats st;
  while (pending) {
    auto next = p.plan();
    for (const auto& e : p.on_result(ex.execute(*pending))) st.outputs[e.seq_id].push_back(e.token);
    pending = (next.seqs.empty() && next.finished.empty())
                  ? std::nullopt
                  : std::optional<step_plan>(std::move(next));
  }
  for (const auto& s : seqs) {
    std::vector<int32_t> got = s.id == 1 ? std::vector<int32_t>{} : st.outputs[s.id];
    if (s.id != 1) CHECK(got == reference(s));
  }
  CHECK(p.pool().num_free() == 16);
}

TEST_CASE("planner: cancellation frees blocks and tells the executor", "[actors][planner]") {
  planner_config cfg{
      .max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 64, .eos_id = -1};
  batch_planner p(cfg,
                  {.num_blocks = 16, .block_size = 4, .enable_prefix_caching = true, .hash = {}});
  sim_executor ex(16, 4, k_vocab);
  p.add(make_seq(1, {1, 2, 3, 4, 5}, 50));
  p.add(make_seq(2, {6, 7}, 3));
  auto a = p.plan();
  p.finish(1, finish_reason::abort);
  auto b = p.plan();
  CHECK(std::find(b.finished.begin(), b.finished.end(), seq_id_t{1}) != b.finished.end());
  for (const auto& s : b.seqs) CHECK(s.seq_id != 1);
  p.on_result(ex.execute(a));
  p.on_result(ex.execute(b));
  auto rest = drive(p, ex, cfg);
  CHECK(p.pool().num_free() == 16);
  CHECK(ex.live() == 0);
}
