#include "model/text/tokenizer/pre_tokenizer.hpp"

#include <algorithm>

namespace coserve {

namespace {
constexpr std::string_view k_gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
}

result<pre_tokenizer> pre_tokenizer::from_json(simdjson::dom::element node) {
  pre_tokenizer p;
  if (node.is_null()) return p;
  if (auto r = p.add(node); !r) return std::move(r).err();
  for (std::size_t i = 0; i + 1 < p.steps_.size(); ++i)
    if (p.steps_[i].k == kind::byte_level)
      return make_error("unsupported", "unsupported pre-tokenizer: a step after ByteLevel");
  return p;
}

result<pre_tokenizer::step> pre_tokenizer::split_step(std::string_view pattern, bool is_regex,
                                                      behavior how, bool invert) {
  auto re = is_regex ? regex::compile(pattern) : regex::literal(pattern);
  if (!re) return std::move(re).err();
  step s{kind::split, std::move(*re)};
  s.how = how;
  s.invert = invert;
  return s;
}

result<pre_tokenizer::behavior> pre_tokenizer::parse_behavior(std::string_view name) {
  if (name == "Removed") return behavior::removed;
  if (name == "Isolated") return behavior::isolated;
  if (name == "MergedWithPrevious") return behavior::merged_with_previous;
  if (name == "MergedWithNext") return behavior::merged_with_next;
  if (name == "Contiguous") return behavior::contiguous;
  return make_error("unsupported", "unsupported Split behavior '" + std::string(name) + "'");
}

result<pre_tokenizer::step> pre_tokenizer::byte_level_step(simdjson::dom::element node) {
  bool flag = false;
  step s{kind::byte_level, {}};
  s.use_regex = true;
  if (!node["use_regex"].get(flag)) s.use_regex = flag;
  if (!node["add_prefix_space"].get(flag)) s.add_prefix_space = flag;
  if (s.use_regex) {
    auto re = regex::compile(k_gpt2_pattern);
    if (!re) return std::move(re).err();
    s.re = std::move(*re);
  }
  return s;
}

result<pre_tokenizer::step> pre_tokenizer::split_json_step(simdjson::dom::element node) {
  std::string_view pat, beh;
  bool is_regex = false;
  if (!node["pattern"]["Regex"].get(pat))
    is_regex = true;
  else if (node["pattern"]["String"].get(pat))
    return make_error("invalid_argument", "Split without a pattern");
  if (node["behavior"].get(beh)) beh = "Isolated";
  auto how = parse_behavior(beh);
  if (!how) return std::move(how).err();
  bool invert = false, flag = false;
  if (!node["invert"].get(flag)) invert = flag;
  return split_step(pat, is_regex, *how, invert);
}

result<pre_tokenizer::step> pre_tokenizer::metaspace_step(simdjson::dom::element node) {
  step s{kind::metaspace, {}};
  std::string_view rep = "\xE2\x96\x81", scheme;
  bool flag = false;
  if (node["replacement"].get(rep)) rep = "\xE2\x96\x81";
  s.replacement = rep;
  s.prepend = 2;
  if (!node["prepend_scheme"].get(scheme)) {
    if (scheme == "never")
      s.prepend = 0;
    else if (scheme == "first")
      s.prepend = 1;
    else if (scheme == "always")
      s.prepend = 2;
    else
      return make_error("unsupported",
                        "unsupported Metaspace prepend_scheme '" + std::string(scheme) + "'");
  } else if (!node["add_prefix_space"].get(flag)) {
    s.prepend = flag ? 2 : 0;
  }
  if (!node["split"].get(flag)) s.metaspace_split = flag;
  return s;
}

// ASCII punctuation and symbols, and Unicode's P categories, one character a match.
result<pre_tokenizer::step> pre_tokenizer::punctuation_step(std::string_view type,
                                                            simdjson::dom::element node) {
  behavior how = behavior::isolated;
  std::string_view beh;
  if (type == "Punctuation" && !node["behavior"].get(beh)) {
    auto b = parse_behavior(beh);
    if (!b) return std::move(b).err();
    how = *b;
  }
  return split_step(R"([\p{P}!-/:-@\[-`{-~])", true, how, false);
}

result<void> pre_tokenizer::add(simdjson::dom::element node) {
  std::string_view type;
  if (node["type"].get(type)) return make_error("invalid_argument", "pre-tokenizer without a type");
  auto push = [&](result<step> s) -> result<void> {
    if (!s) return std::move(s).err();
    steps_.push_back(std::move(*s));
    return {};
  };
  if (type == "Sequence") {
    simdjson::dom::array arr;
    if (node["pretokenizers"].get(arr))
      return make_error("invalid_argument", "Sequence without pretokenizers");
    for (auto child : arr)
      if (auto r = add(child); !r) return r;
    return {};
  }
  if (type == "ByteLevel") {
    auto s = byte_level_step(node);
    if (s) byte_level_ = true;
    return push(std::move(s));
  }
  if (type == "Split") return push(split_json_step(node));
  if (type == "Metaspace") return push(metaspace_step(node));
  if (type == "Digits") {
    bool individual = false;
    if (node["individual_digits"].get(individual)) individual = false;
    return push(split_step(individual ? R"(\p{N})" : R"(\p{N}+)", true, behavior::isolated, false));
  }
  if (type == "Whitespace")
    // The Rust regex crate's \w (Alphabetic, marks, decimal digits, connector punctuation,
    // joiners), which differs from Oniguruma's \w that Split patterns use.
    return push(split_step(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+)"
                           R"(|[^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\s]+)",
                           true, behavior::removed, true));
  if (type == "Punctuation" || type == "BertPreTokenizer") {
    if (type == "BertPreTokenizer")  // whitespace removed first
      if (auto r = push(split_step(R"(\s+)", true, behavior::removed, false)); !r) return r;
    return push(punctuation_step(type, node));
  }
  if (type == "CharDelimiterSplit") {
    std::string_view delim;
    if (node["delimiter"].get(delim) || delim.empty())
      return make_error("invalid_argument", "CharDelimiterSplit without a delimiter");
    return push(split_step(delim, false, behavior::removed, false));
  }
  if (type == "WhitespaceSplit") return push(split_step(R"(\s+)", true, behavior::removed, false));
  return make_error("unsupported", "unsupported pre-tokenizer type '" + std::string(type) + "'");
}

void pre_tokenizer::split(std::string_view text, std::size_t start_len,
                          const std::function<void(std::string_view)>& sink) const {
  run(0, text, std::min(start_len, text.size()), sink);
}

namespace {
// The start_len of the piece [b, e) of a text whose first z bytes come from the input's first
// character.
std::size_t piece_start_len(std::size_t z, std::size_t b, std::size_t e) {
  return b < z ? std::min(e, z) - b : 0;
}
}  // namespace

void pre_tokenizer::run(std::size_t index, std::string_view text, std::size_t z,
                        const std::function<void(std::string_view)>& sink) const {
  if (text.empty()) return;
  if (index == steps_.size()) {
    sink(text);
    return;
  }
  const step& s = steps_[index];
  switch (s.k) {
    case kind::byte_level: {
      std::string prefixed;
      if (s.add_prefix_space && text.front() != ' ') {
        prefixed.reserve(text.size() + 1);
        prefixed.push_back(' ');
        prefixed.append(text);
        text = prefixed;
        if (z > 0) ++z;  // the space belongs to the piece's first character
      }
      if (s.use_regex)
        split_by(s, text, z, index + 1, sink);
      else
        run(index + 1, text, z, sink);
      return;
    }
    case kind::split:
      split_by(s, text, z, index + 1, sink);
      return;
    case kind::metaspace: {
      std::string t;
      t.reserve(text.size() + s.replacement.size());
      std::size_t tz = 0;
      for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == ' ')
          t += s.replacement;
        else
          t.push_back(text[i]);
        if (i + 1 == z) tz = t.size();
      }
      const bool starts = std::string_view(t).substr(0, s.replacement.size()) == s.replacement;
      if (!starts && (s.prepend == 2 || (s.prepend == 1 && tz > 0))) {
        t.insert(0, s.replacement);
        if (tz > 0) tz += s.replacement.size();
      }
      if (!s.metaspace_split) {
        run(index + 1, t, tz, sink);
        return;
      }
      // Split before every replacement character (MergedWithNext).
      std::size_t begin = 0;
      for (std::size_t p = t.find(s.replacement, 1); p != std::string::npos;
           p = t.find(s.replacement, p + 1)) {
        run(index + 1, std::string_view(t).substr(begin, p - begin), piece_start_len(tz, begin, p),
            sink);
        begin = p;
      }
      run(index + 1, std::string_view(t).substr(begin), piece_start_len(tz, begin, t.size()), sink);
      return;
    }
  }
}

void pre_tokenizer::split_by(const step& s, std::string_view text, std::size_t z, std::size_t next,
                             const std::function<void(std::string_view)>& sink) const {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  s.re.find_all(text, matches);
  // The text as alternating (range, is_match) pieces.
  struct piece {
    std::size_t b, e;
    bool match;
  };
  std::vector<piece> pieces;
  pieces.reserve(matches.size() * 2 + 1);
  std::size_t last = 0;
  for (auto [b, e] : matches) {
    if (b > last) pieces.push_back({last, b, s.invert});
    pieces.push_back({b, e, !s.invert});
    last = e;
  }
  if (last < text.size()) pieces.push_back({last, text.size(), s.invert});

  auto emit = [&](std::size_t b, std::size_t e) {
    if (e > b) run(next, text.substr(b, e - b), piece_start_len(z, b, e), sink);
  };
  const behavior how = s.k == kind::byte_level ? behavior::isolated : s.how;
  switch (how) {
    case behavior::isolated:
      for (const auto& p : pieces) emit(p.b, p.e);
      break;
    case behavior::removed:
      for (const auto& p : pieces)
        if (!p.match) emit(p.b, p.e);
      break;
    // A match joins the piece before (after) it only when that piece is not a match itself, as in
    // Hugging Face's split: consecutive matches stay apart, and so do consecutive non-matches
    // (which only an inverted pattern produces).
    case behavior::merged_with_previous: {
      std::vector<std::pair<std::size_t, std::size_t>> out;
      bool prev_match = false;
      for (const auto& p : pieces) {
        if (p.match && !prev_match && !out.empty())
          out.back().second = p.e;
        else
          out.emplace_back(p.b, p.e);
        prev_match = p.match;
      }
      for (auto [b, e] : out) emit(b, e);
      break;
    }
    case behavior::merged_with_next: {
      std::vector<std::pair<std::size_t, std::size_t>> out;  // built from the end
      bool next_match = false;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->match && !next_match && !out.empty())
          out.back().first = it->b;
        else
          out.emplace_back(it->b, it->e);
        next_match = it->match;
      }
      for (auto it = out.rbegin(); it != out.rend(); ++it) emit(it->first, it->second);
      break;
    }
    case behavior::contiguous: {
      // Neighbours of the same kind merge: runs of matches, and with invert runs of the pattern's
      // own matches (the non-matching pieces then) too, as Hugging Face's split does.
      std::size_t start = 0;
      bool prev_match = false;
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        const auto& p = pieces[i];
        if (i == 0 || p.match != prev_match) {
          emit(start, p.b);
          start = p.b;
        }
        prev_match = p.match;
      }
      emit(start, text.size());
      break;
    }
  }
}

}  // namespace coserve
