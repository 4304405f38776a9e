#include "http/request_parser.hpp"

#include <algorithm>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cctype>
#include <cstdint>

namespace coserve::http {

namespace bh = boost::beast::http;

struct request_parser::impl {
  bh::request_parser<bh::string_body> parser;
};

request_parser::request_parser(const server_limits& limits) : impl_(std::make_unique<impl>()) {
  auto& p = impl_->parser;
  p.header_limit(
      static_cast<std::uint32_t>(std::min<std::size_t>(limits.max_header_bytes, UINT32_MAX)));
  p.body_limit(limits.max_body_bytes);
  p.eager(true);
}

request_parser::~request_parser() = default;

int request_parser::feed(std::string& buf) {
  auto& p = impl_->parser;
  while (!buf.empty() && !p.is_done()) {
    boost::system::error_code ec;
    std::size_t used = p.put(boost::asio::buffer(buf.data(), buf.size()), ec);
    buf.erase(0, used);
    if (ec == bh::error::header_limit) return 431;
    if (ec == bh::error::body_limit) return 413;
    if (ec == bh::error::need_more) break;
    if (ec) return 400;
    if (used == 0) break;
  }
  return 0;
}

bool request_parser::done() const { return impl_->parser.is_done(); }

bool request_parser::header_done() const { return impl_->parser.is_header_done(); }

bool request_parser::expects_continue() const {
  if (!header_done()) return false;
  auto expect = impl_->parser.get()[bh::field::expect];
  return expect.size() == 12 &&
         std::equal(expect.begin(), expect.end(), "100-continue", [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

http_request request_parser::take() {
  auto& msg = impl_->parser.get();
  http_request out;
  out.method = std::string(msg.method_string());
  out.target = std::string(msg.target());
  for (const auto& f : msg) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    out.headers.emplace_back(std::move(name), std::string(f.value()));
  }
  out.keep_alive = msg.keep_alive();
  out.body = std::move(msg.body());
  return out;
}

}  // namespace coserve::http
