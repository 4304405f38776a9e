#include "model/tokenizer/pre_tokenizer.hpp"

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

result<pre_tokenizer::step> pre_tokenizer::split_step(std::string_view pattern, bool is_regex, behavior how,
                                                      bool invert) {
  auto re = is_regex ? regex::compile(pattern) : regex::literal(pattern);
  if (!re) return std::move(re).err();
  step s{kind::split, std::move(*re)};
  s.how = how;
  s.invert = invert;
  return s;
}

result<void> pre_tokenizer::add(simdjson::dom::element node) {
  std::string_view type;
  if (node["type"].get(type)) return make_error("invalid_argument", "pre-tokenizer without a type");
  bool flag = false;
  if (type == "Sequence") {
    simdjson::dom::array arr;
    if (node["pretokenizers"].get(arr)) return make_error("invalid_argument", "Sequence without pretokenizers");
    for (auto child : arr)
      if (auto r = add(child); !r) return r;
    return {};
  }
  if (type == "ByteLevel") {
    step s{kind::byte_level, {}};
    s.use_regex = true;
    if (!node["use_regex"].get(flag)) s.use_regex = flag;
    if (!node["add_prefix_space"].get(flag)) s.add_prefix_space = flag;
    if (s.use_regex) {
      auto re = regex::compile(k_gpt2_pattern);
      if (!re) return std::move(re).err();
      s.re = std::move(*re);
    }
    byte_level_ = true;
    steps_.push_back(std::move(s));
    return {};
  }
  if (type == "Split") {
    std::string_view pat, beh;
    bool is_regex = false;
    if (!node["pattern"]["Regex"].get(pat)) is_regex = true;
    else if (node["pattern"]["String"].get(pat)) return make_error("invalid_argument", "Split without a pattern");
    if (node["behavior"].get(beh)) beh = "Isolated";
    behavior how;
    if (beh == "Removed") how = behavior::removed;
    else if (beh == "Isolated") how = behavior::isolated;
    else if (beh == "MergedWithPrevious") how = behavior::merged_with_previous;
    else if (beh == "MergedWithNext") how = behavior::merged_with_next;
    else if (beh == "Contiguous") how = behavior::contiguous;
    else return make_error("unsupported", "unsupported Split behavior '" + std::string(beh) + "'");
    bool invert = false;
    if (!node["invert"].get(flag)) invert = flag;
    auto s = split_step(pat, is_regex, how, invert);
    if (!s) return std::move(s).err();
    steps_.push_back(std::move(*s));
    return {};
  }
  if (type == "Metaspace") {
    step s{kind::metaspace, {}};
    std::string_view rep = "\xE2\x96\x81", scheme;
    if (node["replacement"].get(rep)) rep = "\xE2\x96\x81";
    s.replacement = rep;
    s.prepend = 2;
    if (!node["prepend_scheme"].get(scheme)) {
      if (scheme == "never") s.prepend = 0;
      else if (scheme == "first") s.prepend = 1;
      else if (scheme == "always") s.prepend = 2;
      else return make_error("unsupported", "unsupported Metaspace prepend_scheme '" + std::string(scheme) + "'");
    } else if (!node["add_prefix_space"].get(flag)) {
      s.prepend = flag ? 2 : 0;
    }
    if (!node["split"].get(flag)) s.metaspace_split = flag;
    steps_.push_back(std::move(s));
    return {};
  }
  if (type == "Digits") {
    if (node["individual_digits"].get(flag)) flag = false;
    auto s = split_step(flag ? R"(\p{N})" : R"(\p{N}+)", true, behavior::isolated, false);
    if (!s) return std::move(s).err();
    steps_.push_back(std::move(*s));
    return {};
  }
  if (type == "Whitespace") {
    auto s = split_step(R"(\w+|[^\w\s]+)", true, behavior::removed, true);
    if (!s) return std::move(s).err();
    steps_.push_back(std::move(*s));
    return {};
  }
  if (type == "WhitespaceSplit") {
    auto s = split_step(R"(\s+)", true, behavior::removed, false);
    if (!s) return std::move(s).err();
    steps_.push_back(std::move(*s));
    return {};
  }
  return make_error("unsupported", "unsupported pre-tokenizer type '" + std::string(type) + "'");
}

void pre_tokenizer::split(std::string_view text, bool at_start,
                          const std::function<void(std::string_view)>& sink) const {
  run(0, text, at_start, sink);
}

void pre_tokenizer::run(std::size_t index, std::string_view text, bool at_start,
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
      }
      if (s.use_regex) split_by(s, text, at_start, index + 1, sink);
      else run(index + 1, text, at_start, sink);
      return;
    }
    case kind::split:
      split_by(s, text, at_start, index + 1, sink);
      return;
    case kind::metaspace: {
      std::string t;
      t.reserve(text.size() + s.replacement.size());
      for (char c : text) {
        if (c == ' ') t += s.replacement;
        else t.push_back(c);
      }
      const bool starts = std::string_view(t).substr(0, s.replacement.size()) == s.replacement;
      if (!starts && (s.prepend == 2 || (s.prepend == 1 && at_start))) t.insert(0, s.replacement);
      if (!s.metaspace_split) {
        run(index + 1, t, at_start, sink);
        return;
      }
      // Split before every replacement character (MergedWithNext).
      std::size_t begin = 0;
      for (std::size_t p = t.find(s.replacement, 1); p != std::string::npos; p = t.find(s.replacement, p + 1)) {
        run(index + 1, std::string_view(t).substr(begin, p - begin), at_start && begin == 0, sink);
        begin = p;
      }
      run(index + 1, std::string_view(t).substr(begin), at_start && begin == 0, sink);
      return;
    }
  }
}

void pre_tokenizer::split_by(const step& s, std::string_view text, bool at_start, std::size_t next,
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
    if (e > b) run(next, text.substr(b, e - b), at_start && b == 0, sink);
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
    case behavior::merged_with_previous: {
      std::size_t start = 0;
      for (const auto& p : pieces)
        if (p.match) {
          emit(start, p.e);
          start = p.e;
        }
      emit(start, text.size());
      break;
    }
    case behavior::merged_with_next: {
      std::size_t start = 0;
      for (const auto& p : pieces)
        if (p.match) {
          emit(start, p.b);
          start = p.b;
        }
      emit(start, text.size());
      break;
    }
    case behavior::contiguous: {
      std::size_t start = 0;
      bool prev_match = false;
      for (const auto& p : pieces) {
        if (!(p.match && prev_match)) {
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
