// Cross-origin resource sharing, as vLLM serves it (its --allowed-origins, --allowed-methods,
// --allowed-headers and --allowed-credentials configure Starlette's CORSMiddleware, whose rules
// this follows): which pages of other origins a browser lets call the server. Pure functions; the
// API router answers preflights with them and adds their headers to every other response.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coserve::http {

struct cors_policy {
  std::vector<std::string> origins{"*"};  // "*": any origin
  std::vector<std::string> methods{"*"};  // "*": DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT
  std::vector<std::string> headers{"*"};  // "*": whatever a preflight asks for
  bool credentials = false;               // Access-Control-Allow-Credentials: true
};

struct cors_answer {
  // A preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered here: 200, or
  // 400 with `failure` ("Disallowed CORS origin, method"); 0 for any other request.
  int preflight_status = 0;
  std::string failure;
  std::vector<std::pair<std::string, std::string>> headers;  // to add to the response
};

// The answer for a request with these header values ("" when absent; request_headers: the
// preflight's Access-Control-Request-Headers). No Origin: no headers, not a preflight.
cors_answer cors_for(const cors_policy& p, std::string_view method, std::string_view origin,
                     std::string_view request_method, std::string_view request_headers,
                     bool has_cookie);

// Reads a list flag as vLLM takes it: a JSON array of strings ('["http://a.com", "http://b.com"]').
// false (and why in `error`) for anything else.
bool parse_cors_list(std::string_view json, std::vector<std::string>& out, std::string& error);

}  // namespace coserve::http
