#include "http/output_reader.hpp"

#include <algorithm>

namespace coserve::http {

output_reader::output_reader(std::vector<std::shared_ptr<request_stream>> streams, int32_t n,
                             std::optional<split_rules> rules)
    : streams_(std::move(streams)), n_(n) {
  if (rules)
    for (size_t i = 0; i < streams_.size() * static_cast<size_t>(n_); ++i)
      splits_.emplace_back(*rules);
}

// The hooks' defaults (defined here, not in the class: GCC 12 mixes up the frames of inline
// virtual coroutines).
asio::awaitable<bool> choice_sink::open() { co_return true; }
asio::awaitable<bool> choice_sink::prompt_begins(size_t, request_stream&) { co_return true; }
asio::awaitable<void> choice_sink::failure(const choice_event&, const std::string&) { co_return; }
asio::awaitable<void> choice_sink::close() { co_return; }

void output_reader::stop() noexcept {
  stopped_ = true;
  for (auto& s : streams_) s->cancel();
}

asio::awaitable<void> output_reader::run(choice_sink& sink) {
  if (!co_await sink.open()) stop();
  for (size_t p = 0; p < streams_.size() && failure_.empty(); ++p) co_await read_stream(p, sink);
  if (failure_.empty() && !stopped_) co_await sink.close();
}

asio::awaitable<void> output_reader::read_stream(size_t p, choice_sink& sink) {
  request_stream& s = *streams_[p];
  if (!stopped_ && !co_await sink.prompt_begins(p, s)) stop();
  prompt_tokens_ += static_cast<int64_t>(s.prompt_ids().size());
  int32_t cached = 0;
  while (auto ev = co_await s.next()) {
    if (stopped_) continue;  // drain: the engine ends the cancelled stream with abort events
    cached = std::max(cached, ev->cached_prompt_tokens);
    const int32_t choice = static_cast<int32_t>(p) * n_ + ev->index;
    const bool last = ev->finish != finish_reason::none;
    chat_output_split* split = splits_.empty() ? nullptr : &splits_[static_cast<size_t>(choice)];
    output_part part;
    if (split)
      part = split->push(ev->text, last);
    else
      part.content = ev->text;
    const choice_event e{*ev, p, choice, last, part, split};
    if (ev->finish == finish_reason::error) {
      failure_ = ev->error_message.empty() ? "engine failure" : ev->error_message;
      co_await sink.failure(e, failure_);
      stop();
      co_return;
    }
    if (!co_await sink.event(e)) stop();
  }
  cached_tokens_ += cached;
}

}  // namespace coserve::http
