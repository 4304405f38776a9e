// Plain HTTP request/response values exchanged between the connection layer (http/server.hpp) and
// the request handlers (http/openai_api.hpp). No I/O here; the wire format is Beast's business.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace coserve::http {

struct http_request {
  std::string method;                                        // "GET", "POST", ... as sent
  std::string target;                                        // path + query, as sent
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  bool keep_alive = true;

  // The first header named `name` (lower-case), or "" when absent.
  std::string header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return v;
    return {};
  }
  // The target without its query string.
  std::string path() const { return target.substr(0, target.find('?')); }
};

struct http_response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// Limits that protect the server from slow or hostile clients.
struct server_limits {
  std::size_t max_header_bytes = 16 * 1024;      // request line + headers; beyond: 431
  std::size_t max_body_bytes = 8 * 1024 * 1024;  // beyond: 413 (checked from Content-Length first)
  std::chrono::milliseconds idle_timeout{60'000};     // keep-alive wait for the next request
  std::chrono::milliseconds request_timeout{30'000};  // whole request once its first byte arrived
  std::chrono::milliseconds write_timeout{30'000};    // one write to the client
  std::size_t max_connections = 4096;                 // beyond: accepted and closed at once
};

}  // namespace coserve::http
