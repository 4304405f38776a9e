#include "actors/speculation.hpp"

#include <algorithm>

#include "model/text/json/value.hpp"

namespace coserve::actors {

namespace {

error bad(const std::string& field, const std::string& why) {
  return error{"invalid_argument", "--speculative-config: '" + field + "' " + why, field};
}

}  // namespace

result<speculative_config> parse_speculative_config(std::string_view text) {
  auto parsed = json::parse(text);
  if (!parsed)
    return error{"invalid_argument",
                 "--speculative-config: not valid JSON: " + parsed.err().message, ""};
  const json::value& v = *parsed;
  if (!v.is_object())
    return error{"invalid_argument", "--speculative-config: expected a JSON object", ""};
  speculative_config c;
  bool have_min = false, have_max = false;
  auto int_field = [&](const std::string& key, const json::value& x, int32_t lo, int32_t hi,
                       int32_t& out) -> result<void> {
    if (!x.is_int()) return bad(key, "must be an integer");
    const int64_t n = x.as_int();
    if (n < lo || n > hi)
      return bad(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                          std::to_string(n));
    out = static_cast<int32_t>(n);
    return {};
  };
  for (const auto& [key, x] : v.as_object()) {
    result<void> r;
    if (key == "method") {
      if (!x.is_string()) return bad(key, "must be a string");
      if (x.as_string() != "ngram" && x.as_string() != "draft_model")
        return bad(key, "is \"" + x.as_string() +
                            "\"; the supported methods are \"ngram\" and \"draft_model\"");
      c.method = x.as_string();
    } else if (key == "model") {
      if (!x.is_string() || x.as_string().empty())
        return bad(key, "must be a model folder (a non-empty string)");
      c.draft_model = x.as_string();
    } else if (key == "num_speculative_tokens") {
      r = int_field(key, x, 1, 16, c.num_speculative_tokens);
    } else if (key == "prompt_lookup_min") {
      r = int_field(key, x, 1, 64, c.prompt_lookup_min);
      have_min = true;
    } else if (key == "prompt_lookup_max") {
      r = int_field(key, x, 1, 64, c.prompt_lookup_max);
      have_max = true;
    } else if (key == "disable_by_batch_size") {
      r = int_field(key, x, 0, 1 << 20, c.disable_by_batch_size);
    } else if (key == "backoff") {
      if (!x.is_bool()) return bad(key, "must be true or false");
      c.backoff = x.as_bool();
    } else {
      return bad(
          key,
          "is not a known key (known: method, model, num_speculative_tokens, prompt_lookup_min, "
          "prompt_lookup_max, disable_by_batch_size, backoff)");
    }
    if (!r) return r.err();
  }
  if (!c.draft_model.empty() && c.method.empty()) c.method = "draft_model";
  if (c.method.empty()) return bad("method", "is required (\"ngram\", or a draft \"model\")");
  if (c.method == "ngram" && !c.draft_model.empty())
    return bad("model",
               "is for a draft model; method \"ngram\" looks up the sequence's own tokens");
  if (c.method == "draft_model") {
    if (c.draft_model.empty())
      return bad("model", "is required with method \"draft_model\" (the draft's folder)");
    if (have_min || have_max)
      return bad(have_min ? "prompt_lookup_min" : "prompt_lookup_max",
                 "applies to method \"ngram\" only");
  }
  if (c.num_speculative_tokens == 0) return bad("num_speculative_tokens", "is required");
  if (c.method == "draft_model") return c;
  if (!have_min && !have_max)
    c.prompt_lookup_min = c.prompt_lookup_max = 5;
  else if (!have_min)
    c.prompt_lookup_min = c.prompt_lookup_max;
  else if (!have_max)
    c.prompt_lookup_max = c.prompt_lookup_min;
  if (c.prompt_lookup_min > c.prompt_lookup_max)
    return bad("prompt_lookup_min", "(" + std::to_string(c.prompt_lookup_min) +
                                        ") exceeds prompt_lookup_max (" +
                                        std::to_string(c.prompt_lookup_max) + ")");
  return c;
}

int32_t ngram_propose(const token_view& seq, int32_t min_n, int32_t max_n, int32_t k, int32_t skip,
                      std::vector<int32_t>& out) {
  const int32_t len = seq.size();
  if (k <= 0) return 0;
  const int32_t want =
      k + skip;  // tokens after the match: `skip` predicted ones, then the proposals
  for (int32_t n = std::min(max_n, len - 1); n >= std::max(1, min_n); --n) {
    // The pattern is seq[len - n, len); look for it ending before the end, latest first. The
    // latest match with k tokens after it wins; else the latest match (fewer tokens follow it:
    // in text that repeats with a short period the latest match sits right before the end).
    int32_t fallback = -1;
    for (int32_t end = len - 1; end >= n; --end) {  // a match occupies [end - n, end)
      int32_t i = 0;
      while (i < n && seq[end - n + i] == seq[len - n + i]) ++i;
      if (i < n) continue;
      if (len - end >= want) {
        fallback = end;
        break;
      }
      if (fallback < 0) fallback = end;
    }
    if (fallback < 0) continue;
    const int32_t take = std::min(want, len - fallback) - skip;
    if (take <= 0) continue;
    for (int32_t j = 0; j < take; ++j) out.push_back(seq[fallback + skip + j]);
    return take;
  }
  return 0;
}

}  // namespace coserve::actors
