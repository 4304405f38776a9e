// The server's routes: one entry per route the router answers, with what the router needs (path,
// method, whether it generates, whether it belongs to the web UI) and the route's OpenAPI
// operation. The router (openai_api::handle) matches requests against this table and the
// document at /openapi.json lists its paths from it, so a route cannot be answered without being
// documented.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace coserve::http {

enum class route_id : uint8_t {
  completions,
  chat_completions,
  responses,
  responses_input_tokens,
  messages,
  messages_count_tokens,
  models,
  model,  // /v1/models/{model}
  tokenize,
  detokenize,
  health,
  metrics,
  version,
  openapi,
  api_status,  // the web UI's data
  api_trace,
  embeddings,
  score,
  rerank,  // /v1/rerank and /v2/rerank
  api_prefix_cache,
  reset_prefix_cache,
};

struct route {
  route_id id;
  std::string_view path;    // "/v1/models/{model}": {model} is a path parameter
  std::string_view method;  // "GET" (HEAD answered too) or "POST"
  bool generates;           // refused (503) while the server drains
  bool webui;               // served only with the web UI
  // The OpenAPI operation object (JSON text; placeholders as http/openapi.cpp fills them in).
  std::string_view operation;
};

std::span<const route> routes();

// Whether the route needs the API key (when the server has one): /v1/* and the web UI's data.
bool needs_api_key(std::string_view path);

// The route answering `path`, or null; `webui`: the web UI's routes are served. For
// /v1/models/{model}, `model_id` receives the id, percent-decoded (ids such as
// "meta-llama/Llama-3.1-8B" may come with "/" as is or as %2F); a malformed escape matches no
// route.
const route* find_route(std::string_view path, bool webui, std::optional<std::string>& model_id);

}  // namespace coserve::http
