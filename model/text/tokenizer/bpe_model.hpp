// The BPE model of tokenizer.json: a vocabulary, ranked merges, and the merge loop with a cache.
//
// Byte-level files (GPT-2, Qwen2, Llama-3) store tokens in GPT-2's byte alphabet; when the
// tokenizer's pre-tokenizer is ByteLevel the model is built in byte mode: vocabulary keys are the
// raw bytes the tokens stand for and words start as single bytes, which is the same computation
// as merging the mapped characters but skips the mapping. Otherwise words start as UTF-8
// characters, with byte_fallback (<0xAB> tokens) and unk/fuse_unk for characters not in the vocab.
//
// Thread-safety: tokenize() is const and may run on several threads at once; the word cache is the
// only mutable state and is guarded by a mutex.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/text/tokenizer/merge_table.hpp"
#include "model/text/tokenizer/token_model.hpp"

namespace coserve {

class bpe_model final : public token_model {
 public:
  struct options {
    bool byte_mode = false;
    bool byte_fallback = false;
    bool fuse_unk = false;
    bool ignore_merges = false;
    std::optional<int32_t> unk_id;
  };

  // vocab: token text (as stored in the file) -> id. merges: pairs of token texts, by rank.
  // Merges naming unknown tokens are skipped.
  bpe_model(string_id_map vocab, const std::vector<std::pair<std::string, std::string>>& merges,
            options opts);
  bpe_model(bpe_model&&) = delete;

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> find(std::string_view key) const override;
  bool byte_mode() const noexcept override { return opts_.byte_mode; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  options opts_;
  string_id_map vocab_;  // model key -> id
  merge_table merges_;   // (left id, right id) -> rank, merged id
  std::array<int32_t, 256>
      byte_ids_{};  // byte mode: single-byte token ids; fallback: <0xAB> ids (-1: none)

  static constexpr std::size_t k_max_cached_word = 256;
  static constexpr std::size_t k_max_cache_entries = 1 << 17;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, string_hash, std::equal_to<>>
      cache_;
};

}  // namespace coserve
