// write_queue: the writes of coroutines sharing one strand never interleave, each waits for the
// one in progress (no polling), and a waiter cancelled while queued leaves the queue usable.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "http/sse_stream.hpp"

using namespace coserve::http;
using namespace asio::experimental::awaitable_operators;
using namespace std::chrono_literals;

namespace {

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
}

// Holds the queue while it "writes" `what` in two halves with a pause between.
asio::awaitable<void> write(write_queue& q, std::string& log, char what) {
  co_await q.lock();
  log += what;
  co_await sleep_for(5ms);
  log += what;
  q.unlock();
}

}  // namespace

TEST_CASE("write_queue: one write at a time, in the order asked", "[http][sse]") {
  asio::io_context io;
  write_queue q(io.get_executor());
  std::string log;
  for (char c : std::string("abc")) asio::co_spawn(io, write(q, log, c), asio::detached);
  const auto start = std::chrono::steady_clock::now();
  io.run();
  CHECK(log == "aabbcc");
  CHECK(std::chrono::steady_clock::now() - start >= 15ms);
}

TEST_CASE("write_queue: a waiter cancelled in the queue does not hold it", "[http][sse]") {
  asio::io_context io;
  write_queue q(io.get_executor());
  std::string log;
  auto body = [&]() -> asio::awaitable<void> {
    co_await q.lock();  // held by this coroutine
    // A second locker gives up after 2 ms (the || cancels its wait); the branches are lambdas,
    // as in http/sse_stream.cpp.
    auto queued = [&]() -> asio::awaitable<void> { co_await write(q, log, 'x'); };
    auto give_up = []() -> asio::awaitable<void> { co_await sleep_for(2ms); };
    co_await (queued() || give_up());
    q.unlock();
    co_await write(q, log, 'y');  // the queue is free again
  };
  asio::co_spawn(io, body(), asio::detached);
  io.run();
  CHECK(log == "yy");
}
