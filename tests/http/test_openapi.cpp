// The OpenAPI document: valid JSON with the served model's name, vocabulary and context filled in.
#include <catch2/catch.hpp>

#include "http/openapi.hpp"
#include "model/text/json/value.hpp"

using namespace coserve;
using namespace coserve::http;

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
