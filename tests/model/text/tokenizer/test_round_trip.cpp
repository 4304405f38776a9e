// Property tests: decode(encode(x)) == x for byte-level tokenizers on random valid UTF-8, and the
// streaming detokenizer on random id sequences (including byte tokens that form invalid UTF-8):
// every piece is valid UTF-8 and the pieces concatenate to decode(ids).
#include <catch2/catch.hpp>
#include <random>

#include "model/text/tokenizer/incremental_detokenizer.hpp"
#include "model/text/tokenizer/tokenizer.hpp"
#include "model/text/tokenizer/utf8.hpp"
#include "tests/model/text/tokenizer/test_support.hpp"

using namespace coserve;

namespace {

std::string random_utf8(std::mt19937& rng, bool bmp_cjk_only) {
  std::uniform_int_distribution<int> len(0, 40), kind(0, 9);
  std::string s;
  const int n = len(rng);
  for (int i = 0; i < n; ++i) {
    char32_t cp;
    const int k = bmp_cjk_only ? kind(rng) % 4 : kind(rng);
    switch (k) {
      case 0:
        cp = std::uniform_int_distribution<char32_t>(0x20, 0x7E)(rng);
        break;
      case 1:
        cp = U" \n\t\r"[std::uniform_int_distribution<int>(0, 3)(rng)];
        break;
      case 2:
        cp = std::uniform_int_distribution<char32_t>(0x4E00, 0x9FFF)(rng);
        break;
      case 3:
        cp = std::uniform_int_distribution<char32_t>('0', '9')(rng);
        break;
      case 4:
        cp = std::uniform_int_distribution<char32_t>(0x80, 0x7FF)(rng);
        break;
      case 5:
        cp = std::uniform_int_distribution<char32_t>(0x1F300, 0x1FAFF)(rng);
        break;
      case 6:
        cp = std::uniform_int_distribution<char32_t>(0x0, 0x1F)(rng);
        break;
      case 7:
        cp = std::uniform_int_distribution<char32_t>(0x300, 0x36F)(rng);
        break;  // combining
      case 8:
        cp = std::uniform_int_distribution<char32_t>(0xE000, 0xFFFD)(rng);
        break;
      default:
        cp = std::uniform_int_distribution<char32_t>(0x10000, 0x10FFFF)(rng);
        break;
    }
    utf8::append(s, cp);
  }
  return s;
}

}  // namespace

TEST_CASE("byte-level round trip on random valid UTF-8", "[tokenizer]") {
  struct src {
    std::filesystem::path path;
    bool cjk_only;  // tokenizers with an NFC normalizer: inputs that NFC leaves unchanged
  };
  const std::vector<src> sources = {
      {test::testdata() / "tokenizers/gpt2", false},
      {test::testdata() / "tokenizers/phi-2", false},
      {test::testdata() / "tokenizers/roberta-base", false},
      {test::testdata() / "tokenizers/qwen2.5", true},
      {test::fixtures() / "synthetic-ignore-merges.tokenizer.json", false},
  };
  for (const auto& s : sources) COSERVE_SKIP_UNLESS_EXISTS(s.path);
  std::mt19937 rng(1234);
  for (const auto& s : sources) {
    auto tok = tokenizer::load(s.path);
    REQUIRE(tok.ok());
    for (int i = 0; i < 300; ++i) {
      const std::string x = random_utf8(rng, s.cjk_only);
      const auto ids = tok->encode(x, false);
      INFO(s.path << ": '" << x << "'");
      REQUIRE(tok->decode(ids, false) == x);
    }
  }
}

TEST_CASE("streaming random ids: valid pieces that concatenate to decode", "[tokenizer]") {
  const std::vector<std::filesystem::path> sources = {
      test::testdata() / "tokenizers/gpt2", test::testdata() / "tokenizers/qwen2.5",
      test::testdata() / "tokenizers/phi-3-mini",
      test::fixtures() / "synthetic-metaspace.tokenizer.json",
      test::fixtures() / "synthetic-ignore-merges.tokenizer.json"};
  for (const auto& path : sources) COSERVE_SKIP_UNLESS_EXISTS(path);
  std::mt19937 rng(99);
  for (const auto& path : sources) {
    auto tok = tokenizer::load(path);
    REQUIRE(tok.ok());
    std::uniform_int_distribution<int32_t> any_id(0, tok->vocab_size() - 1), low_id(0, 400),
        tiny_id(0, 8);
    // Adversarial mix: byte tokens (low ids), specials (tiny ids), a lone metaspace "▁" when the
    // vocabulary has one, and anything.
    const int32_t space_id = tok->token_to_id("\xE2\x96\x81").value_or(0);
    for (int i = 0; i < 200; ++i) {
      std::vector<int32_t> ids;
      const int n = std::uniform_int_distribution<int>(0, 30)(rng);
      for (int k = 0; k < n; ++k) {
        const int r = std::uniform_int_distribution<int>(0, 3)(rng);
        ids.push_back(r == 0   ? low_id(rng)
                      : r == 1 ? space_id
                      : r == 2 ? tiny_id(rng)
                               : any_id(rng));
      }
      for (bool skip : {false, true}) {
        incremental_detokenizer d(*tok, skip);
        std::string all;
        for (int32_t id : ids) {
          const std::string piece = d.push(id);
          CHECK(utf8::is_valid(piece));
          all += piece;
        }
        all += d.flush();
        INFO(path << " case " << i << " skip " << skip);
        REQUIRE(all == tok->decode(ids, skip));
      }
    }
  }
}

TEST_CASE("streaming after a prompt continues the prompt's text", "[tokenizer]") {
  const auto path = test::testdata() / "tokenizers/phi-3-mini";
  COSERVE_SKIP_UNLESS_EXISTS(path);
  auto tok = tokenizer::load(path);
  REQUIRE(tok.ok());
  const auto prompt = tok->encode("The answer is", false);
  const auto gen =
      tok->encode(" forty two, \xF0\x9F\x98\x80 done", false);  // emoji via byte fallback
  std::vector<int32_t> all_ids = prompt;
  all_ids.insert(all_ids.end(), gen.begin(), gen.end());
  incremental_detokenizer d(*tok, true, prompt);
  std::string text;
  for (int32_t id : gen) text += d.push(id);
  text += d.flush();
  CHECK(text.find("\xF0\x9F\x98\x80 done") != std::string::npos);
  CHECK(tok->decode(prompt, true) + text == tok->decode(all_ids, true));
}
