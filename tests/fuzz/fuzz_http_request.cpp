// HTTP/1.1 request parsing as the connection loop does it: bytes arrive in chunks, requests may be
// pipelined. Each request parses or ends in 400/413/431; parsed requests keep the limits and have
// lower-case header names; the parser never consumes more bytes than it was given.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "http/request_parser.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coserve::http;
  if (size == 0) return 0;
  // The first byte sets the chunk size (1..256 bytes per read); small limits reach the 413/431
  // paths.
  const size_t chunk = size_t(data[0]) + 1;
  server_limits limits;
  limits.max_header_bytes = 512;
  limits.max_body_bytes = 1024;
  std::string input(reinterpret_cast<const char*>(data + 1), size - 1);
  size_t pos = 0;
  std::string buf;
  for (int requests = 0; requests < 64; ++requests) {
    request_parser parser(limits);
    int status = 0;
    while (!parser.done()) {
      if (buf.empty()) {
        if (pos == input.size()) break;
        size_t n = std::min(chunk, input.size() - pos);
        buf.append(input, pos, n);
        pos += n;
      }
      const size_t before = buf.size();
      status = parser.feed(buf);
      if (buf.size() > before) std::abort();
      if (status != 0) break;
      if (!parser.done() && !buf.empty()) {  // needs more bytes than buf holds
        if (pos == input.size()) break;
        size_t n = std::min(chunk, input.size() - pos);
        buf.append(input, pos, n);
        pos += n;
      }
      (void)parser.expects_continue();
    }
    if (status != 0) {
      if (status != 400 && status != 413 && status != 431) std::abort();
      return 0;
    }
    if (!parser.done()) return 0;  // input ended mid-request
    http_request req = parser.take();
    if (req.body.size() > limits.max_body_bytes || req.method.empty()) std::abort();
    for (const auto& [name, value] : req.headers)
      for (char c : name)
        if (std::isupper(static_cast<unsigned char>(c))) std::abort();
    (void)req.path();
  }
  return 0;
}
