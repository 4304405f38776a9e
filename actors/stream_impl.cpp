#include "actors/stream_impl.hpp"

#include <asio/system_executor.hpp>
#include <asio/use_awaitable.hpp>

namespace coserve::actors {

stream_impl::stream_impl(uint64_t id, size_t capacity, rt::actor_ref<intake_protocol> intake)
    : id_(id),
      channel_(asio::system_executor{}, capacity),
      intake_(std::move(intake)),
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
    if (intake_) (void)intake_.tell(cancel_request{id_});
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

}  // namespace coserve::actors
