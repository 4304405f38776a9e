#include "http/reasoning.hpp"

#include <algorithm>

namespace coserve::http {

namespace {

constexpr std::string_view k_open = "<think>", k_close = "</think>";

const reasoning_parser k_parsers[] = {
    {"deepseek_r1", true},
    {"qwen3", false},
};

// Length of the longest tail of `s` that is a proper prefix of `tag`.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(tag.size() - 1, s.size()); k > 0; --k)
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

}  // namespace

const reasoning_parser* find_reasoning_parser(std::string_view name) {
  for (const auto& p : k_parsers)
    if (name == p.name) return &p;
  return nullptr;
}

std::string reasoning_parser_names() {
  std::string out;
  for (const auto& p : k_parsers) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out;
}

reasoning_split split_reasoning(const reasoning_parser& p, std::string_view text) {
  reasoning_stream s(p);
  reasoning_split a = s.push(text);
  reasoning_split b = s.finish();
  a.reasoning += b.reasoning;
  a.content += b.content;
  a.has_reasoning = a.has_reasoning || b.has_reasoning;
  return a;
}

reasoning_split reasoning_stream::push(std::string_view piece) {
  buf_ += piece;
  return drain(false);
}

reasoning_split reasoning_stream::finish() { return drain(true); }

reasoning_split reasoning_stream::drain(bool final) {
  reasoning_split out;
  for (;;) {
    switch (st_) {
      case state::start: {
        // A leading <think> (after blanks) opens the reasoning.
        const size_t f = buf_.find_first_not_of(" \t\r\n");
        if (f == std::string::npos) {
          if (!final) return out;  // only blanks so far
          st_ = p_.starts_in_reasoning ? state::reasoning : state::content;
          continue;
        }
        const std::string_view rest = std::string_view(buf_).substr(f);
        if (rest.substr(0, k_open.size()) == k_open) {
          buf_.erase(0, f + k_open.size());
          st_ = state::reasoning;
          continue;
        }
        if (!final && rest.size() < k_open.size() && k_open.substr(0, rest.size()) == rest)
          return out;  // maybe
        st_ = p_.starts_in_reasoning ? state::reasoning : state::content;
        continue;
      }
      case state::reasoning: {
        out.has_reasoning = true;
        const size_t end = buf_.find(k_close);
        if (end != std::string::npos) {
          out.reasoning += buf_.substr(0, end);
          buf_.erase(0, end + k_close.size());
          st_ = state::content;
          continue;
        }
        const size_t hold = final ? 0 : partial_tag(buf_, k_close);
        out.reasoning += buf_.substr(0, buf_.size() - hold);
        buf_.erase(0, buf_.size() - hold);
        return out;
      }
      case state::content:
        out.content += buf_;
        buf_.clear();
        return out;
    }
  }
}

}  // namespace coserve::http
