// The WordPiece model of tokenizer.json (BERT and its descendants): each pre-tokenized word is
// split greedily into the longest vocabulary entries from its start, pieces after the first
// carrying the continuing-subword prefix ("##"). A word with a part no entry covers, or longer than
// max_input_chars_per_word characters, becomes the unknown token alone — what Hugging Face
// `tokenizers` does.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstddef>
#include <string>

#include "model/text/tokenizer/token_model.hpp"

namespace coserve {

class wordpiece_model final : public token_model {
 public:
  struct options {
    int32_t unk_id = 0;
    std::string continuing_subword_prefix = "##";
    std::size_t max_input_chars_per_word = 100;
  };
  wordpiece_model(string_id_map vocab, options opts);

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> find(std::string_view key) const override;

 private:
  string_id_map vocab_;
  options opts_;
  std::size_t longest_ = 0;  // bytes of the longest vocabulary entry: no longer part can match
};

}  // namespace coserve
