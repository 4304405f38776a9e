// The request fields the server reads, one entry per field and kind of request, each with the
// JSON Schema of its value as /openapi.json states it. The readers (http/openai_request.cpp,
// http/dialects.cpp, the tokenize routes) name fields only through `declared_field`, which does
// not compile for a name missing here, and the document's request schemas are made from this
// table (http/openapi.cpp): a field the server reads is always documented.
//
// Schemas may use the document's placeholders (@MODELS@, @VOCAB_MAX@, @MAX_TOKENS_MAX@,
// @MAX_MODEL_LEN@). Every field may be null, which the server reads as absent; the schemas state
// exactly what the server refuses (400), and no more, since a client may rely on either.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "model/text/json/value.hpp"

namespace coserve::http {

enum class field_kind : uint8_t {
  sampling,    // /v1/completions and /v1/chat/completions alike (the Sampling schema)
  completion,  // /v1/completions only
  chat,        // /v1/chat/completions only (also /tokenize with messages)
  tokenize,    // /tokenize with a prompt
  detokenize,  // /detokenize
  responses,   // /v1/responses and /v1/responses/input_tokens
  messages,    // /v1/messages and /v1/messages/count_tokens
  embeddings,  // /v1/embeddings
  score,       // /v1/score
  rerank,      // /v1/rerank and /v2/rerank
};

struct request_field {
  field_kind kind;
  std::string_view name;
  std::string_view schema;
};

inline constexpr request_field k_request_fields[] = {
    // ---- sampling ----
    {field_kind::sampling, "model",
     R"({"enum": [@MODELS@, "", null], "description": "Another name is answered 404."})"},
    {field_kind::sampling, "temperature",
     R"({"type": ["number", "null"], "minimum": 0, "maximum": 2})"},
    {field_kind::sampling, "top_p",
     R"({"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1})"},
    {field_kind::sampling, "min_p", R"({"type": ["number", "null"], "minimum": 0, "maximum": 1})"},
    {field_kind::sampling, "presence_penalty",
     R"({"type": ["number", "null"], "minimum": -2, "maximum": 2})"},
    {field_kind::sampling, "frequency_penalty",
     R"({"type": ["number", "null"], "minimum": -2, "maximum": 2})"},
    {field_kind::sampling, "repetition_penalty",
     R"({"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 2})"},
    {field_kind::sampling, "top_k",
     R"({"type": ["integer", "null"], "minimum": -1, "maximum": 2147483647})"},
    {field_kind::sampling, "n", R"({"type": ["integer", "null"], "minimum": 1, "maximum": 128})"},
    {field_kind::sampling, "cache_salt", R"({"type": ["string", "null"], "minLength": 1,
      "description": "The prompt's blocks are shared through the prefix cache only with requests of the same salt (vLLM's field)."})"},
    {field_kind::sampling, "seed",
     R"({"type": ["integer", "null"], "minimum": -9223372036854775808, "maximum": 9223372036854775807})"},
    {field_kind::sampling, "min_tokens",
     R"({"type": ["integer", "null"], "minimum": 0, "maximum": 2147483647})"},
    {field_kind::sampling, "max_tokens",
     R"({"type": ["integer", "null"], "minimum": 1, "maximum": @MAX_TOKENS_MAX@,
      "description": "The prompt plus max_tokens must fit the context, else 400."})"},
    {field_kind::sampling, "max_completion_tokens",
     R"({"type": ["integer", "null"], "minimum": 1, "maximum": @MAX_TOKENS_MAX@,
      "description": "Same as max_tokens; it wins when both are given."})"},
    {field_kind::sampling, "ignore_eos", R"({"type": ["boolean", "null"]})"},
    {field_kind::sampling, "skip_special_tokens", R"({"type": ["boolean", "null"]})"},
    {field_kind::sampling, "include_stop_str_in_output", R"({"type": ["boolean", "null"]})"},
    {field_kind::sampling, "stop",
     R"({"type": ["string", "array", "null"], "items": {"type": "string"}})"},
    {field_kind::sampling, "stop_token_ids",
     R"({"anyOf": [{"$ref": "#/components/schemas/TokenIds"}, {"type": "null"}]})"},
    {field_kind::sampling, "allowed_token_ids",
     R"({"anyOf": [{"allOf": [{"$ref": "#/components/schemas/TokenIds"}, {"minItems": 1}]}, {"type": "null"}],
      "description": "Only these tokens may be sampled (vLLM's field)."})"},
    {field_kind::sampling, "logit_bias",
     R"({"type": ["object", "null"], "propertyNames": {"pattern": "^[0-9]+$"},
      "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
      "description": "Token id (decimal string) to bias; an id outside the vocabulary is answered 400."})"},
    {field_kind::sampling, "stream", R"({"type": ["boolean", "null"]})"},
    {field_kind::sampling, "stream_options",
     R"({"type": ["object", "null"],
      "properties": {"include_usage": {"type": ["boolean", "null"]},
                     "continuous_usage_stats": {"type": ["boolean", "null"],
                       "description": "With include_usage: every chunk carries the usage so far (vLLM's field)."}}})"},
    {field_kind::sampling, "user", R"({"type": ["string", "null"]})"},
    {field_kind::sampling, "response_format",
     R"({"type": ["object", "null"],
      "description": "{type: text | json_object | json_schema, json_schema: {name, schema, strict}}."})"},
    {field_kind::sampling, "structured_outputs",
     R"({"type": ["object", "null"],
      "description": "One of json, regex, choice, grammar, json_object; disable_any_whitespace."})"},
    {field_kind::sampling, "guided_json",
     R"({"type": ["object", "boolean", "string", "null"],
      "description": "A JSON schema (or its JSON text) the output follows (vLLM's older name of structured_outputs.json)."})"},
    {field_kind::sampling, "guided_regex",
     R"({"type": ["string", "null"], "minLength": 1,
      "description": "A regular expression the output matches (structured_outputs.regex)."})"},
    {field_kind::sampling, "guided_choice",
     R"({"type": ["array", "null"], "minItems": 1, "items": {"type": "string", "minLength": 1},
      "description": "The output is one of these strings (structured_outputs.choice)."})"},
    {field_kind::sampling, "guided_grammar",
     R"({"type": ["string", "null"], "minLength": 1,
      "description": "An EBNF grammar the output follows (structured_outputs.grammar)."})"},
    {field_kind::sampling, "return_tokens_as_token_ids",
     R"({"type": ["boolean", "null"],
      "description": "Logprob tokens as \"token_id:N\" (vLLM's field)."})"},
    {field_kind::sampling, "truncate_prompt_tokens",
     R"({"anyOf": [{"const": -1}, {"type": "integer", "minimum": 1, "maximum": @MAX_MODEL_LEN@}, {"type": "null"}],
      "description": "Keep the prompt's last N tokens (-1: the context length; vLLM's field)."})"},
    {field_kind::sampling, "best_of",
     R"({"type": ["integer", "null"], "minimum": 1, "maximum": 128,
      "description": "Samples generated; the n with the highest logprob per token are returned (not with stream)."})"},
    {field_kind::sampling, "bad_words",
     R"({"type": ["array", "null"], "maxItems": 0,
      "description": "Not supported: a non-empty list is answered 400."})"},
    {field_kind::sampling, "use_beam_search",
     R"({"type": ["boolean", "null"], "description": "Not supported: true is answered 400."})"},
    // ---- completion ----
    {field_kind::completion, "prompt", R"({"anyOf": [
      {"type": "string", "minLength": 1},
      {"allOf": [{"$ref": "#/components/schemas/TokenIds"}, {"minItems": 1}]},
      {"type": "array", "minItems": 1, "items": {"anyOf": [
        {"type": "string", "minLength": 1},
        {"allOf": [{"$ref": "#/components/schemas/TokenIds"}, {"minItems": 1}]}]}}],
      "description": "A text, token ids, or a list of texts and token-id lists (one completion each). A prompt longer than the context is answered 400."})"},
    {field_kind::completion, "echo", R"({"type": ["boolean", "null"],
      "description": "Prepend the prompt to the text; with logprobs, the prompt's tokens lead the logprobs (not with stream)."})"},
    {field_kind::completion, "logprobs",
     R"({"type": ["integer", "null"], "minimum": 0, "maximum": 20})"},
    {field_kind::completion, "suffix",
     R"({"type": ["string", "null"], "description": "Not supported: a string is answered 400."})"},
    {field_kind::completion, "prompt_logprobs",
     R"({"type": ["integer", "null"], "minimum": 0, "maximum": 20,
      "description": "Log-probabilities of the prompt tokens with the top N (vLLM's field; not with stream)."})"},
    // ---- chat ----
    {field_kind::chat, "messages",
     R"({"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/Message"}})"},
    {field_kind::chat, "tools", R"({"type": ["array", "null"], "items": {"type": "object"},
      "description": "OpenAI function tools; see tool_choice."})"},
    {field_kind::chat, "tool_choice", R"({"type": ["string", "object", "null"],
      "description": "none, auto (needs --enable-auto-tool-choice), required, or {type: function, function: {name}}."})"},
    {field_kind::chat, "parallel_tool_calls", R"({"type": ["boolean", "null"]})"},
    {field_kind::chat, "chat_template_kwargs", R"({"type": ["object", "null"]})"},
    {field_kind::chat, "chat_template", R"({"type": ["string", "null"],
      "description": "A chat template for this request (vLLM's field): refused (400) unless the server runs with --trust-request-chat-template."})"},
    {field_kind::chat, "add_generation_prompt", R"({"type": ["boolean", "null"]})"},
    {field_kind::chat, "echo", R"({"type": ["boolean", "null"],
      "description": "When the final message is the assistant's, its text leads the reply's content (vLLM's extension)."})"},
    {field_kind::chat, "continue_final_message", R"({"type": ["boolean", "null"],
      "description": "Leave the final message open so the model continues it (an assistant prefill); needs add_generation_prompt false and a final message with text."})"},
    {field_kind::chat, "reasoning_effort",
     R"({"enum": ["none", "minimal", "low", "medium", "high", null],
      "description": "Passed to the chat template as the variable reasoning_effort."})"},
    {field_kind::chat, "prompt_logprobs",
     R"({"type": ["integer", "null"], "minimum": 0, "maximum": 20,
      "description": "Log-probabilities of the prompt tokens with the top N, on the response (vLLM's field; not with stream)."})"},
    {field_kind::chat, "logprobs", R"({"type": ["boolean", "null"]})"},
    {field_kind::chat, "top_logprobs", R"({"type": ["integer", "null"], "minimum": 0, "maximum": 20,
      "description": "Needs logprobs set to true."})"},
    // ---- tokenize / detokenize ----
    {field_kind::tokenize, "prompt", R"({"type": "string"})"},
    {field_kind::tokenize, "add_special_tokens", R"({"type": ["boolean", "null"]})"},
    {field_kind::tokenize, "messages", R"({"type": "null"})"},
    {field_kind::detokenize, "tokens", R"({"$ref": "#/components/schemas/TokenIds"})"},
    // ---- embeddings, score, rerank ----
    {field_kind::embeddings, "model", R"({"enum": [@MODELS@, "", null]})"},
    {field_kind::embeddings, "input",
     R"({"anyOf": [{"type": "string"},
      {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"type": "string"}},
      {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0, "maximum": @VOCAB_MAX@}},
      {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"type": "array", "minItems": 1,
        "items": {"type": "integer", "minimum": 0, "maximum": @VOCAB_MAX@}}}],
      "description": "A text, texts, token ids or lists of token ids; one vector each."})"},
    {field_kind::embeddings, "encoding_format", R"({"enum": ["float", "base64", null]})"},
    {field_kind::embeddings, "dimensions",
     R"({"type": ["integer", "null"], "minimum": 1, "maximum": 2147483647,
      "description": "Matryoshka models only: the vector's first `dimensions` values, normalised again."})"},
    {field_kind::embeddings, "user", R"({"type": ["string", "null"]})"},
    {field_kind::embeddings, "truncate_prompt_tokens",
     R"({"type": ["integer", "null"], "minimum": -1, "maximum": 2147483647,
      "description": "Keep each input's last k tokens (-1: max_model_len)."})"},
    {field_kind::embeddings, "add_special_tokens", R"({"type": ["boolean", "null"],
      "description": "Default true for input, false for messages (the chat template has them)."})"},
    {field_kind::embeddings, "messages",
     R"({"type": ["array", "null"], "minItems": 1, "items": {"$ref": "#/components/schemas/Message"},
      "description": "Instead of input: chat messages the model's chat template renders into one input (vLLM's chat embedding request); a model without a chat template answers 400."})"},
    {field_kind::embeddings, "add_generation_prompt", R"({"type": ["boolean", "null"],
      "description": "With messages; default false."})"},
    {field_kind::embeddings, "continue_final_message", R"({"type": ["boolean", "null"]})"},
    {field_kind::embeddings, "chat_template_kwargs", R"({"type": ["object", "null"]})"},
    {field_kind::embeddings, "chat_template", R"({"type": ["string", "null"],
      "description": "Refused (400) unless the server runs with --trust-request-chat-template."})"},
    {field_kind::embeddings, "tools",
     R"({"type": ["array", "null"], "items": {"type": "object"}})"},
    {field_kind::embeddings, "reasoning_effort",
     R"({"enum": ["none", "minimal", "low", "medium", "high", null]})"},
    {field_kind::score, "model", R"({"enum": [@MODELS@, "", null]})"},
    {field_kind::score, "text_1",
     R"({"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"type": "string"}}],
      "description": "One text (scored against each of text_2), or as many texts as text_2 (scored pairwise)."})"},
    {field_kind::score, "text_2",
     R"({"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"type": "string"}}]})"},
    {field_kind::score, "truncate_prompt_tokens",
     R"({"type": ["integer", "null"], "minimum": -1, "maximum": 2147483647,
      "description": "A cross-encoder's pair cut to k tokens in all by longest_first (-1: max_model_len)."})"},
    {field_kind::rerank, "model", R"({"enum": [@MODELS@, "", null]})"},
    {field_kind::rerank, "query", R"({"type": "string"})"},
    {field_kind::rerank, "documents",
     R"({"type": "array", "minItems": 1, "maxItems": 2048, "items": {"anyOf": [{"type": "string"},
      {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}]}})"},
    {field_kind::rerank, "top_n",
     R"({"type": ["integer", "null"], "minimum": 0, "maximum": 2147483647,
      "description": "The best top_n results (0 or absent: all)."})"},
    {field_kind::rerank, "return_documents", R"({"type": ["boolean", "null"]})"},
    {field_kind::rerank, "truncate_prompt_tokens",
     R"({"type": ["integer", "null"], "minimum": -1, "maximum": 2147483647,
      "description": "A cross-encoder's pair cut to k tokens in all by longest_first (-1: max_model_len)."})"},
    // ---- responses ----
    {field_kind::responses, "model",
     R"({"description": "A served model's name (another is answered 404); other than a string, ignored."})"},
    {field_kind::responses, "input",
     R"({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}],
      "description": "A user message, or items: messages (input_text / output_text parts), function_call, function_call_output; reasoning items are dropped."})"},
    {field_kind::responses, "instructions", R"({"type": ["string", "null"],
      "description": "A system message."})"},
    {field_kind::responses, "max_output_tokens",
     R"({"type": ["integer", "null"], "minimum": 1, "maximum": 2147483647,
      "description": "The prompt plus max_output_tokens must fit the context, else 400."})"},
    {field_kind::responses, "temperature",
     R"({"type": ["number", "null"], "minimum": 0, "maximum": 2})"},
    {field_kind::responses, "top_p",
     R"({"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1})"},
    {field_kind::responses, "top_k",
     R"({"type": ["integer", "null"], "minimum": -1, "maximum": 2147483647})"},
    {field_kind::responses, "min_p", R"({"type": ["number", "null"], "minimum": 0, "maximum": 1})"},
    {field_kind::responses, "repetition_penalty",
     R"({"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 2})"},
    {field_kind::responses, "seed",
     R"({"type": ["integer", "null"], "minimum": -9223372036854775808, "maximum": 9223372036854775807})"},
    {field_kind::responses, "stop",
     R"({"type": ["string", "array", "null"], "items": {"type": "string"}})"},
    {field_kind::responses, "stream", R"({"type": ["boolean", "null"]})"},
    {field_kind::responses, "parallel_tool_calls", R"({"type": ["boolean", "null"]})"},
    {field_kind::responses, "user", R"({"type": ["string", "null"]})"},
    {field_kind::responses, "tools", R"({"type": ["array", "null"], "items": {"type": "object"},
      "description": "Function tools in the flat form: {type: function, name, description, parameters}."})"},
    {field_kind::responses, "tool_choice", R"({"type": ["string", "object", "null"],
      "description": "none, auto, required, or {type: function, name}."})"},
    {field_kind::responses, "reasoning", R"({"type": ["object", "null"],
      "properties": {"effort": {"enum": ["none", "minimal", "low", "medium", "high", null]}},
      "description": "effort reaches the chat template as reasoning_effort."})"},
    {field_kind::responses, "chat_template_kwargs", R"({"type": ["object", "null"]})"},
    {field_kind::responses, "text",
     R"({"description": "An object: format {type: text | json_object | json_schema, name, schema, strict} constrains the output."})"},
    {field_kind::responses, "metadata",
     R"({"description": "An object, returned on the response as given."})"},
    {field_kind::responses, "previous_response_id",
     R"({"description": "Not supported (nothing is stored): a value other than null is answered 400."})"},
    {field_kind::responses, "background",
     R"({"description": "Not supported: true is answered 400."})"},
    // ---- messages ----
    {field_kind::messages, "model",
     R"({"description": "A served model's name (another is answered 404); other than a string, ignored."})"},
    {field_kind::messages, "system",
     R"({"anyOf": [{"type": ["string", "null"]}, {"type": "array", "items": {
      "type": "object", "required": ["type", "text"],
      "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}]})"},
    {field_kind::messages, "messages", R"({"type": "array", "minItems": 1, "items": {
      "type": "object", "required": ["role", "content"], "properties": {
        "role": {"enum": ["user", "assistant"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}],
          "description": "A text, or text, tool_use (assistant) and tool_result (user) blocks."}}}})"},
    {field_kind::messages, "max_tokens",
     R"({"type": ["integer", "null"], "minimum": 1, "maximum": 2147483647,
      "description": "Required by /v1/messages; the prompt plus max_tokens must fit the context, else 400."})"},
    {field_kind::messages, "temperature",
     R"({"type": ["number", "null"], "minimum": 0, "maximum": 2})"},
    {field_kind::messages, "top_p",
     R"({"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1})"},
    {field_kind::messages, "top_k",
     R"({"type": ["integer", "null"], "minimum": -1, "maximum": 2147483647})"},
    {field_kind::messages, "stream", R"({"type": ["boolean", "null"]})"},
    {field_kind::messages, "stop_sequences",
     R"({"type": ["string", "array", "null"], "items": {"type": "string"}})"},
    {field_kind::messages, "chat_template_kwargs",
     R"({"description": "An object of chat template variables (vLLM's extension)."})"},
    {field_kind::messages, "thinking",
     R"({"anyOf": [{"type": "null"}, {"type": "object", "required": ["type"],
      "properties": {"type": {"enum": ["enabled", "disabled"]}, "budget_tokens": {"type": "integer"}}}],
      "description": "Sets the chat template variable enable_thinking (the budget is not enforced)."})"},
    {field_kind::messages, "tools", R"({"type": ["array", "null"], "items": {"type": "object",
      "required": ["name"], "properties": {"name": {"type": "string"}}},
      "description": "Client tools: {name, description, input_schema}."})"},
    {field_kind::messages, "tool_choice",
     R"({"anyOf": [{"type": "null"}, {"type": "object", "required": ["type"],
      "properties": {"type": {"enum": ["auto", "any", "tool", "none"]}}}],
      "description": "{type: auto | any | tool (with name) | none, disable_parallel_tool_use}."})"},
};

// A field name the server reads: only a name declared in k_request_fields compiles.
struct declared_field {
  std::string_view name;
  consteval declared_field(const char* n) : name(n) {  // NOLINT: implicit from a literal
    bool found = false;
    for (const request_field& f : k_request_fields) found = found || f.name == name;
    if (!found) throw "a request field read without an entry in k_request_fields";
  }
  operator std::string() const { return std::string(name); }  // NOLINT: error params
};

// The request body's field `f`, or null when absent.
inline const json::value* find_field(const json::value& body, declared_field f) {
  return body.find(f.name);
}

}  // namespace coserve::http
