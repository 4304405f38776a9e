// POST /v1/completions and /v1/chat/completions: the request parsed and submitted (one engine
// request per prompt), then its output as SSE chunks (sse_stream) or as one body.
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/this_coro.hpp>
#include <chrono>
#include <string>
#include <unordered_map>

#include "http/chat_output.hpp"
#include "http/openai_api.hpp"
#include "http/openai_response.hpp"
#include "http/output_reader.hpp"
#include "http/sse_stream.hpp"

namespace coserve::http {

using namespace asio::experimental::awaitable_operators;
using json::value;

namespace {

// The state of one completions answer while its output arrives: the choices (n per prompt, in
// response order), the token texts logprobs name, and what every chunk or body repeats.
class completion_run {
 public:
  completion_run(const openai_request& r, response_header h, size_t prompts)
      : request(r),
        header(std::move(h)),
        want_logprobs(r.params.logprobs >= 0 && !r.logprobs_for_ranking),
        choices(prompts * static_cast<size_t>(r.params.n)) {
    for (size_t i = 0; i < choices.size(); ++i) choices[i].index = static_cast<int32_t>(i);
  }

  const openai_request& request;
  response_header header;
  const bool want_logprobs;  // logprobs asked for (not only raised to rank best_of samples)
  std::vector<choice_state> choices;

  // Token strings for logprobs, as the streamer decoded them (output_event::token_texts).
  void learn_texts(const output_event& ev) {
    for (size_t i = 0; i < ev.token_ids.size() && i < ev.token_texts.size(); ++i)
      token_text_.try_emplace(ev.token_ids[i], ev.token_texts[i]);
    for (size_t i = 0; i < ev.top_logprobs.size() && i < ev.top_logprob_texts.size(); ++i)
      for (size_t k = 0; k < ev.top_logprobs[i].size() && k < ev.top_logprob_texts[i].size(); ++k)
        token_text_.try_emplace(ev.top_logprobs[i][k].token, ev.top_logprob_texts[i][k]);
    for (const auto& [id, t] : ev.prompt_token_texts) token_text_.try_emplace(id, t);
  }
  token_text_fn text_of() const {
    return [this](int32_t id) {
      auto it = token_text_.find(id);
      return it == token_text_.end() ? std::string() : it->second;
    };
  }
  // The tokens' names in logprobs: their text, or "token_id:N" with vLLM's
  // return_tokens_as_token_ids (text_offset then counts those names, as vLLM's does). The
  // prompt_logprobs field's decoded_token stays the text.
  token_text_fn name_of() const {
    if (request.tokens_as_ids) return [](int32_t id) { return "token_id:" + std::to_string(id); };
    return text_of();
  }
  int64_t completion_tokens() const {
    int64_t n = 0;
    for (const auto& c : choices) n += c.completion_tokens;  // every sample generated
    return n;
  }

 private:
  std::unordered_map<int32_t, std::string> token_text_;
};

// Non-streamed: every event added to its choice.
class completion_collector final : public choice_sink {
 public:
  explicit completion_collector(completion_run& run) : run_(run) {}
  asio::awaitable<bool> event(const choice_event& e) override {
    if (run_.want_logprobs || run_.request.params.prompt_logprobs >= 0) run_.learn_texts(e.ev);
    run_.choices[static_cast<size_t>(e.choice)].add(e.ev);
    co_return true;
  }
  asio::awaitable<void> failure(const choice_event& e, const std::string&) override {
    co_await event(e);
  }

 private:
  completion_run& run_;
};

// Streamed: the chunks of OpenAI's completions and chat completions streams.
class completion_chunks final : public choice_sink {
 public:
  completion_chunks(completion_run& run, const output_reader& reader, sse_stream& out)
      : run_(run),
        r_(run.request),
        reader_(reader),
        out_(out),
        h_(run.header),
        usage_null_(r_.include_usage),
        text_offsets_(run.choices.size(), 0),
        tool_calls_sent_(run.choices.size(), 0) {
    // continuous_usage_stats: each chunk carries its choice's usage so far.
    if (r_.continuous_usage) h_.usage = &live_usage_;
  }

  // Chat: each choice's role chunk (and the echoed assistant text) first.
  asio::awaitable<bool> open() override {
    if (!r_.chat) co_return true;
    for (const auto& c : run_.choices) {
      set_usage(prompt_size(c.index), 0);
      const std::string chunk = sse_event(chat_role_chunk(h_, c.index, usage_null_));
      if (!co_await out_.write(chunk)) co_return false;
      if (!r_.chat_echo.empty()) {
        const std::string echo =
            sse_event(chat_delta_chunk(h_, c.index, r_.chat_echo, value(), "", usage_null_));
        if (!co_await out_.write(echo)) co_return false;
      }
    }
    co_return true;
  }

  // Completions with echo: the prompt's text leads each of its choices.
  asio::awaitable<bool> prompt_begins(size_t p, request_stream& s) override {
    set_usage(int64_t(s.prompt_ids().size()), 0);
    if (r_.chat || !r_.echo) co_return true;
    for (int32_t k = 0; k < r_.params.n; ++k) {
      const auto idx = static_cast<int32_t>(p) * r_.params.n + k;
      const std::string chunk =
          sse_event(text_chunk(h_, idx, s.prompt_text(), value(), {}, usage_null_));
      if (!co_await out_.write(chunk)) co_return false;
    }
    co_return true;
  }

  asio::awaitable<bool> event(const choice_event& e) override {
    choice_state& c = add(e);
    value lp = logprobs(c, e.ev);
    if (r_.chat) co_return co_await chat_event(c, e, lp);
    const std::string_view fin = finish_text(e.ev.finish);
    if (e.part.content.empty() && lp.is_null() && fin.empty()) co_return true;
    const std::string chunk =
        sse_event(text_chunk(h_, c.index, e.part.content, lp, fin, usage_null_));
    co_return co_await out_.write(chunk);
  }

  // The choice ends with finish_reason "error", then an error event; [DONE] follows.
  asio::awaitable<void> failure(const choice_event& e, const std::string& message) override {
    choice_state& c = add(e);
    const api_error err{500, message, "InternalServerError", {}, {}};
    const std::string fin_chunk =
        sse_event(r_.chat ? chat_delta_chunk(h_, c.index, {}, value(), "error", usage_null_)
                          : text_chunk(h_, c.index, {}, value(), "error", usage_null_));
    if (!co_await out_.write(fin_chunk)) co_return;
    const std::string chunk = sse_event(error_json(err));
    co_await out_.write(chunk);
  }

  // stream_options.include_usage: a last chunk with the usage of every choice.
  asio::awaitable<void> close() override {
    if (!r_.include_usage) co_return;
    const std::string chunk =
        sse_event(usage_chunk(h_, usage_json(reader_.prompt_tokens(), run_.completion_tokens(),
                                             reader_.cached_tokens())));
    co_await out_.write(chunk);
  }

 private:
  int64_t prompt_size(int32_t choice) const {
    return int64_t(reader_.streams()[size_t(choice / r_.params.n)]->prompt_ids().size());
  }
  void set_usage(int64_t prompt, int64_t completion) {
    if (r_.continuous_usage) live_usage_ = usage_json(prompt, completion, 0);
  }
  choice_state& add(const choice_event& e) {
    choice_state& c = run_.choices[static_cast<size_t>(e.choice)];
    if (run_.want_logprobs) run_.learn_texts(e.ev);
    c.add(e.ev);
    set_usage(prompt_size(c.index), c.completion_tokens);
    return c;
  }
  // The event's logprobs object (null without logprobs or tokens).
  value logprobs(const choice_state& c, const output_event& ev) {
    if (!run_.want_logprobs || ev.token_ids.empty()) return value();
    const token_text_fn name_of = run_.name_of();
    auto& off = text_offsets_[static_cast<size_t>(c.index)];
    value lp = r_.chat ? chat_logprobs(ev.token_ids, ev.token_logprobs, ev.top_logprobs, name_of)
                       : completion_logprobs(ev.token_ids, ev.token_logprobs, ev.top_logprobs, off,
                                             name_of);
    for (int32_t id : ev.token_ids) off += chars_in(name_of(id));
    return lp;
  }

  // A chat event's chunks: reasoning, the named function's arguments as they come, content (with
  // the event's logprobs), and at the end the held content, the calls and the finish reason (a
  // chunk of its own, an empty delta, as OpenAI sends it).
  asio::awaitable<bool> chat_event(const choice_state& c, const choice_event& e, const value& lp) {
    const output_part& part = e.part;
    if (!part.reasoning.empty()) {
      const std::string chunk =
          sse_event(chat_reasoning_chunk(h_, c.index, part.reasoning, usage_null_));
      if (!co_await out_.write(chunk)) co_return false;
    }
    if (!co_await named_arguments(c, e)) co_return false;
    if (!part.content.empty() || !lp.is_null()) {
      const std::string chunk =
          sse_event(chat_delta_chunk(h_, c.index, part.content, lp, {}, usage_null_));
      if (!co_await out_.write(chunk)) co_return false;
    }
    std::string_view fin = finish_text(e.ev.finish);
    if (e.last && r_.tools != tool_mode::none) {
      if (!co_await final_calls(c, e)) co_return false;
      if (tool_calls_sent_[static_cast<size_t>(c.index)] > 0 && e.ev.finish == finish_reason::stop)
        fin = "tool_calls";
    }
    if (fin.empty()) co_return true;
    const std::string chunk =
        sse_event(chat_delta_chunk(h_, c.index, {}, value(), fin, usage_null_));
    co_return co_await out_.write(chunk);
  }

  // tool_choice naming a function: the output is its arguments, streamed as they come.
  asio::awaitable<bool> named_arguments(const choice_state& c, const choice_event& e) {
    if (r_.tools != tool_mode::named || e.part.arguments.empty()) co_return true;
    if (e.part.opens_call) {
      tool_calls_sent_[static_cast<size_t>(c.index)] = 1;
      const std::string chunk = sse_event(
          chat_tool_header_chunk(h_, c.index, 0, e.split->named_id(), r_.tool_name, usage_null_));
      if (!co_await out_.write(chunk)) co_return false;
    }
    const std::string chunk =
        sse_event(chat_tool_args_chunk(h_, c.index, 0, e.part.arguments, usage_null_));
    co_return co_await out_.write(chunk);
  }

  // The whole output parsed once (as a non-streamed response is): held content, then each call
  // as a delta with its id, type and name followed by one with its arguments.
  asio::awaitable<bool> final_calls(const choice_state& c, const choice_event& e) {
    if (!e.part.held_content.empty()) {
      const std::string chunk =
          sse_event(chat_delta_chunk(h_, c.index, e.part.held_content, value(), {}, usage_null_));
      if (!co_await out_.write(chunk)) co_return false;
    }
    if (r_.tools == tool_mode::named) co_return true;  // its arguments streamed already
    int32_t k = 0;
    for (const tool_call& call : e.part.calls) {
      const std::string head =
          sse_event(chat_tool_header_chunk(h_, c.index, k, call.id, call.name, usage_null_));
      if (!co_await out_.write(head)) co_return false;
      const std::string args =
          sse_event(chat_tool_args_chunk(h_, c.index, k, call.arguments, usage_null_));
      if (!co_await out_.write(args)) co_return false;
      tool_calls_sent_[static_cast<size_t>(c.index)] = ++k;
    }
    co_return true;
  }

  completion_run& run_;
  const openai_request& r_;
  const output_reader& reader_;
  sse_stream& out_;
  response_header h_;
  const bool usage_null_;  // include_usage: every chunk carries "usage": null (or live usage)
  value live_usage_;
  std::vector<int64_t> text_offsets_;     // completions: characters of each choice so far
  std::vector<int32_t> tool_calls_sent_;  // chat: calls streamed, per choice
};

// The prompt logprobs of choice `i`'s prompt: they came with one sample of it, and every choice of
// the prompt (`group` consecutive ones) shares them.
const std::vector<prompt_logprob>& prompt_logprobs_of(const std::vector<choice_state>& choices,
                                                      size_t i, size_t group) {
  static const std::vector<prompt_logprob> none;
  const std::vector<prompt_logprob>* found = &none;
  for (size_t k = i / group * group; k < (i / group + 1) * group; ++k)
    if (!choices[k].prompt_logprobs.empty()) found = &choices[k].prompt_logprobs;
  return *found;
}

// A whole choice's text as answered: chat's split into reasoning, content and tool calls, and
// the echoed prompt (completions) or assistant text (chat) in front.
void finish_choice(choice_state& c, const openai_request& r,
                   const std::optional<split_rules>& rules, const std::string& prompt_text) {
  if (rules) {
    whole_output out = split_whole_output(*rules, c.text);
    c.reasoning = std::move(out.reasoning);
    c.has_reasoning = out.has_reasoning;
    c.text = std::move(out.content);
    c.tool_calls = std::move(out.calls);
  }
  if (!r.chat && r.echo) c.text = prompt_text + c.text;
  if (r.chat && !r.chat_echo.empty()) c.text = r.chat_echo + c.text;
}

// A whole choice's logprobs object (null when not asked for).
value choice_logprobs(const completion_run& run, const choice_state& c,
                      const std::vector<int32_t>& prompt_ids,
                      const std::vector<prompt_logprob>& prompt_lps) {
  const openai_request& r = run.request;
  if (!run.want_logprobs) return value();
  const token_text_fn name_of = run.name_of();
  if (r.chat) return chat_logprobs(c.token_ids, c.token_logprobs, c.top_logprobs, name_of);
  if (r.echo)
    return completion_logprobs_echo(prompt_ids, prompt_lps, c.token_ids, c.token_logprobs,
                                    c.top_logprobs, name_of);
  return completion_logprobs(c.token_ids, c.token_logprobs, c.top_logprobs, 0, name_of);
}

// The non-streamed body: best_of's best samples kept, each choice finished, with its logprobs
// (and its prompt's, with vLLM's prompt_logprobs), and the usage of every sample generated.
std::string completion_body_of(completion_run& run, const output_reader& reader,
                               const std::optional<split_rules>& rules) {
  const openai_request& r = run.request;
  auto& choices = run.choices;
  const int64_t completion_tokens = run.completion_tokens();
  if (r.returned > 0) keep_best(choices, r.params.n, r.returned);
  const size_t group = size_t(r.returned > 0 ? r.returned : r.params.n);  // choices per prompt now
  std::vector<value> lps, plps;
  for (size_t i = 0; i < choices.size(); ++i) {
    const request_stream& s = *reader.streams()[i / group];
    finish_choice(choices[i], r, rules, s.prompt_text());
    const auto& prompt_lps = prompt_logprobs_of(choices, i, group);
    if (r.prompt_logprobs_field)
      plps.push_back(prompt_logprobs_json(s.prompt_ids(), prompt_lps, run.text_of()));
    lps.push_back(choice_logprobs(run, choices[i], s.prompt_ids(), prompt_lps));
  }
  value usage = usage_json(reader.prompt_tokens(), completion_tokens, reader.cached_tokens());
  const std::vector<value>* plp = r.prompt_logprobs_field ? &plps : nullptr;
  return r.chat ? chat_body(run.header, choices, lps, usage, plp)
                : completion_body(run.header, choices, lps, usage, plp);
}

}  // namespace

std::optional<split_rules> openai_api::split_rules_of(const openai_request& r) const {
  if (!r.chat) return std::nullopt;
  return split_rules{reasoning_, r.tools, limits_.tool_call_parser, r.tool_name};
}

asio::awaitable<std::variant<std::vector<std::shared_ptr<request_stream>>, api_error>>
openai_api::submit_prompts(openai_request& r) {
  // The tokenizer pool renders, encodes and applies the context rule (errors name the field);
  // one engine request per prompt.
  const bool want_logprobs = r.params.logprobs >= 0 && !r.logprobs_for_ranking;
  std::vector<generate_request> gens;
  if (r.chat) {
    generate_request g;
    g.input = std::move(r.chat_in);
    g.add_special_tokens = false;
    gens.push_back(std::move(g));
  } else {
    for (auto& p : r.prompts) {
      generate_request g;
      if (auto* text = std::get_if<std::string>(&p))
        g.input = std::move(*text);
      else
        g.input = std::move(std::get<std::vector<int32_t>>(p));
      g.return_prompt_text = r.echo;
      gens.push_back(std::move(g));
    }
  }
  std::vector<std::shared_ptr<request_stream>> streams;
  for (auto& g : gens) {
    g.params = r.params;
    g.structured = r.structured;
    g.context = context_of(r);
    g.return_token_text = want_logprobs || r.params.prompt_logprobs >= 0;
    auto s = co_await eng().submit(std::move(g));
    if (!s) {
      for (auto& open : streams) open->cancel();
      co_return from_engine_error(s.err(), r.chat ? "messages" : "prompt");
    }
    streams.push_back(std::move(*s));
  }
  co_return streams;
}

asio::awaitable<void> openai_api::collect_output(response_writer& w, output_reader& reader,
                                                 choice_sink& sink) {
  // The branches of `||` are lambdas over this frame (see sse_stream::run).
  auto reading = [&]() -> asio::awaitable<void> { co_await reader.run(sink); };
  auto watching = [&]() -> asio::awaitable<void> {
    if (co_await w.wait_disconnect()) {
      reader.stop();
      metrics_.count_client_disconnect();
    }
  };
  co_await (reading() || watching());
}

asio::awaitable<void> openai_api::generate(http_request& req, response_writer& w, bool chat) {
  auto parsed = parse_openai_request(req.body, chat, limits_);
  if (auto* e = std::get_if<api_error>(&parsed)) {
    const api_error err = *e;
    co_return co_await respond_error(w, err);
  }
  openai_request& r = std::get<openai_request>(parsed);
  auto submitted = co_await submit_prompts(r);
  if (auto* e = std::get_if<api_error>(&submitted)) {
    const api_error err = *e;
    co_return co_await respond_error(w, err);
  }
  auto& streams = std::get<std::vector<std::shared_ptr<request_stream>>>(submitted);
  // The name the request used (one of --served-model-name's), as vLLM echoes it.
  response_header h{new_id(chat ? "chatcmpl" : "cmpl"), unix_now(),
                    r.model.empty() ? limits_.served_model_name : r.model, chat};
  completion_run run(r, std::move(h), streams.size());
  // Streamed chat choices are split as they arrive; whole ones once complete (after best_of).
  output_reader reader(std::move(streams), r.params.n,
                       r.stream ? split_rules_of(r) : std::optional<split_rules>());
  if (r.stream) {
    sse_stream out(w, metrics_, options_.sse_keepalive, co_await asio::this_coro::executor);
    completion_chunks chunks(run, reader, out);
    co_return co_await out.run(reader, chunks, k_sse_done);
  }
  completion_collector collector(run);
  co_await collect_output(w, reader, collector);
  if (w.client_gone()) co_return;
  if (!reader.failure().empty()) {
    const api_error err{500, reader.failure(), "InternalServerError", {}, {}};
    co_return co_await respond_error(w, err);
  }
  std::string body = completion_body_of(run, reader, split_rules_of(r));
  co_await respond_json(w, 200, body);
}

}  // namespace coserve::http
