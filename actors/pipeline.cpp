#include "actors/pipeline.hpp"

#include <algorithm>
#include <asio/system_executor.hpp>
#include <asio/use_awaitable.hpp>

#include "actors/intake.hpp"
#include "runtime/system.hpp"

namespace coserve::actors {

size_t pipeline::pick_tokenizer(int64_t cost) {
  size_t best = 0;
  int64_t best_load = tokenizer_load[0].load(std::memory_order_relaxed);
  for (size_t i = 1; i < tokenizer_refs.size(); ++i) {
    const int64_t l = tokenizer_load[i].load(std::memory_order_relaxed);
    if (l < best_load) {
      best = i;
      best_load = l;
    }
  }
  tokenizer_load[best].fetch_add(cost, std::memory_order_relaxed);
  return best;
}

void latency_histogram::observe(double seconds) {
  const auto it =
      std::lower_bound(snap_.bounds.begin(), snap_.bounds.end(), seconds);  // le semantics
  const auto i = static_cast<size_t>(it - snap_.bounds.begin());
  std::lock_guard lock(mu_);
  ++snap_.counts[i];
  snap_.sum += seconds;
  ++snap_.count;
}

std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> request_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

stream_impl::stream_impl(uint64_t id, size_t capacity, std::weak_ptr<pipeline> p)
    : id_(id),
      channel_(asio::system_executor{}, capacity),
      pipeline_(std::move(p)),
      submitted_(clock::now()) {}

asio::awaitable<std::optional<output_event>> stream_impl::next() {
  if (ended_) co_return std::nullopt;
  output_event ev = co_await channel_.async_receive(asio::use_awaitable);
  if (ev.index < 0) {  // end-of-stream marker
    ended_ = true;
    co_return std::nullopt;
  }
  co_return ev;
}

void stream_impl::cancel() noexcept {
  mark_cancelled(finish_reason::abort);
  if (cancelled_.exchange(true, std::memory_order_relaxed)) return;
  // Best effort: when intake's mailbox is full or closed, the streamer notices the flag at the
  // request's next token and cancels it then.
  try {
    if (auto p = pipeline_.lock()) (void)p->intake_ref.tell(cancel_request{id_});
  } catch (...) {
  }
}

void stream_impl::send(output_event ev) {
  (void)channel_.try_send(asio::error_code{}, std::move(ev));
}

void stream_impl::end() {
  output_event end;
  end.index = -1;
  send(std::move(end));
}

void trace_for_request(rt::system& sys, uint32_t actor_trace_id, const char* what,
                       uint64_t request_id, int64_t start_ns, int64_t end_ns) {
  rt::span s;
  s.message = what;
  s.request_id = request_id;
  s.enqueue_ns = start_ns;
  s.start_ns = start_ns;
  s.end_ns = end_ns;
  s.actor_id = actor_trace_id;
  sys.trace().record(s);
}

}  // namespace coserve::actors
