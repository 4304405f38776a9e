#include "model/text/tokenizer/wordpiece_model.hpp"

#include <algorithm>

namespace coserve {

wordpiece_model::wordpiece_model(string_id_map vocab, options opts)
    : vocab_(std::move(vocab)), opts_(std::move(opts)) {
  for (const auto& [text, id] : vocab_) longest_ = std::max(longest_, text.size());
}

void wordpiece_model::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  std::size_t chars = 0;
  for (char c : word) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  if (chars > opts_.max_input_chars_per_word) {
    out.push_back(opts_.unk_id);
    return;
  }
  const std::size_t first = out.size();
  std::string key;
  for (std::size_t start = 0; start < word.size();) {
    // From the longest part an entry could match (a character boundary at or before it).
    const std::size_t prefix = start == 0 ? 0 : opts_.continuing_subword_prefix.size();
    std::size_t end = word.size();
    if (longest_ < prefix) {
      end = start;  // nothing can match: unknown (below)
    } else if (end - start > longest_ - prefix) {
      end = start + (longest_ - prefix);
      while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;
    }
    int32_t found = -1;
    while (start < end) {
      const std::string_view part = word.substr(start, end - start);
      const string_id_map::const_iterator it =
          start == 0 ? vocab_.find(part)
                     : vocab_.find((key.assign(opts_.continuing_subword_prefix), key += part, key));
      if (it != vocab_.end()) {
        found = it->second;
        break;
      }
      // One character shorter.
      do --end;
      while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (found < 0) {  // a part nothing covers: the whole word is unknown
      out.resize(first);
      out.push_back(opts_.unk_id);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::optional<int32_t> wordpiece_model::find(std::string_view key) const {
  const auto it = vocab_.find(key);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

}  // namespace coserve
