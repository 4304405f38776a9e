#include "model/text/tokenizer/decoder.hpp"

#include "model/text/tokenizer/byte_level.hpp"
#include "model/text/tokenizer/normalizer.hpp"
#include "model/text/tokenizer/utf8.hpp"

namespace coserve {

namespace {

bool get_flag(simdjson::dom::element node, const char* key, bool fallback) {
  bool v = fallback;
  if (node[key].get(v)) return fallback;
  return v;
}

// Hugging Face's WordPiece decoder cleanup: BERT's tokenization puts spaces before punctuation
// and English clitics; these replacements take them out again.
std::string wordpiece_cleanup(std::string t) {
  static constexpr std::pair<std::string_view, std::string_view> k_rules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : k_rules)
    t = replace_all(t, std::string(from), std::nullopt, std::string(to));
  return t;
}

}  // namespace

result<decoder> decoder::from_json(simdjson::dom::element node) {
  decoder d;
  if (node.is_null()) return d;
  d.present_ = true;
  if (auto r = d.add(node); !r) return std::move(r).err();
  return d;
}

result<void> decoder::add(simdjson::dom::element node) {
  std::string_view type;
  if (node["type"].get(type)) return make_error("invalid_argument", "decoder without a type");
  if (type == "Sequence") {
    simdjson::dom::array arr;
    if (node["decoders"].get(arr))
      return make_error("invalid_argument", "Sequence decoder without decoders");
    for (auto child : arr)
      if (auto r = add(child); !r) return r;
    return {};
  }
  step s{};
  bool flag = false;
  if (type == "ByteLevel") {
    s.k = kind::byte_level;
  } else if (type == "Metaspace") {
    s.k = kind::metaspace;
    std::string_view rep, scheme;
    s.replacement = node["replacement"].get(rep) ? std::string("\xE2\x96\x81") : std::string(rep);
    if (!node["prepend_scheme"].get(scheme))
      s.prepend = scheme != "never";
    else if (!node["add_prefix_space"].get(flag))
      s.prepend = flag;
  } else if (type == "ByteFallback") {
    s.k = kind::byte_fallback;
  } else if (type == "Fuse") {
    s.k = kind::fuse;
  } else if (type == "Strip") {
    s.k = kind::strip;
    std::string_view content;
    int64_t start = 0, stop = 0;
    if (node["content"].get(content) || node["start"].get(start) || node["stop"].get(stop))
      return make_error("invalid_argument", "Strip decoder needs content, start and stop");
    s.strip_content = content;
    s.start = static_cast<std::size_t>(start);
    s.stop = static_cast<std::size_t>(stop);
  } else if (type == "Replace") {
    s.k = kind::replace;
    std::string_view content, pat;
    if (node["content"].get(content))
      return make_error("invalid_argument", "Replace decoder without content");
    s.replacement = content;
    if (!node["pattern"]["String"].get(pat)) {
      s.literal = pat;
    } else if (!node["pattern"]["Regex"].get(pat)) {
      auto re = regex::compile(pat);
      if (!re) return std::move(re).err();
      s.re = std::move(*re);
    } else {
      return make_error("invalid_argument", "Replace decoder without a pattern");
    }
  } else if (type == "BPEDecoder") {
    // Each token's end-of-word suffix becomes a space, the last token's nothing.
    s.k = kind::bpe_suffix;
    std::string_view suffix = "</w>";
    if (auto f = node["suffix"]; !f.error() && !f.is_null() && f.get(suffix))
      return make_error("invalid_argument", "BPEDecoder suffix must be a string");
    s.literal = suffix;
  } else if (type == "WordPiece") {
    // Pieces after the first: the continuing-subword prefix joins them to the previous one, any
    // other piece starts a new word after a space.
    s.k = kind::wordpiece;
    std::string_view prefix = "##";
    if (auto f = node["prefix"]; !f.error() && !f.is_null() && f.get(prefix))
      return make_error("invalid_argument", "WordPiece decoder prefix must be a string");
    s.literal = prefix;
    s.cleanup = get_flag(node, "cleanup", true);
  } else {
    return make_error("unsupported", "unsupported decoder type '" + std::string(type) + "'");
  }
  steps_.push_back(std::move(s));
  return {};
}

namespace {

// "<0xAB>" -> 0xAB, or -1.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

std::string decoder::decode(std::vector<std::string> tokens) const {
  if (!present_) {
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  for (const auto& s : steps_) {
    switch (s.k) {
      case kind::byte_level: {
        // Every token back to bytes; a token outside the byte alphabet (an added token such as
        // a run of spaces) stays as its UTF-8 text. The joined bytes are then repaired.
        std::string bytes;
        for (const auto& t : tokens) {
          if (auto b = byte_level::to_bytes(t))
            bytes += *b;
          else
            bytes += t;
        }
        tokens.assign(1, utf8::repair(bytes));
        break;
      }
      case kind::metaspace:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          std::string out;
          const std::string& t = tokens[i];
          for (std::size_t p = 0; p < t.size();) {
            if (t.compare(p, s.replacement.size(), s.replacement) == 0) {
              if (!(i == 0 && s.prepend)) out.push_back(' ');
              p += s.replacement.size();
            } else {
              out.push_back(t[p++]);
            }
          }
          tokens[i] = std::move(out);
        }
        break;
      case kind::byte_fallback: {
        std::vector<std::string> out;
        std::string pending;
        auto flush = [&] {
          if (pending.empty()) return;
          if (utf8::is_valid(pending))
            out.push_back(pending);
          else
            for (std::size_t k = 0; k < pending.size(); ++k)
              out.emplace_back(utf8::replacement_char);
          pending.clear();
        };
        for (auto& t : tokens) {
          const int b = byte_token(t);
          if (b >= 0) {
            pending.push_back(static_cast<char>(b));
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case kind::fuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case kind::strip:
        for (auto& t : tokens) {
          std::size_t b = 0, e = t.size();
          const std::size_t n = s.strip_content.size();
          for (std::size_t k = 0;
               k < s.start && n && e - b >= n && t.compare(b, n, s.strip_content) == 0; ++k)
            b += n;
          for (std::size_t k = 0;
               k < s.stop && n && e - b >= n && t.compare(e - n, n, s.strip_content) == 0; ++k)
            e -= n;
          t = t.substr(b, e - b);
        }
        break;
      case kind::replace:
        for (auto& t : tokens) t = replace_all(t, s.literal, s.re, s.replacement);
        break;
      case kind::bpe_suffix:
        for (std::size_t i = 0; i < tokens.size(); ++i)
          tokens[i] =
              replace_all(tokens[i], s.literal, std::nullopt, i + 1 == tokens.size() ? "" : " ");
        break;
      case kind::wordpiece:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          std::string& t = tokens[i];
          if (i != 0) {
            if (t.compare(0, s.literal.size(), s.literal) == 0)
              t.erase(0, s.literal.size());
            else
              t.insert(0, 1, ' ');
          }
          if (s.cleanup) t = wordpiece_cleanup(std::move(t));
        }
        break;
    }
  }
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::string decoder::token_bytes(const std::string& token) const {
  if (!present_) return token;
  std::string t = token;
  for (const auto& s : steps_) {
    switch (s.k) {
      case kind::byte_level:
        if (auto b = byte_level::to_bytes(t)) t = *b;
        break;
      case kind::metaspace: {
        std::string out;
        for (std::size_t p = 0; p < t.size();) {
          if (!s.replacement.empty() && t.compare(p, s.replacement.size(), s.replacement) == 0) {
            out.push_back(' ');
            p += s.replacement.size();
          } else {
            out.push_back(t[p++]);
          }
        }
        t = std::move(out);
        break;
      }
      case kind::byte_fallback:
        if (const int b = byte_token(t); b >= 0) t.assign(1, static_cast<char>(b));
        break;
      case kind::fuse:
      case kind::strip:
        break;
      case kind::replace:
        t = replace_all(t, s.literal, s.re, s.replacement);
        break;
      case kind::bpe_suffix:
        t = replace_all(t, s.literal, std::nullopt, " ");
        break;
      case kind::wordpiece:
        if (t.compare(0, s.literal.size(), s.literal) == 0)
          t.erase(0, s.literal.size());
        else
          t.insert(0, 1, ' ');
        break;
    }
  }
  return t;
}

}  // namespace coserve
