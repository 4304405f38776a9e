// reply_state<T>: the one-shot rendezvous between an `ask` and the handler that answers it.
//
// Exactly one completion wins: the handler's reply, the asker's timeout, the asker's
// cancellation, or the runtime's "actor stopped". Later completions are ignored, so a reply that
// arrives after a timeout is dropped (the asker has moved on). complete() may be called from any
// thread; the continuation it runs is chosen by the asker (see actor_ref::ask): it posts to the
// asker's executor, or fulfils a promise for a blocking caller. A reply_state released without a
// completion (its message dropped by a stopped actor, or a handler that lost it) completes with
// "actor_failed" as it is destroyed, so no asker waits forever.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <utility>

#include "base/result.hpp"

namespace coserve::rt {

template <class T>
class reply_state {
 public:
  using callback = std::function<void(result<T>)>;

  explicit reply_state(callback on_done) : on_done_(std::move(on_done)) {}
  ~reply_state() {
    if (!done_.load(std::memory_order_acquire))
      complete(make_error("actor_failed", "the request was dropped before it was answered"));
  }
  reply_state(const reply_state&) = delete;
  reply_state& operator=(const reply_state&) = delete;

  // Returns true when this call delivered the result (it was the first).
  bool complete(result<T> r) {
    // acq_rel: the winner's writes before complete() are visible to whoever observes `done_`.
    if (done_.exchange(true, std::memory_order_acq_rel)) return false;
    callback cb = std::move(on_done_);
    cb(std::move(r));
    return true;
  }

  bool done() const noexcept { return done_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> done_{false};
  callback on_done_;  // written at construction, moved out once by the winner
};

// A message of type M carries a reply slot only when M declares reply_type.
template <class T>
using reply_ptr = std::shared_ptr<reply_state<T>>;

}  // namespace coserve::rt
