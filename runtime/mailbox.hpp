// mailbox<E>: an actor's bounded inbox — the lock-free MPSC ring plus close and space-waiting.
//
// Producer side (any thread): try_push, close, wait_for_space.
// Consumer side (the thread running the actor, one at a time): try_pop, empty, wake_space_waiters.
//
// Full mailbox: try_push returns send_status::full at once and the value is not consumed. A
// sender that prefers to wait registers with wait_for_space(); the consumer wakes every waiter
// once a quarter of the mailbox is free (wake_space_waiters, called after each batch: a batch
// that leaves the mailbox empty always wakes them), and the sender retries. Waking at a quarter
// rather than at the first free slot lets a woken sender queue many messages per wake-up instead of
// one or two (each wake-up is a post to the sender's executor).
//
// Close: after close(), try_push returns send_status::closed; values already queued stay and are
// drained by the consumer (graceful shutdown). The close is atomic with respect to pushes (it is a
// bit of the ring's tail, see mpsc_queue.hpp): a push that returned `ok` is always handed to the
// consumer, even when it raced with close(). Space waiters are woken so they can see `closed`.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "runtime/mpsc_queue.hpp"

namespace coserve::rt {

enum class send_status : uint8_t { ok, full, closed };

inline const char* to_string(send_status s) noexcept {
  switch (s) {
    case send_status::ok:
      return "ok";
    case send_status::full:
      return "mailbox_full";
    case send_status::closed:
      return "mailbox_closed";
  }
  return "?";
}

template <class E>
class mailbox {
 public:
  explicit mailbox(std::size_t capacity,
                   std::size_t release_chunk_bytes = mpsc_queue<E>::k_default_release_chunk_bytes)
      : ring_(capacity, release_chunk_bytes),
        wake_level_(ring_.capacity() - ring_.capacity() / 4) {}

  std::size_t capacity() const noexcept { return ring_.capacity(); }
  std::size_t size_approx() const noexcept { return ring_.size_approx(); }
  // Any thread: positions claimed by producers so far (mpsc_queue::claimed).
  std::size_t claimed() const noexcept { return ring_.claimed(); }
  bool closed() const noexcept { return ring_.closed(); }

  // Producer side.
  template <class U>
  send_status try_push(U&& value) {
    switch (ring_.try_push(std::forward<U>(value))) {
      case push_result::ok:
        return send_status::ok;
      case push_result::full:
        return send_status::full;
      case push_result::closed:
        break;
    }
    return send_status::closed;
  }

  void close() noexcept {
    ring_.close();
    wake_all();
  }

  // Producer side: runs `fn` on `ex` once the consumer may have made room, a quarter of the
  // mailbox (or the mailbox closed). Spurious wakeups are possible; the caller retries try_push.
  template <class Fn>
  void wait_for_space(const asio::any_io_executor& ex, Fn fn) {
    auto w = std::make_shared<waiter>(ex, std::move(fn));
    {
      std::lock_guard lock(mu_);
      waiters_.push_back(w);
      // acq_rel RMW on the word the consumer also RMWs after each batch: if the consumer's
      // fetch_add came first, we synchronize with it and the check below sees its room; if ours
      // came first, its fetch_add returns the flag and it wakes us.
      word_.fetch_or(k_waiter_flag, std::memory_order_acq_rel);
    }
    // The same level as the consumer's: a sender woken for one free slot would fill it and wait
    // again, a wake-up per message.
    if (ring_.size_approx() <= wake_level_ || closed()) w->fire();
  }

  // Consumer side.
  std::optional<E> try_pop() { return ring_.try_pop(); }
  bool empty() const noexcept { return ring_.empty(); }
  // Consumer side: closed and everything accepted before the close has been popped.
  bool drained() const noexcept { return ring_.drained(); }
  // See mpsc_queue::head / empty_at / drained_at: the checks a consumer makes after handing off.
  std::size_t consumer_position() const noexcept { return ring_.head(); }
  bool empty_at(std::size_t h) const noexcept { return ring_.empty_at(h); }
  bool drained_at(std::size_t h) const noexcept { return ring_.drained_at(h); }

  // Consumer side, after a batch that popped something: wakes senders waiting for space when at
  // least a quarter of the mailbox is free. Fuller, it returns at once: the consumer has more to
  // pop and calls again after its next batch. Otherwise one RMW per batch when nobody waits.
  void wake_space_waiters() {
    if (ring_.size_approx() > wake_level_) return;
    if (word_.fetch_add(1, std::memory_order_acq_rel) & k_waiter_flag) wake_all();
  }

 private:
  struct waiter {
    template <class Fn>
    waiter(asio::any_io_executor e, Fn f) : ex(std::move(e)), fn(std::move(f)) {}
    void fire() {
      if (fired.exchange(true, std::memory_order_acq_rel)) return;
      asio::post(ex, std::move(fn));
    }
    asio::any_io_executor ex;
    std::function<void()> fn;
    std::atomic<bool> fired{false};
  };

  void wake_all() {
    std::vector<std::shared_ptr<waiter>> ws;
    {
      std::lock_guard lock(mu_);
      ws.swap(waiters_);
      word_.fetch_and(~k_waiter_flag, std::memory_order_acq_rel);
    }
    for (auto& w : ws) w->fire();
  }

  mpsc_queue<E> ring_;
  const std::size_t wake_level_;  // wake space waiters at or below this many queued
  // Low bits: batches popped (wraps harmlessly); top bit: a sender waits for space.
  static constexpr uint64_t k_waiter_flag = uint64_t(1) << 63;
  std::atomic<uint64_t> word_{0};
  std::mutex mu_;  // guards waiters_ (slow path only)
  std::vector<std::shared_ptr<waiter>> waiters_;
};

}  // namespace coserve::rt
