// The serving actor graph end to end on a small demo model: many concurrent requests (greedy
// output identical to each request run alone, every KV block free afterwards), cancellation at
// random points, admission control, per-actor traces, the Chrome trace file, KV sizing.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "actors/engine.hpp"
#include "model/demo_model.hpp"
#include "model/text/json/value.hpp"
#include "runtime/trace.hpp"
#include "tests/actors/pipeline_util.hpp"
#include "tests/model/model_test_util.hpp"
#include "tests/skip.hpp"

using namespace coserve;

using namespace coserve::test;

TEST_CASE("pipeline: 64 concurrent requests equal each run alone, every KV block free afterwards",
          "[actors][pipeline]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  auto eng = engine::start(small_config());
  REQUIRE(eng);
  const int k = 64;
  const auto reqs = random_requests(k, 21, 60, 24);
  const auto alone = run_all(**eng, reqs, false);
  const auto together = run_all(**eng, reqs, true);
  for (int i = 0; i < k; ++i) {
    CAPTURE(i);
    REQUIRE(alone[size_t(i)].error_code.empty());
    CHECK(alone[size_t(i)].tokens.size() == size_t(reqs[size_t(i)].params.max_tokens));
    CHECK(together[size_t(i)].tokens == alone[size_t(i)].tokens);
    CHECK(together[size_t(i)].finish == finish_reason::length);
  }
  REQUIRE(wait_all_blocks_free(**eng));
  const engine_metrics m = (*eng)->metrics();
  CHECK(m.kv_blocks_total == 40);
  CHECK(m.preemptions > 0);  // the cache is too small for 16 running sequences at full length
  CHECK(m.requests_running == 0);
  CHECK(m.requests_waiting == 0);
  (*eng)->stop();
}

TEST_CASE("pipeline: n > 1 forks, context overflow, stop strings", "[actors][pipeline]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  auto eng = engine::start(small_config());
  REQUIRE(eng);
  const auto reqs = random_requests(12, 11, 30, 12);
  const auto alone = run_all(**eng, reqs, false);
  {  // n = 2 greedy: both samples (the second a copy-on-write fork) equal the single run
    generate_request r = reqs[0];
    r.params.n = 2;
    asio::io_context io;
    std::map<int32_t, std::vector<int32_t>> per_index;
    auto fn = [&]() -> asio::awaitable<void> {
      auto s = co_await (*eng)->submit(r);
      REQUIRE(s);
      while (auto ev = co_await (*s)->next())
        per_index[ev->index].insert(per_index[ev->index].end(), ev->token_ids.begin(),
                                    ev->token_ids.end());
    };
    asio::co_spawn(io, fn(), asio::detached);
    io.run();
    CHECK(per_index[0] == alone[0].tokens);
    CHECK(per_index[1] == alone[0].tokens);
  }
  {  // prompt + max_tokens beyond the context: a clear invalid_request, nothing queued
    std::vector<generate_request> big{reqs[0]};
    big[0].params.max_tokens = 10000;
    const auto got = run_all(**eng, big, true);
    CHECK(got[0].error_code == "invalid_request");
  }
  {  // stop string taken from the middle of a greedy output: text ends right before it
    size_t pick = 0;
    for (size_t i = 0; i < alone.size(); ++i)
      if (alone[i].text.size() > alone[pick].text.size()) pick = i;
    const std::string full = alone[pick].text;
    REQUIRE(full.size() >= 6);
    const std::string stop = full.substr(full.size() / 2, 3);
    std::vector<generate_request> one{reqs[pick]};
    one[0].params.stop = {stop};
    const auto got = run_all(**eng, one, true);
    CHECK(got[0].text == full.substr(0, full.find(stop)));
    CHECK(got[0].finish == finish_reason::stop);
  }
  const engine_metrics m = (*eng)->metrics();  // every stream has ended: it is counted
  REQUIRE(wait_all_blocks_free(**eng));
  CHECK(m.ttft.count >= 12);
  CHECK(m.e2e.count >= 12);
  CHECK(m.ttft.counts.size() == m.ttft.bounds.size() + 1);
  uint64_t in_buckets = 0;
  for (uint64_t c : m.ttft.counts) in_buckets += c;
  CHECK(in_buckets == m.ttft.count);
  // Cumulative, and fixed in size however many requests ran.
  const engine_metrics again = (*eng)->metrics();
  CHECK(again.ttft.count == m.ttft.count);
  CHECK(again.ttft.counts.size() == m.ttft.counts.size());
  (*eng)->stop();
}

TEST_CASE("pipeline: requests cancelled at random points end with abort, nothing leaks",
          "[actors][pipeline]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  auto eng = engine::start(small_config());
  REQUIRE(eng);
  const int k = 48;
  auto reqs = random_requests(k, 33, 50, 30);
  std::mt19937 rng(7);
  std::vector<int> cancel_at(k, -1);
  for (int i = 0; i < k; ++i)
    if (i % 2 == 0) cancel_at[size_t(i)] = static_cast<int>(rng() % 6);  // 0: before any token
  std::vector<int> only_uncancelled(k, -1);
  for (int i = 0; i < k; ++i)
    if (cancel_at[size_t(i)] >= 0) only_uncancelled[size_t(i)] = -2;
  const auto alone = run_all(**eng, reqs, false, only_uncancelled);
  // Cancels come from the client's thread while the actors run on theirs.
  const auto got = run_all(**eng, reqs, true, cancel_at);
  int aborted = 0;
  for (int i = 0; i < k; ++i) {
    CAPTURE(i, cancel_at[size_t(i)]);
    const collected& c = got[size_t(i)];
    REQUIRE(c.error_code.empty());
    if (cancel_at[size_t(i)] < 0) {
      CHECK(c.finish == finish_reason::length);
      CHECK(c.tokens == alone[size_t(i)].tokens);  // the others are undisturbed
    } else if (c.finish == finish_reason::abort) {
      ++aborted;
      CHECK(c.tokens.size() < size_t(reqs[size_t(i)].params.max_tokens));
    } else {
      // Finished before the cancel took effect: complete output.
      CHECK(c.finish == finish_reason::length);
      CHECK(c.tokens.size() == size_t(reqs[size_t(i)].params.max_tokens));
    }
  }
  CHECK(aborted > 0);
  REQUIRE(wait_all_blocks_free(**eng));
  (*eng)->stop();
}

TEST_CASE("pipeline: admission control rejects beyond the limit with queue_full",
          "[actors][pipeline]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  engine_config cfg = small_config();
  cfg.max_num_seqs = 2;
  cfg.max_waiting = 2;  // at most 4 requests open
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  const int k = 12;
  auto reqs = random_requests(k, 44, 10, 1);
  for (auto& r : reqs) r.params.max_tokens = 40;
  const auto got = run_all(**eng, reqs, true);
  int rejected = 0, completed = 0;
  for (const auto& c : got) {
    if (c.error_code == "queue_full")
      ++rejected;
    else if (c.finish == finish_reason::length && c.tokens.size() == 40)
      ++completed;
  }
  CHECK(rejected >= k - 4);
  CHECK(completed >= 4);
  CHECK(rejected + completed == k);
  CHECK((*eng)->metrics().rejected == rejected);
  REQUIRE(wait_all_blocks_free(**eng));
  (*eng)->stop();
}

TEST_CASE(
    "pipeline: every request's trace passes intake, tokenizer, scheduler, executor, streamer, "
    "planning overlaps execution",
    "[actors][pipeline][trace]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  engine_config cfg = small_config();
  cfg.num_kv_blocks = 400;
  const auto trace_file = std::filesystem::temp_directory_path() / "coserve_pipeline_trace.json";
  std::filesystem::remove(trace_file);
  cfg.trace_file = trace_file;
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  const int k = 16;
  const auto reqs = random_requests(k, 55, 40, 16);
  const auto got = run_all(**eng, reqs, true);
  rt::tracer* tr = (*eng)->tracer();
  REQUIRE(tr != nullptr);
  (*eng)->stop();  // quiescent: queries are exact
  const std::vector<std::string> path{"intake", "tokenizer", "scheduler", "executor", "streamer"};
  // The message each actor handles for the request on its way to the first token.
  const std::vector<std::string> hop{"submit_request", "tokenize_request", "add_request",
                                     "execute_step", "token_batch"};
  for (const auto& c : got) {
    REQUIRE(c.id != 0);
    CAPTURE(c.id);
    const auto spans = tr->spans_of_request(c.id);
    std::map<std::string, rt::span> first;
    for (const auto& s : spans) {
      std::string actor = tr->track_name(s.track_id);
      if (actor.rfind("tokenizer", 0) == 0) actor = "tokenizer";  // one of the pool
      const std::string key = actor + "/" + s.message;
      if (!first.count(key)) first[key] = s;
    }
    for (size_t i = 0; i < path.size(); ++i) {
      const std::string key = path[i] + "/" + hop[i];
      CAPTURE(key);
      REQUIRE(first.count(key) == 1);
      if (i > 0) CHECK(first[path[i - 1] + "/" + hop[i - 1]].start_ns <= first[key].start_ns);
    }
    // Every step that computed a token for it was streamed: one token_batch span per token.
    size_t batches = 0;
    for (const auto& s : spans) batches += std::string(s.message) == "token_batch";
    CHECK(batches == c.tokens.size());
  }
  // Two steps in flight: the scheduler plans step N+1 while the executor runs step N (the "step"
  // spans of the executor's steps track).
  const auto plans = tr->spans_of_message("plan_step");
  const auto steps = tr->spans_of_track("executor steps");
  for (size_t i = 1; i < steps.size(); ++i)
    CHECK(steps[i - 1].end_ns <= steps[i].start_ns);  // one at a time
  REQUIRE(plans.size() >= 8);
  REQUIRE(steps.size() >= 8);
  size_t inside = 0;
  for (const auto& p : plans)
    for (const auto& s : steps)
      if (p.start_ns > s.start_ns && p.start_ns < s.end_ns) {  // planning began while a step ran
        ++inside;
        break;
      }
  // How many plans begin inside a step depends on how long this tiny model's steps take against
  // planning, and on what else the cores run (ctest runs tests side by side): 22% was seen under
  // load, so the bound is 10% (and at least two).
  INFO("plan_step spans that begin inside an executor step: " << inside << " of " << plans.size());
  CHECK(inside >= 2);
  CHECK(inside * 10 >= plans.size());
  // The Chrome trace file written at stop.
  REQUIRE(std::filesystem::exists(trace_file));
  std::ifstream in(trace_file);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(json.find("\"traceEvents\"") != std::string::npos);
  for (const auto& a : path)  // actor names; the pool's are tokenizer0, tokenizer1, ...
    CHECK(json.find("\"" + (a == "tokenizer" ? std::string("tokenizer0") : a) + "\"") !=
          std::string::npos);
  CHECK(json.find("plan_step") != std::string::npos);
  std::filesystem::remove(trace_file);
}

TEST_CASE("pipeline: a decode step's messages are kv_step, run_step, step_done and token_batch",
          "[actors][pipeline][trace]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  engine_config cfg = small_config();
  cfg.num_kv_blocks = 400;
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  auto reqs = random_requests(1, 77, 8, 1);
  reqs[0].params.max_tokens = 48;
  const auto got = run_all(**eng, reqs, true);
  REQUIRE(got[0].tokens.size() == 48);
  rt::tracer* tr = (*eng)->tracer();
  (*eng)->stop();  // quiescent: queries are exact
  const size_t steps = tr->spans_of_track("executor steps").size();
  REQUIRE(steps >= 48);
  // Messages handled (spans the runtime records per message; the per-request copies carry the
  // request's id) by the four actors a step passes through.
  std::map<std::string, size_t> handled;
  for (const char* actor : {"kv_allocator", "executor", "scheduler", "streamer"})
    for (const auto& sp : tr->spans_of_track(actor))
      if (sp.request_id == 0 && std::string(sp.message) != "plan_step")  // plan_step: a draft
        ++handled[std::string(actor) + "/" + sp.message];
  std::string counts;
  for (const auto& [key, n] : handled) counts += key + ": " + std::to_string(n) + "; ";
  INFO(counts << steps << " steps");
  // The request's arrival (add_request, open_stream) carries its id: not counted here. Nothing but
  // these four crosses a mailbox for a step; besides one of each per step come the first step's
  // allocation, the last step's releases and drops, and — for a plan that reached the executor
  // with no step running — its allocation returned at once in a step_done of its own (at most one
  // per plan: how many depends on how far the scheduler keeps ahead, i.e. on the machine's load).
  for (const auto& [key, n] : handled) {
    CAPTURE(key, n, steps);
    const bool per_step = key == "kv_allocator/kv_step" || key == "executor/run_step" ||
                          key == "scheduler/step_done" || key == "streamer/token_batch";
    CHECK(per_step);
  }
  const size_t plans = handled["executor/run_step"];
  CHECK(handled["streamer/token_batch"] == 48);
  CHECK(handled["kv_allocator/kv_step"] <= steps + 2);
  CHECK(plans <= steps + 2);
  CHECK(handled["scheduler/step_done"] <= steps + plans);
}

TEST_CASE("pipeline: CPU KV cache sized from memory", "[actors][pipeline]") {
  model_config m;
  m.num_hidden_layers = 16;
  m.num_key_value_heads = 8;
  m.head_dim = 64;
  m.hidden_size = 2048;
  m.num_attention_heads = 32;
  engine_config cfg;
  cfg.block_size = 16;
  cfg.max_num_seqs = 256;
  cfg.kv_cache_dtype = "fp32";
  // 2 (K,V) * 16 layers * 8 heads * 64 dims * 16 tokens * 4 bytes = 1 MiB per block
  const int64_t per_block = int64_t{1} << 20;
  CHECK(cpu_kv_cache_blocks(m, cfg, 4096, int64_t{64} << 30) ==
        (int64_t{4} << 30) / per_block);  // 4 GiB cap
  CHECK(cpu_kv_cache_blocks(m, cfg, 4096, int64_t{8} << 30) ==
        (int64_t{2} << 30) / per_block);  // a quarter
  cfg.kv_cache_dtype = "auto";            // bf16: half the bytes, twice the blocks
  CHECK(cpu_kv_cache_blocks(m, cfg, 4096, int64_t{8} << 30) == 2 * (int64_t{2} << 30) / per_block);
  cfg.kv_cache_dtype = "fp32";
  cfg.kv_cache_bytes = int64_t{1} << 30;
  CHECK(cpu_kv_cache_blocks(m, cfg, 4096, int64_t{8} << 30) == 1024);
  cfg.max_num_seqs = 2;  // never more than every sequence at full length
  CHECK(cpu_kv_cache_blocks(m, cfg, 4096, int64_t{8} << 30) == 2 * 256);
  cfg.max_num_seqs = 256;
  cfg.kv_cache_bytes = per_block;  // at least one sequence at max_model_len
  CHECK(cpu_kv_cache_blocks(m, cfg, 4096, int64_t{8} << 30) == 256);
  cfg.kv_cache_bytes = int64_t{1} << 30;
  // Tensor parallel as threads: the host stores every rank's share, 8 KV heads in all at TP 2 and
  // 8; at TP 16 each rank holds one replicated head: 16 per block, half the blocks.
  cfg.tensor_parallel_size = 2;
  CHECK(cpu_kv_cache_blocks(m, cfg, 4096, int64_t{8} << 30) == 1024);
  cfg.tensor_parallel_size = 16;
  CHECK(cpu_kv_cache_blocks(m, cfg, 4096, int64_t{8} << 30) == 512);
  cfg.tensor_parallel_size = 1;
  cfg.num_kv_blocks = 77;
  CHECK(cpu_kv_cache_blocks(m, cfg, 4096, int64_t{8} << 30) == 77);
}

TEST_CASE(
    "pipeline: structured outputs under concurrency and preemption equal each run alone and follow "
    "the grammar",
    "[actors][pipeline][structured]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  engine_config cfg = small_config();
  cfg.cpu_threads = 2;  // rows sample (and fill their masks) in parallel
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  const std::string pattern = "[a-z]{3,9}( [a-z]{2,9}){3,8}\\.";
  grammar_spec regex;
  regex.type = grammar_spec::kind::regex;
  regex.text = pattern;
  grammar_spec schema;
  schema.type = grammar_spec::kind::json_schema;
  schema.any_whitespace = false;
  schema.text =
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer","minimum":0,"maximum":999},"minItems":3,"maxItems":6},"b":{"enum":["x","yy","zzz"]}},"required":["a","b"],"additionalProperties":false})";
  auto reqs = random_requests(24, 31, 40, 8);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].structured = i % 2 ? regex : schema;
    reqs[i].params.max_tokens = 120;
    reqs[i].params.ignore_eos = false;
  }
  const auto alone = run_all(**eng, reqs, false);
  const auto together = run_all(**eng, reqs, true);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i, alone[i].text);
    REQUIRE(alone[i].error_code.empty());
    CHECK(together[i].tokens == alone[i].tokens);
    REQUIRE(alone[i].finish == finish_reason::stop);
    if (i % 2) {
      CHECK(std::regex_match(alone[i].text, std::regex(pattern)));
    } else {
      auto v = json::parse(alone[i].text);
      REQUIRE(v.ok());
      CHECK(v->find("a")->as_array().size() >= 3);
    }
  }
  // An invalid grammar is refused before anything is queued.
  generate_request bad = reqs[0];
  bad.structured->text = R"({"type":"integer","minimum":3,"maximum":1})";
  bad.structured->param = "response_format.json_schema.schema";
  const auto refused = run_all(**eng, {bad}, true);
  CHECK(refused[0].error_code == "invalid_request");
  REQUIRE(wait_all_blocks_free(**eng));
  const engine_metrics m = (*eng)->metrics();
  CHECK(m.preemptions > 0);  // the matcher replay after preemption was exercised
  CHECK(m.grammar_compiles == 2);
  CHECK(m.grammar_cache_hits >= 46);
  CHECK(m.grammar_failures == 1);
  (*eng)->stop();
}

TEST_CASE(
    "pipeline: the scheduler lists the requests it holds, running first, and cached free blocks "
    "are counted",
    "[actors][pipeline]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  engine_config cfg = small_config();
  cfg.max_num_seqs = 1;  // one sequence runs at a time, the others wait
  cfg.num_kv_blocks = 120;
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  auto reqs = random_requests(4, 46, 10, 1);
  for (auto& r : reqs) r.params.max_tokens = 200;
  reqs[0].params.n = 2;
  reqs[0].input = std::vector<int32_t>(17, 7);  // two full blocks of 8 to cache
  std::vector<collected> out(reqs.size());
  std::vector<request_status> seen;
  size_t max_running = 0, max_waiting = 0;
  asio::io_context io;
  for (size_t i = 0; i < reqs.size(); ++i)
    asio::co_spawn(io, run_one(**eng, reqs[i], out[i], -1), asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer t(io);
        for (int i = 0; i < 2000; ++i) {
          auto r = co_await (*eng)->requests(100);
          REQUIRE(r);
          size_t running = 0, waiting = 0;
          for (const auto& s : *r) (s.running ? running : waiting) += 1;
          if (running > 0 && waiting > 0 && seen.empty()) seen = *r;
          max_running = std::max(max_running, running);
          max_waiting = std::max(max_waiting, waiting);
          if (!seen.empty()) break;
          t.expires_after(std::chrono::microseconds(200));
          co_await t.async_wait(asio::use_awaitable);
        }
      },
      asio::detached);
  io.run();
  REQUIRE_FALSE(seen.empty());
  CHECK(max_running == 1);
  // Running first, then the waiting ones oldest first.
  CHECK(seen.front().running);
  CHECK(seen.front().generated_tokens <= 400);
  CHECK(seen.front().age_seconds > 0.0);
  int with_two = 0;
  for (size_t i = 0; i < seen.size(); ++i) {
    CHECK(seen[i].max_tokens == 200);
    if (seen[i].samples == 2) {
      ++with_two;
      CHECK(seen[i].prompt_tokens == 17);
    }
    if (i == 0) continue;
    CHECK_FALSE(seen[i].running);
    if (i > 1) CHECK(seen[i - 1].age_seconds >= seen[i].age_seconds);
  }
  CHECK(with_two <= 1);
  for (const auto& c : out) CHECK(c.finish == finish_reason::length);
  REQUIRE(wait_all_blocks_free(**eng));
  // Nothing held any more; the prompts' full blocks stay cached in the free pool.
  asio::io_context io2;
  std::vector<request_status> after{request_status{}};
  asio::co_spawn(
      io2, [&]() -> asio::awaitable<void> { after = (co_await (*eng)->requests(100)).value(); },
      asio::detached);
  io2.run();
  CHECK(after.empty());
  CHECK((*eng)->metrics().kv_blocks_cached_free >= 2);
  (*eng)->stop();
}

TEST_CASE(
    "pipeline: a prompt larger than the whole KV cache ends with an error, the rest are served",
    "[actors][pipeline]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  engine_config cfg = small_config();
  cfg.num_kv_blocks = 6;  // 48 token slots
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  auto reqs = random_requests(6, 47, 8, 1);
  for (auto& r : reqs) r.params.max_tokens = 8;
  reqs[2].input = std::vector<int32_t>(60, 11);  // 8 blocks: never fits
  const auto got = run_all(**eng, reqs, true);
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(i);
    CHECK(got[i].finish == (i == 2 ? finish_reason::error : finish_reason::length));
  }
  REQUIRE(wait_all_blocks_free(**eng));
  (*eng)->stop();
}
