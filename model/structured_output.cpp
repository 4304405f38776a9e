#include "model/structured_output.hpp"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <optional>

#include "model/cpu_kernels.hpp"
#include "model/json_schema_check.hpp"
#include "model/text/json/value.hpp"
#include "model/text/tokenizer/tokenizer.hpp"
#include "model/xgrammar_logging.hpp"
#include "runtime/lru_cache.hpp"

namespace coserve {

class compiled_grammar {
 public:
  compiled_grammar(xgrammar::CompiledGrammar g, int32_t vocab, int32_t tok_vocab,
                   std::vector<int32_t> stops)
      : grammar(std::move(g)),
        vocab_size(vocab),
        tokenizer_vocab(tok_vocab),
        stop_ids(std::move(stops)),
        bytes(int64_t(grammar.MemorySizeBytes())) {}
  xgrammar::CompiledGrammar grammar;
  int32_t vocab_size;       // logits width
  int32_t tokenizer_vocab;  // ids xgrammar knows (the rest are never allowed)
  std::vector<int32_t> stop_ids;
  int64_t bytes;  // xgrammar's estimate
};

const char* to_string(grammar_spec::kind k) noexcept {
  switch (k) {
    case grammar_spec::kind::json_schema:
      return "json_schema";
    case grammar_spec::kind::json_object:
      return "json_object";
    case grammar_spec::kind::regex:
      return "regex";
    case grammar_spec::kind::choice:
      return "choice";
    case grammar_spec::kind::grammar:
      return "grammar";
  }
  return "?";
}

std::string grammar_spec::key() const {
  std::string k = to_string(type);
  k += any_whitespace ? ":ws:" : ":compact:";
  if (type == kind::choice) {
    // Length-prefixed, so no two different lists share a key.
    for (const auto& c : choices) k += std::to_string(c.size()) + ":" + c;
  } else {
    k += text;
  }
  return k;
}

namespace {

// An xgrammar EBNF string literal: quotes, backslashes and control characters escaped; other
// bytes (UTF-8 included) as they are.
std::string ebnf_literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out += "\"";
  return out;
}

}  // namespace

struct grammar_compiler::impl {
  explicit impl(size_t entries) : cache(entries) {}
  // xgrammar's tokenizer info and compiler (megabytes for a large vocabulary), built by the first
  // compile: a server that never sees a structured request never pays for them.
  std::optional<xgrammar::GrammarCompiler> compiler;
  const tokenizer* tok = nullptr;
  int threads = 1;
  rt::lru_cache<std::string, std::shared_ptr<const compiled_grammar>> cache;
  std::vector<int32_t> stop_ids;
  int32_t tokenizer_vocab = 0;
  int32_t vocab_size = 0;
  int64_t byte_limit = 0;

  xgrammar::GrammarCompiler& get() {
    if (!compiler) {
      std::vector<std::string> vocab(static_cast<size_t>(tokenizer_vocab));
      for (int32_t i = 0; i < tokenizer_vocab; ++i) vocab[size_t(i)] = tok->token_bytes(i);
      // RAW: the strings are the tokens' bytes already. Ids past the tokenizer are padding rows.
      xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, vocab_size, stop_ids, false);
      compiler.emplace(info, threads, /*cache_enabled=*/false);
    }
    return *compiler;
  }
};

result<std::unique_ptr<grammar_compiler>> grammar_compiler::create(
    const tokenizer& tok, int32_t vocab_size, std::vector<int32_t> stop_ids, size_t cache_entries,
    int threads, int64_t cache_bytes) {
  const int32_t n = tok.vocab_size();
  if (vocab_size < n) vocab_size = n;
  std::vector<int32_t> stops;
  for (int32_t s : stop_ids)
    if (s >= 0 && s < n && std::find(stops.begin(), stops.end(), s) == stops.end())
      stops.push_back(s);
  if (stops.empty())
    return make_error(
        "invalid_argument",
        "structured outputs: the model has no end-of-sequence token in its vocabulary");
  std::unique_ptr<grammar_compiler> c(new grammar_compiler());
  c->impl_ = std::make_unique<impl>(cache_entries);
  c->impl_->tok = &tok;
  c->impl_->threads = std::max(1, threads);
  c->impl_->stop_ids = std::move(stops);
  c->impl_->tokenizer_vocab = n;
  c->impl_->vocab_size = vocab_size;
  c->impl_->byte_limit = cache_bytes;
  c->vocab_size_ = vocab_size;
  return c;
}

grammar_compiler::~grammar_compiler() = default;

result<void> grammar_compiler::prepare() {
  try {
    (void)impl_->get();
    return {};
  } catch (const std::exception& e) {
    return make_error("invalid_argument", std::string("structured outputs: ") + e.what());
  }
}

result<std::shared_ptr<const compiled_grammar>> grammar_compiler::compile(
    const grammar_spec& spec) {
  const std::string key = spec.key();
  if (auto* hit = impl_->cache.find(key)) {
    ++stats_.cache_hits;
    return *hit;
  }
  auto fail = [&](std::string why) -> result<std::shared_ptr<const compiled_grammar>> {
    ++stats_.failures;
    error e{"invalid_request", std::move(why), spec.param};
    return e;
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<xgrammar::CompiledGrammar> g;
  xgrammar_warning_capture warnings;  // xgrammar warns when it ignores a schema keyword
  bool one_of_exact = true;           // every oneOf proven disjoint: anyOf semantics are exact
  if (spec.type == grammar_spec::kind::json_schema) {
    auto schema = json::parse(spec.text);
    if (!schema) return fail("invalid json_schema: " + schema.err().message);
    if (std::string k = unsupported_schema_keyword(*schema); !k.empty())
      return fail("unsupported JSON schema feature: '" + k +
                  "' (the grammar engine cannot enforce it)");
    if (std::string k = ignored_beside_keyword(*schema); !k.empty())
      return fail("unsupported JSON schema feature: " + k);
    one_of_exact = one_of_branches_disjoint(*schema);
  }
  try {
    auto& c = impl_->get();
    switch (spec.type) {
      case grammar_spec::kind::json_schema:
        g.emplace(c.CompileJSONSchema(spec.text, spec.any_whitespace));
        break;
      case grammar_spec::kind::json_object:
        g.emplace(c.CompileJSONSchema(R"({"type": "object"})", spec.any_whitespace));
        break;
      case grammar_spec::kind::regex:
        g.emplace(c.CompileRegex(spec.text));
        break;
      case grammar_spec::kind::choice: {
        if (spec.choices.empty()) return fail("choice: at least one choice is required");
        std::string ebnf = "root ::= ";
        for (size_t i = 0; i < spec.choices.size(); ++i) {
          if (spec.choices[i].empty()) return fail("choice: choices must be non-empty strings");
          if (i) ebnf += " | ";
          ebnf += ebnf_literal(spec.choices[i]);
        }
        g.emplace(c.CompileGrammar(ebnf));
        break;
      }
      case grammar_spec::kind::grammar:
        if (spec.text.find("::=") != std::string::npos)
          g.emplace(c.CompileGrammar(spec.text));
        else
          g.emplace(c.CompileLark(spec.text));
        break;
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    // xgrammar's fatal errors read "[hh:mm:ss] /path/file.cc:123: message\n": keep the message.
    if (!what.empty() && what.front() == '[')
      if (auto close = what.find("] "); close != std::string::npos)
        if (auto colon = what.find(": ", close + 2); colon != std::string::npos)
          what = what.substr(colon + 2);
    while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
    return fail(std::string("invalid ") + to_string(spec.type) + ": " + what);
  }
  // A schema keyword xgrammar ignored would let outputs break the schema: refuse it, as vLLM
  // refuses schemas with features its grammar backend does not support.
  // xgrammar builds a oneOf it cannot prove disjoint as anyOf, and warns; where our own proof
  // (types, const/enum values, a discriminating required property, $refs followed) shows the
  // branches disjoint, anyOf accepts exactly what oneOf does and that warning is dropped.
  std::vector<std::string> unsupported;
  for (const auto& w : warnings.warnings())
    if (!(one_of_exact && w.rfind("oneOf with overlapping", 0) == 0)) unsupported.push_back(w);
  if ((spec.type == grammar_spec::kind::json_schema ||
       spec.type == grammar_spec::kind::json_object) &&
      !unsupported.empty()) {
    std::string why = "unsupported JSON schema feature: " + unsupported.front();
    for (size_t i = 1; i < unsupported.size() && i < 4; ++i)
      if (unsupported[i] != unsupported[i - 1]) why += "; " + unsupported[i];
    return fail(std::move(why));
  }
  stats_.compile_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++stats_.compiles;
  auto out = std::make_shared<const compiled_grammar>(std::move(*g), vocab_size_,
                                                      impl_->tokenizer_vocab, impl_->stop_ids);
  // Room by count, then by bytes (the newest grammar always stays); requests holding an evicted
  // grammar keep it alive until they end.
  auto& cache = impl_->cache;
  while (cache.size() >= cache.capacity() ||
         (!cache.empty() && stats_.cache_bytes + out->bytes > impl_->byte_limit)) {
    auto old = cache.pop_least_recent();
    stats_.cache_bytes -= old->second->bytes;
  }
  cache.insert(key, out);
  stats_.cache_bytes += out->bytes;
  stats_.cache_entries = int64_t(cache.size());
  return std::shared_ptr<const compiled_grammar>(out);
}

struct grammar_matcher::impl {
  explicit impl(std::shared_ptr<const compiled_grammar> g)
      : grammar(std::move(g)), matcher(grammar->grammar, grammar->stop_ids) {}
  std::shared_ptr<const compiled_grammar> grammar;
  xgrammar::GrammarMatcher matcher;
};

grammar_matcher::grammar_matcher(std::shared_ptr<const compiled_grammar> g)
    : impl_(std::make_unique<impl>(std::move(g))) {}
grammar_matcher::~grammar_matcher() = default;
grammar_matcher::grammar_matcher(grammar_matcher&&) noexcept = default;
grammar_matcher& grammar_matcher::operator=(grammar_matcher&&) noexcept = default;

int32_t grammar_matcher::vocab_size() const noexcept { return impl_->grammar->vocab_size; }

void grammar_matcher::fill_mask(std::span<uint32_t> mask) {
  const int32_t vocab = impl_->grammar->vocab_size;
  const size_t words = size_t(grammar_mask_words(vocab));
  if (mask.size() < words) {
    // A narrower logits row (a model with fewer rows than its tokenizer has ids): fill the whole
    // mask aside and keep the words the row has.
    std::vector<uint32_t> full(words);
    fill_mask(full);
    std::copy_n(full.begin(), mask.size(), mask.begin());
    return;
  }
  std::fill(mask.begin(), mask.end(), 0u);
  auto stop_only = [&] {
    for (int32_t s : impl_->grammar->stop_ids) mask[size_t(s) / 32] |= 1u << (s % 32);
  };
  if (impl_->matcher.IsTerminated()) return stop_only();
  int64_t shape[2] = {1, int64_t(words)};
  DLTensor t{};
  t.data = mask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  try {
    impl_->matcher.FillNextTokenBitmask(&t, 0);
  } catch (const std::exception& e) {
    // A grammar engine failure mid-output ends the output (only stop tokens) rather than the step.
    std::fprintf(stderr, "coserve: structured output: token mask failed (%s); ending the output\n",
                 e.what());
    std::fill(mask.begin(), mask.end(), 0u);
    return stop_only();
  }
  // Ids past the tokenizer's vocabulary (padded logits rows) are never allowed.
  for (int32_t i = impl_->grammar->tokenizer_vocab; i < vocab; ++i)
    mask[size_t(i) / 32] &= ~(1u << (i % 32));
}

bool grammar_matcher::accept(int32_t token) {
  if (token < 0 || token >= impl_->grammar->tokenizer_vocab) return false;
  try {
    if (!impl_->matcher.AcceptToken(token)) return false;
  } catch (const std::exception&) {
    return false;
  }
  ++accepted_;
  return true;
}

void grammar_matcher::rollback(int32_t n) {
  n = int32_t(std::min<int64_t>(n, accepted_));
  if (n <= 0) return;
  impl_->matcher.Rollback(n);
  accepted_ -= n;
}

bool grammar_matcher::terminated() const { return impl_->matcher.IsTerminated(); }

void apply_grammar_mask(std::span<float> logits, std::span<const uint32_t> mask) {
  const size_t n = logits.size();
  const size_t covered = std::min(n, mask.size() * 32);
  mask_logits(logits.data(), mask.data(), covered);
  std::fill(logits.begin() + std::ptrdiff_t(covered), logits.end(), -INFINITY);
}

}  // namespace coserve
