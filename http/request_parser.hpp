// Incremental HTTP/1.1 request parsing (Beast's sans-I/O parser) into an http_request. The
// connection loop feeds it the bytes it reads; no I/O here.
#pragma once

#include <memory>
#include <string>

#include "http/http_types.hpp"

namespace coserve::http {

class request_parser {
 public:
  // Header and body sizes are checked against limits.max_header_bytes / max_body_bytes.
  explicit request_parser(const server_limits& limits);
  ~request_parser();
  request_parser(const request_parser&) = delete;
  request_parser& operator=(const request_parser&) = delete;

  // Parses bytes from the front of `buf` and erases the ones consumed; bytes after a complete
  // request stay in `buf` (the next pipelined request). Returns 0 when parsing can go on (more
  // bytes needed, or the request is complete), otherwise the status to answer with: 431 (header
  // too large), 413 (body too large) or 400 (malformed). After a non-zero return the parser is
  // unusable.
  int feed(std::string& buf);

  bool done() const;         // the whole request is parsed
  bool header_done() const;  // the request line and headers are parsed
  // Header parsed and it carries "Expect: 100-continue" (case-insensitive).
  bool expects_continue() const;

  // The parsed request (call once, after done()): header names lower-cased, the body moved out.
  http_request take();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace coserve::http
