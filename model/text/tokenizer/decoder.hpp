// tokenizer.json decoders, flattened: a Sequence becomes its steps in order. Each step maps the
// list of token strings to a new list; the result is their concatenation. Supported: ByteLevel,
// Metaspace, ByteFallback, Fuse, Strip, Replace (string or regex), BPEDecoder, WordPiece, Sequence.
// With no
// decoder the tokens are joined with spaces (what Hugging Face does).
#pragma once

#include <simdjson.h>

#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "model/text/tokenizer/regex.hpp"

namespace coserve {

class decoder {
 public:
  static result<decoder> from_json(simdjson::dom::element node);

  // The decoded text; always valid UTF-8 (invalid byte sequences become U+FFFD).
  std::string decode(std::vector<std::string> tokens) const;

  // The bytes one token contributes in the middle of a decoded text: byte-level characters and
  // <0xNN> byte tokens become their raw bytes (which may be a partial UTF-8 character, left as
  // they are), Metaspace's replacement character is a space (the start-of-text rule does not
  // apply), Replace steps apply, a BPEDecoder suffix is a space, Strip steps (which act on the
  // start and end of the whole text) do not. With no decoder, the token string itself.
  std::string token_bytes(const std::string& token) const;

 private:
  enum class kind {
    byte_level,
    metaspace,
    byte_fallback,
    fuse,
    strip,
    replace,
    bpe_suffix,
    wordpiece
  };
  struct step {
    kind k;
    std::string replacement;  // metaspace: the replacement character; replace: the content
    bool prepend = true;      // metaspace: prepend_scheme != never
    std::string literal;      // replace; bpe_suffix: the suffix; wordpiece: the prefix
    bool cleanup = false;     // wordpiece: undo BERT's spaces before punctuation and clitics
    std::optional<regex> re;  // replace
    std::string strip_content;
    std::size_t start = 0, stop = 0;  // strip
  };
  result<void> add(simdjson::dom::element node);
  std::vector<step> steps_;
  bool present_ = false;
};

}  // namespace coserve
