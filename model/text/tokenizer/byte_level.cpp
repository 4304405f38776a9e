#include "model/text/tokenizer/byte_level.hpp"

#include "model/text/tokenizer/utf8.hpp"

namespace coserve::byte_level {

std::optional<std::string> to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char32_t cp;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8::decode(text, i, cp);
    if (n == 0 || cp >= k_tables.char_to_byte.size() || k_tables.char_to_byte[cp] < 0)
      return std::nullopt;
    out.push_back(static_cast<char>(k_tables.char_to_byte[cp]));
    i += n;
  }
  return out;
}

std::string from_bytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8::append(out, k_tables.byte_to_char[b]);
  return out;
}

}  // namespace coserve::byte_level
