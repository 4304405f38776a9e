#include "http/cors.hpp"

#include <algorithm>
#include <cctype>

#include "model/text/json/value.hpp"

namespace coserve::http {

namespace {

constexpr const char* k_all_methods[] = {"DELETE", "GET",  "HEAD", "OPTIONS",
                                         "PATCH",  "POST", "PUT"};
// Headers a preflight may always ask for (the CORS-safelisted request headers).
constexpr const char* k_safelisted[] = {"accept", "accept-language", "content-language",
                                        "content-type"};

bool has(const std::vector<std::string>& v, std::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) {
    if (!out.empty()) out += ", ";
    out += x;
  }
  return out;
}

}  // namespace

cors_answer cors_for(const cors_policy& p, std::string_view method, std::string_view origin,
                     std::string_view request_method, std::string_view request_headers,
                     bool has_cookie) {
  cors_answer a;
  if (origin.empty()) return a;
  const bool any_origin = has(p.origins, "*");
  const bool any_header = has(p.headers, "*");
  const bool origin_ok = any_origin || has(p.origins, origin);
  std::vector<std::string> methods =
      has(p.methods, "*")
          ? std::vector<std::string>(std::begin(k_all_methods), std::end(k_all_methods))
          : p.methods;
  auto& h = a.headers;
  if (method == "OPTIONS" && !request_method.empty()) {  // a preflight
    // Any origin without credentials: "*"; otherwise the origin itself when allowed, and Vary.
    const bool explicit_origin = !any_origin || p.credentials;
    if (explicit_origin)
      h.emplace_back("Vary", "Origin");
    else
      h.emplace_back("Access-Control-Allow-Origin", "*");
    h.emplace_back("Access-Control-Allow-Methods", join(methods));
    h.emplace_back("Access-Control-Max-Age", "600");
    std::vector<std::string> allowed_headers;
    if (!any_header) {
      for (const char* s : k_safelisted) allowed_headers.emplace_back(s);
      for (const auto& x : p.headers) allowed_headers.push_back(lower(x));
      std::sort(allowed_headers.begin(), allowed_headers.end());
      allowed_headers.erase(std::unique(allowed_headers.begin(), allowed_headers.end()),
                            allowed_headers.end());
      h.emplace_back("Access-Control-Allow-Headers", join(allowed_headers));
    }
    if (p.credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
    std::vector<std::string> failures;
    if (origin_ok) {
      if (explicit_origin) h.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    } else {
      failures.emplace_back("origin");
    }
    if (!has(methods, request_method)) failures.emplace_back("method");
    if (any_header && !request_headers.empty()) {
      h.emplace_back("Access-Control-Allow-Headers", std::string(request_headers));
    } else if (!request_headers.empty()) {
      std::string_view rest = request_headers;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        const std::string name = lower(trim(rest.substr(0, comma)));
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
        if (!name.empty() && !has(allowed_headers, name)) {
          failures.emplace_back("headers");
          break;
        }
      }
    }
    a.preflight_status = failures.empty() ? 200 : 400;
    if (!failures.empty()) a.failure = "Disallowed CORS " + join(failures);
    return a;
  }
  // An actual request: the browser shows the answer to the page only with these.
  if (any_origin) {
    if (has_cookie) {  // a request with cookies is answered with its origin, not "*"
      h.emplace_back("Access-Control-Allow-Origin", std::string(origin));
      h.emplace_back("Vary", "Origin");
    } else {
      h.emplace_back("Access-Control-Allow-Origin", "*");
    }
  } else if (origin_ok) {
    h.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    h.emplace_back("Vary", "Origin");
  }
  if (p.credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
  return a;
}

bool parse_cors_list(std::string_view text, std::vector<std::string>& out, std::string& error) {
  auto v = json::parse(text);
  if (!v || !v->is_array()) {
    error = "expects a JSON array of strings, e.g. '[\"http://localhost:3000\"]'";
    return false;
  }
  std::vector<std::string> items;
  for (const auto& x : v->as_array()) {
    if (!x.is_string()) {
      error = "expects a JSON array of strings, e.g. '[\"http://localhost:3000\"]'";
      return false;
    }
    items.push_back(x.as_string());
  }
  out = std::move(items);
  return true;
}

}  // namespace coserve::http
