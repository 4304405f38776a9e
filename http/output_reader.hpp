// output_reader: reads the engine's output for one HTTP request (one request_stream per prompt,
// n choices each) and hands each event to a choice_sink, with a chat choice's text split by
// chat_output_split. Every answer goes through it: streamed chat and completion chunks, the
// Responses and Messages events, and the collected non-streamed bodies.
//
// Threads: run() and stop() on the connection's strand.
#pragma once

#include <asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "http/chat_output.hpp"

namespace coserve::http {

// One engine event of one choice.
struct choice_event {
  const output_event& ev;
  size_t prompt;                   // the request stream (prompt) it came from
  int32_t choice;                  // the choice's index in the response: prompt * n + ev.index
  bool last;                       // it ends the choice
  const output_part& part;         // its text split (without split rules: all of it content)
  const chat_output_split* split;  // the choice's splitter, or null without split rules
};

// Where a request's output goes. Each hook returns false when nothing more can be sent (the
// client is gone): the reader then cancels every request and drains the rest unseen.
class choice_sink {
 public:
  virtual ~choice_sink() = default;
  // Before anything else (streamed: role chunks, response.created, message_start).
  virtual asio::awaitable<bool> open();
  // Before the first event of prompt `prompt`.
  virtual asio::awaitable<bool> prompt_begins(size_t prompt, request_stream& s);
  virtual asio::awaitable<bool> event(const choice_event& e) = 0;
  // The engine failed a choice (ev.finish is error); the reader cancels every request and stops.
  virtual asio::awaitable<void> failure(const choice_event& e, const std::string& message);
  // After the last event, when no choice failed (usage chunk, response.completed, message_stop).
  virtual asio::awaitable<void> close();
};

class output_reader {
 public:
  // `n` choices per stream; with `rules`, each choice's text is split by them.
  output_reader(std::vector<std::shared_ptr<request_stream>> streams, int32_t n,
                std::optional<split_rules> rules);

  // open(), every stream's events in order, then close() unless a choice failed.
  asio::awaitable<void> run(choice_sink& sink);
  // Cancels every request; events still arriving are drained without reaching the sink.
  void stop() noexcept;

  const std::vector<std::shared_ptr<request_stream>>& streams() const noexcept { return streams_; }
  int32_t n() const noexcept { return n_; }
  // The engine's failure message ("" when none failed).
  const std::string& failure() const noexcept { return failure_; }
  // Prompt tokens of every stream begun, and of them served from the prefix cache.
  int64_t prompt_tokens() const noexcept { return prompt_tokens_; }
  int64_t cached_tokens() const noexcept { return cached_tokens_; }

 private:
  asio::awaitable<void> read_stream(size_t prompt, choice_sink& sink);

  std::vector<std::shared_ptr<request_stream>> streams_;
  int32_t n_;
  std::vector<chat_output_split> splits_;  // one per choice, with split rules
  bool stopped_ = false;
  std::string failure_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0;
};

}  // namespace coserve::http
