// Speculative decoding through the engine on small demo models (the parser, the proposer and the
// back-off alone: test_speculation_core.cpp): greedy outputs identical with and without
// speculation (64 concurrent requests, preemption, chunked prefill, prefix caching, n > 1, stop
// ids, stop strings, max_tokens, logprobs, every KV block free afterwards), and seeded sampling
// drawing from the same distribution (chi-square on a 16-token vocabulary), not the same sequence.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "actors/engine.hpp"
#include "model/demo_model.hpp"
#include "runtime/trace.hpp"
#include "tests/actors/pipeline_util.hpp"
#include "tests/model/model_test_util.hpp"
#include "tests/skip.hpp"

using namespace coserve;
using namespace coserve::test;

namespace {

constexpr const char* k_ngram =
    R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":3})";

// Prompts that repeat themselves (the lookup finds matches) and some that do not.
std::vector<generate_request> repetitive_requests(int k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<generate_request> reqs;
  for (int i = 0; i < k; ++i) {
    std::vector<int32_t> ids;
    if (i % 4 == 3) {
      for (int j = 0; j < 20; ++j) ids.push_back(static_cast<int32_t>(rng() % 1000));
    } else {
      std::vector<int32_t> pattern;
      for (uint32_t j = 0; j < 3 + rng() % 4; ++j)
        pattern.push_back(static_cast<int32_t>(rng() % 1000));
      // Every eighth prompt is longer than a step's token budget (96): chunked prefill.
      const size_t len = i % 8 == 4 ? 110 : 30;
      while (ids.size() < len) ids.insert(ids.end(), pattern.begin(), pattern.end());
    }
    generate_request r;
    r.input = ids;
    r.params.temperature = 0.0f;
    r.params.max_tokens = 10 + static_cast<int32_t>(rng() % 60);
    r.params.ignore_eos = true;
    if (i % 8 == 1) r.params.n = 2;
    if (i % 5 == 2) r.params.logprobs = 2;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

struct full_output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text;
  finish_reason finish = finish_reason::none;
  std::string error;
};

asio::awaitable<void> run_collect(engine& eng, generate_request req,
                                  std::map<int32_t, full_output>& out) {
  auto s = co_await eng.submit(std::move(req));
  REQUIRE(s);
  while (auto ev = co_await (*s)->next()) {
    full_output& o = out[ev->index];
    o.tokens.insert(o.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
    o.logprobs.insert(o.logprobs.end(), ev->token_logprobs.begin(), ev->token_logprobs.end());
    o.text += ev->text;
    if (ev->finish != finish_reason::none) o.finish = ev->finish;
    if (!ev->error_message.empty()) o.error = ev->error_message;
  }
}

std::vector<std::map<int32_t, full_output>> run_collect_all(
    engine& eng, const std::vector<generate_request>& reqs) {
  std::vector<std::map<int32_t, full_output>> out(reqs.size());
  asio::io_context io;
  for (size_t i = 0; i < reqs.size(); ++i)
    asio::co_spawn(io, run_collect(eng, reqs[i], out[i]), asio::detached);
  io.run();
  return out;
}

// Two-sample chi-square statistic of two count vectors; `df` gets its degrees of freedom (cells
// with any count, minus one).
double chi2(const std::vector<int>& x, const std::vector<int>& y, int& df) {
  const double nx = std::accumulate(x.begin(), x.end(), 0.0),
               ny = std::accumulate(y.begin(), y.end(), 0.0);
  double stat = 0.0;
  df = -1;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] + y[i] == 0) continue;
    ++df;
    const double ex = nx * (x[i] + y[i]) / (nx + ny), ey = ny * (x[i] + y[i]) / (nx + ny);
    stat += (x[i] - ex) * (x[i] - ex) / ex + (y[i] - ey) * (y[i] - ey) / ey;
  }
  return stat;
}

}  // namespace

TEST_CASE("speculation: a malformed config or an executor that cannot verify is a startup error",
          "[speculation]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  engine_config cfg = small_config();
  cfg.speculative_config = R"({"method":"ngram","num_speculative_tokens":99})";
  auto e = engine::start(cfg);
  REQUIRE_FALSE(e);
  CHECK(e.err().param == "num_speculative_tokens");
  cfg.speculative_config = k_ngram;
  cfg.make_executor = [](const engine_config& c) -> result<std::unique_ptr<executor>> {
    struct plain : executor {
      std::unique_ptr<executor> inner;
      result<step_result> execute(const step_plan& p) override { return inner->execute(p); }
      executor_info info() const override {
        executor_info i = inner->info();
        i.verifies_proposals = false;
        return i;
      }
    };
    auto inner = make_default_executor(c);
    if (!inner) return inner.err();
    auto p = std::make_unique<plain>();
    p->inner = std::move(*inner);
    return std::unique_ptr<executor>(std::move(p));
  };
  e = engine::start(cfg);
  REQUIRE_FALSE(e);
  CHECK(e.err().message.find("does not verify proposals") != std::string::npos);
}

TEST_CASE(
    "speculation: greedy outputs equal plain decoding under concurrency, preemption, n > 1 and "
    "stop ids",
    "[speculation][pipeline]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  auto reqs = repetitive_requests(64, 91);
  engine_config plain_cfg = small_config();  // 40 blocks of 8: preemption happens
  engine_config spec_cfg = plain_cfg;
  spec_cfg.speculative_config = k_ngram;
  auto plain = engine::start(plain_cfg);
  auto spec = engine::start(spec_cfg);
  REQUIRE(plain);
  REQUIRE(spec);
  // Stop ids and stop strings from a first plain run: such requests stop at a token, or in the
  // middle of the text, they produced mid-way.
  const auto first = run_collect_all(**plain, reqs);
  for (size_t i = 0; i < reqs.size(); i += 3) {
    const auto& t = first[i].at(0).tokens;
    if (t.size() > 6) reqs[i].params.stop_token_ids = {t[t.size() / 2]};
  }
  for (size_t i = 1; i < reqs.size(); i += 3) {
    const std::string& text = first[i].at(0).text;
    if (text.size() > 12) reqs[i].params.stop = {text.substr(text.size() / 2, 3)};
  }
  const auto want = run_collect_all(**plain, reqs);
  const auto got = run_collect_all(**spec, reqs);
  int stopped = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    REQUIRE(got[i].size() == want[i].size());
    for (const auto& [index, w] : want[i]) {
      const full_output& g = got[i].at(index);
      CHECK(g.tokens == w.tokens);
      CHECK(g.text == w.text);
      INFO("errors: '" << w.error << "' / '" << g.error << "'");
      CHECK(g.finish == w.finish);
      if (w.finish == finish_reason::stop) ++stopped;
      CHECK(g.tokens.size() <= static_cast<size_t>(reqs[i].params.max_tokens));
      // Logprobs for every token, accepted proposals included.
      REQUIRE(g.logprobs.size() == (reqs[i].params.logprobs >= 0 ? g.tokens.size() : 0));
      for (size_t k = 0; k < g.logprobs.size(); ++k)
        CHECK(g.logprobs[k] == Approx(w.logprobs[k]).margin(2e-2));
    }
  }
  CHECK(stopped > 0);
  const engine_metrics m = (*spec)->metrics();
  CHECK(m.spec_drafts > 0);
  CHECK(m.spec_accepted_tokens > 0);
  CHECK(m.spec_accepted_tokens <= m.spec_draft_tokens);
  REQUIRE(m.spec_accepted_per_position.size() == 3);
  CHECK(m.spec_accepted_per_position[0] >= m.spec_accepted_per_position[1]);
  CHECK(m.spec_accepted_per_position[0] + m.spec_accepted_per_position[1] +
            m.spec_accepted_per_position[2] ==
        m.spec_accepted_tokens);
  CHECK(m.preemptions > 0);
  CHECK((*plain)->metrics().spec_drafts == 0);
  // Each verification is a span in its request's timeline: "verify A/P accepted".
  int verify_spans = 0;
  for (const auto& sp : (*spec)->tracer()->spans_of_track("scheduler"))
    if (std::string_view(sp.message).rfind("verify ", 0) == 0 && sp.request_id != 0) ++verify_spans;
  CHECK(verify_spans == m.spec_drafts);
  // Alone, one at a time, the same again.
  const auto alone =
      run_all(**spec, std::vector<generate_request>(reqs.begin(), reqs.begin() + 8), false);
  for (size_t i = 0; i < alone.size(); ++i)
    if (reqs[i].params.n == 1) CHECK(alone[i].tokens == want[i].at(0).tokens);
  REQUIRE(wait_all_blocks_free(**spec));
  REQUIRE(wait_all_blocks_free(**plain));
  (*spec)->stop();
  (*plain)->stop();
}

TEST_CASE("speculation: seeded sampling draws from the plain distribution, not the same sequence",
          "[speculation][pipeline]") {
  // A 16-token vocabulary without a tokenizer, so a few thousand samples fill every cell.
  static const test::temp_dir tmp("spec-small-vocab");
  demo_options o;
  o.copy_tokenizer = false;
  o.vocab_size = 16;
  o.hidden_size = 64;
  o.intermediate_size = 128;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.max_position_embeddings = 64;
  o.seed = 17;
  REQUIRE(make_demo_model(tmp.str(), o));
  engine_config cfg;
  cfg.model_dir = tmp.str();
  cfg.max_num_seqs = 64;
  cfg.block_size = 8;
  cfg.num_kv_blocks = 64 * 4;
  cfg.cpu_threads = 1;
  cfg.max_waiting = 4096;
  engine_config spec_cfg = cfg;
  // Proposals at every step ("backoff": false): the acceptance rule runs thousands of times.
  spec_cfg.speculative_config =
      R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":2,"backoff":false})";
  auto plain = engine::start(cfg);
  auto spec = engine::start(spec_cfg);
  REQUIRE(plain);
  REQUIRE(spec);
  // The prompt is the model's own greedy continuation of a few tokens, so the lookup finds the
  // tokens it tends to produce and proposals are often accepted (and often rejected: a verifier
  // biased either way would shift the counts past the bounds below).
  generate_request greedy;
  greedy.input = std::vector<int32_t>{1, 2, 3};
  greedy.params.temperature = 0.0f;
  greedy.params.max_tokens = 12;
  greedy.params.ignore_eos = true;
  const auto cont = run_all(**plain, {greedy}, false);
  std::vector<int32_t> prompt{1, 2, 3};
  prompt.insert(prompt.end(), cont[0].tokens.begin(), cont[0].tokens.end());
  const int samples = 3000, length = 4;
  std::vector<generate_request> reqs;
  for (int i = 0; i < samples; ++i) {
    generate_request r;
    r.input = prompt;
    r.params.temperature = 0.7f;
    r.params.max_tokens = length;
    r.params.ignore_eos = true;
    r.params.seed = static_cast<uint64_t>(i);
    reqs.push_back(std::move(r));
  }
  const auto a = run_all(**plain, reqs, true);
  const auto b = run_all(**spec, reqs, true);
  // Two-sample chi-square per output position over the 16 tokens (df <= 15; 0.1% critical value
  // 37.7), and on the pair of the first two tokens (df <= 255; 0.1% critical value 330.5).
  int same_sequences = 0;
  std::vector<int> pair_a(256, 0), pair_b(256, 0);
  for (int pos = 0; pos < length; ++pos) {
    std::vector<int> ca(16, 0), cb(16, 0);
    for (int i = 0; i < samples; ++i) {
      REQUIRE(a[size_t(i)].tokens.size() == size_t(length));
      REQUIRE(b[size_t(i)].tokens.size() == size_t(length));
      ++ca[size_t(a[size_t(i)].tokens[size_t(pos)])];
      ++cb[size_t(b[size_t(i)].tokens[size_t(pos)])];
    }
    int df = 0;
    const double stat = chi2(ca, cb, df);
    INFO("position " << pos << " chi2 " << stat << " df " << df);
    CHECK(df <= 15);
    CHECK(stat < 37.7);
  }
  for (int i = 0; i < samples; ++i) {
    ++pair_a[size_t(a[size_t(i)].tokens[0] * 16 + a[size_t(i)].tokens[1])];
    ++pair_b[size_t(b[size_t(i)].tokens[0] * 16 + b[size_t(i)].tokens[1])];
    if (a[size_t(i)].tokens == b[size_t(i)].tokens) ++same_sequences;
  }
  int df = 0;
  const double stat = chi2(pair_a, pair_b, df);
  INFO("pairs chi2 " << stat << " df " << df);
  CHECK(stat < 330.5);
  // Proposals were verified (and accepted), and the draws differ from plain sampling's.
  const engine_metrics m = (*spec)->metrics();
  INFO("drafts " << m.spec_drafts << " proposed " << m.spec_draft_tokens << " accepted "
                 << m.spec_accepted_tokens);
  CHECK(m.spec_accepted_tokens > samples / 10);
  CHECK(m.spec_draft_tokens - m.spec_accepted_tokens > samples / 10);
  CHECK(same_sequences < samples);
  REQUIRE(wait_all_blocks_free(**spec));
  REQUIRE(wait_all_blocks_free(**plain));
  (*spec)->stop();
  (*plain)->stop();
}

namespace {

std::filesystem::path small_model(const char* name, uint64_t seed, int32_t vocab) {
  static std::map<std::string, std::unique_ptr<test::temp_dir>> made;
  auto& slot = made[std::string(name) + std::to_string(seed)];
  if (!slot) {
    slot = std::make_unique<test::temp_dir>(name);
    demo_options o;
    if (vocab > 0) {
      o.copy_tokenizer = false;
      o.vocab_size = vocab;
      o.max_position_embeddings = 64;
    } else {
      o.max_position_embeddings = 256;
    }
    o.hidden_size = 64;
    o.intermediate_size = 128;
    o.num_layers = vocab > 0 ? 2 : 1;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.seed = seed;
    REQUIRE(make_demo_model(slot->str(), o));
  }
  return slot->str();
}

}  // namespace

TEST_CASE(
    "speculation with a draft model: greedy outputs equal plain decoding, and the model as its own "
    "draft "
    "accepts every proposal",
    "[speculation][pipeline]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  auto reqs = repetitive_requests(64, 93);
  // Requests sharing a 40-token prefix (five blocks): later ones reuse blocks that earlier ones
  // computed, some of them while the draft was not proposing for them.
  std::mt19937 rng(94);
  std::vector<int32_t> prefix;
  for (int j = 0; j < 40; ++j) prefix.push_back(static_cast<int32_t>(rng() % 1000));
  for (int i = 0; i < 12; ++i) {
    generate_request r;
    std::vector<int32_t> ids = prefix;
    for (int j = 0; j < i % 3; ++j) ids.push_back(static_cast<int32_t>(rng() % 1000));
    r.input = std::move(ids);
    r.params.temperature = 0.0f;
    r.params.max_tokens = 8 + i * 3;
    r.params.ignore_eos = true;
    reqs.push_back(std::move(r));
  }
  engine_config plain_cfg = small_config();
  auto plain = engine::start(plain_cfg);
  REQUIRE(plain);
  const auto want = run_collect_all(**plain, reqs);
  // A different, smaller draft (one layer, another seed) and the model itself; then the model
  // itself with proposals switched off while more than 4 sequences run, so the draft skips long
  // stretches of decode steps (and of blocks other sequences reuse) and catches up when proposals
  // resume: as its own draft it must still accept every proposal.
  const std::string other = small_model("spec-draft", 77, 0).string(), self = demo_dir().string();
  for (const auto& [draft, extra] : {std::pair<std::string, std::string>{other, ""},
                                     {self, ""},
                                     {self, R"(,"disable_by_batch_size":4)"}}) {
    INFO("draft " << draft << extra);
    engine_config cfg = plain_cfg;
    cfg.speculative_config =
        R"({"model":")" + draft + R"(","num_speculative_tokens":3)" + extra + "}";
    auto spec = engine::start(cfg);
    REQUIRE(spec);
    const auto got = run_collect_all(**spec, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      INFO("request " << i);
      for (const auto& [index, w] : want[i]) {
        CHECK(got[i].at(index).tokens == w.tokens);
        CHECK(got[i].at(index).finish == w.finish);
      }
    }
    const engine_metrics m = (*spec)->metrics();
    CHECK(m.spec_drafts > 0);
    if (draft == self)
      CHECK(m.spec_accepted_tokens == m.spec_draft_tokens);
    else
      CHECK(m.spec_accepted_tokens < m.spec_draft_tokens);
    REQUIRE(wait_all_blocks_free(**spec));
    (*spec)->stop();
  }
  REQUIRE(wait_all_blocks_free(**plain));
  (*plain)->stop();
}

TEST_CASE(
    "speculation with a draft model: a draft that keeps being rejected is not probed afresh by "
    "each new request",
    "[speculation][pipeline]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  engine_config cfg = small_config();
  cfg.speculative_config = R"({"model":")" + small_model("spec-draft", 77, 0).string() +
                           R"(","num_speculative_tokens":3})";
  auto spec = engine::start(cfg);
  REQUIRE(spec);
  std::mt19937 rng(5);
  std::vector<int64_t> drafts;  // verify steps so far, after each request
  for (int i = 0; i < 6; ++i) {
    generate_request r;
    std::vector<int32_t> ids;
    for (int j = 0; j < 20; ++j) ids.push_back(static_cast<int32_t>(rng() % 1000));
    r.input = std::move(ids);
    r.params.temperature = 0.0f;
    r.params.max_tokens = 40;
    r.params.ignore_eos = true;
    run_collect_all(**spec, {r});
    drafts.push_back((*spec)->metrics().spec_drafts);
  }
  INFO("verify steps after each request: " << Catch::Detail::stringify(drafts));
  // Another model's proposals are (almost) never accepted: the first request probes them at
  // decode steps 1, 3, 6, 11, 20, 37 (its own back-off doubling), and the requests after it start
  // backed off as far as those outcomes took the back-off (64 steps, more than they decode).
  CHECK(drafts[0] >= 4);
  CHECK(drafts[5] - drafts[1] <= 4);
  REQUIRE(wait_all_blocks_free(**spec));
  (*spec)->stop();
}

TEST_CASE(
    "speculation with a draft model: a vocabulary other than the model's is a startup error naming "
    "'model'",
    "[speculation]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  engine_config cfg = small_config();
  cfg.speculative_config = R"({"model":")" + small_model("spec-vocab16", 5, 16).string() +
                           R"(","num_speculative_tokens":2})";
  auto e = engine::start(cfg);
  REQUIRE_FALSE(e);
  CHECK(e.err().param == "model");
  CHECK(e.err().message.find("vocabulary of 16 tokens") != std::string::npos);
  cfg.speculative_config = R"({"model":"/nonexistent/draft","num_speculative_tokens":2})";
  e = engine::start(cfg);
  REQUIRE_FALSE(e);
  CHECK(e.err().param == "model");
}

TEST_CASE("speculation with a draft model: seeded sampling draws from the plain distribution",
          "[speculation][pipeline]") {
  // Another model of the same vocabulary as the draft: it samples its proposals from its own
  // distribution q, accepted with min(1, p/q), so both branches of the rule (and the draw from
  // max(0, p - q)) run thousands of times.
  const auto target = small_model("spec-target16", 17, 16);
  const auto draft = small_model("spec-draft16", 18, 16);
  engine_config cfg;
  cfg.model_dir = target;
  cfg.max_num_seqs = 64;
  cfg.block_size = 8;
  cfg.num_kv_blocks = 64 * 4;
  cfg.cpu_threads = 1;
  cfg.max_waiting = 4096;
  engine_config spec_cfg = cfg;
  spec_cfg.speculative_config =
      R"({"model":")" + draft.string() + R"(","num_speculative_tokens":3,"backoff":false})";
  auto plain = engine::start(cfg);
  auto spec = engine::start(spec_cfg);
  REQUIRE(plain);
  REQUIRE(spec);
  // Draft and target agree on few tokens (a few percent accepted), so the test needs many samples
  // to see a wrong residual draw: 12000 per side.
  const int samples = 12000, length = 4;
  std::vector<generate_request> reqs;
  for (int i = 0; i < samples; ++i) {
    generate_request r;
    r.input = std::vector<int32_t>{1, 2, 3, 4, 5};
    r.params.temperature = 0.8f;
    r.params.max_tokens = length;
    r.params.ignore_eos = true;
    r.params.seed = static_cast<uint64_t>(i);
    reqs.push_back(std::move(r));
  }
  // In rounds of 3000: the engine's mailboxes hold fewer than 12000 requests at once.
  auto run_rounds = [&](engine& eng) {
    std::vector<collected> out;
    for (size_t at = 0; at < reqs.size(); at += 3000) {
      const std::vector<generate_request> part(
          reqs.begin() + std::ptrdiff_t(at),
          reqs.begin() + std::ptrdiff_t(std::min(reqs.size(), at + 3000)));
      auto got = run_all(eng, part, true);
      out.insert(out.end(), got.begin(), got.end());
    }
    return out;
  };
  const auto a = run_rounds(**plain);
  const auto b = run_rounds(**spec);
  for (int pos = 1; pos < length; ++pos) {
    std::vector<int> ca(16, 0), cb(16, 0);
    for (int i = 0; i < samples; ++i) {
      REQUIRE(a[size_t(i)].tokens.size() == size_t(length));
      REQUIRE(b[size_t(i)].tokens.size() == size_t(length));
      ++ca[size_t(a[size_t(i)].tokens[size_t(pos)])];
      ++cb[size_t(b[size_t(i)].tokens[size_t(pos)])];
    }
    int df = 0;
    const double stat = chi2(ca, cb, df);
    INFO("position " << pos << " chi2 " << stat << " df " << df);
    CHECK(stat < 42.6);  // df <= 15, 0.01%
  }
  const engine_metrics m = (*spec)->metrics();
  INFO("proposed " << m.spec_draft_tokens << " accepted " << m.spec_accepted_tokens);
  CHECK(m.spec_accepted_tokens > samples / 10);
  CHECK(m.spec_draft_tokens - m.spec_accepted_tokens > samples / 10);
  REQUIRE(wait_all_blocks_free(**spec));
  REQUIRE(wait_all_blocks_free(**plain));
  (*spec)->stop();
  (*plain)->stop();
}
