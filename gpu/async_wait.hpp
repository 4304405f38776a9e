// co_await gpu::async_wait(stream, token): completes when all work issued to `stream` before the
// call has finished, without blocking a thread. The shape of Asio's C-callback wrapper example:
//
//   1. async_initiate moves the completion handler into a heap state object;
//   2. cudaLaunchHostFunc enqueues a host callback behind the work on the stream;
//   3. the callback runs on a CUDA driver thread and ONLY posts the handler to the handler's
//      associated executor (it never calls CUDA: the CUDA runtime forbids CUDA calls there);
//   4. the handler then runs on that executor — for `co_await async_wait(s, asio::use_awaitable)`
//      the waiting coroutine resumes on its own executor (the owning actor's strand/thread), never
//      on the driver thread. There it queries the stream once, so an asynchronous kernel error that
//      happened before the callback is reported as a value.
//
// Work tracking: the state holds an outstanding-work-tracked copy of the executor, so an io_context
// does not run out of work while the GPU is busy. Cancellation is not supported: the wait ends when
// the stream reaches the callback (a faulted context may never run it; the executor then reports
// the fault on its next CUDA call).
#pragma once

#include <cuda_runtime_api.h>

#include <asio.hpp>
#include <memory>
#include <type_traits>
#include <utility>

#include "gpu/cuda_error.hpp"

namespace coserve::gpu {

namespace detail {

template <class Handler>
struct host_wait_state {
  Handler handler;
  cudaStream_t stream;
  // Keeps the handler's executor from running out of work until the callback posts.
  decltype(asio::prefer(asio::get_associated_executor(std::declval<Handler&>()),
                        asio::execution::outstanding_work.tracked)) work;
  cudaEvent_t event = nullptr;  // async_wait_beside: the event the waiter stream waited on

  // Runs on the handler's executor: the only place CUDA is touched after the wait.
  static void complete(std::unique_ptr<host_wait_state> st) {
    if (st->event != nullptr) (void)cudaEventDestroy(st->event);
    cudaError_t q = cudaStreamQuery(st->stream);
    // cudaErrorNotReady only means later work was queued after ours; our part is done.
    result<void> r = (q == cudaSuccess || q == cudaErrorNotReady)
                         ? result<void>{}
                         : result<void>{cuda_error(q, "stream work before async_wait")};
    Handler h = std::move(st->handler);
    st.reset();
    std::move(h)(std::move(r));
  }

  // Runs on a CUDA driver thread: posts and returns, nothing else.
  // The tracked executor stays in the state, which travels inside the handler; the post goes
  // through an untracked copy, so this thread never touches the context once the handler may run.
  static void CUDART_CB on_host(void* p) {
    std::unique_ptr<host_wait_state> st(static_cast<host_wait_state*>(p));
    const auto ex = asio::prefer(st->work, asio::execution::outstanding_work.untracked);
    asio::post(ex, [s = std::move(st)]() mutable { complete(std::move(s)); });
  }
};

// Enqueues the host function: on `s` itself (waiter null), or on `waiter` behind an event
// recorded on `s`. An error completes the handler through its executor (never inline).
template <class Handler>
void start_wait(Handler handler, cudaStream_t s, cudaStream_t waiter) {
  using state_t = host_wait_state<Handler>;
  auto ex = asio::get_associated_executor(handler);
  auto work = asio::prefer(ex, asio::execution::outstanding_work.tracked);
  auto st = std::make_unique<state_t>(state_t{std::move(handler), s, std::move(work)});
  cudaError_t e = cudaSuccess;
  if (waiter != nullptr) {
    e = cudaEventCreateWithFlags(&st->event, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(st->event, s);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(waiter, st->event, 0);
  }
  if (e == cudaSuccess)
    e = cudaLaunchHostFunc(waiter != nullptr ? waiter : s, &state_t::on_host, st.get());
  if (e == cudaSuccess) {
    (void)st.release();  // owned by the callback now
    return;
  }
  if (st->event != nullptr) (void)cudaEventDestroy(std::exchange(st->event, nullptr));
  auto post_ex = st->work;
  asio::post(post_ex, [st = std::move(st), e]() mutable {
    Handler h = std::move(st->handler);
    st.reset();
    std::move(h)(result<void>{cuda_error(e, "async_wait: enqueueing the host function")});
  });
}

}  // namespace detail

template <asio::completion_token_for<void(result<void>)> Token>
auto async_wait(cudaStream_t s, Token&& token) {
  return asio::async_initiate<Token, void(result<void>)>(
      [s](auto handler) { detail::start_wait(std::move(handler), s, nullptr); }, token);
}

// The same completion, with the host function on `waiter` instead of `s`: an event recorded on `s`
// now, `waiter` waiting for it, the host function behind that wait. Work issued to `s` after the
// call does not wait for the host function (a host function in a stream holds back everything
// queued behind it until it has run on the driver's thread), so a step queued behind this one
// starts as soon as this one ends. `waiter`: a stream of the same device used only for such waits;
// completions come in the order of the calls.
template <asio::completion_token_for<void(result<void>)> Token>
auto async_wait_beside(cudaStream_t s, cudaStream_t waiter, Token&& token) {
  return asio::async_initiate<Token, void(result<void>)>(
      [s, waiter](auto handler) { detail::start_wait(std::move(handler), s, waiter); }, token);
}

}  // namespace coserve::gpu
