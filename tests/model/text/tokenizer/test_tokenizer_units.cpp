// Loader edge cases and API contracts on small hand-written tokenizer.json files and the real ones:
// merge formats, a missing model.type, unsupported components as named load errors, added-token
// flags, tokenizer_config.json handling, invalid UTF-8, and the lookup API.
#include <catch2/catch.hpp>

#include "model/text/tokenizer/tokenizer.hpp"
#include "model/text/tokenizer/utf8.hpp"
#include "tests/model/text/tokenizer/test_support.hpp"

using namespace coserve;

namespace {

// A tiny character-level BPE over "abc" with merges a+b and ab+c; `extra` is spliced into the
// top-level object, `merges` is the JSON merges array, `model_extra` into the model.
std::string tiny(std::string_view merges, std::string_view extra = "",
                 std::string_view model_extra = "") {
  return std::string(
             R"({"added_tokens":[{"id":5,"content":"<eos>","special":true,"normalized":false}],)") +
         std::string(extra) + R"("model":{)" + std::string(model_extra) +
         R"("vocab":{"a":0,"b":1,"c":2,"ab":3,"abc":4,"<eos>":5},"merges":)" + std::string(merges) +
         "}}";
}

}  // namespace

TEST_CASE("merges as strings or pairs, model.type optional", "[tokenizer]") {
  for (const std::string& json : {tiny(R"(["a b","ab c"])"), tiny(R"([["a","b"],["ab","c"]])"),
                                  tiny(R"(["a b","ab c"])", "", R"("type":"BPE",)")}) {
    auto tok = tokenizer::from_json(json);
    REQUIRE(tok.ok());
    CHECK(tok->encode("abcab", false) == std::vector<int32_t>{4, 3});
    CHECK(tok->encode("abc<eos>ca", false) == std::vector<int32_t>{4, 5, 2, 0});
    CHECK(tok->vocab_size() == 6);
    CHECK(tok->is_special(5));
    CHECK_FALSE(tok->is_special(4));
  }
  // Merge order decides: without "ab c" the word stops at ab + c.
  auto tok = tokenizer::from_json(tiny(R"(["a b"])"));
  REQUIRE(tok.ok());
  CHECK(tok->encode("abc", false) == std::vector<int32_t>{3, 2});
}

TEST_CASE("BPEDecoder: the suffix ends a word with a space, the last token's with nothing",
          "[tokenizer]") {
  // Expected strings from Hugging Face tokenizers 0.23.3 on the same file.
  auto tok = tokenizer::from_json(tiny("[]", R"("decoder":{"type":"BPEDecoder","suffix":"c"},)"));
  REQUIRE(tok.ok());
  CHECK(tok->decode(std::vector<int32_t>{4, 0, 2}, false) == "ab a");
  CHECK(tok->decode(std::vector<int32_t>{2, 2, 1}, false) == "  b");
  CHECK(tok->decode(std::vector<int32_t>{4, 5, 2}, false) == "ab <eos>");
  CHECK(tok->decode(std::vector<int32_t>{4, 5, 2}, true) == "ab ");
  CHECK(tok->decode(std::vector<int32_t>{}, false).empty());
  CHECK(tok->token_bytes(4) == "ab ");
}

TEST_CASE("ignore_merges takes whole words from the vocabulary", "[tokenizer]") {
  // "abc" is in the vocabulary but no merge chain reaches it from a+b+c without "ab c".
  auto plain = tokenizer::from_json(tiny(R"(["a b"])"));
  auto ignore = tokenizer::from_json(tiny(R"(["a b"])", "", R"("ignore_merges":true,)"));
  REQUIRE(plain.ok());
  REQUIRE(ignore.ok());
  CHECK(plain->encode("abc", false) == std::vector<int32_t>{3, 2});
  CHECK(ignore->encode("abc", false) == std::vector<int32_t>{4});
}

TEST_CASE("unsupported components are load errors naming them", "[tokenizer]") {
  struct bad {
    std::string json;
    std::string name;
  };
  const std::vector<bad> cases = {
      {R"({"model":{"type":"WordLevel","vocab":{"a":0},"unk_token":"a"}})", "WordLevel"},
      {tiny(R"([])", R"("normalizer":{"type":"Nmt"},)"), "Nmt"},
      {tiny(R"([])", R"("pre_tokenizer":{"type":"UnicodeScripts"},)"), "UnicodeScripts"},
      {tiny(R"([])", R"("decoder":{"type":"CTC"},)"), "CTC"},
      {tiny(R"([])", R"("post_processor":{"type":"Weird"},)"), "Weird"},
      {tiny(R"([])",
            R"("normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Nmt"}]},)"),
       "Nmt"},
      {tiny(R"([])", "", R"("continuing_subword_prefix":"##",)"), "continuing_subword_prefix"},
  };
  for (const auto& c : cases) {
    auto tok = tokenizer::from_json(c.json);
    INFO(c.json);
    REQUIRE_FALSE(tok.ok());
    CHECK(tok.err().code == "unsupported");
    CHECK(tok.err().message.find(c.name) != std::string::npos);
  }
  auto missing = tokenizer::load("/nonexistent/folder");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.err().code == "not_found");
  CHECK_FALSE(tokenizer::from_json("{not json").ok());
}

TEST_CASE("added token flags: lstrip, rstrip, single_word", "[tokenizer]") {
  const std::string json = R"({"added_tokens":[
      {"id":6,"content":"<L>","lstrip":true,"normalized":false,"special":true},
      {"id":7,"content":"<R>","rstrip":true,"normalized":false,"special":false},
      {"id":8,"content":"ab","single_word":true,"normalized":false,"special":false}],
    "pre_tokenizer":{"type":"WhitespaceSplit"},
    "model":{"vocab":{"a":0,"b":1,"c":2,"ab":3,"abc":4," ":5},"merges":["a b","ab c"]}})";
  auto tok = tokenizer::from_json(json);
  REQUIRE(tok.ok());
  // lstrip swallows the spaces before <L>; rstrip those after <R>.
  CHECK(tok->encode("c  <L>c", false) == std::vector<int32_t>{2, 6, 2});
  CHECK(tok->encode("c<R>  c", false) == std::vector<int32_t>{2, 7, 2});
  // single_word: "ab" alone is the added token; inside "cab" or "abc" it is not.
  CHECK(tok->encode("c ab c", false) == std::vector<int32_t>{2, 8, 2});
  CHECK(tok->encode("cab", false) == std::vector<int32_t>{2, 3});
  CHECK(tok->encode("abc", false) == std::vector<int32_t>{4});
  // No decoder: tokens joined by spaces; skip_special drops <L> only.
  CHECK(tok->decode(std::vector<int32_t>{2, 6, 7}, false) == "c <L> <R>");
  CHECK(tok->decode(std::vector<int32_t>{2, 6, 7}, true) == "c <R>");
}

TEST_CASE("tokenizer_config: bos/eos, add_bos_token without a post-processor", "[tokenizer]") {
  const std::string config =
      R"({"bos_token":{"__type":"AddedToken","content":"<s>"},"eos_token":"<eos>",
    "add_bos_token":true,"added_tokens_decoder":{"6":{"content":"<s>","special":true,"normalized":false}}})";
  auto tok = tokenizer::from_json(tiny(R"(["a b"])"), config);
  REQUIRE(tok.ok());
  CHECK(tok->bos_token() == "<s>");
  CHECK(tok->eos_token() == "<eos>");
  CHECK(tok->bos_id() == std::optional<int32_t>(6));
  CHECK(tok->eos_id() == std::optional<int32_t>(5));
  CHECK(tok->vocab_size() == 7);
  CHECK(tok->encode("ab", true) == std::vector<int32_t>{6, 3});
  CHECK(tok->encode("<s>ab", false) == std::vector<int32_t>{6, 3});
  // A post-processor in tokenizer.json wins over add_bos_token.
  auto with_post =
      tokenizer::from_json(tiny(R"(["a b"])", R"("post_processor":{"type":"ByteLevel"},)"), config);
  REQUIRE(with_post.ok());
  CHECK(with_post->encode("ab", true) == std::vector<int32_t>{3});
}

TEST_CASE("real tokenizers: lookups, specials, post-processors", "[tokenizer]") {
  const auto dir = test::testdata() / "tokenizers";
  for (const char* name : {"gpt2", "qwen2.5", "roberta-base", "phi-3-mini"})
    COSERVE_SKIP_UNLESS_EXISTS(dir / name);
  auto gpt2 = tokenizer::load(dir / "gpt2");
  REQUIRE(gpt2.ok());
  CHECK(gpt2->vocab_size() == 50257);
  CHECK(gpt2->token_to_id("<|endoftext|>") == std::optional<int32_t>(50256));
  CHECK(gpt2->token_to_id("\xC4\xA0the") == std::optional<int32_t>(262));  // "Ġthe"
  CHECK(gpt2->id_to_token(262) == "\xC4\xA0the");
  CHECK(gpt2->id_to_token(50257).empty());
  CHECK(gpt2->id_to_token(-1).empty());
  CHECK_FALSE(gpt2->token_to_id("no such token").has_value());
  CHECK(gpt2->bos_id() == std::optional<int32_t>(50256));
  CHECK(gpt2->is_special(50256));
  // Out-of-range ids are skipped by decode.
  CHECK(gpt2->decode(std::vector<int32_t>{15496, 999999, -3, 995}, false) == "Hello world");

  auto qwen = tokenizer::load(dir / "qwen2.5");
  REQUIRE(qwen.ok());
  CHECK(qwen->vocab_size() == 151665);
  CHECK(qwen->eos_token() == "<|im_end|>");
  CHECK(qwen->token_to_id("<|im_start|>") == std::optional<int32_t>(151644));

  auto roberta = tokenizer::load(dir / "roberta-base");  // RobertaProcessing: <s> A </s>
  REQUIRE(roberta.ok());
  const auto ids = roberta->encode("Hello", true);
  REQUIRE(ids.size() == 3);
  CHECK(ids.front() == 0);
  CHECK(ids.back() == 2);

  auto phi3 = tokenizer::load(dir / "phi-3-mini");  // </s> has rstrip but is not special
  REQUIRE(phi3.ok());
  CHECK_FALSE(phi3->is_special(2));
  CHECK(phi3->is_special(32007));
}

TEST_CASE("invalid UTF-8 is repaired to U+FFFD before encoding", "[tokenizer]") {
  CHECK(utf8::repair("a\xFF"
                     "b") ==
        "a\xEF\xBF\xBD"
        "b");
  CHECK(utf8::repair("\xE2\x82") == "\xEF\xBF\xBD");  // truncated: one replacement
  CHECK(utf8::repair("\xED\xA0\x80") ==
        "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: per byte
  CHECK(utf8::repair("ok \xE2\x82\xAC") == "ok \xE2\x82\xAC");
  CHECK(utf8::complete_prefix("ab\xE2\x82") == 2);
  CHECK(utf8::complete_prefix("ab\xE2\x82\xAC") == 5);
}

TEST_CASE("a real tokenizer encodes invalid UTF-8 as its repair", "[tokenizer]") {
  const auto path = test::testdata() / "tokenizers/gpt2";
  COSERVE_SKIP_UNLESS_EXISTS(path);
  auto tok = tokenizer::load(path);
  REQUIRE(tok.ok());
  CHECK(tok->encode("a\xFF"
                    "b",
                    false) == tok->encode("a\xEF\xBF\xBD"
                                          "b",
                                          false));
  CHECK(tok->decode(tok->encode("x\xC3", false), false) == "x\xEF\xBF\xBD");
}

TEST_CASE("negative or huge token ids are load errors, not out-of-range writes", "[tokenizer]") {
  // Found by fuzzing: an id past int32 was cast to a negative index into the id -> token table.
  const std::vector<std::string> bad_json = {
      R"({"model":{"vocab":{"a":4294967301},"merges":[]}})",
      R"({"model":{"vocab":{"a":2147483648},"merges":[]}})",
      R"({"model":{"vocab":{"a":16777216},"merges":[]}})",
      R"({"added_tokens":[{"id":9999999999,"content":"<x>"}],"model":{"vocab":{"a":0},"merges":[]}})",
  };
  for (const auto& json : bad_json) {
    INFO(json);
    auto tok = tokenizer::from_json(json);
    REQUIRE_FALSE(tok.ok());
    CHECK(tok.err().code == "invalid_argument");
  }
  for (const char* key : {"-1", "4294967296", "12abc", ""}) {
    const std::string config =
        std::string(R"({"added_tokens_decoder":{")") + key + R"(":{"content":"<y>"}}})";
    INFO(config);
    auto tok = tokenizer::from_json(tiny(R"([])"), config);
    REQUIRE_FALSE(tok.ok());
    CHECK(tok.err().message.find("added_tokens_decoder") != std::string::npos);
  }
  // Post-processor ids (found by fuzzing: a cls id of 666666666660 gave encoded ids outside the
  // vocabulary): outside the range, or not in the vocabulary, are load errors.
  for (
      const char* post :
      {R"("post_processor":{"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",666666666660]},)",
       R"("post_processor":{"type":"BertProcessing","sep":["</s>",2],"cls":["<s>",77]},)",
       R"("post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"X"}}],)"
       R"("special_tokens":{"X":{"ids":[4294967296]}}},)"}) {
    INFO(post);
    auto tok = tokenizer::from_json(tiny(R"([])", post));
    REQUIRE_FALSE(tok.ok());
    CHECK(tok.err().code == "invalid_argument");
  }
  // Sparse ids within the range load; the table is sized by the largest.
  auto ok = tokenizer::from_json(R"({"model":{"vocab":{"a":0,"b":1000},"merges":[]}})");
  REQUIRE(ok.ok());
  CHECK(ok->vocab_size() == 1001);
}

TEST_CASE("WordPiece: longest match first, ## continuations, unknown words whole", "[tokenizer]") {
  const std::string json =
      R"({"model":{"type":"WordPiece","unk_token":"[UNK]","max_input_chars_per_word":9,)"
      R"("vocab":{"[UNK]":0,"un":1,"##aff":2,"##able":3,"a":4,"##b":5,"x":6,"ab":7}},)"
      R"("pre_tokenizer":{"type":"WhitespaceSplit"},"decoder":{"type":"WordPiece"}})";
  auto tok = tokenizer::from_json(json);
  REQUIRE(tok.ok());
  CHECK(tok->encode("unaffable", false) == std::vector<int32_t>{1, 2, 3});
  CHECK(tok->encode("ab abb", false) == std::vector<int32_t>{7, 7, 5});
  CHECK(tok->encode("unaffy x", false) == std::vector<int32_t>{0, 6});  // "y" uncovered
  CHECK(tok->encode("abbbbbbbbb", false) == std::vector<int32_t>{0});   // 10 > 9 characters
  CHECK(tok->decode(std::vector<int32_t>{1, 2, 3, 6}, false) == "unaffable x");
  // The unknown token must be in the vocabulary.
  auto bad = tokenizer::from_json(R"({"model":{"type":"WordPiece","vocab":{"a":0}}})");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.err().message.find("[UNK]") != std::string::npos);
}

TEST_CASE("Unigram: the highest-scoring split, unknown characters fused or as bytes",
          "[tokenizer]") {
  auto make = [](bool byte_fallback, const char* unk) {
    return tokenizer::from_json(
        std::string(R"({"model":{"type":"Unigram","unk_id":)") + unk + R"(,"byte_fallback":)" +
        (byte_fallback ? "true" : "false") +
        R"(,"vocab":[["<unk>",0],["a",-1],["b",-1],["ab",-1.5],["abc",-4],["c",-1],)"
        R"(["<0xC3>",-5],["<0xA9>",-5]]}})");
  };
  auto tok = make(false, "0");
  REQUIRE(tok.ok());
  CHECK(tok->encode("ab", false) == std::vector<int32_t>{3});        // -1.5 beats a + b (-2)
  CHECK(tok->encode("abc", false) == std::vector<int32_t>{3, 5});    // -2.5 beats abc (-4)
  CHECK(tok->encode("xyzab", false) == std::vector<int32_t>{0, 3});  // x, y, z fused
  auto bytes = make(true, "0");
  REQUIRE(bytes.ok());
  CHECK(bytes->encode("\xC3\xA9"
                      "a",
                      false) == std::vector<int32_t>{6, 7, 1});        // é as bytes
  CHECK(bytes->encode("\xC3\xA8", false) == std::vector<int32_t>{0});  // è: 0xA8 missing
  auto no_unk = make(false, "null");
  REQUIRE(no_unk.ok());
  CHECK(no_unk->encode("xa", false) == std::vector<int32_t>{1});  // no unknown piece: dropped
  CHECK_FALSE(make(false, "8").ok());                             // unk_id outside the vocab
}

TEST_CASE("Precompiled: a malformed map is a load error, a null map does nothing", "[tokenizer]") {
  auto with = [](const std::string& normalizer) {
    return tokenizer::from_json(R"({"normalizer":)" + normalizer +
                                R"(,"model":{"type":"Unigram","unk_id":0,)"
                                R"("vocab":[["<unk>",0],["a",-1]]}})");
  };
  CHECK(with(R"({"type":"Precompiled","precompiled_charsmap":null})").ok());
  for (const char* bad : {R"("!!notbase64")", R"("AAE=")",  // 2 bytes: no trie size
                          R"("/////wAA")"}) {               // trie size beyond the data
    auto tok = with(std::string(R"({"type":"Precompiled","precompiled_charsmap":)") + bad + "}");
    INFO(bad);
    REQUIRE_FALSE(tok.ok());
    CHECK(tok.err().code == "invalid_argument");
  }
}

TEST_CASE("pairs without a post-processor: a then b, types 0 and 1", "[tokenizer]") {
  auto tok = tokenizer::from_json(tiny(R"(["a b","ab c"])"));
  REQUIRE(tok.ok());
  const tokenizer::encoding e = tok->encode_pair("abc", "ab", true);
  CHECK(e.ids == std::vector<int32_t>{4, 3});
  CHECK(e.type_ids == std::vector<int32_t>{0, 1});
}

TEST_CASE("WordPiece and Unigram on very long words and pieces", "[tokenizer]") {
  // A Unigram piece of 200,000 bytes: the trie is built without recursion. (Encoding a word that
  // long is quadratic in Viterbi over a trie, as in Hugging Face: short words here.)
  const std::string long_piece(200000, 'a');
  auto uni = tokenizer::from_json(R"({"model":{"type":"Unigram","unk_id":0,"vocab":[["<unk>",0],)"
                                  R"(["a",-1],[")" +
                                  long_piece + R"(",-2]]}})");
  REQUIRE(uni.ok());
  CHECK(uni->token_to_id(long_piece) == 2);
  CHECK(uni->encode("aaa", false) == std::vector<int32_t>{1, 1, 1});
  CHECK(uni->encode(std::string(1000, 'a'), false) == std::vector<int32_t>(1000, 1));
  // WordPiece with no word limit: a 100,000-character word of one-character pieces.
  auto wp = tokenizer::from_json(
      R"({"model":{"type":"WordPiece","unk_token":"[UNK]","max_input_chars_per_word":1000000,)"
      R"("vocab":{"[UNK]":0,"b":1,"##b":2}}})");
  REQUIRE(wp.ok());
  const auto ids = wp->encode(std::string(100000, 'b'), false);
  REQUIRE(ids.size() == 100000);
  CHECK(ids.front() == 1);
  CHECK(ids.back() == 2);
}
