// SentencePiece's precompiled normalization map (the "Precompiled" normalizer of tokenizer.json,
// from a SentencePiece model's normalizer_spec: XLM-RoBERTa, T5, ALBERT, bge-m3): a darts-clone
// double-array trie from UTF-8 byte strings to replacement strings.
//
// apply() works as Hugging Face `tokenizers` does: the text goes by extended grapheme clusters; a
// cluster shorter than 6 bytes whose bytes start with a key is replaced whole by the shortest such
// key's replacement; otherwise each of its characters is replaced by the replacement of the
// shortest key it starts with, or kept.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace coserve {

class precompiled_charsmap {
 public:
  // blob: the decoded precompiled_charsmap (little-endian u32 trie size in bytes, the trie's
  // units, then the NUL-separated replacement strings).
  static result<precompiled_charsmap> parse(std::string_view blob);
  // From the base64 text tokenizer.json stores.
  static result<precompiled_charsmap> from_base64(std::string_view text);

  std::string apply(std::string_view text) const;
  bool empty() const noexcept { return units_.empty(); }

 private:
  // The replacement for the shortest key `bytes` starts with, if any.
  std::optional<std::string_view> transform(std::string_view bytes) const;

  std::vector<uint32_t> units_;
  std::string replacements_;
};

}  // namespace coserve
