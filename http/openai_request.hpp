// Parsing and validation of OpenAI request bodies (/v1/completions, /v1/chat/completions) into
// engine inputs. Pure functions over json::value: no I/O, no engine calls; checks that need the
// tokenizer (prompt length) happen in the router once the prompt is tokenized.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/engine.hpp"
#include "http/api_error.hpp"
#include "http/tool_calls.hpp"
#include "model/sampling_params.hpp"
#include "model/text/json/value.hpp"

namespace coserve::http {

// What validation needs to know about the served model.
struct model_limits {
  std::string served_model_name;
  // Whether `name` is one of the served model's names or a served LoRA adapter's.
  bool serves(std::string_view name) const {
    return name == served_model_name ||
           std::find(served_model_aliases.begin(), served_model_aliases.end(), name) !=
               served_model_aliases.end() ||
           lora_id(name) != 0;
  }
  // The LoRA adapter `name` selects (sampling_params::lora_id); 0: none (the base model).
  int32_t lora_id(std::string_view name) const {
    for (size_t i = 0; i < lora_names.size(); ++i)
      if (lora_names[i] == name) return static_cast<int32_t>(i + 1);
    return 0;
  }
  int32_t vocab_size = 0;     // ids must be in [0, vocab_size)
  int32_t max_model_len = 0;  // prompt + max_tokens at most
  // Tool calling: tool_choice "auto" needs --enable-auto-tool-choice and a --tool-call-parser.
  bool enable_auto_tool_choice = false;
  const tool_parser* tool_call_parser = nullptr;
  std::vector<std::string> served_model_aliases;  // other names answered as the served model
  // vLLM's --trust-request-chat-template: a request's chat_template is used, not refused.
  bool trust_request_chat_template = false;
  // What requests leave out (the generation config's sampling defaults, model_info::defaults).
  sampling_defaults defaults;
  std::vector<std::string> lora_names;  // the served LoRA adapters (--lora-modules), in order
};

struct openai_request {
  bool chat = false;
  std::string model;
  // completions: one entry per prompt (text or ids); chat: empty, `chat` holds the messages.
  std::vector<std::variant<std::string, std::vector<int32_t>>> prompts;
  chat_input chat_in;
  sampling_params params;
  bool max_tokens_given = false;   // false: completions default 16, chat: the rest of the context
  int32_t default_max_tokens = 0;  // chat without max_tokens: at most this many (0: no cap)
  std::string max_tokens_param;    // "max_tokens" or "max_completion_tokens" (error messages)
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage =
      false;  // stream_options.continuous_usage_stats (vLLM): usage in every chunk
  // vLLM's truncate_prompt_tokens: keep the prompt's last k tokens (-1: max_model_len); 0: as
  // given.
  int32_t truncate_prompt_tokens = 0;
  bool tokens_as_ids = false;  // vLLM's return_tokens_as_token_ids: logprob tokens as "token_id:N"
  bool chat_logprobs = false;  // chat: logprobs requested (top_logprobs in params.logprobs)
  bool prompt_logprobs_field = false;  // vLLM's prompt_logprobs given: the response carries them
  // Chat `echo` (vLLM's extension): when the final message is the assistant's, its text leads
  // each reply's content.
  std::string chat_echo;
  // best_of > n: params.n samples are generated (best_of of them) and the `returned` best by mean
  // token logprob are answered; 0: every sample is returned.
  int32_t returned = 0;
  bool logprobs_for_ranking = false;  // params.logprobs was raised to 0 only to rank the samples
  bool echo = false;                  // completions: prompt text prepended to the output
  std::string user;
  // response_format json_object / json_schema, structured_outputs, or a guided_* alias (or the
  // grammar tool_choice "required" / a named function imposes).
  std::optional<grammar_spec> structured;
  // Chat tools: how the output is read (tool_choice), the named function, parallel_tool_calls.
  tool_mode tools = tool_mode::none;
  std::string tool_name;
  bool parallel_tool_calls = true;
};

// Parses a request body. On failure the error names the offending field in `param`.
std::variant<openai_request, api_error> parse_openai_request(std::string_view body, bool chat,
                                                             const model_limits& limits);

// A chat request's messages and what renders them (tools, chat_template_kwargs,
// add_generation_prompt, continue_final_message, a request template under
// --trust-request-chat-template) into `out`, whose fields keep their values where the body has
// none (other endpoints' defaults: /v1/embeddings' messages). Errors name the field.
std::optional<api_error> read_chat_input(const json::value& body, const model_limits& limits,
                                         chat_input& out);

// Parses a body that must be a JSON object (any endpoint). Errors: malformed JSON, not an object.
std::variant<json::value, api_error> parse_json_object(std::string_view body);

// The request's context rule (coserve::apply_context_rule): max_tokens as given, else the rest of
// the context (chat) or at most 16 (completions); errors name "messages"/"prompt" or the field
// given.
context_rule context_of(const openai_request& req);

// Applies the context rule once the prompt length is known (the tokenizer actor does the same for
// served requests): fills in a default max_tokens and rejects prompt + max_tokens beyond
// max_model_len.
std::optional<api_error> check_context(openai_request& req, int32_t prompt_tokens,
                                       const model_limits& limits);

}  // namespace coserve::http
