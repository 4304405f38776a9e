#include "model/text/tokenizer/tokenizer.hpp"

#include <algorithm>

#include "model/text/tokenizer/byte_level.hpp"
#include "model/text/tokenizer/tokenizer_impl.hpp"
#include "model/text/tokenizer/utf8.hpp"

namespace coserve {
namespace {

// `tokenizers`' longest_first truncation of a pair to `max_length` ids in all, from the right:
// with n1 the shorter part's length, the shorter keeps n1 when the longer can shrink to
// max(n1, max_length - n1) within the limit; otherwise the two keep max_length / 2 and the rest.
void truncate_longest_first(std::vector<int32_t>& a, std::vector<int32_t>& b, size_t max_length) {
  if (a.size() + b.size() <= max_length) return;
  const bool swapped = a.size() > b.size();
  size_t n1 = swapped ? b.size() : a.size();
  size_t n2 = n1 > max_length ? n1 : std::max(n1, max_length - n1);
  if (n1 + n2 > max_length) {
    n1 = max_length / 2;
    n2 = n1 + max_length % 2;
  }
  if (swapped) std::swap(n1, n2);
  a.resize(std::min(a.size(), n1));
  b.resize(std::min(b.size(), n2));
}

}  // namespace

std::vector<int32_t> tokenizer::encode(std::string_view input, bool add_special_tokens) const {
  const impl& t = *impl_;
  std::string repaired;
  if (!utf8::is_valid(input)) {
    repaired = utf8::repair(input);
    input = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(input.size() / 3 + t.prefix.size() + t.suffix.size() + 4);
  if (add_special_tokens) ids.insert(ids.end(), t.prefix.begin(), t.prefix.end());

  const auto sink = [&](std::string_view word) { t.model->tokenize(word, ids); };
  std::vector<added_token_matcher::piece> raw, normed;
  t.raw_matcher.split(input, raw);
  for (const auto& p : raw) {
    if (p.id >= 0) {
      ids.push_back(p.id);
      continue;
    }
    const std::string_view segment = input.substr(p.begin, p.end - p.begin);
    // start_len: the leading bytes that come from the input's first character (see
    // pre_tokenizer::split); only the segment that begins the input has any.
    std::size_t start_len = 0;
    if (p.begin == 0) {
      char32_t cp;
      start_len = std::max<std::size_t>(1, utf8::decode(segment, 0, cp));
    }
    if (t.norm.empty() && t.norm_matcher.empty()) {
      t.pre.split(segment, start_len, sink);
      continue;
    }
    const std::string normalized =
        t.norm.apply(std::string(segment), p.begin == 0 ? &start_len : nullptr);
    normed.clear();
    t.norm_matcher.split(normalized, normed);
    for (const auto& q : normed) {
      if (q.id >= 0) {
        ids.push_back(q.id);
        continue;
      }
      const std::size_t piece_start =
          q.begin < start_len ? std::min(q.end, start_len) - q.begin : 0;
      t.pre.split(std::string_view(normalized).substr(q.begin, q.end - q.begin), piece_start, sink);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), t.suffix.begin(), t.suffix.end());
  return ids;
}

tokenizer::encoding tokenizer::encode_pair(std::string_view a, std::string_view b,
                                           bool add_special_tokens, int32_t max_length) const {
  const impl& t = *impl_;
  std::vector<int32_t> parts[2] = {encode(a, false), encode(b, false)};
  const bool templated = !t.pair_template.empty() && add_special_tokens;
  if (max_length > 0) {
    size_t added = 0;
    if (templated)
      for (const auto& item : t.pair_template)
        if (item.sequence < 0) added += item.ids.size();
    truncate_longest_first(parts[0], parts[1],
                           size_t(max_length) - std::min(added, size_t(max_length)));
  }
  encoding out;
  auto put = [&](const std::vector<int32_t>& ids, int32_t type_id) {
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.type_ids.insert(out.type_ids.end(), ids.size(), type_id);
  };
  if (!templated && (t.pair_template.empty() || !t.template_types_plain)) {
    put(parts[0], 0);
    put(parts[1], 1);
    return out;
  }
  for (const auto& item : t.pair_template) {
    if (item.sequence >= 0)
      put(parts[item.sequence], item.type_id);
    else if (add_special_tokens)
      put(item.ids, item.type_id);
  }
  return out;
}

std::string tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const impl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= t.id_to_token.size()) continue;
    if (skip_special_tokens && t.special[static_cast<std::size_t>(id)]) continue;
    const auto as = t.decode_as.find(id);
    const std::string& s =
        as != t.decode_as.end() ? as->second : t.id_to_token[static_cast<std::size_t>(id)];
    if (s.empty() && !t.added_ids.contains(s)) continue;  // a hole in the id space
    tokens.push_back(s);
  }
  return t.dec.decode(std::move(tokens));
}

std::string tokenizer::token_bytes(int32_t id) const {
  const impl& t = *impl_;
  if (id < 0 || static_cast<std::size_t>(id) >= t.id_to_token.size()) return {};
  if (t.special[static_cast<std::size_t>(id)]) return {};
  const auto as = t.decode_as.find(id);
  const std::string& s =
      as != t.decode_as.end() ? as->second : t.id_to_token[static_cast<std::size_t>(id)];
  if (s.empty()) return {};
  return t.dec.token_bytes(s);
}

int32_t tokenizer::vocab_size() const noexcept {
  return static_cast<int32_t>(impl_->id_to_token.size());
}

std::optional<int32_t> tokenizer::token_to_id(std::string_view token) const {
  const impl& t = *impl_;
  if (auto it = t.added_ids.find(token); it != t.added_ids.end()) return it->second;
  if (t.model->byte_mode()) {
    auto bytes = byte_level::to_bytes(token);
    if (!bytes) return std::nullopt;
    return t.model->find(*bytes);
  }
  return t.model->find(token);
}

std::string_view tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_to_token.size()) return {};
  return impl_->id_to_token[static_cast<std::size_t>(id)];
}

bool tokenizer::is_special(int32_t id) const noexcept {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->special.size() &&
         impl_->special[static_cast<std::size_t>(id)];
}

std::optional<int32_t> tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<int32_t> tokenizer::eos_id() const { return impl_->eos_id; }
const std::string& tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& tokenizer::eos_token() const { return impl_->eos_token; }

}  // namespace coserve
