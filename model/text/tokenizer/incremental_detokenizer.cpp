#include "model/text/tokenizer/incremental_detokenizer.hpp"

#include "model/text/tokenizer/utf8.hpp"

namespace coserve {

namespace {
constexpr std::size_t k_prompt_context = 5;  // prompt ids kept as decoding context

bool ends_with_replacement(const std::string& s) {
  return s.size() >= utf8::replacement_char.size() &&
         std::string_view(s).substr(s.size() - utf8::replacement_char.size()) ==
             utf8::replacement_char;
}
// "<0xAB>": a byte-fallback token. The ByteFallback decoder decodes a run of them as a whole
// (one invalid byte turns the entire run into U+FFFDs), so text is held back while a run is open.
bool is_byte_token(std::string_view t) {
  return t.size() == 6 && t.starts_with("<0x") && t.back() == '>';
}
}  // namespace

incremental_detokenizer::incremental_detokenizer(const tokenizer& tok, bool skip_special_tokens,
                                                 std::span<const int32_t> prompt_ids)
    : tok_(&tok), skip_special_(skip_special_tokens) {
  for (int32_t id : prompt_ids)
    if (!(skip_special_ && tok.is_special(id))) ids_.push_back(id);
  read_ = ids_.size();
  prefix_ = read_ > k_prompt_context ? read_ - k_prompt_context : 0;
}

std::string incremental_detokenizer::decode_range(std::size_t begin, std::size_t end) const {
  return tok_->decode(std::span<const int32_t>(ids_.data() + begin, end - begin), false);
}

// The window's text before the new ids. A window whose tokens decode to nothing (e.g. a lone "▁"
// that a Strip decoder removes as the leading space) would lose that text once more tokens
// follow, so the window is widened backwards until it decodes to something (or starts at 0).
std::string incremental_detokenizer::window_before() {
  std::string before = decode_range(prefix_, read_);
  while (before.empty() && prefix_ > 0 && prefix_ < read_) before = decode_range(--prefix_, read_);
  return before;
}

std::string incremental_detokenizer::push(int32_t id) {
  // Skipped ids change nothing in decode(), so they are dropped here.
  if (skip_special_ && tok_->is_special(id)) return {};
  if (id < 0 || id >= tok_->vocab_size()) return {};
  ids_.push_back(id);
  if (is_byte_token(tok_->id_to_token(id))) return {};
  const std::string before = window_before();
  const std::string now = decode_range(prefix_, ids_.size());
  if (now.size() <= before.size() || ends_with_replacement(now) ||
      now.compare(0, before.size(), before) != 0)
    return {};
  std::string piece = now.substr(before.size());
  prefix_ = read_;
  read_ = ids_.size();
  return piece;
}

std::string incremental_detokenizer::flush() {
  if (read_ == ids_.size()) return {};
  const std::string before = window_before();
  const std::string now = decode_range(prefix_, ids_.size());
  prefix_ = read_ = ids_.size();
  if (now.size() <= before.size() || now.compare(0, before.size(), before) != 0) return {};
  return now.substr(before.size());
}

}  // namespace coserve
