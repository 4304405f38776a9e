// GPT-2's byte-level alphabet: every byte maps to one printable code point so that byte strings
// can be stored as text in vocab files. Printable Latin-1 bytes map to themselves; the other 68
// bytes map, in order, to U+0100 and up (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace coserve::byte_level {

struct tables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<int16_t, 324> char_to_byte{};  // index: code point < 324; -1 when not in the alphabet
};

constexpr tables make_tables() {
  tables t{};
  for (auto& v : t.char_to_byte) v = -1;
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const char32_t c = printable ? char32_t(b) : char32_t(256 + extra++);
    t.byte_to_char[b] = c;
    t.char_to_byte[c] = static_cast<int16_t>(b);
  }
  return t;
}

inline constexpr tables k_tables = make_tables();

// Byte-level text (e.g. "Ġhello") back to the bytes it stands for; nullopt when a character is
// outside the alphabet (such a token is kept as plain UTF-8 by the ByteLevel decoder).
std::optional<std::string> to_bytes(std::string_view text);

// Bytes to byte-level text.
std::string from_bytes(std::string_view bytes);

}  // namespace coserve::byte_level
