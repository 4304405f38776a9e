// CORS answers as vLLM's server gives them (Starlette's CORSMiddleware under vLLM's flags).
#include <catch2/catch.hpp>
#include <string>

#include "http/cors.hpp"

using namespace coserve::http;

namespace {

std::string header(const cors_answer& a, const std::string& name) {
  for (const auto& [k, v] : a.headers)
    if (k == name) return v;
  return "<none>";
}

}  // namespace

TEST_CASE("cors: the default policy lets any origin call, preflights echo the asked headers",
          "[http][cors]") {
  const cors_policy any;
  auto none = cors_for(any, "POST", "", "", "", false);  // no Origin: not a CORS request
  CHECK(none.preflight_status == 0);
  CHECK(none.headers.empty());
  auto simple = cors_for(any, "POST", "http://app.example", "", "", false);
  CHECK(simple.preflight_status == 0);
  CHECK(header(simple, "Access-Control-Allow-Origin") == "*");
  CHECK(header(simple, "Vary") == "<none>");
  auto cookie =
      cors_for(any, "GET", "http://app.example", "", "", true);  // cookies: the origin itself
  CHECK(header(cookie, "Access-Control-Allow-Origin") == "http://app.example");
  CHECK(header(cookie, "Vary") == "Origin");
  auto pre =
      cors_for(any, "OPTIONS", "http://app.example", "POST", "authorization, content-type", false);
  CHECK(pre.preflight_status == 200);
  CHECK(header(pre, "Access-Control-Allow-Origin") == "*");
  CHECK(header(pre, "Access-Control-Allow-Methods") ==
        "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  CHECK(header(pre, "Access-Control-Allow-Headers") == "authorization, content-type");
  CHECK(header(pre, "Access-Control-Max-Age") == "600");
  CHECK(header(pre, "Access-Control-Allow-Credentials") == "<none>");
  // OPTIONS without Access-Control-Request-Method is no preflight.
  CHECK(cors_for(any, "OPTIONS", "http://app.example", "", "", false).preflight_status == 0);
}

TEST_CASE("cors: listed origins, methods and headers, and refusals that name what failed",
          "[http][cors]") {
  cors_policy p;
  p.origins = {"http://a.example", "https://b.example"};
  p.methods = {"GET", "POST"};
  p.headers = {"Authorization", "X-Custom"};
  p.credentials = true;
  auto ok =
      cors_for(p, "OPTIONS", "https://b.example", "POST", "Content-Type, authorization", false);
  CHECK(ok.preflight_status == 200);
  CHECK(header(ok, "Access-Control-Allow-Origin") == "https://b.example");
  CHECK(header(ok, "Vary") == "Origin");
  CHECK(header(ok, "Access-Control-Allow-Methods") == "GET, POST");
  CHECK(header(ok, "Access-Control-Allow-Headers") ==
        "accept, accept-language, authorization, content-language, content-type, x-custom");
  CHECK(header(ok, "Access-Control-Allow-Credentials") == "true");
  auto bad = cors_for(p, "OPTIONS", "http://evil.example", "DELETE", "x-other", false);
  CHECK(bad.preflight_status == 400);
  CHECK(bad.failure == "Disallowed CORS origin, method, headers");
  CHECK(header(bad, "Access-Control-Allow-Origin") == "<none>");
  auto listed = cors_for(p, "POST", "http://a.example", "", "", false);
  CHECK(header(listed, "Access-Control-Allow-Origin") == "http://a.example");
  CHECK(header(listed, "Vary") == "Origin");
  CHECK(header(listed, "Access-Control-Allow-Credentials") == "true");
  auto other = cors_for(p, "POST", "http://evil.example", "", "",
                        false);  // served, but not shown to the page
  CHECK(header(other, "Access-Control-Allow-Origin") == "<none>");
}

TEST_CASE("cors: list flags are JSON arrays of strings", "[http][cors]") {
  std::vector<std::string> out;
  std::string why;
  CHECK(parse_cors_list(R"(["http://a", "http://b"])", out, why));
  CHECK(out == std::vector<std::string>{"http://a", "http://b"});
  CHECK_FALSE(parse_cors_list("http://a", out, why));
  CHECK_FALSE(why.empty());
  CHECK_FALSE(parse_cors_list("[1]", out, why));
  CHECK(out == std::vector<std::string>{"http://a", "http://b"});  // unchanged on failure
}
