// actor_ref<P>: a typed, copyable handle to an actor; the only way to reach its state. P is the
// actor's protocol — any type with `using messages = message_list<...>` — either a protocol struct
// a sender can include without the actor's implementation, or the behavior class itself (which
// names its protocol's list). Refs of two types with the same message list convert into each
// other: they address the same kind of mailbox.
//
//   ref.tell(msg)                  fire and forget; returns send_status (ok / full / closed)
//   co_await ref.send(msg)         like tell, but waits for mailbox space instead of `full`
//   co_await ref.ask(msg, timeout) awaitable reply: result<M::reply_type>, errors "timeout",
//                                  "cancelled", "mailbox_full", "mailbox_closed", "actor_failed"
//   ref.ask_sync(msg, timeout)     the same for a thread outside the runtime (blocks it)
//
// Where awaits resume: send() and ask() resume on the executor of the awaiting coroutine (the
// completion is posted there), never on the target actor's thread.
#pragma once

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <concepts>
#include <future>
#include <memory>
#include <type_traits>
#include <utility>

#include "runtime/actor_cell.hpp"

namespace coserve::rt {

class system;

// P may be incomplete where an actor_ref<P> is declared (a message that carries a reference to its
// own receiver's kind); it must be complete where the reference is used.
template <class P>
class actor_ref {
 public:
  actor_ref() = default;
  // `cell` is a mailbox_cell of P's messages (an actor_cell of a behavior speaking P).
  template <class Cell>
  explicit actor_ref(std::shared_ptr<Cell> cell) : cell_(std::move(cell)) {
    static_assert(std::is_base_of_v<mailbox_cell<typename P::messages>, Cell>,
                  "the actor's mailbox does not take this protocol's messages");
  }
  template <class Q>
  requires std::same_as<typename Q::messages, typename P::messages> actor_ref(
      const actor_ref<Q>& other)
      : cell_(other.cell_ptr()) {}  // NOLINT(implicit)

  explicit operator bool() const noexcept { return static_cast<bool>(cell_); }
  const std::string& name() const noexcept { return cell_->name(); }
  std::size_t queued() const noexcept { return cell_->queued(); }
  const asio::any_io_executor& io_executor() const noexcept { return cell_->io_executor(); }
  auto& cell() const noexcept { return static_cast<mailbox_cell<typename P::messages>&>(*cell_); }
  const std::shared_ptr<cell_base>& cell_ptr() const noexcept { return cell_; }

  // Any thread. `request_id` overrides a message's own request_id member in traces.
  template <class M>
  send_status tell(M msg, uint64_t request_id = 0) const {
    static_assert(!has_reply<M>, "messages with a reply_type are sent with ask()");
    return cell().push(make_env(std::move(msg), request_id));
  }

  // Like tell, but `msg` is moved from only when the send succeeds (a full mailbox leaves it
  // intact, so the caller can wait and retry).
  template <class M>
  send_status try_tell(M& msg, uint64_t request_id = 0) const {
    static_assert(!has_reply<M>, "messages with a reply_type are sent with ask()");
    typename mailbox_cell<typename P::messages>::env_variant v(
        make_env(std::move(msg), request_id));
    const send_status s = cell().push(std::move(v));
    if (s != send_status::ok) msg = std::move(std::get<envelope<M>>(v).msg);
    return s;
  }

  // Waits (asynchronously) while the mailbox is full. Returns ok or closed.
  // (send and ask are plain functions returning a coroutine: GCC 12 miscompiles temporaries
  // passed by value straight into a coroutine inside a co_await expression.)
  template <class M>
  asio::awaitable<send_status> send(M&& msg, uint64_t request_id = 0) const {
    using T = std::remove_cvref_t<M>;
    static_assert(!has_reply<T>, "messages with a reply_type are sent with ask()");
    return send_variant(typename mailbox_cell<typename P::messages>::env_variant(
        make_env(T(std::forward<M>(msg)), request_id)));
  }

  template <class M>
  asio::awaitable<result<typename M::reply_type>> ask(
      M msg, std::chrono::steady_clock::duration timeout = std::chrono::seconds(30),
      uint64_t request_id = 0) const {
    const uint64_t id = pick_id(msg, request_id);
    return ask_envelope<M>(envelope<M>{std::move(msg), 0, id, {}}, timeout);
  }

  // Blocking ask for threads outside the runtime (never call it from an actor handler).
  template <class M>
  result<typename M::reply_type> ask_sync(
      M msg, std::chrono::steady_clock::duration timeout = std::chrono::seconds(30),
      uint64_t request_id = 0) const {
    using R = typename M::reply_type;
    auto promise = std::make_shared<std::promise<result<R>>>();
    auto future = promise->get_future();
    auto st = std::make_shared<reply_state<R>>(
        [promise](result<R> r) { promise->set_value(std::move(r)); });
    const uint64_t id = pick_id(msg, request_id);
    envelope<M> env{std::move(msg), cell().enqueue_ns(), id, st};
    const send_status s = cell().push(std::move(env));
    if (s != send_status::ok)
      st->complete(make_error(to_string(s), "cannot deliver to actor '" + cell_->name() + "'"));
    if (future.wait_for(timeout) == std::future_status::timeout)
      st->complete(make_error("timeout", "no reply before the timeout"));
    return future.get();
  }

 private:
  template <class V>  // mailbox_cell<P::messages>::env_variant
  asio::awaitable<send_status> send_variant(V v) const {
    for (;;) {
      // push moves from v only when it succeeds.
      const send_status s = cell().push(std::move(v));
      if (s != send_status::full) co_return s;
      auto ex = co_await asio::this_coro::executor;
      co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
          [&](auto handler) {
            auto h = std::make_shared<decltype(handler)>(std::move(handler));
            cell().box().wait_for_space(ex, [h]() mutable { (*h)(); });
          },
          asio::use_awaitable);
    }
  }

  template <class M>
  asio::awaitable<result<typename M::reply_type>> ask_envelope(
      envelope<M> env, std::chrono::steady_clock::duration timeout) const {
    using R = typename M::reply_type;
    auto ex = co_await asio::this_coro::executor;
    co_return co_await asio::async_initiate<decltype(asio::use_awaitable), void(result<R>)>(
        [&](auto handler) {
          using H = decltype(handler);
          auto h = std::make_shared<H>(std::move(handler));
          auto hex = asio::get_associated_executor(*h, ex);
          auto timer = std::make_shared<asio::steady_timer>(ex, timeout);
          auto slot = asio::get_associated_cancellation_slot(*h);
          // The work guard keeps the asker's io_context running until the post below has fully
          // returned on the replying thread.
          auto work = asio::make_work_guard(hex);
          auto st =
              std::make_shared<reply_state<R>>([h, hex, timer, slot, work](result<R> r) mutable {
                asio::post(hex, [h, timer, slot, r = std::move(r)]() mutable {
                  timer->cancel();
                  if (slot.is_connected()) slot.clear();
                  (*h)(std::move(r));
                });
                work.reset();
              });
          if (slot.is_connected()) {
            slot.assign([st](asio::cancellation_type) {
              st->complete(make_error("cancelled", "ask cancelled by the caller"));
            });
          }
          timer->async_wait([st](const asio::error_code& ec) {
            if (!ec) st->complete(make_error("timeout", "no reply before the timeout"));
          });
          env.enqueue_ns = cell().enqueue_ns();
          env.reply = st;
          const send_status s = cell().push(std::move(env));
          if (s != send_status::ok)
            st->complete(
                make_error(to_string(s), "cannot deliver to actor '" + cell_->name() + "'"));
        },
        asio::use_awaitable);
  }

  template <class M>
  static uint64_t pick_id(const M& msg, uint64_t request_id) {
    return request_id != 0 ? request_id : request_id_of(msg);
  }
  template <class M>
  envelope<M> make_env(M&& msg, uint64_t request_id) const {
    const uint64_t id = pick_id(msg, request_id);
    return envelope<M>{std::move(msg), cell().enqueue_ns(), id, {}};
  }

  std::shared_ptr<cell_base> cell_;
};

// What a behavior may keep to reach its own actor and the system; passed to an optional
// `void on_start(actor_context<B>&)` member (at spawn, and again after each restart).
template <class B>
struct actor_context {
  rt::system* sys = nullptr;
  actor_ref<B> self;
  const std::string& name() const { return self.name(); }
  const asio::any_io_executor& io_executor() const { return self.io_executor(); }
};

}  // namespace coserve::rt
