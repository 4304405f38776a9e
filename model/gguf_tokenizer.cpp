// The tokenizer of a GGUF file (tokenizer.ggml.*) as tokenizer.json / tokenizer_config.json
// documents for our tokenizer (model/gguf_model.hpp says which tokenizer models are read).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "model/gguf_model.hpp"
#include "model/text/json/value.hpp"

namespace coserve {
namespace {

error gerr(const gguf_file& f, const std::string& what) {
  return make_error("invalid_model", f.path() + ": " + what);
}
error gunsupported(const gguf_file& f, const std::string& what) {
  return make_error("unsupported", f.path() + ": " + what);
}

std::string json_escape(std::string_view s) {
  std::string out = "\"";
  json::append_escaped(out, s);
  out += '"';
  return out;
}

// ggml token types.
constexpr int64_t k_tok_normal = 1, k_tok_unknown = 2, k_tok_control = 3, k_tok_user = 4;

// Hugging Face pre-tokenizers for the names llama.cpp's converter writes to tokenizer.ggml.pre.
struct bpe_pre {
  const char* names[8];
  const char* pre_tokenizer;  // tokenizer.json "pre_tokenizer"
  const char* normalizer;     // tokenizer.json "normalizer" ("null" for none)
  bool ignore_merges;
};

constexpr const char* k_byte_level_regex =
    R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";
// Digits(individual_digits) as a split of every \p{N} character, then GPT-2's byte-level regex.
constexpr const char* k_digits_byte_level =
    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\p{N}"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]})";
constexpr const char* k_llama3_split =
    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]})";
constexpr const char* k_qwen2_split =
    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]})";

// Qwen3.5: Qwen2's pattern with marks (\p{M}) joining letters.
constexpr const char* k_qwen35_split =
    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]})";
// Mistral's Tekken (Mistral Nemo, Mistral Small 3, Ministral, Pixtral).
constexpr const char* k_tekken_split =
    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]})";
// OpenAI's o200k pattern (Phi-4-mini, Llama 4).
constexpr const char* k_gpt4o_split =
    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]})";
// DeepSeek Coder (1.x): newlines, letters, punctuation and CJK runs split apart, digits one by one.
constexpr const char* k_deepseek_coder_split =
    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"[\r\n]"},"behavior":"Isolated","invert":false},{"type":"Split","pattern":{"Regex":"\\s?\\p{L}+"},"behavior":"Isolated","invert":false},{"type":"Split","pattern":{"Regex":"\\s?\\p{P}+"},"behavior":"Isolated","invert":false},{"type":"Split","pattern":{"Regex":"[一-龥ࠀ-一가-퟿]+"},"behavior":"Isolated","invert":false},{"type":"Digits","individual_digits":true},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]})";
// DeepSeek LLM (1.x): as the coder's with explicit letter ranges, ASCII/full-width punctuation,
// trailing whitespace, and digit runs.
constexpr const char* k_deepseek_llm_split =
    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"[\r\n]"},"behavior":"Isolated","invert":false},{"type":"Split","pattern":{"Regex":"\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"},"behavior":"Isolated","invert":false},{"type":"Split","pattern":{"Regex":"\\s?[!-/:-~！-／：-～‘-‟　-。]+"},"behavior":"Isolated","invert":false},{"type":"Split","pattern":{"Regex":"\\s+$"},"behavior":"Isolated","invert":false},{"type":"Split","pattern":{"Regex":"[一-龥ࠀ-一가-퟿]+"},"behavior":"Isolated","invert":false},{"type":"Digits","individual_digits":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]})";
// The names llama.cpp (0.3.x) gives each pre-tokenizer, with the Hugging Face tokenizer.json
// settings of the models they come from; ignore_merges where llama.cpp sets it.
const bpe_pre k_bpe_pres[] = {
    {{"gpt-2", "phi-2", "exaone4", nullptr}, k_byte_level_regex, "null", false},
    {{"starcoder", "refact", "smollm", "codeshell", nullptr}, k_digits_byte_level, "null", false},
    {{"command-r", nullptr}, k_digits_byte_level, R"({"type":"NFC"})", false},
    {{"mpt", "gpt-neox", "olmo", nullptr}, k_byte_level_regex, R"({"type":"NFC"})", false},
    {{"llama-bpe", "llama3", "llama-v3", "falcon3", nullptr}, k_llama3_split, "null", true},
    {{"dbrx", "smaug-bpe", nullptr}, k_llama3_split, "null", false},
    {{"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "kormo", "f2llmv2", nullptr},
     k_qwen2_split,
     R"({"type":"NFC"})",
     false},
    {{"qwen35", nullptr}, k_qwen35_split, "null", false},
    {{"tekken", nullptr}, k_tekken_split, "null", true},
    {{"gpt-4o", "llama4", nullptr}, k_gpt4o_split, "null", false},
    {{"deepseek-coder", nullptr}, k_deepseek_coder_split, "null", false},
    {{"deepseek-llm", nullptr}, k_deepseek_llm_split, "null", false},
};

std::string supported_pres() {
  std::string s;
  for (const auto& p : k_bpe_pres)
    for (const char* const* n = p.names; *n; ++n) s += (s.empty() ? "" : ", ") + std::string(*n);
  return s;
}

// Merges from SentencePiece scores, as transformers' SentencePieceExtractor derives them: every
// split of every piece into two pieces of the vocabulary (ordered by the ids of the halves), all
// of them ordered by the merged piece's score, highest first (stable).
std::vector<std::pair<std::string_view, std::string_view>> merges_from_scores(
    const std::vector<std::string_view>& tokens, const std::vector<double>& scores) {
  std::unordered_map<std::string_view, int32_t> id;
  id.reserve(tokens.size() * 2);
  for (size_t i = 0; i < tokens.size(); ++i) id.emplace(tokens[i], int32_t(i));
  struct merge {
    std::string_view l, r;
    double score;
    int32_t il, ir;
  };
  std::vector<merge> all;
  std::vector<merge> local;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string_view p = tokens[i];
    local.clear();
    for (size_t cut = 1; cut < p.size(); ++cut) {
      if ((static_cast<unsigned char>(p[cut]) & 0xC0) == 0x80) continue;  // inside a UTF-8 sequence
      auto l = id.find(p.substr(0, cut)), r = id.find(p.substr(cut));
      if (l != id.end() && r != id.end())
        local.push_back({l->first, r->first, scores[i], l->second, r->second});
    }
    std::sort(local.begin(), local.end(), [](const merge& a, const merge& b) {
      return a.il != b.il ? a.il < b.il : a.ir < b.ir;
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const merge& a, const merge& b) { return a.score > b.score; });
  std::vector<std::pair<std::string_view, std::string_view>> out;
  out.reserve(all.size());
  for (const merge& m : all) out.emplace_back(m.l, m.r);
  return out;
}

// The tokenizer.ggml.* keys every tokenizer model uses, checked: the vocabulary, its token types,
// the special ids and the add_* flags.
struct gguf_vocab {
  bool spm = false;  // tokenizer.ggml.model "llama" (SentencePiece pieces)
  bool wpm = false;  // tokenizer.ggml.model "bert" (WordPiece, in llama.cpp's phantom-space form)
  const std::vector<std::string_view>* tokens = nullptr;
  std::vector<int64_t> types;               // ggml token type per token
  std::optional<int32_t> bos, eos, unk;     // special ids (none when absent or negative)
  std::optional<int32_t> cls, sep;          // BERT's [CLS] and [SEP]
  bool want_bos = false, want_eos = false;  // added around every encoded sequence
  std::optional<bool> add_space_prefix;     // tokenizer.ggml.add_space_prefix

  std::string_view token(int32_t id) const { return (*tokens)[size_t(id)]; }
};

// A special token id from metadata `key`: none when absent or negative, an error past the
// vocabulary.
result<std::optional<int32_t>> special_token_id(const gguf_file& f, const char* key,
                                                size_t vocab_size) {
  auto v = f.get_int(key);
  if (!v) return v.err();
  if (!*v || **v < 0) return std::optional<int32_t>{};
  if (**v >= int64_t(vocab_size))
    return gerr(f, std::string("metadata ") + key + " is not a token id");
  return std::optional<int32_t>(int32_t(**v));
}

result<gguf_vocab> read_vocab(const gguf_file& f) {
  auto model_v = f.get_string("tokenizer.ggml.model");
  if (!model_v) return model_v.err();
  if (!*model_v)
    return gerr(f, "metadata tokenizer.ggml.model is missing (the file has no tokenizer)");
  const std::string model = **model_v;
  if (model != "gpt2" && model != "llama" && model != "bert")
    return gunsupported(
        f, "tokenizer.ggml.model '" + model + "' is not supported (supported: gpt2, llama, bert)");
  gguf_vocab v;
  v.spm = model == "llama";
  v.wpm = model == "bert";
  const gguf_value* tokens_v = f.find("tokenizer.ggml.tokens");
  if (!tokens_v || tokens_v->kind != gguf_kind::array || tokens_v->elem != gguf_kind::string)
    return gerr(f, "metadata tokenizer.ggml.tokens must be an array of strings");
  v.tokens = &tokens_v->strings;
  const size_t n = v.tokens->size();
  if (n == 0 || n > (size_t(1) << 24))
    return gerr(f, "tokenizer.ggml.tokens is empty or too large");
  v.types.assign(n, k_tok_normal);
  if (const gguf_value* tt = f.find("tokenizer.ggml.token_type")) {
    if (tt->kind != gguf_kind::array || tt->ints.size() != n)
      return gerr(f,
                  "metadata tokenizer.ggml.token_type must be an integer array as long as "
                  "tokenizer.ggml.tokens");
    v.types = tt->ints;
  }
  for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", &v.bos},
                         std::pair{"tokenizer.ggml.eos_token_id", &v.eos},
                         std::pair{"tokenizer.ggml.unknown_token_id", &v.unk},
                         std::pair{"tokenizer.ggml.cls_token_id", &v.cls},
                         std::pair{"tokenizer.ggml.seperator_token_id", &v.sep}}) {
    auto r = special_token_id(f, key, n);
    if (!r) return r.err();
    *id = *r;
  }
  auto add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  auto add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
  auto add_space = f.get_bool("tokenizer.ggml.add_space_prefix");
  for (auto* r : {&add_bos, &add_eos, &add_space})
    if (!*r) return r->err();
  v.want_bos = add_bos->value_or(v.spm) && v.bos;
  v.want_eos = add_eos->value_or(false) && v.eos;
  v.add_space_prefix = *add_space;
  return v;
}

// GGUF has no per-token strip attributes; llama.cpp sets them by model name, as here: Phi-3's
// special tokens and </s> swallow the whitespace after them (as its tokenizer.json says).
result<bool> is_phi3(const gguf_file& f) {
  auto name_v = f.get_string("general.name");
  if (!name_v) return name_v.err();
  std::string name = name_v->value_or("");
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return char(std::tolower(ch)); });
  return name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;
}

// tokenizer.json "added_tokens": the control, user-defined and unknown tokens.
void append_added_tokens(std::string& j, const gguf_vocab& v, bool phi3) {
  j += "\"added_tokens\":[";
  bool first = true;
  for (size_t i = 0; i < v.tokens->size(); ++i) {
    const int64_t t = v.types[i];
    const std::string_view tok = (*v.tokens)[i];
    if (t != k_tok_control && t != k_tok_user && t != k_tok_unknown) continue;
    bool rstrip = false;
    if (phi3) {
      rstrip = t == k_tok_control || tok == "</s>";
      if (tok == "<unk>" || tok == "<s>" || tok == "<|endoftext|>") rstrip = false;
    }
    if (!first) j += ',';
    first = false;
    j += "{\"id\":" + std::to_string(i) + ",\"content\":" + json_escape(tok) +
         ",\"single_word\":false,\"lstrip\":false,\"rstrip\":" + (rstrip ? "true" : "false") +
         ",\"normalized\":false,\"special\":" + (t == k_tok_user ? "false" : "true") + "}";
  }
  j += "],";
}

// tokenizer.json "post_processor": BOS and EOS around each sequence as the file asks ("null" for
// neither).
std::string post_processor_json(const gguf_vocab& v) {
  if (!v.want_bos && !v.want_eos) return "null";
  std::string post = "{\"type\":\"TemplateProcessing\",\"single\":[";
  std::string specials;
  auto special = [&](int32_t id) {
    const std::string tok = json_escape(v.token(id));
    return tok + ":{\"id\":" + tok + ",\"ids\":[" + std::to_string(id) + "],\"tokens\":[" + tok +
           "]}";
  };
  if (v.want_bos) {
    post += "{\"SpecialToken\":{\"id\":" + json_escape(v.token(*v.bos)) + ",\"type_id\":0}},";
    specials += special(*v.bos);
  }
  post += "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}";
  if (v.want_eos) {
    post += ",{\"SpecialToken\":{\"id\":" + json_escape(v.token(*v.eos)) + ",\"type_id\":0}}";
    if (!specials.empty()) specials += ',';
    specials += special(*v.eos);
  }
  return post + "],\"special_tokens\":{" + specials + "}}";
}

using merge_list = std::vector<std::pair<std::string_view, std::string_view>>;

// SentencePiece ("llama"): merges derived from the scores; the normalizer, pre-tokenizer,
// post-processor and decoder entries of tokenizer.json appended to j.
result<merge_list> append_spm_pipeline(std::string& j, const gguf_file& f, const gguf_vocab& v,
                                       const std::string& post) {
  const gguf_value* sc = f.find("tokenizer.ggml.scores");
  if (!sc || sc->kind != gguf_kind::array || sc->floats.size() != v.tokens->size())
    return gerr(
        f, "metadata tokenizer.ggml.scores must be a float array as long as tokenizer.ggml.tokens");
  merge_list merges = merges_from_scores(*v.tokens, sc->floats);
  const bool prefix = v.add_space_prefix.value_or(true);
  j += std::string("\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[") +
       (prefix ? "{\"type\":\"Prepend\",\"prepend\":\"\u2581\"}," : "") +
       "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\u2581\"}]},"
       "\"pre_tokenizer\":null,\"post_processor\":" +
       post +
       ","
       "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{"
       "\"String\":\"\u2581\"},"
       "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}" +
       (prefix ? ",{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}" : "") + "]},";
  return merges;
}

// Byte-level BPE ("gpt2"): the pre-tokenizer named by tokenizer.ggml.pre and the file's merges;
// the normalizer, pre-tokenizer, post-processor and decoder entries appended to j.
result<merge_list> append_bpe_pipeline(std::string& j, const gguf_file& f, const std::string& post,
                                       bool& ignore_merges) {
  auto pre_v = f.get_string("tokenizer.ggml.pre");
  if (!pre_v) return pre_v.err();
  const std::string pre = pre_v->value_or("default");
  const bpe_pre* chosen = nullptr;
  for (const auto& p : k_bpe_pres)
    for (const char* const* n = p.names; *n; ++n)
      if (pre == *n) chosen = &p;
  if (!chosen)
    return gunsupported(f, "tokenizer.ggml.pre '" + pre +
                               "' is not supported (supported: " + supported_pres() + ")");
  ignore_merges = chosen->ignore_merges;
  const gguf_value* mv = f.find("tokenizer.ggml.merges");
  if (!mv || mv->kind != gguf_kind::array || mv->elem != gguf_kind::string)
    return gerr(f, "metadata tokenizer.ggml.merges must be an array of strings");
  merge_list merges;
  merges.reserve(mv->strings.size());
  for (std::string_view m : mv->strings) {
    const size_t sp = m.find(' ', 1);
    if (sp == std::string_view::npos)
      return gerr(f, "tokenizer.ggml.merges entry without a space: " + std::string(m));
    merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  j += std::string("\"normalizer\":") + chosen->normalizer +
       ",\"pre_tokenizer\":" + chosen->pre_tokenizer + ",\"post_processor\":" + post +
       ",\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
       "\"use_regex\":true},";
  return merges;
}

// WordPiece ("bert"): llama.cpp's converter writes a word-initial piece as "\u2581piece", a
// continuation "##piece" as "piece", and "[...]" tokens as they are; this undoes it.
std::vector<std::string> wordpiece_tokens(const std::vector<std::string_view>& phantom) {
  static constexpr std::string_view k_space = "\u2581";
  std::vector<std::string> out;
  out.reserve(phantom.size());
  for (std::string_view t : phantom) {
    if (t.size() >= 2 && t.front() == '[' && t.back() == ']')
      out.emplace_back(t);
    else if (t.starts_with(k_space))
      out.emplace_back(t.substr(k_space.size()));
    else
      out.push_back("##" + std::string(t));
  }
  return out;
}

// WordPiece ("bert"): BERT's normalizer (lowercased and accents stripped, as llama.cpp's WPM
// tokenizer always does), pre-tokenizer and decoder, [CLS] $A [SEP] (pairs: [CLS] $A [SEP] $B
// [SEP], the second part of type 1) when the file names both, and the WordPiece model; appended
// to j, which this completes.
result<void> append_wordpiece(std::string& j, const gguf_file& f, const gguf_vocab& v) {
  if (!v.unk) return gerr(f, "a bert tokenizer needs tokenizer.ggml.unknown_token_id");
  std::string post = "null";
  if (v.cls && v.sep) {
    const std::string cls = json_escape(v.token(*v.cls)), sep = json_escape(v.token(*v.sep));
    auto special = [](const std::string& tok, int32_t id) {
      return "{\"SpecialToken\":{\"id\":" + tok + ",\"type_id\":" + std::to_string(id) + "}}";
    };
    auto seq = [](const char* name, int type) {
      return std::string("{\"Sequence\":{\"id\":\"") + name +
             "\",\"type_id\":" + std::to_string(type) + "}}";
    };
    post = "{\"type\":\"TemplateProcessing\",\"single\":[" + special(cls, 0) + "," + seq("A", 0) +
           "," + special(sep, 0) + "],\"pair\":[" + special(cls, 0) + "," + seq("A", 0) + "," +
           special(sep, 0) + "," + seq("B", 1) + "," + special(sep, 1) + "],\"special_tokens\":{" +
           cls + ":{\"id\":" + cls + ",\"ids\":[" + std::to_string(*v.cls) + "],\"tokens\":[" +
           cls + "]}," + sep + ":{\"id\":" + sep + ",\"ids\":[" + std::to_string(*v.sep) +
           "],\"tokens\":[" + sep + "]}}}";
  }
  j += "\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\":true,"
       "\"handle_chinese_chars\":true,\"strip_accents\":null,\"lowercase\":true},"
       "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"post_processor\":" +
       post + ",\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},";
  j += "\"model\":{\"type\":\"WordPiece\",\"unk_token\":" + json_escape(v.token(*v.unk)) +
       ",\"continuing_subword_prefix\":\"##\",\"max_input_chars_per_word\":100,\"vocab\":{";
  for (size_t i = 0; i < v.tokens->size(); ++i) {
    if (i) j += ',';
    j += json_escape((*v.tokens)[i]) + ":" + std::to_string(i);
  }
  j += "}}}";
  return {};
}

// tokenizer.json "model": the BPE vocabulary and merges.
void append_bpe_model(std::string& j, const gguf_vocab& v, const merge_list& merges,
                      bool ignore_merges) {
  j += "\"model\":{\"type\":\"BPE\",\"dropout\":null,";
  if (v.spm && v.unk) j += "\"unk_token\":" + json_escape(v.token(*v.unk)) + ",";
  j += std::string("\"fuse_unk\":") + (v.spm ? "true" : "false") +
       ",\"byte_fallback\":" + (v.spm ? "true" : "false") +
       ",\"ignore_merges\":" + (ignore_merges ? "true" : "false") + ",\"vocab\":{";
  for (size_t i = 0; i < v.tokens->size(); ++i) {
    if (i) j += ',';
    j += json_escape((*v.tokens)[i]) + ":" + std::to_string(i);
  }
  j += "},\"merges\":[";
  for (size_t i = 0; i < merges.size(); ++i) {
    if (i) j += ',';
    j += '[';
    j += json_escape(merges[i].first);
    j += ',';
    j += json_escape(merges[i].second);
    j += ']';
  }
  j += "]}}";
}

// tokenizer_config.json: the BOS and EOS tokens.
std::string tokenizer_config_json(const gguf_vocab& v) {
  std::string cfg = "{";
  if (v.bos) cfg += "\"bos_token\":" + json_escape(v.token(*v.bos));
  if (v.eos) cfg += std::string(v.bos ? "," : "") + "\"eos_token\":" + json_escape(v.token(*v.eos));
  cfg += "}";
  return cfg;
}

}  // namespace

result<gguf_tokenizer_documents> gguf_tokenizer_json(const gguf_file& f) {
  auto vocab = read_vocab(f);
  if (!vocab) return vocab.err();
  gguf_vocab& v = *vocab;
  std::vector<std::string> wordpiece;  // "bert": the tokens as tokenizer.json has them
  std::vector<std::string_view> wordpiece_views;
  if (v.wpm) {
    wordpiece = wordpiece_tokens(*v.tokens);
    wordpiece_views.assign(wordpiece.begin(), wordpiece.end());
    v.tokens = &wordpiece_views;
  }
  auto phi3 = is_phi3(f);
  if (!phi3) return phi3.err();
  std::string j;
  j.reserve(v.tokens->size() * 24);
  j += "{\"version\":\"1.0\",";
  append_added_tokens(j, v, *phi3);
  if (v.wpm) {
    if (auto r = append_wordpiece(j, f, v); !r) return r.err();
    return gguf_tokenizer_documents{std::move(j), tokenizer_config_json(v)};
  }
  const std::string post = post_processor_json(v);
  bool ignore_merges = false;
  auto merges =
      v.spm ? append_spm_pipeline(j, f, v, post) : append_bpe_pipeline(j, f, post, ignore_merges);
  if (!merges) return merges.err();
  append_bpe_model(j, v, *merges, ignore_merges);
  return gguf_tokenizer_documents{std::move(j), tokenizer_config_json(v)};
}

result<tokenizer> load_gguf_tokenizer(const gguf_file& f) {
  auto docs = gguf_tokenizer_json(f);
  if (!docs) return docs.err();
  auto t = tokenizer::from_json(docs->tokenizer_json, docs->tokenizer_config_json);
  if (!t) return make_error(t.err().code, f.path() + ": tokenizer.ggml.*: " + t.err().message);
  return t;
}

}  // namespace coserve
