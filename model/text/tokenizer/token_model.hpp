// The model step of a tokenizer.json tokenizer: one pre-tokenized word to ids. Implemented by
// bpe_model (BPE), wordpiece_model (WordPiece) and unigram_model (Unigram).
//
// Thread-safety: tokenize() and find() are const and may run on several threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace coserve {

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
using string_id_map = std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>>;

class token_model {
 public:
  virtual ~token_model() = default;
  // Appends the ids of one pre-tokenized word (raw bytes in byte mode, UTF-8 text otherwise).
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  // Model-vocabulary lookup by the key the model uses (raw bytes in byte mode).
  virtual std::optional<int32_t> find(std::string_view key) const = 0;
  // BPE over GPT-2's byte alphabet (see bpe_model); the other models work on UTF-8 text.
  virtual bool byte_mode() const noexcept { return false; }
};

}  // namespace coserve
