// Every case of ../shared/testdata/vocab-vectors (ids from Hugging Face, add_special_tokens=False)
// must encode identically; phi-2 and roberta-base must load and encode.
#include <catch2/catch.hpp>

#include "model/text/tokenizer/tokenizer.hpp"
#include "tests/model/text/tokenizer/test_support.hpp"

using namespace coserve;

namespace {

void check_vectors(const char* vectors, const char* tokenizer_dir) {
  const auto vfile = test::testdata() / "vocab-vectors" / vectors;
  COSERVE_SKIP_UNLESS_EXISTS(vfile);
  auto tok = tokenizer::load(test::testdata() / "tokenizers" / tokenizer_dir);
  REQUIRE(tok.ok());
  simdjson::dom::parser parser;
  const std::string json = test::slurp(vfile);
  simdjson::dom::element root = parser.parse(json);
  int n = 0;
  for (auto c : root["cases"].get_array()) {
    const std::string_view text = c["text"].get_string();
    const auto expected = test::to_ids(c["ids"].get_array());
    INFO(vectors << " case " << n << ": '" << text << "'");
    CHECK(tok->encode(text, false) == expected);
    ++n;
  }
  CHECK(n > 10);
}

}  // namespace

TEST_CASE("vocab vectors: gpt-2", "[tokenizer]") { check_vectors("gpt-2.json", "gpt2"); }
TEST_CASE("vocab vectors: qwen2", "[tokenizer]") { check_vectors("qwen2.json", "qwen2"); }
TEST_CASE("vocab vectors: deepseek-r1-qwen (qwen2.5)", "[tokenizer]") {
  check_vectors("deepseek-r1-qwen.json", "qwen2.5");
}
TEST_CASE("vocab vectors: phi-3", "[tokenizer]") { check_vectors("phi-3.json", "phi-3-mini"); }

TEST_CASE("phi-2 and roberta-base load and encode", "[tokenizer]") {
  for (const char* name : {"phi-2", "roberta-base"})
    COSERVE_SKIP_UNLESS_EXISTS(test::testdata() / "tokenizers" / name);
  for (const char* name : {"phi-2", "roberta-base"}) {
    const auto dir = test::testdata() / "tokenizers" / name;
    auto tok = tokenizer::load(dir);
    REQUIRE(tok.ok());
    const auto ids = tok->encode("Hello world", false);
    REQUIRE(ids.size() == 2);
    CHECK(tok->id_to_token(ids[0]) == "Hello");
    CHECK(tok->id_to_token(ids[1]) == "\xC4\xA0world");
    CHECK(tok->decode(ids, false) == "Hello world");
  }
}
