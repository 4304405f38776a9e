// Structured outputs: a request's output constrained to a JSON schema, any JSON object, a regular
// expression, a fixed set of choices or a grammar, on xgrammar's C++ core.
//
//   grammar_spec      what the client asked for (parsed by the HTTP layer)
//   grammar_compiler  spec -> compiled_grammar: xgrammar's compiler over our tokenizer's
//   vocabulary,
//                     with an LRU cache keyed by the spec; errors name the request field
//   grammar_matcher   one per sequence: fills the allowed-token bitmask before each sample and
//                     accepts the sampled token after it (rolls back on request)
//
// The bitmask is xgrammar's layout: 32-bit words, bit (i % 32) of word (i / 32) set when token i
// may come next. Tokens past the tokenizer's vocabulary (a model's padded rows) are never allowed.
//
// Threads: a compiled_grammar is immutable and shared by every sequence using it; a
// grammar_compiler and each grammar_matcher belong to one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace coserve {

class tokenizer;

struct grammar_spec {
  enum class kind : uint8_t {
    json_schema,  // text: the schema (JSON)
    json_object,  // any JSON object (text unused)
    regex,        // text: the pattern
    choice,       // choices: the output is exactly one of them
    grammar,      // text: xgrammar EBNF (GBNF-style, "root ::= ...") or, without "::=", Lark
  };
  kind type = kind::json_object;
  std::string text;
  std::vector<std::string> choices;
  bool any_whitespace = true;  // JSON: any whitespace between tokens (false: compact separators)
  std::string param;           // the request field it came from (error messages name it)

  // The cache key: kind, options and text.
  std::string key() const;
};

const char* to_string(grammar_spec::kind k) noexcept;

// A grammar compiled against one tokenizer. Opaque; shared (std::shared_ptr) and immutable.
class compiled_grammar;

struct grammar_compiler_stats {
  int64_t compiles = 0;  // grammars compiled (cache misses that succeeded)
  int64_t cache_hits = 0;
  int64_t failures = 0;          // specs rejected (invalid schema, pattern, grammar)
  double compile_seconds = 0.0;  // total time spent compiling
  int64_t cache_entries = 0;
  int64_t cache_bytes = 0;  // xgrammar's size estimate of the cached grammars
};

class grammar_compiler {
 public:
  // The vocabulary comes from `tok` (tokenizer::token_bytes; special tokens are never allowed
  // except `stop_ids`, which end the output once the grammar is complete); `tok` must outlive the
  // compiler. `vocab_size` is the model's logits width (at least the tokenizer's). `threads`:
  // xgrammar's compile threads. The cache holds at most `cache_entries` grammars and, beyond the
  // most recent one, at most `cache_bytes` of them (a grammar over a large vocabulary can take
  // megabytes). xgrammar's tokenizer info (megabytes for a large vocabulary) is built by the first
  // compile() or prepare(), not here.
  static result<std::unique_ptr<grammar_compiler>> create(const tokenizer& tok, int32_t vocab_size,
                                                          std::vector<int32_t> stop_ids,
                                                          size_t cache_entries = 256,
                                                          int threads = 1,
                                                          int64_t cache_bytes = int64_t{512} << 20);
  ~grammar_compiler();

  // The compiled grammar (from the cache when the same spec was compiled before). Errors: code
  // "invalid_request", message from the grammar engine, param = spec.param.
  result<std::shared_ptr<const compiled_grammar>> compile(const grammar_spec& spec);
  // Builds xgrammar's tokenizer info and compiler now (compile() does it when first called).
  result<void> prepare();

  const grammar_compiler_stats& stats() const noexcept { return stats_; }
  int32_t vocab_size() const noexcept { return vocab_size_; }

 private:
  grammar_compiler() = default;
  struct impl;
  std::unique_ptr<impl> impl_;
  grammar_compiler_stats stats_;
  int32_t vocab_size_ = 0;
};

// Words in the bitmask of a vocabulary.
inline int32_t grammar_mask_words(int32_t vocab_size) noexcept { return (vocab_size + 31) / 32; }

class grammar_matcher {
 public:
  explicit grammar_matcher(std::shared_ptr<const compiled_grammar> g);
  ~grammar_matcher();
  grammar_matcher(grammar_matcher&&) noexcept;
  grammar_matcher& operator=(grammar_matcher&&) noexcept;

  int32_t vocab_size() const noexcept;
  // Fills `mask` with the tokens allowed next: grammar_mask_words(vocab_size()) words, or fewer
  // for a narrower logits row (the words past the row are dropped; extra words are cleared). Once
  // the grammar has terminated (a stop token was accepted), only the stop tokens are allowed.
  void fill_mask(std::span<uint32_t> mask);
  // Advances by a sampled token; false (state unchanged) when the grammar does not allow it.
  bool accept(int32_t token);
  // Undoes the last `n` accepted tokens.
  void rollback(int32_t n);
  // A stop token was accepted: the output is complete.
  bool terminated() const;
  // Tokens accepted so far.
  int64_t accepted() const noexcept { return accepted_; }

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  int64_t accepted_ = 0;
};

// Sets logits[i] to -inf for every token whose bit is clear (and every i past the mask).
void apply_grammar_mask(std::span<float> logits, std::span<const uint32_t> mask);

}  // namespace coserve
