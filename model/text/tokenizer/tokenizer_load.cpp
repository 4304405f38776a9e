// Loading tokenizer.json (+ tokenizer_config.json) into tokenizer::impl.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "model/text/tokenizer/bpe_model.hpp"
#include "model/text/tokenizer/byte_level.hpp"
#include "model/text/tokenizer/tokenizer_impl.hpp"
#include "model/text/tokenizer/unigram_model.hpp"
#include "model/text/tokenizer/utf8.hpp"
#include "model/text/tokenizer/wordpiece_model.hpp"

namespace coserve {

namespace {

// Token ids above this are refused (vocabularies in use are far smaller; the id -> token table is
// sized by the largest id).
constexpr int64_t k_max_token_id = (int64_t{1} << 24) - 1;

using simdjson::dom::element;

result<std::string> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return make_error("not_found", "cannot open " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool get_bool(element node, const char* key, bool fallback) {
  bool v = fallback;
  if (node[key].get(v)) return fallback;
  return v;
}

// A token given as a string or as an AddedToken dict {"content": ...}.
std::optional<std::string> token_text(simdjson::simdjson_result<element> r) {
  element node;
  if (r.get(node)) return std::nullopt;
  std::string_view s;
  if (!node.get(s)) return std::string(s);
  if (!node["content"].get(s)) return std::string(s);
  return std::nullopt;
}

added_token parse_added(element node, int32_t id) {
  added_token t;
  std::string_view content;
  if (!node["content"].get(content)) t.content = content;
  t.id = id;
  t.special = get_bool(node, "special", false);
  t.lstrip = get_bool(node, "lstrip", false);
  t.rstrip = get_bool(node, "rstrip", false);
  t.single_word = get_bool(node, "single_word", false);
  t.normalized = get_bool(node, "normalized", !t.special);
  return t;
}

result<string_id_map> read_vocab_object(element model) {
  simdjson::dom::object vocab;
  if (model["vocab"].get(vocab)) return make_error("invalid_argument", "model.vocab missing");
  string_id_map v;
  v.reserve(vocab.size());
  for (auto [key, value] : vocab) {
    int64_t id = 0;
    if (value.get(id) || id < 0 || id > k_max_token_id)
      return make_error("invalid_argument", "vocab id is not an integer in [0, " +
                                                std::to_string(k_max_token_id) + "]");
    v.emplace(std::string(key), static_cast<int32_t>(id));
  }
  return v;
}

result<std::unique_ptr<token_model>> load_bpe(element model, bool byte_mode,
                                              string_id_map& vocab_out) {
  std::string_view s;
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!model[key].get(s) && !s.empty())
      return make_error("unsupported",
                        std::string("unsupported BPE option ") + key + " '" + std::string(s) + "'");
  double dropout = 0;
  if (!model["dropout"].get(dropout) && dropout > 0)
    return make_error("unsupported", "unsupported BPE option dropout (sampling tokenization)");
  auto vocab = read_vocab_object(model);
  if (!vocab) return std::move(vocab).err();
  string_id_map v = std::move(*vocab);
  std::vector<std::pair<std::string, std::string>> merges;
  simdjson::dom::array marr;
  if (!model["merges"].get(marr)) {
    merges.reserve(marr.size());
    for (auto m : marr) {
      std::string_view ms;
      simdjson::dom::array pair;
      if (!m.get(ms)) {
        const auto sp = ms.find(' ', 1);
        if (sp == std::string_view::npos)
          return make_error("invalid_argument", "merge without a space: " + std::string(ms));
        merges.emplace_back(std::string(ms.substr(0, sp)), std::string(ms.substr(sp + 1)));
      } else if (!m.get(pair) && pair.size() == 2) {
        std::string_view a, b;
        if (pair.at(0).get(a) || pair.at(1).get(b))
          return make_error("invalid_argument", "merge pair is not two strings");
        merges.emplace_back(std::string(a), std::string(b));
      } else {
        return make_error("invalid_argument", "merge is neither \"a b\" nor [\"a\",\"b\"]");
      }
    }
  }
  bpe_model::options o;
  o.byte_mode = byte_mode;
  o.byte_fallback = get_bool(model, "byte_fallback", false);
  o.fuse_unk = get_bool(model, "fuse_unk", false);
  o.ignore_merges = get_bool(model, "ignore_merges", false);
  if (!model["unk_token"].get(s)) {
    auto it = v.find(s);
    if (it == v.end())
      return make_error("invalid_argument",
                        "unk_token '" + std::string(s) + "' not in the vocabulary");
    o.unk_id = it->second;
  }
  vocab_out = v;
  return std::unique_ptr<token_model>(std::make_unique<bpe_model>(std::move(v), merges, o));
}

result<std::unique_ptr<token_model>> load_wordpiece(element model, string_id_map& vocab_out) {
  auto vocab = read_vocab_object(model);
  if (!vocab) return std::move(vocab).err();
  wordpiece_model::options o;
  std::string_view unk = "[UNK]", prefix;
  if (auto f = model["unk_token"]; !f.error() && !f.is_null() && f.get(unk))
    return make_error("invalid_argument", "WordPiece unk_token must be a string");
  const auto it = vocab->find(unk);
  if (it == vocab->end())
    return make_error("invalid_argument",
                      "WordPiece unk_token '" + std::string(unk) + "' not in the vocabulary");
  o.unk_id = it->second;
  if (!model["continuing_subword_prefix"].get(prefix)) o.continuing_subword_prefix = prefix;
  int64_t max_chars = 0;
  if (!model["max_input_chars_per_word"].get(max_chars) && max_chars >= 0)
    o.max_input_chars_per_word = static_cast<std::size_t>(max_chars);
  vocab_out = *vocab;
  return std::unique_ptr<token_model>(
      std::make_unique<wordpiece_model>(std::move(*vocab), std::move(o)));
}

result<std::unique_ptr<token_model>> load_unigram(element model,
                                                  std::vector<std::string>& texts_out) {
  simdjson::dom::array vocab;
  if (model["vocab"].get(vocab))
    return make_error("invalid_argument", "Unigram model.vocab is not a list");
  if (vocab.size() > static_cast<std::size_t>(k_max_token_id) + 1)
    return make_error("invalid_argument", "Unigram vocabulary larger than " +
                                              std::to_string(k_max_token_id + 1) + " pieces");
  std::vector<std::pair<std::string, double>> pieces;
  pieces.reserve(vocab.size());
  for (auto entry : vocab) {
    std::string_view text;
    double score = 0;
    simdjson::dom::array pair;
    if (entry.get(pair) || pair.size() != 2 || pair.at(0).get(text) || pair.at(1).get(score))
      return make_error("invalid_argument", "Unigram vocab entry is not [piece, score]");
    pieces.emplace_back(std::string(text), score);
  }
  int64_t unk_id = -1;
  if (!model["unk_id"].is_null() && !model["unk_id"].error()) {
    if (model["unk_id"].get(unk_id) || unk_id < 0 ||
        static_cast<std::size_t>(unk_id) >= pieces.size())
      return make_error("invalid_argument", "Unigram unk_id is not an id of the vocabulary");
  }
  texts_out.clear();
  texts_out.reserve(pieces.size());
  for (const auto& p : pieces) texts_out.push_back(p.first);
  return std::unique_ptr<token_model>(std::make_unique<unigram_model>(
      std::move(pieces), static_cast<int32_t>(unk_id), get_bool(model, "byte_fallback", false)));
}

// The model; its vocabulary (text by id) in texts_out.
result<std::unique_ptr<token_model>> load_model(element model, bool byte_mode,
                                                std::vector<std::string>& texts_out) {
  std::string_view type;
  if (auto e = model["type"].get(type); e == simdjson::NO_SUCH_FIELD) {
    // Untagged (older files): what the fields say.
    simdjson::dom::array list;
    if (!model["merges"].error())
      type = "BPE";
    else if (!model["vocab"].get(list))
      type = "Unigram";
    else if (!model["max_input_chars_per_word"].error())
      type = "WordPiece";
    else
      return make_error("unsupported",
                        "model without a type that is neither BPE, WordPiece nor "
                        "Unigram");
  } else if (e) {
    return make_error("invalid_argument", "model.type is not a string");
  }
  if (type == "Unigram") return load_unigram(model, texts_out);
  string_id_map vocab;
  result<std::unique_ptr<token_model>> m =
      type == "BPE" ? load_bpe(model, byte_mode, vocab)
      : type == "WordPiece"
          ? load_wordpiece(model, vocab)
          : make_error("unsupported", "unsupported model type '" + std::string(type) + "'");
  if (!m) return m;
  int32_t max_id = -1;
  for (const auto& [k, id] : vocab) max_id = std::max(max_id, id);
  texts_out.assign(static_cast<std::size_t>(max_id + 1), std::string());
  for (auto& [k, id] : vocab) texts_out[static_cast<std::size_t>(id)] = k;
  return m;
}

// Appends the ids of a TemplateProcessing special token.
result<void> template_special_ids(element node, std::string_view id, std::vector<int32_t>& out) {
  simdjson::dom::array ids;
  if (node["special_tokens"][id]["ids"].get(ids))
    return make_error("invalid_argument",
                      "TemplateProcessing special token '" + std::string(id) + "' undefined");
  for (auto x : ids) {
    int64_t v = 0;
    if (x.get(v) || v < 0 || v > k_max_token_id)
      return make_error("invalid_argument", "TemplateProcessing ids must be integers in [0, " +
                                                std::to_string(k_max_token_id) + "]");
    out.push_back(static_cast<int32_t>(v));
  }
  return {};
}

// TemplateProcessing: the single template's ids before and after the sequence, and the pair
// template's parts.
result<void> load_template_processing(element node, tokenizer::impl& t) {
  simdjson::dom::array single;
  if (node["single"].get(single))
    return make_error("invalid_argument", "TemplateProcessing without single");
  bool after = false;
  std::vector<int32_t> pre, post;
  for (auto item : single) {
    std::string_view id;
    if (!item["Sequence"]["id"].get(id)) {
      after = true;
      continue;
    }
    if (item["SpecialToken"]["id"].get(id))
      return make_error("invalid_argument", "TemplateProcessing item not understood");
    if (auto r = template_special_ids(node, id, after ? post : pre); !r) return r;
  }
  t.prefix.insert(t.prefix.end(), pre.begin(), pre.end());
  t.suffix.insert(t.suffix.begin(), post.begin(), post.end());
  simdjson::dom::array pair;
  if (node["pair"].get(pair)) return {};
  t.pair_template.clear();
  t.template_types_plain = true;
  for (auto item : pair) {
    std::string_view id;
    int64_t type_id = 0;
    tokenizer::impl::pair_item piece;
    if (!item["Sequence"]["id"].get(id)) {
      if (id != "A" && id != "B")
        return make_error("invalid_argument", "TemplateProcessing pair sequence '" +
                                                  std::string(id) + "' is neither A nor B");
      piece.sequence = id == "A" ? 0 : 1;
      if (!item["Sequence"]["type_id"].get(type_id)) piece.type_id = static_cast<int32_t>(type_id);
    } else if (!item["SpecialToken"]["id"].get(id)) {
      if (auto r = template_special_ids(node, id, piece.ids); !r) return r;
      if (!item["SpecialToken"]["type_id"].get(type_id))
        piece.type_id = static_cast<int32_t>(type_id);
    } else {
      return make_error("invalid_argument", "TemplateProcessing pair item not understood");
    }
    t.pair_template.push_back(std::move(piece));
  }
  return {};
}

// The special-token ids a post-processor puts around a single sequence.
result<void> load_post_processor(element node, tokenizer::impl& t) {
  if (node.is_null()) return {};
  std::string_view type;
  if (node["type"].get(type))
    return make_error("invalid_argument", "post_processor without a type");
  if (type == "ByteLevel") return {};
  if (type == "Sequence") {
    simdjson::dom::array arr;
    if (node["processors"].get(arr))
      return make_error("invalid_argument", "Sequence post_processor without processors");
    for (auto p : arr)
      if (auto r = load_post_processor(p, t); !r) return r;
    return {};
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    int64_t cls = 0, sep = 0;
    if (node["cls"].at(1).get(cls) || node["sep"].at(1).get(sep) || cls < 0 ||
        cls > k_max_token_id || sep < 0 || sep > k_max_token_id)
      return make_error("invalid_argument", std::string(type) + " without cls/sep ids in [0, " +
                                                std::to_string(k_max_token_id) + "]");
    t.prefix.push_back(static_cast<int32_t>(cls));
    t.suffix.insert(t.suffix.begin(), static_cast<int32_t>(sep));
    const auto c = static_cast<int32_t>(cls), p = static_cast<int32_t>(sep);
    t.template_types_plain = type == "RobertaProcessing";  // Hugging Face: both 0 without too
    if (type == "BertProcessing")  // [CLS] A [SEP] B [SEP], B's part of type 1
      t.pair_template = {{-1, {c}, 0}, {0, {}, 0}, {-1, {p}, 0}, {1, {}, 1}, {-1, {p}, 1}};
    else  // <s> A </s> </s> B </s>, all of type 0
      t.pair_template = {{-1, {c}, 0}, {0, {}, 0}, {-1, {p, p}, 0}, {1, {}, 0}, {-1, {p}, 0}};
    return {};
  }
  if (type == "TemplateProcessing") return load_template_processing(node, t);
  return make_error("unsupported", "unsupported post_processor type '" + std::string(type) + "'");
}

}  // namespace

result<tokenizer> tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path file = path, folder = path.parent_path();
  if (std::filesystem::is_directory(path, ec)) {
    file = path / "tokenizer.json";
    folder = path;
  }
  auto json = read_file(file);
  if (!json) return std::move(json).err();
  std::string config;
  if (auto c = read_file(folder / "tokenizer_config.json")) config = std::move(*c);
  auto r = from_json(*json, config);
  if (!r) return make_error(r.err().code, file.string() + ": " + r.err().message);
  return r;
}

result<tokenizer> tokenizer::from_json(std::string_view tokenizer_json,
                                       std::string_view tokenizer_config) {
  simdjson::dom::parser parser;
  element root;
  if (auto e = parser.parse(tokenizer_json.data(), tokenizer_json.size()).get(root))
    return make_error("invalid_argument",
                      std::string("tokenizer.json: ") + simdjson::error_message(e));
  auto t = std::make_shared<impl>();

  element node;
  if (auto e = root["normalizer"].get(node); !e) {
    auto n = normalizer::from_json(node);
    if (!n) return std::move(n).err();
    t->norm = std::move(*n);
  }
  if (auto e = root["pre_tokenizer"].get(node); !e) {
    auto p = pre_tokenizer::from_json(node);
    if (!p) return std::move(p).err();
    t->pre = std::move(*p);
  }
  if (auto e = root["decoder"].get(node); !e) {
    auto d = decoder::from_json(node);
    if (!d) return std::move(d).err();
    t->dec = std::move(*d);
  }
  bool has_post = false;
  if (auto e = root["post_processor"].get(node); !e) {
    has_post = !node.is_null();
    if (auto r = load_post_processor(node, *t); !r) return std::move(r).err();
  }
  if (root["model"].get(node)) return make_error("invalid_argument", "tokenizer.json has no model");
  std::vector<std::string> model_tokens;  // by id
  auto m = load_model(node, t->pre.byte_level(), model_tokens);
  if (!m) return std::move(m).err();
  t->model = std::move(*m);

  simdjson::dom::array added;
  if (!root["added_tokens"].get(added)) {
    for (auto a : added) {
      int64_t id = 0;
      if (a["id"].get(id) || id < 0 || id > k_max_token_id)
        return make_error("invalid_argument", "added token without an id in [0, " +
                                                  std::to_string(k_max_token_id) + "]");
      t->added.push_back(parse_added(a, static_cast<int32_t>(id)));
    }
  }

  // tokenizer_config.json: extra AddedToken dicts, bos/eos, add_bos_token/add_eos_token.
  simdjson::dom::parser config_parser;
  element config;
  const bool have_config =
      !tokenizer_config.empty() &&
      !config_parser.parse(tokenizer_config.data(), tokenizer_config.size()).get(config);
  if (have_config) {
    simdjson::dom::object dec;
    if (!config["added_tokens_decoder"].get(dec)) {
      for (auto [key, value] : dec) {
        const std::string key_text(key);
        char* end = nullptr;
        const long long parsed = std::strtoll(key_text.c_str(), &end, 10);
        if (key_text.empty() || *end != '\0' || parsed < 0 || parsed > k_max_token_id)
          return make_error("invalid_argument", "added_tokens_decoder key '" + key_text +
                                                    "' is not a token id in [0, " +
                                                    std::to_string(k_max_token_id) + "]");
        const auto id = static_cast<int32_t>(parsed);
        const bool known = std::any_of(t->added.begin(), t->added.end(),
                                       [&](const added_token& a) { return a.id == id; });
        if (!known) t->added.push_back(parse_added(value, id));
      }
    }
    if (auto b = token_text(config["bos_token"])) t->bos_token = *b;
    if (auto e = token_text(config["eos_token"])) t->eos_token = *e;
  }

  // id -> token text; vocabulary size.
  auto max_id = static_cast<int32_t>(model_tokens.size()) - 1;
  for (const auto& a : t->added) max_id = std::max(max_id, a.id);
  t->id_to_token = std::move(model_tokens);
  t->id_to_token.resize(static_cast<std::size_t>(max_id + 1));
  t->special.assign(static_cast<std::size_t>(max_id + 1), 0);
  for (const auto& a : t->added) {
    t->id_to_token[static_cast<std::size_t>(a.id)] = a.content;
    t->special[static_cast<std::size_t>(a.id)] = a.special ? 1 : 0;
    t->added_ids[a.content] = a.id;
    if (a.normalized) {
      std::string normed = t->norm.apply(utf8::repair(a.content));
      if (normed != a.content) t->decode_as[a.id] = normed;
      t->norm_matcher.add(std::move(normed), a);
    } else {
      t->raw_matcher.add(a.content, a);
    }
  }
  t->raw_matcher.build();
  t->norm_matcher.build();
  // The post-processor's special tokens ([CLS]/[SEP], template ids) must be in the vocabulary.
  std::vector<const std::vector<int32_t>*> specials = {&t->prefix, &t->suffix};
  for (const auto& item : t->pair_template) specials.push_back(&item.ids);
  for (const auto* ids : specials)
    for (int32_t id : *ids)
      if (id < 0 || static_cast<std::size_t>(id) >= t->id_to_token.size())
        return make_error("invalid_argument", "post_processor token id " + std::to_string(id) +
                                                  " is not in the vocabulary");

  tokenizer tok;
  tok.impl_ = t;
  if (!t->bos_token.empty()) t->bos_id = tok.token_to_id(t->bos_token);
  if (!t->eos_token.empty()) t->eos_id = tok.token_to_id(t->eos_token);
  if (have_config && !has_post) {
    if (get_bool(config, "add_bos_token", false) && t->bos_id) t->prefix.push_back(*t->bos_id);
    if (get_bool(config, "add_eos_token", false) && t->eos_id) t->suffix.push_back(*t->eos_id);
  }
  return tok;
}

}  // namespace coserve
