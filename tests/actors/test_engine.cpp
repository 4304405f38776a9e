// Engine integration: concurrent greedy requests on a small demo model give the same tokens as
// each request run alone; cancellation ends a stream with "abort" and leaks no KV blocks.
#include <catch2/catch.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <filesystem>
#include <map>
#include <random>

#include "actors/engine.hpp"
#include "model/demo_model.hpp"

using namespace coserve;

namespace {

struct collected {
  std::vector<int32_t> tokens;
  std::string text;
  finish_reason finish = finish_reason::none;
  bool ok = false;
};

asio::awaitable<void> run_one(engine& eng, generate_request req, collected& out, int cancel_after) {
  auto s = co_await eng.submit(std::move(req));
  if (!s) co_return;
  out.ok = true;
  int seen = 0;
  while (auto ev = co_await (*s)->next()) {
    out.tokens.insert(out.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
    out.text += ev->text;
    if (ev->finish != finish_reason::none) out.finish = ev->finish;
    if (++seen == cancel_after) (*s)->cancel();
  }
}

std::unique_ptr<engine> start_demo(const std::filesystem::path& dir) {
  demo_options o;
  o.hidden_size = 64;
  o.intermediate_size = 128;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.max_position_embeddings = 256;
  o.seed = 3;
  auto made = make_demo_model(dir.string(), o);
  if (!made) return nullptr;
  engine_config cfg;
  cfg.model_dir = dir;
  cfg.max_num_seqs = 8;
  cfg.max_num_batched_tokens = 64;
  cfg.num_kv_blocks = 48;
  cfg.block_size = 8;
  cfg.cpu_threads = 1;
  auto e = engine::start(cfg);
  return e ? std::move(*e) : nullptr;
}

}  // namespace

TEST_CASE("engine: concurrent greedy requests match each request run alone and cancel leaks nothing",
          "[actors][engine]") {
  if (!std::filesystem::exists("../shared/testdata/tokenizers/gpt2")) {
    WARN("../shared/testdata absent: skipped");
    return;
  }
  const auto dir = std::filesystem::temp_directory_path() / "coserve_engine_test_model";
  auto eng = start_demo(dir);
  REQUIRE(eng);
  std::mt19937 rng(11);
  const int k = 12;
  std::vector<generate_request> reqs;
  for (int i = 0; i < k; ++i) {
    generate_request r;
    std::vector<int32_t> ids;
    const int len = 1 + static_cast<int>(rng() % 30);
    for (int j = 0; j < len; ++j) ids.push_back(static_cast<int32_t>(rng() % 1000));
    r.input = ids;
    r.params.temperature = 0.0f;
    r.params.max_tokens = 1 + static_cast<int32_t>(rng() % 12);
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  std::vector<collected> alone(k), together(k + 4);
  for (int i = 0; i < k; ++i) {
    asio::io_context io;
    asio::co_spawn(io, run_one(*eng, reqs[static_cast<size_t>(i)], alone[static_cast<size_t>(i)], -1), asio::detached);
    io.run();
  }
  {
    asio::io_context io;
    for (int i = 0; i < k; ++i)
      asio::co_spawn(io, run_one(*eng, reqs[static_cast<size_t>(i)], together[static_cast<size_t>(i)], -1), asio::detached);
    for (int i = 0; i < 4; ++i) {  // cancelled early
      generate_request r = reqs[static_cast<size_t>(i)];
      r.params.max_tokens = 40;
      asio::co_spawn(io, run_one(*eng, r, together[static_cast<size_t>(k + i)], 1 + i), asio::detached);
    }
    io.run();
  }
  for (int i = 0; i < k; ++i) {
    CAPTURE(i);
    REQUIRE(alone[static_cast<size_t>(i)].ok);
    CHECK(alone[static_cast<size_t>(i)].tokens.size() == static_cast<size_t>(reqs[static_cast<size_t>(i)].params.max_tokens));
    CHECK(together[static_cast<size_t>(i)].tokens == alone[static_cast<size_t>(i)].tokens);
    CHECK(together[static_cast<size_t>(i)].finish == finish_reason::length);
  }
  for (int i = 0; i < 4; ++i) CHECK(together[static_cast<size_t>(k + i)].finish == finish_reason::abort);
  {  // n = 2 greedy: both samples (the second a copy-on-write fork) equal the single run.
    generate_request r = reqs[0];
    r.params.n = 2;
    asio::io_context io;
    std::map<int32_t, std::vector<int32_t>> per_index;
    auto fn = [&]() -> asio::awaitable<void> {
      auto s = co_await eng->submit(r);
      REQUIRE(s);
      while (auto ev = co_await (*s)->next())
        per_index[ev->index].insert(per_index[ev->index].end(), ev->token_ids.begin(), ev->token_ids.end());
    };
    asio::co_spawn(io, fn(), asio::detached);
    io.run();
    CHECK(per_index[0] == alone[0].tokens);
    CHECK(per_index[1] == alone[0].tokens);
  }
  {  // prompt + max_tokens beyond the context: a clear invalid_request
    generate_request r = reqs[0];
    r.params.max_tokens = 10000;
    asio::io_context io;
    std::string code;
    auto fn = [&]() -> asio::awaitable<void> {
      auto s = co_await eng->submit(r);
      if (!s) code = s.err().code;
    };
    asio::co_spawn(io, fn(), asio::detached);
    io.run();
    CHECK(code == "invalid_request");
  }
  {  // stop string taken from the middle of a greedy output: text ends right before it
    size_t pick = 0;
    for (int i = 0; i < k; ++i)
      if (alone[static_cast<size_t>(i)].text.size() > alone[pick].text.size()) pick = static_cast<size_t>(i);
    const std::string full = alone[pick].text;
    if (full.size() >= 6) {
      const size_t at = full.size() / 2;
      const std::string stop = full.substr(at, 3);
      const size_t first = full.find(stop);
      generate_request r = reqs[pick];
      r.params.stop = {stop};
      collected got;
      asio::io_context io;
      asio::co_spawn(io, run_one(*eng, r, got, -1), asio::detached);
      io.run();
      CHECK(got.text == full.substr(0, first));
      CHECK(got.finish == finish_reason::stop);
    }
  }
  const engine_metrics m = eng->metrics();
  CHECK(m.kv_blocks_free == m.kv_blocks_total);
  CHECK(m.kv_blocks_total == 48);
  CHECK(m.ttft_s.size() >= static_cast<size_t>(2 * k));
  CHECK(m.e2e_s.size() >= static_cast<size_t>(2 * k));
  CHECK(m.finished_abort == 4);
  CHECK(eng->metrics().ttft_s.empty());  // samples are handed out once
  eng->stop();
  std::filesystem::remove_all(dir);
}
