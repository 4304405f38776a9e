// The tokenizer pool: typed input errors naming their field, the context rule, /tokenize and
// /detokenize through the pool, prompt and token text for echo and logprobs, a busy tokenizer not
// holding up other requests, and admission by waiting prompt tokens.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "actors/engine.hpp"
#include "model/text/tokenizer/tokenizer.hpp"
#include "tests/actors/pipeline_util.hpp"
#include "tests/skip.hpp"

using namespace coserve;
using namespace coserve::test;

namespace {

template <class T>
T run_sync(asio::awaitable<T> a) {
  asio::io_context io;
  T out{};
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { out = co_await std::move(a); }, asio::detached);
  io.run();
  return out;
}

result<std::shared_ptr<request_stream>> submit(engine& eng, generate_request r) {
  return run_sync(eng.submit(std::move(r)));
}

std::vector<output_event> drain(request_stream& s) {
  std::vector<output_event> evs;
  asio::io_context io;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        while (auto ev = co_await s.next()) evs.push_back(std::move(*ev));
      },
      asio::detached);
  io.run();
  return evs;
}

// Words of varied length from a fixed seed, `bytes` long.
std::string long_text(size_t bytes) {
  std::mt19937 rng(3);
  static const char* words[] = {"the",     "actor",   "mailbox", "tokenizer", "of",
                                "serving", "a",       "prompt",  "coroutine", "cache",
                                "block",   "request", "step",    "stream",    "on"};
  std::string s;
  while (s.size() < bytes) {
    s += words[rng() % 15];
    s += ' ';
  }
  s.resize(bytes);
  return s;
}

}  // namespace

TEST_CASE("tokenizer pool: input errors name their field, the context rule fills max_tokens",
          "[actors][tokenizer]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  engine_config cfg = small_config();
  cfg.tokenizer_pool_size = 3;
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  engine& e = **eng;
  const int32_t ctx = e.info().max_model_len;
  auto tok = tokenizer::load(demo_dir() / "tokenizer.json");
  REQUIRE(tok);

  {  // a token id outside the vocabulary: the input field
    generate_request r;
    r.input = std::vector<int32_t>{1, e.info().vocab_size + 5};
    r.context.input_param = "prompt";
    auto s = submit(e, r);
    REQUIRE_FALSE(s);
    CHECK(s.err().code == "invalid_request");
    CHECK(s.err().param == "prompt");
  }
  {  // prompt + max_tokens past the context: the max_tokens field the client used
    generate_request r;
    r.input = std::vector<int32_t>{1, 2, 3};
    r.params.max_tokens = ctx;
    r.context.max_tokens_param = "max_completion_tokens";
    auto s = submit(e, r);
    REQUIRE_FALSE(s);
    CHECK(s.err().param == "max_completion_tokens");
    CHECK(s.err().message.find("maximum context length is " + std::to_string(ctx)) !=
          std::string::npos);
  }
  {  // a prompt that alone fills the context, max_tokens not given: the input field
    generate_request r;
    r.input = std::vector<int32_t>(static_cast<size_t>(ctx), 7);
    r.context.max_tokens_given = false;
    r.context.input_param = "messages";
    auto s = submit(e, r);
    REQUIRE_FALSE(s);
    CHECK(s.err().param == "messages");
  }
  {  // chat without a chat template: invalid_request naming messages
    generate_request r;
    chat_input chat;
    chat.messages = json::array{};
    json::value m = json::object{};
    m["role"] = "user";
    m["content"] = "hi";
    chat.messages.push_back(m);
    r.input = chat;
    r.context.input_param = "messages";
    auto s = submit(e, r);
    REQUIRE_FALSE(s);
    CHECK(s.err().code == "invalid_request");
    CHECK(s.err().param == "messages");
  }
  {  // max_tokens not given: the rest of the context, capped by default_max_tokens
    generate_request r;
    r.input = std::vector<int32_t>{5, 6, 7, 8};
    r.params.ignore_eos = true;
    r.params.max_tokens = 1;  // replaced by the rule
    r.context.max_tokens_given = false;
    r.context.default_max_tokens = 9;
    auto s = submit(e, r);
    REQUIRE(s);
    const auto evs = drain(**s);
    REQUIRE_FALSE(evs.empty());
    CHECK(evs.back().completion_tokens == 9);
    CHECK(evs.back().finish == finish_reason::length);
  }
  {  // /tokenize and /detokenize through the pool equal the tokenizer's own
    const std::string text = "Hello world, the pool tokenizes this.";
    tokenize_request_input in;
    in.input = text;
    in.add_special_tokens = false;
    auto ids = run_sync(e.tokenize(in));
    REQUIRE(ids);
    CHECK(*ids == tok->encode(text, false));
    auto back = run_sync(e.detokenize(*ids));
    REQUIRE(back);
    CHECK(*back == text);
    auto bad = run_sync(e.detokenize({1, -4}));
    REQUIRE_FALSE(bad);
    CHECK(bad.err().param == "tokens");
  }
  {  // echo's prompt text and logprobs' token text
    generate_request r;
    r.input = std::vector<int32_t>{464, 3290, 318};
    r.params.max_tokens = 6;
    r.params.ignore_eos = true;
    r.params.logprobs = 3;
    r.return_prompt_text = true;
    r.return_token_text = true;
    auto s = submit(e, r);
    REQUIRE(s);
    CHECK((*s)->prompt_text() == tok->decode(std::vector<int32_t>{464, 3290, 318}, true));
    const auto evs = drain(**s);
    int tokens = 0;
    for (const auto& ev : evs) {
      REQUIRE(ev.token_texts.size() == ev.token_ids.size());
      for (size_t i = 0; i < ev.token_ids.size(); ++i) {
        ++tokens;
        CHECK(ev.token_texts[i] == tok->decode(std::vector<int32_t>{ev.token_ids[i]}, true));
      }
      REQUIRE(ev.top_logprob_texts.size() == ev.top_logprobs.size());
      for (size_t i = 0; i < ev.top_logprobs.size(); ++i) {
        REQUIRE(ev.top_logprob_texts[i].size() == ev.top_logprobs[i].size());
        for (size_t k = 0; k < ev.top_logprobs[i].size(); ++k)
          CHECK(ev.top_logprob_texts[i][k] ==
                tok->decode(std::vector<int32_t>{ev.top_logprobs[i][k].token}, true));
      }
    }
    CHECK(tokens == 6);
  }
  REQUIRE(wait_all_blocks_free(e));
  e.stop();
}

TEST_CASE("tokenizer pool: a tokenizer busy with one prompt does not hold up the others",
          "[actors][tokenizer]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  // The first request's tokenizer is held (through the fault hook, on that tokenizer's thread)
  // until every later request has finished: with one shared tokenizer they could never finish.
  std::mutex mu;
  std::condition_variable cv;
  bool shorts_done = false, held_timed_out = false;
  std::atomic<bool> first_seen{false}, holding{false};
  engine_config cfg = small_config();
  cfg.tokenizer_pool_size = 2;
  cfg.fault_hook = [&](std::string_view actor, std::string_view message) {
    if (actor != "tokenizer" || message != "tokenize_request" || first_seen.exchange(true)) return;
    holding = true;
    std::unique_lock lock(mu);
    held_timed_out = !cv.wait_for(lock, std::chrono::seconds(60), [&] { return shorts_done; });
  };
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  engine& e = **eng;
  std::string long_code;
  asio::io_context io;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        generate_request r;
        r.input = long_text(size_t{1} << 20);  // far past the context: rejected once encoded
        r.params.max_tokens = 1;
        auto s = co_await e.submit(std::move(r));
        if (!s) long_code = s.err().code;
      },
      asio::detached);
  const auto reqs = random_requests(6, 21, 20, 4);
  std::vector<collected> out(reqs.size());
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer t(co_await asio::this_coro::executor);
        while (!holding) {
          t.expires_after(std::chrono::milliseconds(1));
          co_await t.async_wait(asio::use_awaitable);
        }
        for (size_t i = 0; i < reqs.size(); ++i) co_await run_one(e, reqs[i], out[i], -1);
        {
          std::lock_guard lock(mu);
          shorts_done = true;
        }
        cv.notify_all();
      },
      asio::detached);
  io.run();
  CHECK_FALSE(held_timed_out);
  CHECK(long_code == "invalid_request");
  for (const auto& c : out) CHECK(c.finish == finish_reason::length);
  REQUIRE(wait_all_blocks_free(e));
  e.stop();
}

TEST_CASE("tokenizer pool: admission by waiting prompt tokens", "[actors][tokenizer]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  engine_config cfg = small_config();
  cfg.max_num_seqs = 1;  // one runs, the others wait with their whole prompt
  cfg.max_waiting_tokens = 100;
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  engine& e = **eng;
  auto reqs = random_requests(10, 8, 1, 1);
  for (auto& r : reqs) {
    r.input = std::vector<int32_t>(60, 11);
    r.params.max_tokens = 24;
  }
  // The first; the second once the first runs (nothing waits: it is admitted); the rest once the
  // second waits in the scheduler (the tokenizers admit by the waiting tokens the scheduler has
  // published, so requests sent together could all pass before it has seen any, or the second
  // could meet the first still waiting).
  std::vector<collected> got(reqs.size());
  asio::io_context io;
  asio::co_spawn(io, run_one(e, reqs[0], got[0], -1), asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer t(io);
        auto until = [&](auto ready) -> asio::awaitable<void> {
          for (int k = 0; k < 20000 && !ready(); ++k) {
            t.expires_after(std::chrono::microseconds(100));
            co_await t.async_wait(asio::use_awaitable);
          }
        };
        co_await until([&] { return e.metrics().requests_running >= 1; });
        asio::co_spawn(io, run_one(e, reqs[1], got[1], -1), asio::detached);
        co_await until([&] { return e.metrics().requests_waiting >= 1; });
        for (size_t i = 2; i < reqs.size(); ++i)
          asio::co_spawn(io, run_one(e, reqs[i], got[i], -1), asio::detached);
      },
      asio::detached);
  io.run();
  int rejected = 0, completed = 0;
  for (const auto& c : got) {
    if (c.error_code == "queue_full")
      ++rejected;
    else if (c.finish == finish_reason::length)
      ++completed;
  }
  CHECK(rejected >= 1);
  CHECK(completed >= 2);
  CHECK(rejected + completed == static_cast<int>(reqs.size()));
  REQUIRE(wait_all_blocks_free(e));
  // With nothing waiting, one prompt larger than the limit is still admitted.
  auto big = reqs[0];
  big.input = std::vector<int32_t>(150, 12);
  big.params.max_tokens = 2;
  const auto alone = run_all(e, {big}, true);
  CHECK(alone[0].error_code.empty());
  CHECK(alone[0].finish == finish_reason::length);
  REQUIRE(wait_all_blocks_free(e));
  e.stop();
}
