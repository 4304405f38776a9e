// Added tokens (tokenizer.json "added_tokens", plus AddedToken dicts from tokenizer_config.json):
// found in the text before the model runs, leftmost-longest as Hugging Face's Aho-Corasick pass
// finds them. Tokens with normalized=false are matched in the raw text, the others in the
// normalized text (their content normalized the same way). lstrip/rstrip widen a match over
// neighbouring whitespace; single_word rejects a match that touches a word character.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace coserve {

struct added_token {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// One matcher over a set of added tokens.
class added_token_matcher {
 public:
  void add(std::string content, const added_token& token);
  // Indexes the tokens; call once after the last add() and before split().
  void build();
  bool empty() const noexcept { return entries_.empty(); }

  // A split of `text`: a run of plain text (id < 0) or one added token (its id).
  struct piece {
    std::size_t begin, end;
    int32_t id;
  };
  // Appends the pieces of `text`, in order, covering it entirely.
  void split(std::string_view text, std::vector<piece>& out) const;

 private:
  struct entry {
    std::string content;
    added_token token;
  };
  std::vector<entry> entries_;
  std::array<std::vector<uint32_t>, 256> by_first_{};  // per first byte: entries, longest first
};

}  // namespace coserve
