// The OpenAPI document: valid JSON with the served model's name, vocabulary and context filled in,
// listing every route the router answers and every request field the parsers read.
#include <catch2/catch.hpp>
#include <string>

#include "http/openapi.hpp"
#include "http/request_fields.hpp"
#include "http/routes.hpp"
#include "model/text/json/value.hpp"

using namespace coserve;
using namespace coserve::http;

namespace {

// The properties of a request schema, following allOf / anyOf to the object that holds them.
const json::value* properties_with(const json::value& schemas, const char* schema,
                                   std::string_view field) {
  const json::value* s = schemas.find(schema);
  REQUIRE(s);
  std::vector<const json::value*> todo{s};
  while (!todo.empty()) {
    const json::value* v = todo.back();
    todo.pop_back();
    if (const json::value* p = v->find("properties"); p && p->find(field)) return p->find(field);
    for (const char* k : {"allOf", "anyOf"})
      if (const json::value* list = v->find(k))
        for (const auto& branch : list->as_array()) {
          if (const json::value* ref = branch.find("$ref")) {
            const std::string name = ref->as_string().substr(ref->as_string().rfind('/') + 1);
            todo.push_back(schemas.find(name));
          } else {
            todo.push_back(&branch);
          }
        }
  }
  return nullptr;
}

// The request schemas that carry a kind of field.
std::vector<const char*> schemas_of(field_kind kind) {
  switch (kind) {
    case field_kind::sampling:
      return {"CompletionRequest", "ChatCompletionRequest"};
    case field_kind::completion:
      return {"CompletionRequest"};
    case field_kind::chat:
      return {"ChatCompletionRequest"};
    case field_kind::tokenize:
      return {"TokenizeRequest"};
    case field_kind::detokenize:
      return {"DetokenizeRequest"};
    case field_kind::responses:
      return {"ResponsesRequest"};
    case field_kind::messages:
      return {"MessagesRequest", "MessagesCountRequest"};
    case field_kind::embeddings:
      return {"EmbeddingRequest"};
    case field_kind::score:
      return {"ScoreRequest"};
    case field_kind::rerank:
      return {"RerankRequest"};
  }
  return {};
}

}  // namespace

TEST_CASE("openapi: the document is JSON with the model's limits substituted", "[http][openapi]") {
  const model_limits lim{"m\"odel", 1000, 256};
  auto doc = json::parse(openapi_json(lim, "9.9"));
  REQUIRE(doc);
  CHECK(doc->find("openapi")->as_string() == "3.1.0");
  CHECK(doc->find("info")->find("version")->as_string() == "9.9");
  const auto* paths = doc->find("paths");
  REQUIRE(paths);
  for (const char* p : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health",
                        "/metrics", "/tokenize", "/detokenize", "/version", "/openapi.json"})
    CHECK(paths->find(p) != nullptr);
  const auto* schemas = doc->find("components")->find("schemas");
  const auto* sampling = schemas->find("Sampling")->find("properties");
  CHECK(sampling->find("model")->find("enum")->as_array()[0].as_string() == "m\"odel");
  CHECK(sampling->find("max_tokens")->find("maximum")->as_int() == 255);
  CHECK(schemas->find("TokenIds")->find("items")->find("maximum")->as_int() == 999);
}

TEST_CASE("openapi: every route the router answers is a path of the document", "[http][openapi]") {
  const model_limits lim{"m", 1000, 256};
  for (bool webui : {true, false}) {
    auto doc = json::parse(openapi_json(lim, "1", webui));
    REQUIRE(doc);
    const json::value& paths = *doc->find("paths");
    size_t served = 0;
    for (const route& r : routes()) {
      INFO(r.path << " webui=" << webui);
      std::optional<std::string> id;
      const std::string probe =
          r.id == route_id::model ? std::string("/v1/models/some-model") : std::string(r.path);
      const route* answered = find_route(probe, webui, id);
      if (!answered) {
        CHECK(r.webui);
        CHECK(!webui);
        CHECK(paths.find(r.path) == nullptr);  // not served, not listed
        continue;
      }
      CHECK(answered == &r);
      ++served;
      const json::value* item = paths.find(r.path);
      REQUIRE(item);
      std::string method(r.method);
      for (char& c : method) c = char(c - 'A' + 'a');
      const json::value* op = item->find(method);
      REQUIRE(op);
      CHECK(op->find("responses") != nullptr);
      CHECK((op->find("security") != nullptr) == needs_api_key(r.path));
    }
    CHECK(paths.as_object().size() == served);
  }
}

TEST_CASE("openapi: every request field the parsers read is in its request's schema",
          "[http][openapi]") {
  const model_limits lim{"m", 1000, 256};
  auto doc = json::parse(openapi_json(lim, "1"));
  REQUIRE(doc);
  const json::value& schemas = *doc->find("components")->find("schemas");
  for (const request_field& f : k_request_fields)
    for (const char* schema : schemas_of(f.kind)) {
      INFO(schema << "." << f.name);
      CHECK(properties_with(schemas, schema, f.name) != nullptr);
    }
  // Fields added to the document since it was written by hand, each where the parser reads it.
  CHECK(properties_with(schemas, "CompletionRequest", "truncate_prompt_tokens"));
  CHECK(properties_with(schemas, "ChatCompletionRequest", "guided_json"));
  CHECK(properties_with(schemas, "ChatCompletionRequest", "chat_template"));
  CHECK(properties_with(schemas, "CompletionRequest", "allowed_token_ids"));
  CHECK(properties_with(schemas, "ResponsesRequest", "input"));
  CHECK(properties_with(schemas, "MessagesRequest", "max_tokens"));
}
