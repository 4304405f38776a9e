// tokenizer.json normalizers, flattened: a Sequence becomes its steps in order. Supported: NFC,
// NFD, NFKC, NFKD (utf8proc), Lowercase, Prepend, Replace (string or regex), Strip, BertNormalizer
// (control characters dropped, whitespace to spaces, spaces around CJK ideographs, accents
// stripped, lowercase), StripAccents, Precompiled (SentencePiece's map, precompiled.hpp), Sequence.
#pragma once

#include <simdjson.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "model/text/tokenizer/precompiled.hpp"
#include "model/text/tokenizer/regex.hpp"

namespace coserve {

class normalizer {
 public:
  // node: the "normalizer" value (null gives an identity normalizer).
  static result<normalizer> from_json(simdjson::dom::element node);

  bool empty() const noexcept { return steps_.empty(); }
  // Input and output are valid UTF-8.
  std::string apply(std::string text) const { return apply(std::move(text), nullptr); }
  // *start_len: on entry the byte length of the input's first character; on return how many
  // leading bytes of the output come from it (what Hugging Face's alignments map to original
  // offset 0): its normal form, its lowercase, a replacement of a match that starts there, what
  // Prepend put before it; 0 when Strip removed it.
  std::string apply(std::string text, std::size_t* start_len) const;

 private:
  enum class kind {
    nfc,
    nfd,
    nfkc,
    nfkd,
    lowercase,
    prepend,
    replace,
    strip,
    bert,
    strip_accents,
    precompiled
  };
  struct bert_options {
    bool clean_text = true, handle_chinese_chars = true, strip_accents = true, lowercase = true;
  };
  struct step {
    kind k;
    std::string text;                  // prepend: the prefix; replace: the content
    std::string literal;               // replace with a String pattern
    std::optional<regex> re;           // replace with a Regex pattern
    bool left = false, right = false;  // strip
    bert_options bert;
    std::shared_ptr<const precompiled_charsmap> charsmap;
  };
  static std::string apply_step(const step& s, std::string text);
  result<void> add(simdjson::dom::element node);
  std::vector<step> steps_;
};

// Each code point's lowercase (utf8proc's simple mapping, and U+0130 to i + U+0307), as the
// Lowercase normalizer maps text; no context-dependent mappings (a word-final capital sigma becomes
// σ, where Python's str.lower gives ς). Input and output are valid UTF-8.
std::string unicode_lowercase(const std::string& text);

// Replaces every match of a literal or regex with `content` (shared with the Replace decoder).
// `prefix`, when given, holds a count of leading bytes of `text` and receives how many leading
// bytes of the result they became (a match that starts inside them counts whole).
std::string replace_all(const std::string& text, const std::string& literal,
                        const std::optional<regex>& re, const std::string& content,
                        std::size_t* prefix = nullptr);

}  // namespace coserve
