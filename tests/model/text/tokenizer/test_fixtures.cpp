// The wider corpus: ids and decodes produced by Hugging Face `tokenizers` through
// tests/reference/make_tokenizer_fixtures.py, for every tokenizer in testdata plus synthetic ones
// (BPE with ignore_merges; BPE with Metaspace + byte fallback; WordPiece; Unigram). Also checks
// that streamed pieces concatenate to decode(ids) for every case, and the documented invalid-UTF-8
// behaviour.
#include <catch2/catch.hpp>

#include "model/text/tokenizer/incremental_detokenizer.hpp"
#include "model/text/tokenizer/tokenizer.hpp"
#include "tests/model/text/tokenizer/test_support.hpp"

using namespace coserve;

namespace {

std::string from_hex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return out;
}

std::string stream(const tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  incremental_detokenizer d(tok, skip);
  std::string all;
  for (int32_t id : ids) {
    std::string piece = d.push(id);
    all += piece;
  }
  all += d.flush();
  return all;
}

void check_fixture(const std::string& name, bool from_testdata) {
  const auto file = test::fixtures() / (name + ".json");
  REQUIRE(std::filesystem::exists(file));
  const auto source = from_testdata ? test::testdata() / "tokenizers" / name
                                    : test::fixtures() / (name + ".tokenizer.json");
  COSERVE_SKIP_UNLESS_EXISTS(source);
  auto tok = tokenizer::load(source);
  REQUIRE(tok.ok());
  simdjson::dom::parser parser;
  const std::string json = test::slurp(file);
  simdjson::dom::element root = parser.parse(json);
  int n = 0;
  for (auto c : root["cases"].get_array()) {
    const std::string_view text = c["text"].get_string();
    const auto ids = test::to_ids(c["ids"].get_array());
    const auto ids_special = test::to_ids(c["ids_special"].get_array());
    const std::string_view decoded = c["decode"].get_string();
    const std::string_view decoded_skip = c["decode_skip"].get_string();
    INFO(name << " case " << n << ": '" << text << "'");
    CHECK(tok->encode(text, false) == ids);
    CHECK(tok->encode(text, true) == ids_special);
    CHECK(tok->decode(ids_special, false) == decoded);
    CHECK(tok->decode(ids_special, true) == decoded_skip);
    CHECK(stream(*tok, ids_special, false) == decoded);
    CHECK(stream(*tok, ids_special, true) == decoded_skip);
    ++n;
  }
  CHECK(n > 50);
  simdjson::dom::array pairs;
  if (!root["pairs"].get(pairs)) {
    int k = 0;
    for (auto c : pairs) {
      const std::string_view a = c["a"].get_string(), b = c["b"].get_string();
      INFO(name << " pair " << k++ << ": '" << a << "' / '" << b << "'");
      const tokenizer::encoding with = tok->encode_pair(a, b, true);
      const tokenizer::encoding plain = tok->encode_pair(a, b, false);
      CHECK(with.ids == test::to_ids(c["ids"].get_array()));
      CHECK(with.type_ids == test::to_ids(c["type_ids"].get_array()));
      CHECK(plain.ids == test::to_ids(c["ids_plain"].get_array()));
      CHECK(plain.type_ids == test::to_ids(c["type_ids_plain"].get_array()));
    }
    CHECK(k > 0);
  }
  for (auto c : root["invalid_utf8"].get_array()) {
    const std::string raw = from_hex(c["hex"].get_string());
    INFO(name << " invalid UTF-8 " << c["hex"].get_string());
    CHECK(tok->encode(raw, false) == test::to_ids(c["ids"].get_array()));
  }
}

}  // namespace

TEST_CASE("fixtures: gpt2", "[tokenizer]") { check_fixture("gpt2", true); }
TEST_CASE("fixtures: qwen2", "[tokenizer]") { check_fixture("qwen2", true); }
TEST_CASE("fixtures: qwen2.5", "[tokenizer]") { check_fixture("qwen2.5", true); }
TEST_CASE("fixtures: phi-3-mini", "[tokenizer]") { check_fixture("phi-3-mini", true); }
TEST_CASE("fixtures: phi-2", "[tokenizer]") { check_fixture("phi-2", true); }
TEST_CASE("fixtures: roberta-base", "[tokenizer]") { check_fixture("roberta-base", true); }
TEST_CASE("fixtures: synthetic ignore_merges", "[tokenizer]") {
  check_fixture("synthetic-ignore-merges", false);
}
TEST_CASE("fixtures: synthetic metaspace", "[tokenizer]") {
  check_fixture("synthetic-metaspace", false);
}

// WordPiece (BertNormalizer, BertPreTokenizer, WordPiece decoder; uncased and cased with accents
// stripped and a 12-character word limit) and Unigram (SentencePiece's precompiled nmt_nfkc map,
// Metaspace; with and without byte fallback).
TEST_CASE("fixtures: synthetic wordpiece", "[tokenizer]") {
  check_fixture("synthetic-wordpiece", false);
}
TEST_CASE("fixtures: synthetic wordpiece, cased", "[tokenizer]") {
  check_fixture("synthetic-wordpiece-cased", false);
}
TEST_CASE("fixtures: synthetic unigram", "[tokenizer]") {
  check_fixture("synthetic-unigram", false);
}
TEST_CASE("fixtures: synthetic unigram with byte fallback", "[tokenizer]") {
  check_fixture("synthetic-unigram-bytes", false);
}

// Component variants (normalizers, pre-tokenizers, decoders, post-processors not used by the real
// files): every variant-*.tokenizer.json the script wrote.
TEST_CASE("fixtures: component variants", "[tokenizer]") {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::fixtures())) {
    const std::string file = entry.path().filename().string();
    const std::string suffix = ".tokenizer.json";
    if (!file.starts_with("variant-") || !file.ends_with(suffix)) continue;
    check_fixture(file.substr(0, file.size() - suffix.size()), false);
    ++n;
  }
  CHECK(n >= 7);
}
