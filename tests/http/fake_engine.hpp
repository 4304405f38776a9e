// fake_engine: a coserve::engine for HTTP tests. Bytes are tokens (vocabulary 256); a request
// generates max_tokens tokens per sample by cycling over its prompt, one every `token_delay`.
// A prompt holding "FAIL" ends with an engine error after two tokens; a chat message whose content
// is "RAISE" fails templating like a template raise_exception.
#pragma once

#include <algorithm>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <chrono>
#include <mutex>

#include "actors/engine.hpp"

namespace coserve::test {

class fake_engine final : public engine {
 public:
  // Tests set these from their own thread while the server thread reads them: atomics.
  std::atomic<int> token_delay_ms{1};
  std::atomic<int> max_in_flight{1000};  // beyond: submit fails "queue_full"
  std::atomic<bool> up{true};
  std::atomic<int> in_flight{0};
  std::atomic<int> cancels{0};
  std::atomic<int> submitted{0};
  std::atomic<int64_t> generated{0};

  fake_engine() {
    info_.served_model_name = "fake-model";
    info_.architecture = "FakeForCausalLM";
    info_.max_model_len = 128;
    info_.vocab_size = 256;
    info_.created = 1700000000;
  }

  class stream final : public request_stream {
   public:
    stream(fake_engine& e, std::vector<int32_t> prompt, sampling_params p, std::string prompt_text,
           bool token_text)
        : engine_(e),
          prompt_(std::move(prompt)),
          prompt_text_(std::move(prompt_text)),
          params_(std::move(p)),
          token_text_(token_text),
          produced_(static_cast<size_t>(params_.n), 0),
          done_(static_cast<size_t>(params_.n), false),
          text_(static_cast<size_t>(params_.n)) {
      std::string s(prompt_.begin(), prompt_.end());
      fail_ = s.find("FAIL") != std::string::npos;
    }
    ~stream() override { engine_.in_flight.fetch_sub(1); }
    uint64_t id() const noexcept override { return 1; }
    const std::vector<int32_t>& prompt_ids() const noexcept override { return prompt_; }
    const std::string& prompt_text() const noexcept override { return prompt_text_; }

    asio::awaitable<std::optional<output_event>> next() override {
      size_t n = done_.size();
      for (size_t tries = 0; tries < n; ++tries) {
        size_t k = cursor_++ % n;
        if (done_[k]) continue;
        output_event ev;
        ev.index = static_cast<int32_t>(k);
        ev.prompt_tokens = static_cast<int32_t>(prompt_.size());
        if (cancelled_.load()) {
          done_[k] = true;
          ev.finish = finish_reason::abort;
          ev.completion_tokens = produced_[k];
          co_return ev;
        }
        asio::steady_timer t(co_await asio::this_coro::executor,
                             std::chrono::milliseconds(engine_.token_delay_ms.load()));
        co_await t.async_wait(asio::use_awaitable);
        if (fail_ && produced_[k] == 2) {
          done_[k] = true;
          ev.finish = finish_reason::error;
          ev.error_message = "simulated executor failure";
          co_return ev;
        }
        int32_t tok = prompt_[(static_cast<size_t>(produced_[k]) + k) % prompt_.size()];
        ++produced_[k];
        engine_.generated.fetch_add(1);
        ev.token_ids = {tok};
        ev.text = std::string(1, static_cast<char>(tok));
        text_[k] += ev.text;
        if (params_.logprobs >= 0) {
          ev.token_logprobs = {-0.5f};
          if (params_.logprobs > 0) {
            std::vector<token_logprob> top;
            for (int32_t j = 0; j < params_.logprobs; ++j)
              top.push_back({tok + j < 256 ? tok + j : tok, -0.5f - j});
            ev.top_logprobs = {top};
          }
        }
        if (token_text_) {
          ev.token_texts = {std::string(1, static_cast<char>(tok))};
          for (const auto& row : ev.top_logprobs) {
            std::vector<std::string> texts;
            for (const auto& tl : row) texts.emplace_back(1, static_cast<char>(tl.token));
            ev.top_logprob_texts.push_back(std::move(texts));
          }
        }
        ev.completion_tokens = produced_[k];
        for (const auto& s : params_.stop) {
          if (text_[k].size() >= s.size() &&
              text_[k].compare(text_[k].size() - s.size(), s.size(), s) == 0) {
            ev.text.clear();
            ev.finish = finish_reason::stop;
            ev.stop_reason = s;
            done_[k] = true;
            co_return ev;
          }
        }
        if (produced_[k] >= params_.max_tokens) {
          ev.finish = finish_reason::length;
          done_[k] = true;
        }
        co_return ev;
      }
      co_return std::nullopt;
    }
    void cancel() noexcept override {
      if (!cancelled_.exchange(true)) engine_.cancels.fetch_add(1);
    }

   private:
    fake_engine& engine_;
    std::vector<int32_t> prompt_;
    std::string prompt_text_;
    sampling_params params_;
    bool token_text_ = false;
    std::vector<int32_t> produced_;
    std::vector<bool> done_;
    std::vector<std::string> text_;
    size_t cursor_ = 0;
    bool fail_ = false;
    std::atomic<bool> cancelled_{false};
  };

  asio::awaitable<result<std::shared_ptr<request_stream>>> submit(generate_request req) override {
    if (!up.load()) co_return make_error("engine_down", "engine is down");
    if (in_flight.load() >= max_in_flight) co_return make_error("queue_full", "too many requests");
    std::vector<int32_t> ids;
    std::string prompt_text;
    if (auto* t = std::get_if<std::string>(&req.input)) {
      ids = encode(*t);
      prompt_text = *t;
    } else if (auto* v = std::get_if<std::vector<int32_t>>(&req.input)) {
      ids = *v;
      prompt_text = decode(ids);
    } else {
      auto r = encode_chat(std::get<chat_input>(req.input));
      if (!r) {
        error e = std::move(r).err();
        e.param = req.context.input_param;
        co_return e;
      }
      ids = std::move(*r);
    }
    for (int32_t id : ids)
      if (id < 0 || id >= info_.vocab_size)
        co_return error{"invalid_request", "token id out of range", req.context.input_param};
    if (auto r = apply_context_rule(req.context, static_cast<int32_t>(ids.size()),
                                    info_.max_model_len, req.params);
        !r)
      co_return std::move(r).err();
    if (!req.return_prompt_text) prompt_text.clear();
    in_flight.fetch_add(1);
    submitted.fetch_add(1);
    co_return std::shared_ptr<request_stream>(std::make_shared<stream>(
        *this, std::move(ids), req.params, std::move(prompt_text), req.return_token_text));
  }

  asio::awaitable<result<std::vector<int32_t>>> tokenize(tokenize_request_input in) override {
    if (auto* t = std::get_if<std::string>(&in.input)) co_return encode(*t);
    co_return encode_chat(std::get<chat_input>(in.input));
  }
  asio::awaitable<result<std::string>> detokenize(std::vector<int32_t> ids) override {
    co_return decode(ids);
  }

  static std::vector<int32_t> encode(const std::string& text) { return {text.begin(), text.end()}; }
  static std::string decode(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += static_cast<char>(id);
    return s;
  }
  static result<std::vector<int32_t>> encode_chat(const chat_input& chat) {
    std::string s;
    for (const auto& m : chat.messages.as_array()) {
      const auto* c = m.find("content");
      std::string content = c && c->is_string() ? c->as_string() : "";
      if (content == "RAISE")
        return error{"template_error", "Conversation roles must alternate", "messages"};
      const std::string& role = m.find("role")->as_string();
      if (role != "system" && role != "user" && role != "assistant" && role != "tool")
        return error{"template_error", "Unknown role: " + role, "messages"};
      s += m.find("role")->as_string() + ": " + content + "\n";
    }
    if (chat.add_generation_prompt) s += "assistant: ";
    return encode(s);
  }
  const model_info& info() const noexcept override { return info_; }
  bool healthy() const noexcept override { return up.load(); }
  engine_metrics metrics() override {
    engine_metrics m;
    m.requests_running = in_flight.load();
    m.kv_blocks_total = 100;
    m.kv_blocks_free = 100;
    m.finished_abort = cancels.load();
    m.generation_tokens = generated.load();
    m.ttft = {{0.001, 0.005, 0.5}, {0, 1, 1, 0}, 0.302, 2};  // samples 0.002 and 0.3
    return m;
  }
  void stop(bool) override { up.store(false); }

 private:
  model_info info_;
};

}  // namespace coserve::test
