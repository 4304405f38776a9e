// UTF-8 helpers shared by the tokenizer: decoding one code point, encoding, lossy repair of invalid
// input (each maximal invalid subsequence becomes one U+FFFD, as Python's errors="replace" and
// Rust's String::from_utf8_lossy do), and the Unicode White_Space property.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace coserve::utf8 {

// Decodes the code point starting at s[i]; returns its length in bytes, or 0 when the bytes there
// do not start a valid, complete UTF-8 sequence (overlongs and surrogates are invalid).
std::size_t decode(std::string_view s, std::size_t i, char32_t& cp) noexcept;

void append(std::string& out, char32_t cp);

// True when `s` is valid UTF-8.
bool is_valid(std::string_view s) noexcept;

// `s` with every maximal invalid subsequence replaced by U+FFFD.
std::string repair(std::string_view s);

// Length of the longest prefix of `s` that does not end inside an incomplete (but so far valid)
// multi-byte sequence: the bytes after it could still become a character when more arrive.
std::size_t complete_prefix(std::string_view s) noexcept;

// Unicode White_Space (what Rust's char::is_whitespace tests).
bool is_whitespace(char32_t c) noexcept;

// The Rust regex crate's Unicode `\w` (what Hugging Face's added-token single_word rule tests):
// Alphabetic (letters, letter numbers, the circled and squared Latin letters), marks, decimal
// digits, connector punctuation, ZWNJ and ZWJ.
bool is_word_char(char32_t c) noexcept;

inline constexpr std::string_view replacement_char = "\xEF\xBF\xBD";

}  // namespace coserve::utf8
