#include "http/sse_stream.hpp"

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "http/openai_response.hpp"

namespace coserve::http {

using namespace asio::experimental::awaitable_operators;

asio::awaitable<void> write_queue::lock() {
  // Completes at once while the slot is empty, else when unlock() empties it.
  co_await slot_.async_send(asio::error_code{}, true, asio::use_awaitable);
}

void write_queue::unlock() noexcept {
  slot_.try_receive([](asio::error_code, bool) {});
}

namespace {

// Holds the queue until the end of the scope (a write, or the wait for the last one).
class queue_hold {
 public:
  explicit queue_hold(write_queue& q) noexcept : q_(q) {}
  ~queue_hold() { q_.unlock(); }
  queue_hold(const queue_hold&) = delete;
  queue_hold& operator=(const queue_hold&) = delete;

 private:
  write_queue& q_;
};

}  // namespace

sse_stream::sse_stream(response_writer& w, prometheus_metrics& metrics,
                       std::chrono::milliseconds keepalive, const asio::any_io_executor& ex)
    : w_(w),
      metrics_(metrics),
      keepalive_(keepalive),
      queue_(ex),
      last_write_(std::chrono::steady_clock::now()) {}

asio::awaitable<bool> sse_stream::write(std::string_view chunk) {
  co_await queue_.lock();
  queue_hold hold(queue_);
  const bool ok = co_await w_.write_chunk(chunk);
  last_write_ = std::chrono::steady_clock::now();
  co_return ok;
}

bool sse_stream::quiet() const {
  return keepalive_.count() > 0 && std::chrono::steady_clock::now() - last_write_ >= keepalive_;
}

asio::awaitable<void> sse_stream::run(output_reader& reader, choice_sink& sink,
                                      std::string_view done) {
  metrics_.count_http(200);
  if (!co_await w_.begin_stream(200, "text/event-stream")) {
    reader.stop();
    co_return;
  }
  last_write_ = std::chrono::steady_clock::now();
  // The branches of `||` are lambdas over this frame. Built with GCC 12, member and free
  // coroutines as branches here went wrong (a callee saw shifted arguments, a branch was resumed
  // after it had finished, at -O0 too); lambdas, as this layer always used, are not affected.
  auto pumping = [&]() -> asio::awaitable<void> { co_await pump(reader, sink); };
  auto watching = [&]() -> asio::awaitable<void> {
    if (co_await w_.wait_disconnect()) {
      reader.stop();
      metrics_.count_client_disconnect();
    }
  };
  auto keeping_alive = [&]() -> asio::awaitable<void> { co_await keep_alive(); };
  co_await (pumping() || watching() || keeping_alive());
  if (w_.client_gone()) co_return;
  if (!done.empty()) co_await w_.write_chunk(done);  // after an error event too
  co_await w_.end_stream();
}

asio::awaitable<void> sse_stream::pump(output_reader& reader, choice_sink& sink) {
  co_await reader.run(sink);
  // A keep-alive comment being written finishes before the stream's last chunks.
  co_await queue_.lock();
  queue_.unlock();
}

asio::awaitable<void> sse_stream::keep_alive() {
  asio::steady_timer t(co_await asio::this_coro::executor);
  for (;;) {
    if (keepalive_.count() <= 0)
      t.expires_at(asio::steady_timer::time_point::max());
    else
      t.expires_at(last_write_ + keepalive_);
    co_await t.async_wait(asio::use_awaitable);
    if (!quiet()) continue;  // written meanwhile
    co_await queue_.lock();
    queue_hold hold(queue_);
    if (!quiet()) continue;  // a write held the queue meanwhile
    if (!co_await w_.write_chunk(k_sse_keepalive)) co_return;
    last_write_ = std::chrono::steady_clock::now();
  }
}

}  // namespace coserve::http
