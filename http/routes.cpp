#include "http/routes.hpp"

namespace coserve::http {

namespace {

// One entry per route, each with its OpenAPI operation (the document's paths).
constexpr route k_routes[] = {
    {route_id::completions, "/v1/completions", "POST", true, false, R"json({
  "operationId": "create_completion",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CompletionRequest"}}}},
  "responses": {
    "200": {"description": "The completion (JSON), or its chunks as server-sent events when stream is true.",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Completion"}},
                  "text/event-stream": {"schema": {"$ref": "#/components/schemas/EventStream"}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "500": {"$ref": "#/components/responses/ServerError"},
    "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
    {route_id::chat_completions, "/v1/chat/completions", "POST", true, false, R"json({
  "operationId": "create_chat_completion",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletionRequest"}}}},
  "responses": {
    "200": {"description": "The chat completion (JSON), or its chunks as server-sent events when stream is true.",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletion"}},
                  "text/event-stream": {"schema": {"$ref": "#/components/schemas/EventStream"}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "500": {"$ref": "#/components/responses/ServerError"},
    "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
    {route_id::responses, "/v1/responses", "POST", true, false, R"json({
  "operationId": "create_response",
  "description": "OpenAI's Responses API over the chat template (one sample, nothing stored).",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ResponsesRequest"}}}},
  "responses": {
    "200": {"description": "The response (JSON), or its response.* events when stream is true.",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Response"}},
                  "text/event-stream": {"schema": {"$ref": "#/components/schemas/NamedEventStream"}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "500": {"$ref": "#/components/responses/ServerError"},
    "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
    {route_id::responses_input_tokens, "/v1/responses/input_tokens", "POST", false, false, R"json({
  "operationId": "count_response_input_tokens",
  "description": "The prompt tokens a Responses request renders to; nothing is generated.",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ResponsesRequest"}}}},
  "responses": {
    "200": {"description": "The count.", "content": {"application/json": {"schema": {
      "type": "object", "required": ["object", "input_tokens"], "properties": {
        "object": {"const": "response.input_tokens"}, "input_tokens": {"type": "integer", "minimum": 0}}}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
    {route_id::messages, "/v1/messages", "POST", true, false, R"json({
  "operationId": "create_message",
  "description": "Anthropic's Messages API over the chat template; errors in Anthropic's shape (the key check's and the loading answer's in OpenAI's).",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MessagesRequest"}}}},
  "responses": {
    "200": {"description": "The message (JSON), or its message_* and content_block_* events when stream is true.",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AnthropicMessage"}},
                  "text/event-stream": {"schema": {"$ref": "#/components/schemas/NamedEventStream"}}}},
    "400": {"$ref": "#/components/responses/AnthropicBadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/AnthropicNotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/AnthropicOverloaded"}, "500": {"$ref": "#/components/responses/AnthropicServerError"},
    "503": {"$ref": "#/components/responses/AnyUnavailable"}}})json"},
    {route_id::messages_count_tokens, "/v1/messages/count_tokens", "POST", false, false, R"json({
  "operationId": "count_message_tokens",
  "description": "The prompt tokens a Messages request renders to; nothing is generated (max_tokens may be left out).",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MessagesCountRequest"}}}},
  "responses": {
    "200": {"description": "The count.", "content": {"application/json": {"schema": {
      "type": "object", "required": ["input_tokens"], "properties": {"input_tokens": {"type": "integer", "minimum": 0}}}}}},
    "400": {"$ref": "#/components/responses/AnthropicBadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/AnthropicNotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/AnthropicOverloaded"}, "503": {"$ref": "#/components/responses/AnyUnavailable"}}})json"},
    {route_id::models, "/v1/models", "GET", false, false, R"json({
  "operationId": "list_models",
  "responses": {
    "200": {"description": "The served model.", "content": {"application/json": {"schema": {
      "type": "object", "required": ["object", "data"], "properties": {
        "object": {"const": "list"},
        "data": {"type": "array", "minItems": @NUM_MODELS@, "maxItems": @NUM_MODELS@,
                 "items": {"$ref": "#/components/schemas/Model"}}}}}}},
    "401": {"$ref": "#/components/responses/Unauthorized"}}})json"},
    {route_id::model, "/v1/models/{model}", "GET", false, false, R"json({
  "operationId": "retrieve_model",
  "parameters": [{"in": "path", "name": "model", "required": true, "schema": {"type": "string"},
                  "description": "The served model's id (404 for another)."}],
  "responses": {
    "200": {"description": "The served model.", "content": {"application/json": {"schema": {
      "$ref": "#/components/schemas/Model"}}}},
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}}})json"},
    {route_id::embeddings, "/v1/embeddings", "POST", true, false, R"json({
  "operationId": "create_embedding",
  "description": "Vectors of an embedding model (BERT- or XLM-R-style encoders), one per input.",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EmbeddingRequest"}}}},
  "responses": {
    "200": {"description": "The vectors.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EmbeddingList"}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "500": {"$ref": "#/components/responses/ServerError"},
    "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
    {route_id::score, "/v1/score", "POST", true, false, R"json({
  "operationId": "create_score",
  "description": "Relevance of text pairs: a cross-encoder's score, or the cosine of an embedding model's vectors.",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ScoreRequest"}}}},
  "responses": {
    "200": {"description": "One score per pair.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ScoreList"}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "500": {"$ref": "#/components/responses/ServerError"},
    "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
    {route_id::rerank, "/v1/rerank", "POST", true, false, R"json({
  "operationId": "rerank",
  "description": "Documents ranked by relevance to the query (Jina / Cohere shape).",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RerankRequest"}}}},
  "responses": {
    "200": {"description": "The documents by decreasing relevance.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RerankResult"}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "500": {"$ref": "#/components/responses/ServerError"},
    "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
    {route_id::rerank, "/v2/rerank", "POST", true, false, R"json({
  "operationId": "rerank_v2",
  "description": "As /v1/rerank (the path of Cohere's v2 API).",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RerankRequest"}}}},
  "responses": {
    "200": {"description": "The documents by decreasing relevance.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RerankResult"}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "500": {"$ref": "#/components/responses/ServerError"},
    "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
    {route_id::tokenize, "/tokenize", "POST", false, false, R"json({
  "operationId": "tokenize",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenizeRequest"}}}},
  "responses": {
    "200": {"description": "Token ids of the prompt, or of the templated messages.",
      "content": {"application/json": {"schema": {"type": "object",
        "required": ["count", "max_model_len", "tokens"], "properties": {
          "count": {"type": "integer", "minimum": 0}, "max_model_len": {"type": "integer"},
          "tokens": {"$ref": "#/components/schemas/TokenIds"}}}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "404": {"$ref": "#/components/responses/NotFound"},
    "413": {"$ref": "#/components/responses/TooLarge"}, "429": {"$ref": "#/components/responses/Overloaded"},
    "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
    {route_id::detokenize, "/detokenize", "POST", false, false, R"json({
  "operationId": "detokenize",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DetokenizeRequest"}}}},
  "responses": {
    "200": {"description": "The text of the token ids.", "content": {"application/json": {"schema": {
      "type": "object", "required": ["prompt"], "properties": {"prompt": {"type": "string"}}}}}},
    "400": {"$ref": "#/components/responses/BadRequest"}, "413": {"$ref": "#/components/responses/TooLarge"},
    "429": {"$ref": "#/components/responses/Overloaded"}, "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
    {route_id::health, "/health", "GET", false, false,
     R"json({"operationId": "health", "responses": {
  "200": {"description": "The engine is up.", "content": {"application/json": {"schema": {"type": "object"}}}},
  "503": {"description": "The engine is down.", "content": {"application/json": {"schema": {
    "type": "object", "properties": {"status": {"type": "string"}}}}}}}})json"},
    {route_id::metrics, "/metrics", "GET", false, false,
     R"json({"operationId": "metrics", "responses": {
  "200": {"description": "Prometheus text format 0.0.4.", "content": {"text/plain": {"schema": {"type": "string"}}}}}})json"},
    {route_id::version, "/version", "GET", false, false,
     R"json({"operationId": "version", "responses": {
  "200": {"description": "The server version.", "content": {"application/json": {"schema": {
    "type": "object", "required": ["version"], "properties": {"version": {"type": "string"}}}}}}}})json"},
    {route_id::openapi, "/openapi.json", "GET", false, false,
     R"json({"operationId": "openapi", "responses": {
  "200": {"description": "This document.", "content": {"application/json": {"schema": {
    "type": "object", "required": ["openapi", "info", "paths"]}}}}}})json"},
    {route_id::api_status, "/api/status", "GET", false, true, R"json({"operationId": "webui_status",
  "description": "The web UI's live view: scheduler, KV cache, requests and actors.",
  "responses": {
    "200": {"description": "The live view's data.", "content": {"application/json": {"schema": {
      "type": "object", "required": ["model", "healthy", "kv_blocks", "requests", "actors"]}}}},
    "401": {"$ref": "#/components/responses/Unauthorized"}}})json"},
    {route_id::api_trace, "/api/trace", "GET", false, true, R"json({"operationId": "webui_trace",
  "description": "The engine's trace as Chrome trace JSON (404 when tracing is off).",
  "responses": {
    "200": {"description": "The trace.", "content": {"application/json": {"schema": {"type": "object"}}}},
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"}}})json"},
    {route_id::api_prefix_cache, "/api/prefix_cache", "GET", false, true,
     R"json({"operationId": "prefix_cache",
  "description": "The blocks the prefix cache holds (the state KV-cache events describe).",
  "responses": {
    "200": {"description": "The cached blocks.", "content": {"application/json": {"schema": {
      "type": "object", "required": ["block_size", "num_blocks", "blocks"], "properties": {
        "block_size": {"type": "integer"}, "num_blocks": {"type": "integer"},
        "blocks": {"type": "array", "items": {"type": "object",
          "required": ["block", "hash", "parent", "ref_count"], "properties": {
            "block": {"type": "integer"}, "hash": {"type": "integer"},
            "parent": {"type": "integer"}, "ref_count": {"type": "integer"}}}}}}}}},
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
    {route_id::reset_prefix_cache, "/reset_prefix_cache", "POST", false, true,
     R"json({"operationId": "reset_prefix_cache",
  "description": "Drops every cached block (vLLM's endpoint; AllBlocksCleared is published).",
  "responses": {
    "200": {"description": "The cache was reset.", "content": {"application/json": {"schema": {
      "type": "object", "required": ["dropped_blocks"], "properties": {
        "dropped_blocks": {"type": "integer"}}}}}},
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "503": {"$ref": "#/components/responses/Unavailable"}}})json"},
};

constexpr std::string_view k_model_prefix = "/v1/models/";

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "/v1/models/{model}" (OpenAI's retrieveModel): the id, percent-decoded; nullopt for any other
// path or a malformed escape.
std::optional<std::string> model_in_path(std::string_view path) {
  if (path.size() <= k_model_prefix.size() ||
      path.substr(0, k_model_prefix.size()) != k_model_prefix)
    return std::nullopt;
  const std::string_view rest = path.substr(k_model_prefix.size());
  std::string id;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] != '%') {
      id += rest[i];
      continue;
    }
    if (i + 2 >= rest.size()) return std::nullopt;
    const int hi = hex_digit(rest[i + 1]), lo = hex_digit(rest[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    id += char(hi * 16 + lo);
    i += 2;
  }
  return id;
}

}  // namespace

std::span<const route> routes() { return k_routes; }

bool needs_api_key(std::string_view path) {
  return path.rfind("/v1/", 0) == 0 || path.rfind("/api/", 0) == 0 || path == "/reset_prefix_cache";
}

const route* find_route(std::string_view path, bool webui, std::optional<std::string>& model_id) {
  model_id = model_in_path(path);
  const route* found = nullptr;
  for (const route& r : k_routes) {
    if (r.webui && !webui) continue;
    if (model_id ? r.id == route_id::model : r.path == path) found = &r;
  }
  return found;
}

}  // namespace coserve::http
