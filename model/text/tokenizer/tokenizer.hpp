// A Hugging Face tokenizer.json tokenizer (BPE, WordPiece and Unigram models), held to the ids the
// Python `tokenizers` library produces. encode() runs: UTF-8 repair -> added tokens (raw) ->
// normalizer -> added tokens (normalized) -> pre-tokenizer -> model -> post-processor; decode()
// maps ids to token strings and runs the decoder.
//
// Invalid UTF-8 input: Python callers can only pass valid str, so the reference never sees it.
// Here every maximal invalid byte subsequence is replaced by U+FFFD before encoding (what
// bytes.decode("utf-8", "replace") does), so encode(bad) == HF encode(bad decoded with replace).
//
// Thread-safety: a loaded tokenizer is immutable apart from the BPE word cache, which is
// internally locked; encode/decode may run concurrently. Copies share the loaded state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace coserve {

class tokenizer {
 public:
  // path: a folder holding tokenizer.json (and optionally tokenizer_config.json, whose AddedToken
  // dicts / bos_token / eos_token / add_bos_token / add_eos_token it reads), or the file itself.
  // add_bos_token/add_eos_token apply only when tokenizer.json has no post-processor (otherwise
  // the post-processor decides, as in `tokenizers`). Unsupported components are a load error
  // naming them (code "unsupported").
  static result<tokenizer> load(const std::filesystem::path& path);
  // Same, from the JSON texts (config may be empty).
  static result<tokenizer> from_json(std::string_view tokenizer_json,
                                     std::string_view tokenizer_config = {});

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;

  // A pair of texts (a cross-encoder's query and document) with token type ids: with special
  // tokens, as the post-processor's pair template places them (BERT: [CLS] a [SEP] b [SEP], the
  // second part of type 1; RoBERTa: <s> a </s> </s> b </s>, all of type 0); without, or with no
  // pair template, a's ids then b's (of the template's types for TemplateProcessing and
  // RobertaProcessing files, otherwise 0 and 1).
  struct encoding {
    std::vector<int32_t> ids;
    std::vector<int32_t> type_ids;
  };
  // max_length > 0: truncated to at most that many ids, special tokens included, as `tokenizers`
  // truncates a pair with the longest_first strategy (from the right): the shorter part keeps its
  // length where the longer one can give up enough, else each keeps about half.
  encoding encode_pair(std::string_view a, std::string_view b, bool add_special_tokens,
                       int32_t max_length = 0) const;
  // Ids outside the vocabulary are skipped, as Hugging Face does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  int32_t vocab_size() const noexcept;  // largest id + 1, added tokens included
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string_view id_to_token(int32_t id) const;  // empty if out of range
  bool is_special(int32_t id) const noexcept;
  // The raw bytes token `id` adds to a decoded text after other tokens (decoder::token_bytes);
  // "" for special tokens, holes in the id space and ids out of range. What a grammar engine
  // matches generated tokens against.
  std::string token_bytes(int32_t id) const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  const std::string& bos_token() const;  // "" when none
  const std::string& eos_token() const;  // "" when none

  struct impl;

 private:
  std::shared_ptr<const impl> impl_;
};

}  // namespace coserve
