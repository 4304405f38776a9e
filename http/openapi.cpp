#include "http/openapi.hpp"

#include <string_view>
#include <utility>

#include "model/text/json/value.hpp"

namespace coserve::http {

namespace {

// The document with placeholders: @MODEL@ and @VERSION@ (JSON strings), @MODELS@ (every served
// name: comma-separated JSON strings), @NUM_MODELS@ (their count), @VOCAB_MAX@ (the largest
// token id), @MAX_TOKENS_MAX@ (max_model_len - 1: a longer completion never fits the context).
// Every request field may be null, which the server reads as absent.
constexpr std::string_view k_document = R"json({
"openapi": "3.1.0",
"info": {"title": "coserve", "version": @VERSION@,
  "description": "OpenAI-compatible inference server. Unknown request fields are ignored."},
"components": {
"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
  "description": "Required on /v1/* when the server runs with --api-key."}},
"schemas": {
"Error": {"type": "object", "required": ["error"], "properties": {"error": {
  "type": "object", "required": ["message", "type", "param", "code"], "properties": {
    "message": {"type": "string"}, "type": {"type": "string"},
    "param": {"type": ["string", "null"]}, "code": {"type": ["string", "integer"]}}}}},
"TokenIds": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": @VOCAB_MAX@}},
"Sampling": {"type": "object",
  "properties": {
    "model": {"enum": [@MODELS@, "", null], "description": "Another name is answered 404."},
    "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
    "top_p": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1},
    "min_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
    "presence_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
    "frequency_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
    "repetition_penalty": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 2},
    "top_k": {"type": ["integer", "null"], "minimum": -1, "maximum": 2147483647},
    "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 128},
    "seed": {"type": ["integer", "null"], "minimum": -9223372036854775808, "maximum": 9223372036854775807},
    "min_tokens": {"type": ["integer", "null"], "minimum": 0, "maximum": 2147483647},
    "max_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": @MAX_TOKENS_MAX@,
      "description": "The prompt plus max_tokens must fit the context, else 400."},
    "max_completion_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": @MAX_TOKENS_MAX@,
      "description": "Same as max_tokens; it wins when both are given."},
    "ignore_eos": {"type": ["boolean", "null"]},
    "skip_special_tokens": {"type": ["boolean", "null"]},
    "include_stop_str_in_output": {"type": ["boolean", "null"]},
    "stop": {"type": ["string", "array", "null"], "items": {"type": "string"}},
    "stop_token_ids": {"anyOf": [{"$ref": "#/components/schemas/TokenIds"}, {"type": "null"}]},
    "logit_bias": {"type": ["object", "null"], "propertyNames": {"pattern": "^[0-9]+$"},
      "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
      "description": "Token id (decimal string) to bias; an id outside the vocabulary is answered 400."},
    "stream": {"type": ["boolean", "null"]},
    "stream_options": {"type": ["object", "null"],
      "properties": {"include_usage": {"type": ["boolean", "null"]}}},
    "user": {"type": ["string", "null"]}},
  "if": {"required": ["stream_options"], "properties": {"stream_options": {"type": "object"}}},
  "then": {"required": ["stream"], "properties": {"stream": {"const": true}}}},
"CompletionRequest": {"allOf": [{"$ref": "#/components/schemas/Sampling"}, {
  "type": "object", "required": ["prompt"],
  "properties": {
    "prompt": {"anyOf": [
      {"type": "string", "minLength": 1},
      {"allOf": [{"$ref": "#/components/schemas/TokenIds"}, {"minItems": 1}]},
      {"type": "array", "minItems": 1, "items": {"anyOf": [
        {"type": "string", "minLength": 1},
        {"allOf": [{"$ref": "#/components/schemas/TokenIds"}, {"minItems": 1}]}]}}],
      "description": "A text, token ids, or a list of texts and token-id lists (one completion each). A prompt longer than the context is answered 400."},
    "echo": {"type": ["boolean", "null"],
      "description": "Prepend the prompt to the text; with logprobs, the prompt's tokens lead the logprobs (not with stream)."},
    "logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20},
    "suffix": {"type": ["string", "null"], "description": "Not supported: a string is answered 400."},
    "best_of": {"type": ["integer", "null"], "minimum": 1, "maximum": 128,
      "description": "Samples generated; the n with the highest logprob per token are returned (not with stream)."},
    "prompt_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20,
      "description": "Log-probabilities of the prompt tokens with the top N (vLLM's field; not with stream)."}}}]},
"Message": {"type": "object", "required": ["role"], "properties": {
  "role": {"type": "string", "enum": ["system", "user", "assistant", "tool"],
    "description": "The roles the demo model's chat template accepts; other models' templates decide theirs (a role a template rejects is answered 400)."},
  "content": {"anyOf": [{"type": ["string", "null"]}, {"type": "array", "items": {
    "type": "object", "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}]}}},
"ChatCompletionRequest": {"allOf": [{"$ref": "#/components/schemas/Sampling"}, {
  "type": "object", "required": ["messages"],
  "properties": {
    "messages": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/Message"}},
    "tools": {"type": ["array", "null"], "items": {"type": "object"},
      "description": "OpenAI function tools; see tool_choice."},
    "tool_choice": {"type": ["string", "object", "null"],
      "description": "none, auto (needs --enable-auto-tool-choice), required, or {type: function, function: {name}}."},
    "parallel_tool_calls": {"type": ["boolean", "null"]},
    "response_format": {"type": ["object", "null"],
      "description": "{type: text | json_object | json_schema, json_schema: {name, schema, strict}}."},
    "structured_outputs": {"type": ["object", "null"],
      "description": "One of json, regex, choice, grammar, json_object; disable_any_whitespace."},
    "chat_template_kwargs": {"type": ["object", "null"]},
    "add_generation_prompt": {"type": ["boolean", "null"]},
    "echo": {"type": ["boolean", "null"],
      "description": "When the final message is the assistant's, its text leads the reply's content (vLLM's extension)."},
    "continue_final_message": {"type": ["boolean", "null"],
      "description": "Leave the final message open so the model continues it (an assistant prefill); needs add_generation_prompt false and a final message with text."},
    "reasoning_effort": {"enum": ["none", "minimal", "low", "medium", "high", null],
      "description": "Passed to the chat template as the variable reasoning_effort."},
    "prompt_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20,
      "description": "Log-probabilities of the prompt tokens with the top N, on the response (vLLM's field; not with stream)."},
    "logprobs": {"type": ["boolean", "null"]},
    "top_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20,
      "description": "Needs logprobs set to true."}},
  "if": {"required": ["top_logprobs"], "properties": {"top_logprobs": {"type": "integer"}}},
  "then": {"required": ["logprobs"], "properties": {"logprobs": {"const": true}}}}]},
"TokenizeRequest": {"anyOf": [
  {"$ref": "#/components/schemas/ChatCompletionRequest"},
  {"type": "object", "required": ["prompt"], "properties": {
    "prompt": {"type": "string"}, "add_special_tokens": {"type": ["boolean", "null"]},
    "messages": {"type": "null"}}}]},
"DetokenizeRequest": {"type": "object", "required": ["tokens"],
  "properties": {"tokens": {"$ref": "#/components/schemas/TokenIds"}}},
"FinishReason": {"enum": ["stop", "length", "abort", "tool_calls", null]},
"Logprobs": {"type": ["object", "null"]},
"Usage": {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
  "properties": {
    "prompt_tokens": {"type": "integer", "minimum": 0},
    "completion_tokens": {"type": "integer", "minimum": 0},
    "total_tokens": {"type": "integer", "minimum": 0},
    "prompt_tokens_details": {"type": "object", "required": ["cached_tokens"],
      "properties": {"cached_tokens": {"type": "integer", "minimum": 0}}}}},
"Completion": {"type": "object", "required": ["id", "object", "created", "model", "choices", "usage"],
  "properties": {
    "id": {"type": "string"}, "object": {"const": "text_completion"},
    "created": {"type": "integer"}, "model": {"type": "string"},
    "choices": {"type": "array", "items": {"type": "object",
      "required": ["index", "text", "logprobs", "finish_reason"], "properties": {
        "index": {"type": "integer", "minimum": 0}, "text": {"type": "string"},
        "logprobs": {"$ref": "#/components/schemas/Logprobs"},
        "finish_reason": {"$ref": "#/components/schemas/FinishReason"},
        "stop_reason": {"type": ["string", "null"]}}}},
    "usage": {"$ref": "#/components/schemas/Usage"}}},
"ChatCompletion": {"type": "object", "required": ["id", "object", "created", "model", "choices", "usage"],
  "properties": {
    "id": {"type": "string"}, "object": {"const": "chat.completion"},
    "created": {"type": "integer"}, "model": {"type": "string"},
    "choices": {"type": "array", "items": {"type": "object",
      "required": ["index", "message", "logprobs", "finish_reason"], "properties": {
        "index": {"type": "integer", "minimum": 0},
        "message": {"type": "object", "required": ["role", "content"], "properties": {
          "role": {"const": "assistant"}, "content": {"type": "string"},
          "tool_calls": {"type": "array"}}},
        "logprobs": {"$ref": "#/components/schemas/Logprobs"},
        "finish_reason": {"$ref": "#/components/schemas/FinishReason"},
        "stop_reason": {"type": ["string", "null"]}}}},
    "usage": {"$ref": "#/components/schemas/Usage"}}},
"Model": {"type": "object", "required": ["id", "object", "created", "owned_by", "root", "max_model_len"],
  "properties": {
    "id": {"enum": [@MODELS@]}, "object": {"const": "model"}, "created": {"type": "integer"},
    "owned_by": {"type": "string"}, "root": {"const": @MODEL@},
    "max_model_len": {"type": "integer", "minimum": 1}}},
"EventStream": {"type": "object", "required": ["data"],
  "properties": {"event": {"const": "message"}, "data": {"type": "string"}},
  "description": "One server-sent event: `data: <chunk JSON>`; the last one is `data: [DONE]`."}
},
"responses": {
  "BadRequest": {"description": "Invalid request.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "Unauthorized": {"description": "Missing or wrong API key.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "NotFound": {"description": "Unknown model.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "TooLarge": {"description": "Request body over --max-body-bytes.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "Overloaded": {"description": "Admission queue full; retry later.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "ServerError": {"description": "The engine failed.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "Unavailable": {"description": "The engine is down.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
}
},
"paths": {
"/v1/completions": {"post": {"operationId": "create_completion", "security": [{}, {"bearer": []}],
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CompletionRequest"}}}},
  "responses": {
    "200": {"description": "The completion (JSON), or its chunks as server-sent events when stream is true.",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Completion"}},
                  "text/event-stream": {"schema": {"$ref": "#/components/schemas/EventStream"}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "500": {"$ref": "#/components/responses/ServerError"},
    "503": {"$ref": "#/components/responses/Unavailable"}}}},
"/v1/chat/completions": {"post": {"operationId": "create_chat_completion", "security": [{}, {"bearer": []}],
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletionRequest"}}}},
  "responses": {
    "200": {"description": "The chat completion (JSON), or its chunks as server-sent events when stream is true.",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletion"}},
                  "text/event-stream": {"schema": {"$ref": "#/components/schemas/EventStream"}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "500": {"$ref": "#/components/responses/ServerError"},
    "503": {"$ref": "#/components/responses/Unavailable"}}}},
"/v1/models": {"get": {"operationId": "list_models", "security": [{}, {"bearer": []}],
  "responses": {
    "200": {"description": "The served model.", "content": {"application/json": {"schema": {
      "type": "object", "required": ["object", "data"], "properties": {
        "object": {"const": "list"},
        "data": {"type": "array", "minItems": @NUM_MODELS@, "maxItems": @NUM_MODELS@,
                 "items": {"$ref": "#/components/schemas/Model"}}}}}}},
    "401": {"$ref": "#/components/responses/Unauthorized"}}}},
"/v1/models/{model}": {"get": {"operationId": "retrieve_model", "security": [{}, {"bearer": []}],
  "parameters": [{"in": "path", "name": "model", "required": true, "schema": {"type": "string"},
                  "description": "The served model's id (404 for another)."}],
  "responses": {
    "200": {"description": "The served model.", "content": {"application/json": {"schema": {
      "$ref": "#/components/schemas/Model"}}}},
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}}}},
"/tokenize": {"post": {"operationId": "tokenize",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenizeRequest"}}}},
  "responses": {
    "200": {"description": "Token ids of the prompt, or of the templated messages.",
      "content": {"application/json": {"schema": {"type": "object",
        "required": ["count", "max_model_len", "tokens"], "properties": {
          "count": {"type": "integer", "minimum": 0}, "max_model_len": {"type": "integer"},
          "tokens": {"$ref": "#/components/schemas/TokenIds"}}}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "404": {"$ref": "#/components/responses/NotFound"},
    "413": {"$ref": "#/components/responses/TooLarge"}, "429": {"$ref": "#/components/responses/Overloaded"},
    "503": {"$ref": "#/components/responses/Unavailable"}}}},
"/detokenize": {"post": {"operationId": "detokenize",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DetokenizeRequest"}}}},
  "responses": {
    "200": {"description": "The text of the token ids.", "content": {"application/json": {"schema": {
      "type": "object", "required": ["prompt"], "properties": {"prompt": {"type": "string"}}}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "503": {"$ref": "#/components/responses/Unavailable"}}}},
"/health": {"get": {"operationId": "health", "responses": {
  "200": {"description": "The engine is up.", "content": {"application/json": {"schema": {"type": "object"}}}},
  "503": {"description": "The engine is down.", "content": {"application/json": {"schema": {
    "type": "object", "properties": {"status": {"type": "string"}}}}}}}}},
"/metrics": {"get": {"operationId": "metrics", "responses": {
  "200": {"description": "Prometheus text format 0.0.4.", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
"/version": {"get": {"operationId": "version", "responses": {
  "200": {"description": "The server version.", "content": {"application/json": {"schema": {
    "type": "object", "required": ["version"], "properties": {"version": {"type": "string"}}}}}}}}},
"/openapi.json": {"get": {"operationId": "openapi", "responses": {
  "200": {"description": "This document.", "content": {"application/json": {"schema": {
    "type": "object", "required": ["openapi", "info", "paths"]}}}}}}}
}
})json";

std::string json_string(const std::string& s) {
  std::string out = "\"";
  json::append_escaped(out, s);
  out += '"';
  return out;
}

}  // namespace

std::string openapi_json(const model_limits& limits, const std::string& version) {
  std::string models = json_string(limits.served_model_name);  // every name, comma-separated
  for (const std::string& alias : limits.served_model_aliases) models += ", " + json_string(alias);
  const std::pair<std::string_view, std::string> subs[] = {
      {"@MODEL@", json_string(limits.served_model_name)},
      {"@MODELS@", models},
      {"@NUM_MODELS@", std::to_string(1 + limits.served_model_aliases.size())},
      {"@VERSION@", json_string(version)},
      {"@VOCAB_MAX@", std::to_string(limits.vocab_size - 1)},
      {"@MAX_TOKENS_MAX@", std::to_string(limits.max_model_len > 1 ? limits.max_model_len - 1 : 1)},
  };
  std::string out;
  out.reserve(k_document.size() + 256);
  size_t i = 0;
  while (i < k_document.size()) {
    bool replaced = false;
    if (k_document[i] == '@')
      for (const auto& [key, text] : subs)
        if (k_document.compare(i, key.size(), key) == 0) {
          out += text;
          i += key.size();
          replaced = true;
          break;
        }
    if (!replaced) out += k_document[i++];
  }
  return out;
}

}  // namespace coserve::http
