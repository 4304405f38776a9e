// The OpenAPI document: fixed schemas (response bodies, errors) written here, request schemas made
// from the request-field table (http/request_fields.hpp) and paths from the route table
// (http/routes.hpp), then the served model's values filled in.
#include "http/openapi.hpp"

#include <string_view>
#include <utility>

#include "http/request_fields.hpp"
#include "http/routes.hpp"
#include "model/text/json/value.hpp"

namespace coserve::http {

namespace {

// Placeholders, filled in by openapi_json(): @MODEL@ and @VERSION@ (JSON strings), @MODELS@ (every
// served name: comma-separated JSON strings), @NUM_MODELS@ (their count), @VOCAB_MAX@ (the largest
// token id), @MAX_TOKENS_MAX@ (max_model_len - 1: a longer completion never fits the context),
// @MAX_MODEL_LEN@.

// The document up to the request schemas: its head and the schemas of what the server answers.
constexpr std::string_view k_head = R"json({
"openapi": "3.1.0",
"info": {"title": "coserve", "version": @VERSION@,
  "description": "OpenAI-compatible inference server. Unknown request fields are ignored."},
"components": {
"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
  "description": "Required on /v1/* (and the web UI's /api/*) when the server runs with --api-key."}},
"schemas": {
"Error": {"type": "object", "required": ["error"], "properties": {"error": {
  "type": "object", "required": ["message", "type", "param", "code"], "properties": {
    "message": {"type": "string"}, "type": {"type": "string"},
    "param": {"type": ["string", "null"]}, "code": {"type": ["string", "integer"]}}}}},
"TokenIds": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": @VOCAB_MAX@}},
"Message": {"type": "object", "required": ["role"], "properties": {
  "role": {"type": "string", "enum": ["system", "user", "assistant", "tool"],
    "description": "The roles the demo model's chat template accepts; other models' templates decide theirs (a role a template rejects is answered 400)."},
  "content": {"anyOf": [{"type": ["string", "null"]}, {"type": "array", "items": {
    "type": "object", "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}]}}},
"AnthropicError": {"type": "object", "required": ["type", "error"], "properties": {
  "type": {"const": "error"}, "error": {"type": "object", "required": ["type", "message"], "properties": {
    "type": {"type": "string"}, "message": {"type": "string"}}}}},
"Response": {"type": "object", "required": ["id", "object", "created_at", "status", "model", "output", "usage"],
  "properties": {
    "id": {"type": "string"}, "object": {"const": "response"}, "created_at": {"type": "integer"},
    "status": {"enum": ["completed", "incomplete"]}, "model": {"type": "string"},
    "output": {"type": "array", "items": {"type": "object", "required": ["type"], "properties": {
      "type": {"enum": ["reasoning", "message", "function_call"]}}}},
    "usage": {"type": "object", "required": ["input_tokens", "output_tokens", "total_tokens"]}}},
"AnthropicMessage": {"type": "object", "required": ["id", "type", "role", "model", "content", "stop_reason", "usage"],
  "properties": {
    "id": {"type": "string"}, "type": {"const": "message"}, "role": {"const": "assistant"},
    "model": {"type": "string"},
    "content": {"type": "array", "items": {"type": "object", "required": ["type"], "properties": {
      "type": {"enum": ["thinking", "text", "tool_use"]}}}},
    "stop_reason": {"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use"]},
    "usage": {"type": "object", "required": ["input_tokens", "output_tokens"]}}},
"NamedEventStream": {"type": "object", "required": ["event", "data"],
  "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
  "description": "One server-sent event: `event: <type>` and `data: <event JSON>`."},
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
"EmbeddingList": {"type": "object", "required": ["id", "object", "created", "model", "data", "usage"],
  "properties": {
    "id": {"type": "string"}, "object": {"const": "list"}, "created": {"type": "integer"},
    "model": {"type": "string"},
    "data": {"type": "array", "items": {"type": "object", "required": ["index", "object", "embedding"],
      "properties": {"index": {"type": "integer", "minimum": 0}, "object": {"const": "embedding"},
        "embedding": {"anyOf": [{"type": "array", "items": {"type": "number"}}, {"type": "string"}],
          "description": "Floats, or (encoding_format base64) their little-endian float32 bytes in base64."}}}},
    "usage": {"$ref": "#/components/schemas/PoolingUsage"}}},
"PoolingUsage": {"type": "object", "required": ["prompt_tokens", "total_tokens"], "properties": {
  "prompt_tokens": {"type": "integer", "minimum": 0}, "total_tokens": {"type": "integer", "minimum": 0}}},
"ScoreList": {"type": "object", "required": ["id", "object", "created", "model", "data", "usage"],
  "properties": {
    "id": {"type": "string"}, "object": {"const": "list"}, "created": {"type": "integer"},
    "model": {"type": "string"},
    "data": {"type": "array", "items": {"type": "object", "required": ["index", "object", "score"],
      "properties": {"index": {"type": "integer", "minimum": 0}, "object": {"const": "score"},
        "score": {"type": "number"}}}},
    "usage": {"$ref": "#/components/schemas/PoolingUsage"}}},
"RerankResult": {"type": "object", "required": ["id", "model", "results", "usage"],
  "properties": {
    "id": {"type": "string"}, "model": {"type": "string"},
    "results": {"type": "array", "items": {"type": "object", "required": ["index", "relevance_score"],
      "properties": {"index": {"type": "integer", "minimum": 0}, "relevance_score": {"type": "number"},
        "document": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}}}},
    "usage": {"type": "object", "required": ["total_tokens"], "properties": {
      "total_tokens": {"type": "integer", "minimum": 0}}}}},
"EventStream": {"type": "object", "required": ["data"],
  "properties": {"event": {"const": "message"}, "data": {"type": "string"}},
  "description": "One server-sent event: `data: <chunk JSON>`; the last one is `data: [DONE]`."},)json";

// After the request schemas: the shared error responses, then the paths.
constexpr std::string_view k_responses = R"json(
},
"responses": {
  "BadRequest": {"description": "Invalid request.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "Unauthorized": {"description": "Missing or wrong API key.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "NotFound": {"description": "Unknown model.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "TooLarge": {"description": "Request body over --max-body-bytes.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "Overloaded": {"description": "Admission queue full; retry later.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "ServerError": {"description": "The engine failed.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "Unavailable": {"description": "The engine is down.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
  "AnthropicBadRequest": {"description": "Invalid request.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AnthropicError"}}}},
  "AnthropicNotFound": {"description": "Unknown model.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AnthropicError"}}}},
  "AnthropicOverloaded": {"description": "Admission queue full; retry later.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AnthropicError"}}}},
  "AnthropicServerError": {"description": "The engine failed.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AnthropicError"}}}},
  "AnyUnavailable": {"description": "The model is loading (OpenAI's error shape) or the engine is down (Anthropic's).", "content": {"application/json": {"schema": {
    "anyOf": [{"$ref": "#/components/schemas/Error"}, {"$ref": "#/components/schemas/AnthropicError"}]}}}}
}
},
"paths": {)json";

// {"<name>": <schema>, ...}: the properties of one kind of request field.
std::string properties(field_kind kind) {
  std::string out = "{";
  for (const request_field& f : k_request_fields) {
    if (f.kind != kind) continue;
    if (out.size() > 1) out += ",\n    ";
    out += '"';
    out += f.name;
    out += "\": ";
    out += f.schema;
  }
  return out + "}";
}

// The request bodies' schemas, each around the properties of its fields.
std::string request_schemas() {
  std::string out;
  out += R"("Sampling": {"type": "object", "properties": )" + properties(field_kind::sampling) +
         R"(,
  "if": {"required": ["stream_options"], "properties": {"stream_options": {"type": "object"}}},
  "then": {"required": ["stream"], "properties": {"stream": {"const": true}}}},
)";
  out += R"("CompletionRequest": {"allOf": [{"$ref": "#/components/schemas/Sampling"}, {
  "type": "object", "required": ["prompt"], "properties": )" +
         properties(field_kind::completion) + "}]},\n";
  out += R"("ChatCompletionRequest": {"allOf": [{"$ref": "#/components/schemas/Sampling"}, {
  "type": "object", "required": ["messages"], "properties": )" +
         properties(field_kind::chat) + R"(,
  "if": {"required": ["top_logprobs"], "properties": {"top_logprobs": {"type": "integer"}}},
  "then": {"required": ["logprobs"], "properties": {"logprobs": {"const": true}}}}]},
)";
  out += R"("TokenizeRequest": {"anyOf": [
  {"$ref": "#/components/schemas/ChatCompletionRequest"},
  {"type": "object", "required": ["prompt"], "properties": )" +
         properties(field_kind::tokenize) + "}]},\n";
  out += R"("DetokenizeRequest": {"type": "object", "required": ["tokens"], "properties": )" +
         properties(field_kind::detokenize) + "},\n";
  out += R"("ResponsesRequest": {"type": "object", "required": ["input"], "properties": )" +
         properties(field_kind::responses) + "},\n";
  const std::string messages = properties(field_kind::messages);
  out +=
      R"("MessagesRequest": {"type": "object", "required": ["messages", "max_tokens"], "properties": )" +
      messages + "},\n";
  out += R"("MessagesCountRequest": {"type": "object", "required": ["messages"], "properties": )" +
         messages + "},\n";
  out += R"("EmbeddingRequest": {"type": "object", "anyOf": [{"required": ["input"]},)"
         R"( {"required": ["messages"]}], "properties": )" +
         properties(field_kind::embeddings) + "},\n";
  out += R"("ScoreRequest": {"type": "object", "required": ["text_1", "text_2"], "properties": )" +
         properties(field_kind::score) + "},\n";
  out +=
      R"("RerankRequest": {"type": "object", "required": ["query", "documents"], "properties": )" +
      properties(field_kind::rerank) + "}";
  return out;
}

// One entry per route served; routes behind the API key say so ("security").
std::string paths(bool webui) {
  std::string out;
  for (const route& r : routes()) {
    if (r.webui && !webui) continue;
    if (!out.empty()) out += ",\n";
    out += '"';
    out += r.path;
    out += "\": {\"";
    for (char c : r.method) out += char(c - 'A' + 'a');
    out += "\": ";
    std::string_view op = r.operation;  // "{...}"
    if (needs_api_key(r.path)) {
      out += R"({"security": [{}, {"bearer": []}],)";
      op.remove_prefix(1);
    }
    out += op;
    out += "}";
  }
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  json::append_escaped(out, s);
  out += '"';
  return out;
}

// `doc` with every @KEY@ placeholder replaced by its value.
std::string fill_placeholders(std::string_view doc,
                              std::span<const std::pair<std::string_view, std::string>> subs) {
  std::string out;
  out.reserve(doc.size() + 256);
  size_t i = 0;
  while (i < doc.size()) {
    bool replaced = false;
    if (doc[i] == '@')
      for (const auto& [key, text] : subs)
        if (doc.compare(i, key.size(), key) == 0) {
          out += text;
          i += key.size();
          replaced = true;
          break;
        }
    if (!replaced) out += doc[i++];
  }
  return out;
}

}  // namespace

std::string openapi_json(const model_limits& limits, const std::string& version, bool webui) {
  std::string models = json_string(limits.served_model_name);  // every name, comma-separated
  for (const std::string& alias : limits.served_model_aliases) models += ", " + json_string(alias);
  const std::pair<std::string_view, std::string> subs[] = {
      {"@MODEL@", json_string(limits.served_model_name)},
      {"@MODELS@", models},
      {"@NUM_MODELS@", std::to_string(1 + limits.served_model_aliases.size())},
      {"@VERSION@", json_string(version)},
      {"@VOCAB_MAX@", std::to_string(limits.vocab_size - 1)},
      {"@MAX_TOKENS_MAX@", std::to_string(limits.max_model_len > 1 ? limits.max_model_len - 1 : 1)},
      {"@MAX_MODEL_LEN@", std::to_string(limits.max_model_len)},
  };
  std::string doc(k_head);
  doc += request_schemas();
  doc += k_responses;
  doc += paths(webui);
  doc += "\n}\n}\n";
  return fill_placeholders(doc, subs);
}

}  // namespace coserve::http
