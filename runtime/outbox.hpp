// outbox: the sends of one handler, delivered in order, without blocking the actor's thread.
//
// A handler that forwards messages (a pipeline stage) usually finds room in the next mailbox;
// when it does not, it must wait without blocking its thread and without reordering. An outbox
// tries each send at once; after the first send that finds a full mailbox, that send and every
// later one are kept and delivered, in order, by the coroutine that finish() returns — which the
// handler returns as its rt::maybe_async, so the actor handles nothing else until they are out.
//
//   rt::maybe_async handle(step_done& m) {
//     rt::outbox out;
//     out.tell(streamer, std::move(batch));
//     out.tell(kv, std::move(release));
//     return out.finish();
//   }
//
// Sends to a closed mailbox are dropped (the receiver is shutting down).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "runtime/actor.hpp"
#include "runtime/actor_cell.hpp"

namespace coserve::rt {

class outbox {
 public:
  template <class B, class M>
  void tell(const actor_ref<B>& ref, M msg, uint64_t request_id = 0) {
    if (rest_.empty() && ref.try_tell(msg, request_id) != send_status::full) return;
    auto held = std::make_shared<M>(std::move(msg));
    rest_.push_back([ref, held, request_id]() -> asio::awaitable<void> {
      M m = std::move(*held);
      co_await ref.send(std::move(m), request_id);
    });
  }

  bool empty() const noexcept { return rest_.empty(); }

  // nullopt when everything went out; otherwise the coroutine delivering the rest.
  maybe_async finish() {
    if (rest_.empty()) return std::nullopt;
    return deliver(std::move(rest_));
  }

 private:
  static asio::awaitable<void> deliver(std::vector<std::function<asio::awaitable<void>()>> rest) {
    for (auto& send : rest) co_await send();
  }
  std::vector<std::function<asio::awaitable<void>()>> rest_;
};

}  // namespace coserve::rt
