// encode/decode with real tokenizers from ../shared/testdata/tokenizers (byte-level BPE with and
// without a normalizer, SentencePiece-style BPE with byte fallback) and the WordPiece and Unigram
// tokenizers of tests/reference/fixtures/tokenizer. Encoded ids are in the vocabulary, and
// streaming detokenization concatenates to decode() of the same ids, as incremental_detokenizer
// documents. Without any of them every input is a no-op.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/tokenizer/incremental_detokenizer.hpp"
#include "model/text/tokenizer/tokenizer.hpp"

namespace {

using coserve::tokenizer;

std::vector<tokenizer> load_all() {
  std::vector<tokenizer> out;
  const std::string testdata = std::string(COSERVE_SOURCE_DIR) + "/../shared/testdata/tokenizers/";
  const std::string fixtures =
      std::string(COSERVE_SOURCE_DIR) + "/tests/reference/fixtures/tokenizer/";
  for (const std::string dir : {testdata + "gpt2", testdata + "qwen2.5", testdata + "phi-3-mini",
                                fixtures + "synthetic-wordpiece.tokenizer.json",
                                fixtures + "synthetic-wordpiece-cased.tokenizer.json",
                                fixtures + "synthetic-unigram.tokenizer.json",
                                fixtures + "synthetic-unigram-bytes.tokenizer.json"}) {
    auto t = tokenizer::load(dir);
    if (!t) {
      std::fprintf(stderr, "fuzz_tokenizer_encode: %s not loaded (%s)\n", dir.c_str(),
                   t.err().message.c_str());
      continue;
    }
    out.push_back(std::move(*t));
  }
  return out;
}

void check_stream(const tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  const std::string whole = tok.decode(ids, skip_special);
  coserve::incremental_detokenizer detok(tok, skip_special);
  std::string pieces;
  for (int32_t id : ids) pieces += detok.push(id);
  pieces += detok.flush();
  if (pieces != whole) std::abort();
}

}  // namespace

// data[0]: bits 0-2 pick the tokenizer, bit 3 add_special_tokens, bit 4 skip_special_tokens, bit 5
// decodes the rest as little-endian 16-bit ids instead of encoding it as text, bit 6 encodes it as
// a pair (split at its middle).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<tokenizer> toks = load_all();
  if (toks.empty() || size == 0) return 0;
  const tokenizer& tok = toks[(data[0] & 7) % toks.size()];
  const bool add_special = data[0] & 8, skip_special = data[0] & 16;
  if (data[0] & 32) {
    std::vector<int32_t> ids;
    for (size_t i = 1; i + 1 < size; i += 2)
      ids.push_back(int32_t(data[i]) | int32_t(data[i + 1]) << 8);
    check_stream(tok, ids, skip_special);
    return 0;
  }
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 64) {
    const auto pair =
        tok.encode_pair(text.substr(0, text.size() / 2), text.substr(text.size() / 2), add_special);
    if (pair.ids.size() != pair.type_ids.size()) std::abort();
    for (int32_t id : pair.ids)
      if (id < 0 || id >= tok.vocab_size()) std::abort();
    return 0;
  }
  std::vector<int32_t> ids = tok.encode(text, add_special);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  check_stream(tok, ids, skip_special);
  return 0;
}
