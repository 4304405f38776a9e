// The chat run /v1/responses and /v1/messages share: one sample of a translated chat request,
// split by chat_output_split as it streams and handed on as reasoning, content and tool calls
// (dialect_sink), and its outcome.
#pragma once

#include <asio/awaitable.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "http/output_reader.hpp"
#include "http/tool_calls.hpp"

namespace coserve::http {

struct chat_outcome {
  finish_reason finish = finish_reason::none;
  std::string stop_reason;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::string error;  // the engine's failure, if any
  bool tool_calls = false;
};

// A dialect's view of the one chat choice: reasoning, then content and tool calls (once the
// output is complete), each hook returning false when nothing more can be sent.
class dialect_sink : public choice_sink {
 public:
  const chat_outcome& outcome() const noexcept { return outcome_; }

  asio::awaitable<bool> prompt_begins(size_t, request_stream& s) final;
  asio::awaitable<bool> event(const choice_event& e) final;
  asio::awaitable<void> failure(const choice_event& e, const std::string& message) final;

 protected:
  virtual asio::awaitable<bool> reasoning(const std::string& text) = 0;
  virtual asio::awaitable<bool> content(const std::string& text) = 0;
  virtual asio::awaitable<bool> call(const tool_call& c) = 0;
  // The engine failed (streamed: the dialect's error event).
  virtual asio::awaitable<void> failed(const std::string&) { co_return; }

 private:
  void count(const output_event& ev);
  chat_outcome outcome_;
};

// Non-streamed: the choice collected whole.
class dialect_collector final : public dialect_sink {
 public:
  std::string reasoning_text, text;
  std::vector<tool_call> calls;

 protected:
  asio::awaitable<bool> reasoning(const std::string& t) override {
    reasoning_text += t;
    co_return true;
  }
  asio::awaitable<bool> content(const std::string& t) override {
    text += t;
    co_return true;
  }
  asio::awaitable<bool> call(const tool_call& c) override {
    calls.push_back(c);
    co_return true;
  }
};

}  // namespace coserve::http
