// Helpers of the actor-graph tests (test_pipeline.cpp, test_tokenizer_pool.cpp): a small demo
// model made once per process, random token-id requests, and a client running them.
#pragma once

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine.hpp"
#include "model/demo_model.hpp"
#include "tests/model/model_test_util.hpp"
#include "tests/skip.hpp"

namespace coserve::test {

struct collected {
  uint64_t id = 0;
  std::vector<int32_t> tokens;
  std::string text;
  finish_reason finish = finish_reason::none;
  std::string error_code;
  int events = 0;
};

// cancel_after: cancel once this many events arrived (0: right after submit; -1: never).
inline asio::awaitable<void> run_one(engine& eng, generate_request req, collected& out,
                                     int cancel_after) {
  auto s = co_await eng.submit(std::move(req));
  if (!s) {
    out.error_code = s.err().code;
    co_return;
  }
  out.id = (*s)->id();
  if (cancel_after == 0) (*s)->cancel();
  while (auto ev = co_await (*s)->next()) {
    out.tokens.insert(out.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
    out.text += ev->text;
    if (ev->finish != finish_reason::none) out.finish = ev->finish;
    if (++out.events == cancel_after) (*s)->cancel();
  }
}

// Writes the small Llama-shaped demo model the actor tests run (hidden 64, 2 layers, 4/2 heads,
// 256 positions) into `dir`.
inline void make_small_demo_model(const std::filesystem::path& dir,
                                  decltype(demo_options{}.seed) seed) {
  demo_options o;
  o.hidden_size = 64;
  o.intermediate_size = 128;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.max_position_embeddings = 256;
  o.seed = seed;
  REQUIRE(make_demo_model(dir.string(), o));
}

inline std::filesystem::path demo_dir() {
  static const std::filesystem::path dir = [] {
    // Per process: ctest runs this binary's cases as parallel processes, and a shared folder
    // would be rewritten while another process has its weights mapped.
    static const test::temp_dir tmp("pipeline-model");
    make_small_demo_model(tmp.str(), 5);
    return std::filesystem::path(tmp.str());
  }();
  return dir;
}

// The tokenizer demo_dir() copies (make_demo_model's default, from the shared test data).
inline std::filesystem::path default_tokenizer() {
  return test::testdata() / "tokenizers/gpt2/tokenizer.json";
}

inline engine_config small_config() {
  engine_config cfg;
  cfg.model_dir = demo_dir();
  cfg.max_num_seqs = 16;
  cfg.max_num_batched_tokens = 96;
  cfg.block_size = 8;
  cfg.num_kv_blocks = 40;  // 320 token slots for up to 16 sequences: preemption happens
  cfg.cpu_threads = 1;
  return cfg;
}

inline std::vector<generate_request> random_requests(int k, uint32_t seed, int max_prompt,
                                                     int max_new) {
  std::mt19937 rng(seed);
  std::vector<generate_request> reqs;
  for (int i = 0; i < k; ++i) {
    generate_request r;
    std::vector<int32_t> ids;
    const int len = 1 + static_cast<int>(rng() % static_cast<uint32_t>(max_prompt));
    for (int j = 0; j < len; ++j) ids.push_back(static_cast<int32_t>(rng() % 1000));
    r.input = ids;
    r.params.temperature = 0.0f;
    r.params.max_tokens = 1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(max_new));
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

// Runs the requests one at a time (concurrently == false) or all at once; cancel_at[i] as in
// run_one (empty: never).
inline std::vector<collected> run_all(engine& eng, const std::vector<generate_request>& reqs,
                                      bool concurrently, const std::vector<int>& cancel_at = {}) {
  std::vector<collected> out(reqs.size());
  asio::io_context io;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const int cancel = cancel_at.empty() ? -1 : cancel_at[i];
    if (cancel == -2) continue;  // skipped
    asio::co_spawn(io, run_one(eng, reqs[i], out[i], cancel), asio::detached);
    if (!concurrently) {
      io.run();
      io.restart();
    }
  }
  io.run();
  return out;
}

// Every block comes back once the last stream has ended (the release is a message away).
inline bool wait_all_blocks_free(engine& eng) {
  for (int i = 0; i < 2000; ++i) {
    const engine_metrics m = eng.metrics();
    if (m.kv_blocks_free == m.kv_blocks_total && m.open_requests == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace coserve::test
