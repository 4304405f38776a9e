// co_await gpu::async_wait(stream): resumes on the awaiting coroutine's executor after the stream's
// earlier work has finished.
#include <asio.hpp>
#include <catch2/catch.hpp>
#include <thread>

#include "gpu/async_wait.hpp"
#include "gpu/kernels.hpp"
#include "tests/gpu/device_helpers.hpp"

using namespace coserve;
using namespace coserve::gpu;
using namespace coserve::gpu::test;

TEST_CASE("async_wait resumes on the io_context thread after the stream's work",
          "[gpu][async_wait]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  auto s = cuda_stream::create();
  REQUIRE(s.ok());
  const int64_t n = int64_t(1) << 26;  // big enough that the fill is still running when we wait
  auto d = device_buffer::allocate(size_t(n) * 2);
  REQUIRE(d.ok());
  std::vector<uint16_t> host(4, 0);
  asio::io_context io;
  bool done = false;
  std::thread::id resumed_on;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        REQUIRE(launch_fill_bf16(d->as<bf16>(), n, 1.5f, s->get()).ok());
        REQUIRE(cudaMemcpyAsync(host.data(), d->as<uint16_t>() + (n - 4), 8, cudaMemcpyDeviceToHost,
                                s->get()) == cudaSuccess);
        auto r = co_await async_wait(s->get(), asio::use_awaitable);
        CHECK(r.ok());
        resumed_on = std::this_thread::get_id();
        done = true;
      },
      asio::detached);
  io.run();  // returns only when the wait completed: the pending wait counts as work
  CHECK(done);
  CHECK(resumed_on == std::this_thread::get_id());
  for (uint16_t h : host) CHECK(bf16_to_f32(h) == 1.5f);
}

TEST_CASE("async_wait_beside: each completion after its own work, in issue order",
          "[gpu][async_wait]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  auto s = cuda_stream::create(), waiter = cuda_stream::create();
  REQUIRE((s.ok() && waiter.ok()));
  const int64_t n = int64_t(1) << 26;
  auto d = device_buffer::allocate(size_t(n) * 2);
  REQUIRE(d.ok());
  // Three fills, each followed by a copy of its tail and a wait: each completion must see its own
  // fill's value (not a later one's), and they complete in order.
  std::vector<std::vector<uint16_t>> host(3, std::vector<uint16_t>(4, 0));
  std::vector<int> order;
  std::vector<float> seen;
  asio::io_context io;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(launch_fill_bf16(d->as<bf16>(), n, float(i + 1), s->get()).ok());
    REQUIRE(cudaMemcpyAsync(host[size_t(i)].data(), d->as<uint16_t>() + (n - 4), 8,
                            cudaMemcpyDeviceToHost, s->get()) == cudaSuccess);
    async_wait_beside(s->get(), waiter->get(), asio::bind_executor(io, [&, i](result<void> r) {
                        CHECK(r.ok());
                        order.push_back(i);
                        seen.push_back(bf16_to_f32(host[size_t(i)][3]));
                      }));
  }
  io.run();
  CHECK(order == std::vector<int>{0, 1, 2});
  CHECK(seen == std::vector<float>{1.0f, 2.0f, 3.0f});
}
