// The Unigram model of tokenizer.json (SentencePiece unigram: XLM-RoBERTa, T5, ALBERT, bge-m3):
// a vocabulary of pieces with log-probabilities; a word is split into the pieces whose scores sum
// highest (Viterbi over a byte trie of the pieces). A character no piece starts with costs the
// lowest score minus 10 and becomes the unknown piece; consecutive unknown characters fuse into
// one unknown token, or with byte_fallback into their <0xNN> byte tokens when all exist — what
// Hugging Face `tokenizers` does.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/text/tokenizer/token_model.hpp"

namespace coserve {

class unigram_model final : public token_model {
 public:
  // pieces: (text, score) by id. unk_id: the unknown piece (-1: none; then a word with a character
  // no piece covers has no tokenization and the load is refused by the caller's checks).
  unigram_model(std::vector<std::pair<std::string, double>> pieces, int32_t unk_id,
                bool byte_fallback);

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> find(std::string_view key) const override;

 private:
  // A byte trie of the pieces; a node's children are contiguous and sorted by byte.
  struct node {
    int32_t piece = -1;  // the piece ending here (-1: none)
    uint32_t child_begin = 0;
    uint16_t child_count = 0;
    uint8_t byte = 0;
  };
  // The trie over the pieces in `order` (ids sorted by their text, bytewise).
  void build(const std::vector<uint32_t>& order);
  const node* child(const node& n, uint8_t b) const noexcept;
  // Appends the id(s) of a stretch of the word the best path gave to the unknown piece.
  void unknown(std::string_view text, std::vector<int32_t>& out) const;

  std::vector<std::pair<std::string, double>> pieces_;
  string_id_map ids_;  // text -> id (the last id when a text repeats)
  std::vector<node> trie_;
  int32_t unk_id_;
  bool byte_fallback_;
  double unk_score_ = 0;
};

}  // namespace coserve
