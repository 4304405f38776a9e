// The web UI's static files (http/webui/*, and the Markdown libraries found at build time),
// embedded in the binary by cmake/coserve_embed.cmake: GET /, /status and /webui/*.
#pragma once

#include <cstddef>
#include <string_view>

namespace coserve::http {

struct web_asset {
  std::string_view path;  // the URL path it is served at
  std::string_view content_type;
  std::string_view body;
};

extern const web_asset k_web_assets[];  // k_web_asset_count entries, then an empty one
extern const size_t k_web_asset_count;

// The asset served at `path`, or nullptr.
inline const web_asset* find_web_asset(std::string_view path) {
  for (size_t i = 0; i < k_web_asset_count; ++i)
    if (k_web_assets[i].path == path) return &k_web_assets[i];
  return nullptr;
}

// The Content-Security-Policy of every web UI page: scripts, styles and connections from this
// server only, no inline code, no frames, no plugins.
inline constexpr std::string_view k_webui_csp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src "
    "'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace coserve::http
