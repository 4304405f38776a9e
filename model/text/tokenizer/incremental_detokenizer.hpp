// Streaming detokenization: ids arrive one at a time and each push() returns the text that has
// become final. It never returns a partial UTF-8 character, and without prompt ids the pieces
// (push results, then flush()) concatenate exactly to tokenizer::decode(all ids).
//
// How: the ids since `prefix_` are decoded as a window, and the window's text up to `read_` (the
// part already returned) is subtracted from it; decoding a window that starts a few tokens back
// keeps decoders that treat a first token specially (Metaspace, Strip) and byte-level merges
// across token boundaries right. Text ending in U+FFFD is held back until more ids (or flush)
// decide it. With prompt ids, the window starts inside the prompt so the first generated token
// decodes in context; the pieces are then decode(prompt + generated) minus decode(prompt).
//
// Not thread-safe: one per stream. The tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/text/tokenizer/tokenizer.hpp"

namespace coserve {

class incremental_detokenizer {
 public:
  incremental_detokenizer(const tokenizer& tok, bool skip_special_tokens,
                          std::span<const int32_t> prompt_ids = {});

  std::string push(int32_t id);
  // Whatever is still held back (e.g. a trailing partial character, as U+FFFD like decode()).
  std::string flush();

 private:
  std::string decode_range(std::size_t begin, std::size_t end) const;
  std::string window_before();

  const tokenizer* tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  std::size_t prefix_ = 0;  // window start
  std::size_t read_ = 0;    // ids whose text has been returned
};

}  // namespace coserve
