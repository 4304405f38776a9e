// sse_stream: the one writer of streamed answers (chat completions, completions, Responses and
// Messages). It writes the headers, runs an output_reader into the dialect's choice_sink, writes
// an SSE comment (": keep-alive") after `keepalive` without output so proxies and clients with
// read timeouts keep a stream that waits long (queued, or a long prefill) open, watches the
// client (one that leaves cancels the requests), and ends the stream.
//
// Threads: every member runs on the connection's strand (the response_writer's).
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/experimental/channel.hpp>
#include <chrono>
#include <string_view>

#include "http/output_reader.hpp"
#include "http/prometheus_metrics.hpp"
#include "http/server.hpp"

namespace coserve::http {

// An async mutex for the coroutines of one connection: a channel with one slot, held while a
// value sits in it. lock() resumes on the awaiting coroutine's executor (the connection's strand)
// as soon as the slot is free; not thread-safe (one strand).
class write_queue {
 public:
  explicit write_queue(const asio::any_io_executor& ex) : slot_(ex, 1) {}
  asio::awaitable<void> lock();
  void unlock() noexcept;

 private:
  asio::experimental::channel<void(asio::error_code, bool)> slot_;  // the value: held
};

class sse_stream {
 public:
  // `keepalive`: the quiet time before a comment is written (0: never).
  sse_stream(response_writer& w, prometheus_metrics& metrics, std::chrono::milliseconds keepalive,
             const asio::any_io_executor& ex);

  // One chunk, after any write in progress. false: the client is gone or too slow.
  asio::awaitable<bool> write(std::string_view chunk);

  // The whole stream: status 200 and headers, the reader's events through `sink` (whose writes go
  // through write()), then `done` (a last chunk such as "data: [DONE]\n\n", or "") and the
  // terminating chunk. A client that leaves cancels the requests and nothing more is written.
  asio::awaitable<void> run(output_reader& reader, choice_sink& sink, std::string_view done);

 private:
  asio::awaitable<void> pump(output_reader& reader, choice_sink& sink);
  asio::awaitable<void> keep_alive();
  bool quiet() const;  // nothing written for `keepalive_`

  response_writer& w_;
  prometheus_metrics& metrics_;
  std::chrono::milliseconds keepalive_;
  write_queue queue_;
  std::chrono::steady_clock::time_point last_write_;
};

}  // namespace coserve::http
