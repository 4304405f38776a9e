// Encoding of OpenAI responses: full bodies for non-streaming requests and SSE chunks
// (`data: {chunk}\n\n`) for streaming ones, in the shapes the official client parses.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/engine.hpp"
#include "http/tool_calls.hpp"
#include "model/text/json/value.hpp"

namespace coserve::http {

// Fields every chunk / body of one response repeats.
struct response_header {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  bool chat = false;
  // stream_options.continuous_usage_stats: the usage each chunk carries (null: none, or null with
  // include_usage).
  const json::value* usage = nullptr;
};

// Text of one token id (for logprobs).
using token_text_fn = std::function<std::string(int32_t)>;

// One sample's output, accumulated over its events (non-streaming responses, usage).
struct choice_state {
  int32_t index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<float> token_logprobs;
  std::vector<std::vector<token_logprob>> top_logprobs;
  std::vector<prompt_logprob>
      prompt_logprobs;  // from the event that carried them (one sample of a prompt)
  finish_reason finish = finish_reason::none;
  std::string stop_reason;
  int32_t completion_tokens = 0;
  // Chat with tools: the calls found in the output (text then holds the rest, the content);
  // with calls and a "stop" finish, finish_reason is "tool_calls".
  std::vector<tool_call> tool_calls;
  // With a reasoning parser: the thinking split off the output (message.reasoning_content).
  std::string reasoning;
  bool has_reasoning = false;

  void add(const output_event& ev);
};

// best_of: of each prompt's n consecutive choices, the `keep` with the highest mean token
// log-probability (OpenAI's "highest log probability per token"; ties: lower index first), best
// first and re-indexed; the prompt's logprobs, carried by one of the group, go to the first kept.
void keep_best(std::vector<choice_state>& choices, int32_t n, int32_t keep);

// "stop", "length", "abort", "error", or null ("") while unfinished.
std::string_view finish_text(finish_reason r) noexcept;

// `data: <json>\n\n`.
std::string sse_event(std::string_view json);
inline constexpr std::string_view k_sse_done = "data: [DONE]\n\n";
inline constexpr std::string_view k_sse_keepalive = ": keep-alive\n\n";  // an SSE comment

// Characters (code points) in UTF-8 text: completions' text offsets count them, as OpenAI's do.
int64_t chars_in(std::string_view t);

// Logprobs objects. Completions: {tokens, token_logprobs, top_logprobs, text_offset}, offsets
// counted from `text_offset`. Chat: {content: [{token, logprob, bytes, top_logprobs}]}.
json::value completion_logprobs(const std::vector<int32_t>& ids, const std::vector<float>& lps,
                                const std::vector<std::vector<token_logprob>>& tops,
                                int64_t text_offset, const token_text_fn& text_of);
json::value chat_logprobs(const std::vector<int32_t>& ids, const std::vector<float>& lps,
                          const std::vector<std::vector<token_logprob>>& tops,
                          const token_text_fn& text_of);

json::value usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// Streaming chunks (JSON text, not yet framed by sse_event).
// `logprobs`: a logprobs object or null. `usage_null`: add "usage": null (include_usage is on).
std::string text_chunk(const response_header& h, int32_t index, std::string_view text,
                       const json::value& logprobs, std::string_view finish, bool usage_null);
std::string chat_role_chunk(const response_header& h, int32_t index, bool usage_null);
std::string chat_delta_chunk(const response_header& h, int32_t index, std::string_view text,
                             const json::value& logprobs, std::string_view finish, bool usage_null);
std::string usage_chunk(const response_header& h, const json::value& usage);
// A reasoning delta ({"reasoning_content": text}) of choice `index`.
std::string chat_reasoning_chunk(const response_header& h, int32_t index, std::string_view text,
                                 bool usage_null);
// Tool-call deltas of choice `index`: the call's first chunk (id, type, name, empty arguments),
// then argument text.
std::string chat_tool_header_chunk(const response_header& h, int32_t index, int32_t call_index,
                                   const std::string& id, const std::string& name, bool usage_null);
std::string chat_tool_args_chunk(const response_header& h, int32_t index, int32_t call_index,
                                 std::string_view arguments, bool usage_null);

// Completions' logprobs with echo: the prompt's tokens first (the first with null logprob and
// top_logprobs, the others from `prompt_lps`, their top entries holding the prompt token too),
// then the generated ones; text offsets from 0 over the tokens' texts.
json::value completion_logprobs_echo(const std::vector<int32_t>& prompt_ids,
                                     const std::vector<prompt_logprob>& prompt_lps,
                                     const std::vector<int32_t>& ids, const std::vector<float>& lps,
                                     const std::vector<std::vector<token_logprob>>& tops,
                                     const token_text_fn& text_of);
// vLLM's prompt_logprobs value: [null, {"<id>": {logprob, rank, decoded_token}, ...}, ...], one
// entry per prompt token, each holding the prompt token and the top ones (null where missing).
json::value prompt_logprobs_json(const std::vector<int32_t>& prompt_ids,
                                 const std::vector<prompt_logprob>& prompt_lps,
                                 const token_text_fn& text_of);

// Whole bodies. `choices` in index order; each choice's logprobs object (or null) alongside.
// prompt_logprobs (vLLM's field), when given: completions put entry i on choice i, chat puts
// entry 0 on the response.
std::string completion_body(const response_header& h, const std::vector<choice_state>& choices,
                            const std::vector<json::value>& logprobs, const json::value& usage,
                            const std::vector<json::value>* prompt_logprobs = nullptr);
std::string chat_body(const response_header& h, const std::vector<choice_state>& choices,
                      const std::vector<json::value>& logprobs, const json::value& usage,
                      const std::vector<json::value>* prompt_logprobs = nullptr);

}  // namespace coserve::http
