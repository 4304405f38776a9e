// A compiled PCRE2 pattern (UTF + UCP, JIT when available) for the Split pre-tokenizer, the
// Replace normalizer/decoder and ByteLevel's GPT-2 split. Compiled once at load; matching is const
// and thread-safe (each call uses its own match data). Inputs must be valid UTF-8 (the tokenizer
// repairs its input first), so matching skips PCRE2's UTF check.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace coserve {

class regex {
 public:
  // pattern: PCRE2 syntax (the Oniguruma patterns of tokenizer.json files are compatible).
  static result<regex> compile(std::string_view pattern);
  // A literal string, escaped.
  static result<regex> literal(std::string_view text);

  // Byte ranges [begin, end) of every non-overlapping match, left to right. Empty matches are
  // skipped (as the Rust regex crate's splitting does).
  void find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& out) const;

 private:
  struct impl;
  std::shared_ptr<const impl> impl_;
};

}  // namespace coserve
