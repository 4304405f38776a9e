// The serving actor graph with tensor-parallel executors (ranks as threads): 64 concurrent greedy
// requests under preemption, n = 2 forks and prefix-cache hits give TP = 1's tokens at TP = 2 and
// TP = 4 (fp32 activations and KV cache, where the sharded sums differ from TP = 1's by rounding
// only), and every KV block comes back.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <map>

#include "actors/engine.hpp"
#include "tests/actors/pipeline_util.hpp"
#include "tests/skip.hpp"

using namespace coserve;
using namespace coserve::test;

namespace {

struct tp_run {
  std::vector<collected> together;
  std::vector<collected> shared;                 // one at a time, sharing a prefix: prefix hits
  std::map<int32_t, std::vector<int32_t>> fork;  // n = 2 of request 0, per index
  engine_metrics metrics;
};

// Requests whose prompts share a 24-token prefix (three blocks of 8), each with its own tail.
std::vector<generate_request> shared_prefix_requests() {
  auto reqs = random_requests(6, 31, 8, 10);
  std::vector<int32_t> prefix;
  for (int32_t i = 0; i < 24; ++i) prefix.push_back((i * 37 + 11) % 1000);
  for (auto& r : reqs) {
    auto tail = std::get<std::vector<int32_t>>(r.input);
    tail.insert(tail.begin(), prefix.begin(), prefix.end());
    r.input = tail;
  }
  return reqs;
}

tp_run run_at(int32_t tp, const std::vector<generate_request>& reqs) {
  engine_config cfg = small_config();
  cfg.tensor_parallel_size = tp;
  cfg.cpu_threads = tp;
  cfg.dtype = "float32";
  cfg.kv_cache_dtype = "fp32";
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  tp_run out;
  out.together = run_all(**eng, reqs, true);
  out.shared = run_all(**eng, shared_prefix_requests(), false);
  generate_request r = reqs[0];
  r.params.n = 2;
  asio::io_context io;
  auto fn = [&]() -> asio::awaitable<void> {
    auto s = co_await (*eng)->submit(r);
    REQUIRE(s);
    while (auto ev = co_await (*s)->next())
      out.fork[ev->index].insert(out.fork[ev->index].end(), ev->token_ids.begin(),
                                 ev->token_ids.end());
  };
  asio::co_spawn(io, fn(), asio::detached);
  io.run();
  REQUIRE(wait_all_blocks_free(**eng));
  out.metrics = (*eng)->metrics();
  (*eng)->stop();
  return out;
}

}  // namespace

TEST_CASE(
    "pipeline: tensor parallel 2 and 4 give TP 1's greedy tokens under concurrency, preemption, "
    "forks and "
    "prefix hits",
    "[actors][pipeline][tensor_parallel]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  const auto reqs = random_requests(64, 23, 60, 24);
  const tp_run one = run_at(1, reqs);
  CHECK(one.metrics.preemptions > 0);
  CHECK(one.metrics.prefix_hits > 0);
  for (int32_t tp : {2, 4}) {
    CAPTURE(tp);
    const tp_run got = run_at(tp, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      CAPTURE(i);
      REQUIRE(got.together[i].error_code.empty());
      CHECK(got.together[i].tokens.size() == size_t(reqs[i].params.max_tokens));
      CHECK(got.together[i].tokens == one.together[i].tokens);
    }
    for (size_t i = 0; i < got.shared.size(); ++i)
      CHECK(got.shared[i].tokens == one.shared[i].tokens);
    CHECK(got.fork.at(0) == one.together[0].tokens);
    CHECK(got.fork.at(1) == one.together[0].tokens);
    CHECK(got.metrics.preemptions > 0);
    CHECK(got.metrics.prefix_hits > 0);
    // Every rank's figures reach rank 0 (with the logits gather of each step).
    REQUIRE(got.metrics.tp_ranks.size() == size_t(tp));
    for (const rank_stats& r : got.metrics.tp_ranks) {
      CHECK(r.steps > 0);
      CHECK(r.compute_seconds > 0);
      CHECK(r.collective_seconds > 0);
    }
  }
  CHECK(one.metrics.tp_ranks.empty());
}
