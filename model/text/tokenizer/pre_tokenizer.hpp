// tokenizer.json pre-tokenizers, flattened: a Sequence becomes its steps in order. Each step
// splits (and may rewrite) every piece the previous step produced; the last step's pieces are the
// words the model tokenizes. Supported: ByteLevel (add_prefix_space, use_regex; it must be the
// last step, since the model then works on raw bytes), Split (string or regex; Removed, Isolated,
// MergedWithPrevious, MergedWithNext, Contiguous; invert), Metaspace (prepend_scheme
// always/first/never or the older add_prefix_space, split), Digits, Whitespace, WhitespaceSplit,
// Punctuation, BertPreTokenizer, CharDelimiterSplit.
#pragma once

#include <simdjson.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "model/text/tokenizer/regex.hpp"

namespace coserve {

class pre_tokenizer {
 public:
  static result<pre_tokenizer> from_json(simdjson::dom::element node);

  // True when a ByteLevel step is present: the model must run in byte mode.
  bool byte_level() const noexcept { return byte_level_; }

  // Calls `sink` with every word of `text`, in order. The views live only during the call.
  // `start_len`: how many leading bytes of `text` come from the input's first character (its
  // normalized form, and anything a normalizer prepended to it); 0 when the text does not begin
  // the input. Metaspace's prepend_scheme "first" prepends to a piece that starts within them, as
  // Hugging Face's does (it asks whether the piece's original offset is 0): a first character
  // that NFKC expands into "1⁄2" makes three such pieces after a Digits split, while a text whose
  // leading whitespace a Strip normalizer removed has none.
  void split(std::string_view text, std::size_t start_len,
             const std::function<void(std::string_view)>& sink) const;

 private:
  enum class kind { byte_level, split, metaspace };
  enum class behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };
  struct step {
    kind k;
    regex re;  // split; byte_level with use_regex (GPT-2's pattern)
    bool use_regex = false;
    bool add_prefix_space = false;
    behavior how = behavior::isolated;
    bool invert = false;
    std::string replacement;  // metaspace
    int prepend = 0;          // metaspace: 0 never, 1 first, 2 always
    bool metaspace_split = true;
  };
  // Appends the step(s) of one tokenizer.json pre-tokenizer (a Sequence: each of its members).
  result<void> add(simdjson::dom::element node);
  // The steps of the pre-tokenizer types that take options: ByteLevel, Split, Metaspace, and
  // Punctuation (BertPreTokenizer's second step).
  static result<step> byte_level_step(simdjson::dom::element node);
  static result<step> split_json_step(simdjson::dom::element node);
  static result<step> metaspace_step(simdjson::dom::element node);
  static result<step> punctuation_step(std::string_view type, simdjson::dom::element node);
  static result<behavior> parse_behavior(std::string_view name);
  static result<step> split_step(std::string_view pattern, bool is_regex, behavior how,
                                 bool invert);
  void run(std::size_t index, std::string_view text, std::size_t start_len,
           const std::function<void(std::string_view)>& sink) const;
  void split_by(const step& s, std::string_view text, std::size_t start_len, std::size_t next,
                const std::function<void(std::string_view)>& sink) const;

  std::vector<step> steps_;
  bool byte_level_ = false;
};

}  // namespace coserve
