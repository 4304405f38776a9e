// The loaded state behind coserve::tokenizer (private to model/text/tokenizer/).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/text/tokenizer/added_vocab.hpp"
#include "model/text/tokenizer/decoder.hpp"
#include "model/text/tokenizer/normalizer.hpp"
#include "model/text/tokenizer/pre_tokenizer.hpp"
#include "model/text/tokenizer/token_model.hpp"
#include "model/text/tokenizer/tokenizer.hpp"

namespace coserve {

struct tokenizer::impl {
  std::unique_ptr<token_model> model;
  normalizer norm;
  pre_tokenizer pre;
  decoder dec;
  std::vector<added_token> added;        // all added tokens
  added_token_matcher raw_matcher;       // normalized=false tokens
  added_token_matcher norm_matcher;      // normalized=true tokens (content normalized)
  string_id_map added_ids;               // content -> id
  std::vector<std::string> id_to_token;  // as written in the file; added tokens' content
  // What decoding uses for a normalized=true added token whose normalized form differs from its
  // content (Hugging Face tokenizers 0.23+ decode that form, so a decoder can invert it).
  std::unordered_map<int32_t, std::string> decode_as;
  std::vector<uint8_t> special;  // per id
  // Post-processing of a single sequence: ids before and after it.
  std::vector<int32_t> prefix, suffix;
  // Post-processing of a pair: its parts in order, special ids or one of the two sequences, each
  // with its token type. Empty: the first sequence then the second (types 0 and 1).
  struct pair_item {
    int32_t sequence = -1;     // 0: the first, 1: the second, -1: `ids`
    std::vector<int32_t> ids;  // special tokens
    int32_t type_id = 0;
  };
  std::vector<pair_item> pair_template;
  // Without special tokens the sequences keep the template's types (TemplateProcessing,
  // RobertaProcessing), or are of types 0 and 1 (BertProcessing, none).
  bool template_types_plain = false;
  std::string bos_token, eos_token;
  std::optional<int32_t> bos_id, eos_id;
};

}  // namespace coserve
