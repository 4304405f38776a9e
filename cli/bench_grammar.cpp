// `coserve bench grammar TOKENIZER [--walks N] [--max-tokens T] [--seed S]`: the structured-output
// costs for one tokenizer's vocabulary, on one thread:
//   - compile time of each grammar in a fixed set (JSON schemas of several shapes, json_object, a
//     regex, a choice), then the same specs again: cache hits and their time;
//   - mask time per token: for each grammar, N random walks (random logits, sampled under the mask
//     as the sampler does, tokens that close strings and objects boosted so walks end) of at most T
//     tokens; per token, the time xgrammar takes to fill the bitmask and the time to apply it to a
//     logits row.
// Prints one JSON object per grammar, then a summary line with p50/p99/max over every token
// (mask_us = fill + apply, the cost the sampler adds per token and sequence).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "model/sampler.hpp"
#include "model/structured_output.hpp"
#include "model/text/tokenizer/tokenizer.hpp"

namespace coserve::cli {
namespace {

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5));
  return v[i];
}

struct named_spec {
  const char* name;
  grammar_spec spec;
};

std::vector<named_spec> bench_specs() {
  auto schema = [](const char* text) {
    grammar_spec s;
    s.type = grammar_spec::kind::json_schema;
    s.text = text;
    return s;
  };
  std::vector<named_spec> v;
  v.push_back({"flat_object", schema(R"({"type":"object","properties":{"name":{"type":"string"},
      "age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","pattern":"^[a-z0-9.]+@[a-z]+\\.[a-z]{2,3}$"},
      "active":{"type":"boolean"}},"required":["name","age","email","active"],"additionalProperties":false})")});
  v.push_back(
      {"nested_arrays", schema(R"({"type":"object","properties":{"items":{"type":"array","items":{
      "type":"object","properties":{"sku":{"type":"string","maxLength":12},"qty":{"type":"integer","minimum":1},
      "price":{"type":"number"},"tags":{"type":"array","items":{"enum":["new","sale","gift"]},"maxItems":3}},
      "required":["sku","qty","price"]},"maxItems":5},"total":{"type":"number"}},"required":["items","total"]})")});
  v.push_back({"defs_anyof",
               schema(R"({"$defs":{"point":{"type":"object","properties":{"x":{"type":"number"},
      "y":{"type":"number"}},"required":["x","y"]},"shape":{"anyOf":[{"type":"object","properties":{"circle":{
      "type":"object","properties":{"center":{"$ref":"#/$defs/point"},"r":{"type":"number","minimum":0}},
      "required":["center","r"]}},"required":["circle"]},{"type":"object","properties":{"polygon":{"type":"array",
      "items":{"$ref":"#/$defs/point"},"minItems":3,"maxItems":6}},"required":["polygon"]}]}},
      "type":"object","properties":{"shapes":{"type":"array","items":{"$ref":"#/$defs/shape"},"maxItems":3},
      "label":{"type":"string","maxLength":20}},"required":["shapes"]})")});
  v.push_back({"tool_call", schema(R"({"type":"object","properties":{"name":{"const":"get_weather"},
      "arguments":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},
      "days":{"type":"integer","minimum":1,"maximum":14}},"required":["city","unit"],"additionalProperties":false}},
      "required":["name","arguments"],"additionalProperties":false})")});
  grammar_spec obj;
  obj.type = grammar_spec::kind::json_object;
  v.push_back({"json_object", obj});
  grammar_spec re;
  re.type = grammar_spec::kind::regex;
  re.text = R"((\+1 )?\(?[0-9]{3}\)?[ -][0-9]{3}-[0-9]{4}( ext\. [0-9]{1,5})?)";
  v.push_back({"regex_phone", re});
  grammar_spec ch;
  ch.type = grammar_spec::kind::choice;
  ch.choices = {"positive", "negative", "neutral", "mixed"};
  v.push_back({"choice", ch});
  return v;
}

struct bench_grammar_args {
  std::string path;
  int walks = 8, max_tokens = 256;
  uint64_t seed = 1;
};

// Returns 0 with `a` filled in, -1 after printing the help (exit 0), else the exit status.
int parse_bench_grammar_args(int argc, char** argv, bench_grammar_args& b) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: coserve bench grammar TOKENIZER [--walks N] [--max-tokens T] [--seed S]\n"
          "  structured-output costs over TOKENIZER's vocabulary (a tokenizer.json or its "
          "folder):\n"
          "  grammar compile time and cache hits, and the per-token time to fill and apply the\n"
          "  token bitmask along N random walks of at most T tokens per grammar (default 8, "
          "256)\n");
      return -1;
    }
    if (a == "--walks" && i + 1 < argc)
      b.walks = std::stoi(argv[++i]);
    else if (a == "--max-tokens" && i + 1 < argc)
      b.max_tokens = std::stoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc)
      b.seed = std::stoull(argv[++i]);
    else if (!a.starts_with("--") && b.path.empty())
      b.path = a;
    else {
      std::fprintf(stderr, "coserve bench grammar: unexpected argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (b.path.empty()) {
    std::fprintf(stderr, "usage: coserve bench grammar TOKENIZER [--walks N] [--max-tokens T]\n");
    return 2;
  }
  return 0;
}

// The ids that end a walk: the tokenizer's EOS and the common end-of-turn tokens it has.
std::vector<int32_t> stop_ids(const tokenizer& tok) {
  std::vector<int32_t> stops;
  if (auto e = tok.eos_id()) stops.push_back(*e);
  for (const char* name : {"<|endoftext|>", "<|im_end|>", "</s>", "<|eot_id|>"})
    if (auto id = tok.token_to_id(name);
        id && std::find(stops.begin(), stops.end(), *id) == stops.end())
      stops.push_back(*id);
  return stops;
}

// Tokens that close strings and containers, boosted in the walks so that they end (random logits
// rarely pick them).
std::vector<int32_t> closer_ids(const tokenizer& tok, int32_t vocab) {
  std::vector<int32_t> closers;
  for (int32_t id = 0; id < vocab; ++id) {
    const std::string b = tok.token_bytes(id);
    if (b.find_first_of("\"}]") != std::string::npos) closers.push_back(id);
  }
  return closers;
}

// The per-token times of the walks over one grammar, in microseconds.
struct walk_times {
  std::vector<double> fill, apply, mask;  // mask = fill + apply
  int finished = 0;                       // walks the grammar terminated
  int64_t tokens = 0;
};

// The random logits of every walk, one sequence over all grammars (from --seed).
struct logit_source {
  std::mt19937_64 rng;
  std::normal_distribution<float> nd{0.0f, 3.0f};
  float next() { return nd(rng); }
};

// b.walks walks of random logits, sampled under the grammar's mask as the sampler does; false
// when the matcher refuses the token the mask allowed.
bool walk(const std::shared_ptr<const compiled_grammar>& g, const bench_grammar_args& b,
          const std::vector<int32_t>& closers, int32_t vocab, logit_source& random,
          walk_times& out) {
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<uint32_t> mask(size_t(grammar_mask_words(vocab)));
  for (int w = 0; w < b.walks; ++w) {
    grammar_matcher m(g);
    for (int t = 0; t < b.max_tokens; ++t) {
      for (float& l : logits) l = random.next();
      for (int32_t c : closers) logits[size_t(c)] += 8.0f;
      auto f0 = clock_type::now();
      m.fill_mask(mask);
      out.fill.push_back(us_since(f0));
      auto a0 = clock_type::now();
      apply_grammar_mask(logits, mask);
      out.apply.push_back(us_since(a0));
      out.mask.push_back(out.fill.back() + out.apply.back());
      const int32_t tok_id =
          int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      ++out.tokens;
      if (!m.accept(tok_id)) return false;
      if (m.terminated()) {
        ++out.finished;
        break;
      }
    }
  }
  return true;
}

// What every grammar adds to the summary.
struct bench_totals {
  std::vector<double> fill, apply, mask, compile_ms, hit_us;
};

// One grammar: its compile time, a cache hit's, and the walks; prints its JSON line.
bool bench_one(grammar_compiler& c, const named_spec& ns, const bench_grammar_args& b,
               const std::vector<int32_t>& closers, int32_t vocab, logit_source& random,
               bench_totals& totals) {
  auto t0 = clock_type::now();
  auto g = c.compile(ns.spec);
  const double cms = us_since(t0) / 1e3;
  if (!g) {
    std::fprintf(stderr, "coserve bench grammar: %s: %s\n", ns.name, g.err().message.c_str());
    return false;
  }
  t0 = clock_type::now();
  auto again = c.compile(ns.spec);
  const double hus = us_since(t0);
  if (!again || again->get() != g->get()) return false;
  totals.compile_ms.push_back(cms);
  totals.hit_us.push_back(hus);

  walk_times w;
  if (!walk(*g, b, closers, vocab, random, w)) return false;
  std::printf(
      "{\"bench\":\"grammar\",\"grammar\":\"%s\",\"vocab\":%d,\"compile_ms\":%.3f,\"cache_hit_"
      "us\":%.2f,"
      "\"cache_bytes_after\":%lld,"
      "\"walks\":%d,\"finished\":%d,\"tokens\":%lld,\"fill_us_p50\":%.2f,\"fill_us_p99\":%.2f,"
      "\"fill_us_max\":%.2f,\"apply_us_p50\":%.2f}\n",
      ns.name, vocab, cms, hus, static_cast<long long>(c.stats().cache_bytes), b.walks, w.finished,
      static_cast<long long>(w.tokens), percentile(w.fill, 0.5), percentile(w.fill, 0.99),
      percentile(w.fill, 1.0), percentile(w.apply, 0.5));
  totals.fill.insert(totals.fill.end(), w.fill.begin(), w.fill.end());
  totals.apply.insert(totals.apply.end(), w.apply.begin(), w.apply.end());
  totals.mask.insert(totals.mask.end(), w.mask.begin(), w.mask.end());
  return true;
}

void print_summary(const std::string& path, int32_t vocab, double tokenizer_info_ms,
                   const grammar_compiler_stats& st, const bench_totals& t) {
  std::string name = path;
  for (char& ch : name)
    if (ch == '"' || ch == '\\') ch = '_';
  std::printf(
      "{\"bench\":\"grammar_summary\",\"tokenizer\":\"%s\",\"vocab\":%d,\"tokenizer_info_ms\":%.1f,"
      "\"grammars\":%zu,\"compile_ms_p50\":%.2f,\"compile_ms_max\":%.2f,\"cache_hit_us_p50\":%.2f,"
      "\"cache_hit_rate\":%.3f,\"tokens\":%zu,\"mask_us_p50\":%.2f,\"mask_us_p99\":%.2f,\"mask_us_"
      "max\":%.2f,"
      "\"fill_us_p50\":%.2f,\"fill_us_p99\":%.2f,\"apply_us_p50\":%.2f,\"apply_us_p99\":%.2f}\n",
      name.c_str(), vocab, tokenizer_info_ms, t.compile_ms.size(), percentile(t.compile_ms, 0.5),
      percentile(t.compile_ms, 1.0), percentile(t.hit_us, 0.5),
      double(st.cache_hits) / double(std::max<int64_t>(1, st.cache_hits + st.compiles)),
      t.fill.size(), percentile(t.mask, 0.5), percentile(t.mask, 0.99), percentile(t.mask, 1.0),
      percentile(t.fill, 0.5), percentile(t.fill, 0.99), percentile(t.apply, 0.5),
      percentile(t.apply, 0.99));
}

}  // namespace

int bench_grammar(int argc, char** argv) {
  bench_grammar_args b;
  if (int rc = parse_bench_grammar_args(argc, argv, b); rc != 0) return rc == -1 ? 0 : rc;
  auto tok = tokenizer::load(b.path);
  if (!tok) {
    std::fprintf(stderr, "coserve bench grammar: %s\n", tok.err().message.c_str());
    return 1;
  }
  const std::vector<int32_t> stops = stop_ids(*tok);
  const int32_t vocab = tok->vocab_size();
  const auto t_info = clock_type::now();
  auto gc = grammar_compiler::create(*tok, vocab, stops, 256, 1);
  if (gc) {
    if (auto r = (*gc)->prepare(); !r) gc = r.err();  // xgrammar's tokenizer info, timed here
  }
  if (!gc) {
    std::fprintf(stderr, "coserve bench grammar: %s\n", gc.err().message.c_str());
    return 1;
  }
  const double tokenizer_info_ms = us_since(t_info) / 1e3;
  const std::vector<int32_t> closers = closer_ids(*tok, vocab);
  bench_totals totals;
  logit_source random{std::mt19937_64(b.seed)};
  for (const named_spec& ns : bench_specs())
    if (!bench_one(**gc, ns, b, closers, vocab, random, totals)) return 1;
  print_summary(b.path, vocab, tokenizer_info_ms, (*gc)->stats(), totals);
  return 0;
}

}  // namespace coserve::cli
