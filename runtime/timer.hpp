// Timers: deliver a message to an actor after a delay, or periodically, cancellable.
//
// The timer lives on the target actor's executor; cancel() may be called from any thread (it is
// posted there). A delivery that finds the mailbox full or closed is dropped and counted.
// Inside coroutine handlers, plain asio::steady_timer works too (it resumes on the actor's
// executor, and the actor handles nothing else meanwhile).
#pragma once

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <atomic>
#include <chrono>
#include <memory>

#include "runtime/actor.hpp"

namespace coserve::rt {

class timer_handle {
 public:
  timer_handle() = default;
  // Stops future deliveries. Any thread; idempotent.
  void cancel() const {
    if (!state_) return;
    state_->cancelled.store(true, std::memory_order_release);
    asio::post(state_->timer.get_executor(), [s = state_] { s->timer.cancel(); });
  }
  uint64_t fired() const noexcept { return state_ ? state_->fired.load() : 0; }
  uint64_t dropped() const noexcept { return state_ ? state_->dropped.load() : 0; }

  struct state {
    // A strand: the timer is touched by its callback and by cancel(), never at the same time.
    explicit state(const asio::any_io_executor& ex) : timer(asio::make_strand(ex)) {}
    asio::steady_timer timer;
    std::atomic<bool> cancelled{false};
    std::atomic<uint64_t> fired{0};
    std::atomic<uint64_t> dropped{0};
  };
  explicit timer_handle(std::shared_ptr<state> s) : state_(std::move(s)) {}

 private:
  std::shared_ptr<state> state_;
};

namespace detail {
template <class B, class M>
void arm(std::shared_ptr<timer_handle::state> s, actor_ref<B> to, M msg,
         std::chrono::steady_clock::duration period) {
  s->timer.async_wait([s, to, msg, period](const asio::error_code& ec) mutable {
    if (ec || s->cancelled.load(std::memory_order_acquire)) return;
    if (to.tell(msg) == send_status::ok)
      s->fired.fetch_add(1, std::memory_order_relaxed);
    else
      s->dropped.fetch_add(1, std::memory_order_relaxed);
    if (period.count() > 0) {
      s->timer.expires_at(s->timer.expiry() + period);
      arm(std::move(s), std::move(to), std::move(msg), period);
    }
  });
}
}  // namespace detail

// Delivers `msg` to `to` once after `delay`.
template <class B, class M>
timer_handle send_after(const actor_ref<B>& to, std::chrono::steady_clock::duration delay, M msg) {
  auto s = std::make_shared<timer_handle::state>(to.io_executor());
  asio::post(s->timer.get_executor(), [s, to, delay, msg]() mutable {
    s->timer.expires_after(delay);
    detail::arm(s, to, std::move(msg), std::chrono::steady_clock::duration::zero());
  });
  return timer_handle(s);
}

// Delivers `msg` to `to` every `period` (first after one period) until cancelled.
template <class B, class M>
timer_handle send_every(const actor_ref<B>& to, std::chrono::steady_clock::duration period, M msg) {
  auto s = std::make_shared<timer_handle::state>(to.io_executor());
  asio::post(s->timer.get_executor(), [s, to, period, msg]() mutable {
    s->timer.expires_after(period);
    detail::arm(s, to, std::move(msg), period);
  });
  return timer_handle(s);
}

}  // namespace coserve::rt
