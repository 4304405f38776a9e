// stream_impl — one request's output stream (request_stream): a channel of events the streamer
// fills and the client drains. cancel() tells intake, the actor that owns the request's admission.
//
// Threads: next() from the single consumer (resuming on its executor); send()/end() from the
// streamer; cancel() and the cancel mark from any thread.
#pragma once

#include <asio/experimental/concurrent_channel.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/intake_messages.hpp"
#include "actors/request.hpp"
#include "runtime/actor.hpp"

namespace coserve::actors {

class stream_impl final : public request_stream {
 public:
  using clock = std::chrono::steady_clock;
  // `intake` receives the cancel; the capacity covers every event the request can produce.
  stream_impl(uint64_t id, size_t capacity, rt::actor_ref<intake_protocol> intake);
  uint64_t id() const noexcept override { return id_; }
  const std::vector<int32_t>& prompt_ids() const noexcept override { return prompt_; }
  const std::string& prompt_text() const noexcept override { return prompt_text_; }
  asio::awaitable<std::optional<output_event>> next() override;
  void cancel() noexcept override;

  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }
  // Why the request was cancelled (abort: client gone or engine drain; error: an actor failed), or
  // none. Set before the cancel is sent to the scheduler, so a scheduler that receives the request
  // after the cancel (requests are tokenized in parallel) still sees it. First reason wins.
  void mark_cancelled(finish_reason r) noexcept {
    uint8_t none = 0;
    cancel_reason_.compare_exchange_strong(none, static_cast<uint8_t>(r),
                                           std::memory_order_release);
  }
  finish_reason cancel_reason() const noexcept {
    return static_cast<finish_reason>(cancel_reason_.load(std::memory_order_acquire));
  }
  clock::time_point submitted() const noexcept { return submitted_; }
  // Written once by the tokenizer before the stream is handed out.
  void set_prompt(std::vector<int32_t> ids, std::string text = {}) {
    prompt_ = std::move(ids);
    prompt_text_ = std::move(text);
  }
  // Streamer only.
  void send(output_event ev);
  void end();

 private:
  using channel = asio::experimental::concurrent_channel<void(asio::error_code, output_event)>;
  uint64_t id_;
  std::vector<int32_t> prompt_;
  std::string prompt_text_;
  channel channel_;
  rt::actor_ref<intake_protocol> intake_;
  std::atomic<bool> cancelled_{false};
  std::atomic<uint8_t> cancel_reason_{0};
  bool ended_ = false;  // consumer side only
  clock::time_point submitted_;
};

}  // namespace coserve::actors
