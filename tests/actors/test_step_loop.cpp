// The executor's launch / collect protocol through the actor graph (model/executor.hpp,
// actors/executor_actor.hpp): with the CPU executor, step N+1 is launched before step N is
// collected (two steps in flight, N+1's decode inputs resolved from N's sampled ids where the step
// runs). Every request's output must equal the path that runs one step at a time — the same tokens,
// text, finish reasons and counted tokens — under stop ids, max_tokens, stop strings, n > 1, seeded
// sampling and preemption: the token a finished sequence produced in the extra step is never
// streamed or counted.
#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <set>

#include "actors/engine.hpp"
#include "actors/sequence.hpp"
#include "tests/actors/pipeline_util.hpp"

using namespace coserve;
using namespace coserve::test;

namespace {

engine_config one_at_a_time_config() {
  engine_config cfg = small_config();
  cfg.make_executor = [](const engine_config& c) -> result<std::unique_ptr<executor>> {
    auto inner = make_default_executor(c);
    if (!inner) return inner.err();
    return std::unique_ptr<executor>(std::make_unique<one_step_at_a_time>(std::move(*inner)));
  };
  return cfg;
}

// Per request: each sample's tokens and text (by index), its finish reason.
struct sampled {
  std::map<int32_t, std::vector<int32_t>> tokens;
  std::map<int32_t, std::string> text;
  std::map<int32_t, finish_reason> finish;
  std::string error_code;
};

asio::awaitable<void> run_sampled(engine& eng, generate_request r, sampled& out) {
  auto s = co_await eng.submit(std::move(r));
  if (!s) {
    out.error_code = s.err().code;
    co_return;
  }
  while (auto ev = co_await (*s)->next()) {
    auto& t = out.tokens[ev->index];
    t.insert(t.end(), ev->token_ids.begin(), ev->token_ids.end());
    out.text[ev->index] += ev->text;
    if (ev->finish != finish_reason::none) out.finish[ev->index] = ev->finish;
  }
}

std::vector<sampled> run_samples(engine& eng, const std::vector<generate_request>& reqs) {
  std::vector<sampled> out(reqs.size());
  asio::io_context io;
  for (size_t i = 0; i < reqs.size(); ++i)
    asio::co_spawn(io, run_sampled(eng, reqs[i], out[i]), asio::detached);
  io.run();
  return out;
}

// Forwards launch / collect to the CPU executor, and makes its `fail_at`-th launched step fail
// where it runs (an invalid block copy put first: rejected before anything is written), while the
// step behind it may already be launched.
class fail_one_launch final : public executor {
 public:
  fail_one_launch(std::unique_ptr<executor> inner, int fail_at)
      : inner_(std::move(inner)), fail_at_(fail_at) {}
  result<step_result> execute(const step_plan& p) override { return inner_->execute(p); }
  void launch(step_plan p, const asio::any_io_executor& ex, std::function<void()> ready) override {
    if (!p.seqs.empty() && ++launched_ == fail_at_) {
      for (const scheduled_seq& s : p.seqs) failed_requests_.insert(actors::request_of(s.seq_id));
      p.block_copies.insert(p.block_copies.begin(), {-1, -1});
    }
    inner_->launch(std::move(p), ex, std::move(ready));
  }
  result<step_result> collect() override { return inner_->collect(); }
  int32_t max_in_flight() const override { return inner_->max_in_flight(); }
  bool can_launch_ahead(const step_plan& p) const override { return inner_->can_launch_ahead(p); }
  executor_info info() const override { return inner_->info(); }
  // Read after the engine has stopped (the executor actor's thread is the only writer).
  static std::set<uint64_t> failed_requests_;

 private:
  std::unique_ptr<executor> inner_;
  int fail_at_;
  int launched_ = 0;
};
std::set<uint64_t> fail_one_launch::failed_requests_;

}  // namespace

TEST_CASE(
    "step loop: a launched step that fails ends only its requests, the step launched behind it "
    "goes on",
    "[actors][step_loop][faults]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  const auto reqs = random_requests(24, 31, 30, 16);
  auto clean = engine::start(small_config());
  REQUIRE(clean);
  const auto want = run_all(**clean, reqs, true);
  (*clean)->stop();
  for (int fail_at : {2, 7}) {
    CAPTURE(fail_at);
    fail_one_launch::failed_requests_.clear();
    engine_config cfg = small_config();
    cfg.make_executor = [fail_at](const engine_config& c) -> result<std::unique_ptr<executor>> {
      auto inner = make_default_executor(c);
      if (!inner) return inner.err();
      return std::unique_ptr<executor>(
          std::make_unique<fail_one_launch>(std::move(*inner), fail_at));
    };
    auto eng = engine::start(cfg);
    REQUIRE(eng);
    const auto got = run_all(**eng, reqs, true);
    REQUIRE(wait_all_blocks_free(**eng));
    const engine_metrics m = (*eng)->metrics();
    CHECK((*eng)->healthy());
    (*eng)->stop();
    const auto failed = fail_one_launch::failed_requests_;
    REQUIRE(!failed.empty());
    int errors = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      CAPTURE(i);
      REQUIRE(got[i].error_code.empty());
      if (failed.count(got[i].id) != 0) {
        CHECK(got[i].finish == finish_reason::error);
        ++errors;
      } else {  // undisturbed, though its next step may have been launched behind the failed one
        CHECK(got[i].finish == finish_reason::length);
        CHECK(got[i].tokens == want[i].tokens);
      }
    }
    CHECK(errors == int(failed.size()));
    CHECK(errors < int(reqs.size()));
    CHECK(m.steps_launched_ahead > 0);
  }
}

TEST_CASE(
    "step loop: steps launched ahead give the outputs of one step at a time (stop ids, max_tokens, "
    "stop strings, n > 1, seeded sampling, preemption)",
    "[actors][step_loop]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  auto base = random_requests(40, 77, 40, 20);
  // The stop conditions come from the outputs themselves, so they fire mid-generation.
  auto plain = engine::start(one_at_a_time_config());
  REQUIRE(plain);
  const auto first = run_all(**plain, base, true);
  std::vector<generate_request> reqs;
  for (size_t i = 0; i < base.size(); ++i) {
    generate_request r = base[i];
    const auto& toks = first[i].tokens;
    REQUIRE(first[i].error_code.empty());
    switch (i % 5) {
      case 0:  // a stop id sampled mid-way (the step launched behind it has sampled one more)
        if (toks.size() >= 3) r.params.stop_token_ids = {toks[toks.size() / 2]};
        break;
      case 1:  // a stop string from the middle of the text
        if (first[i].text.size() >= 6)
          r.params.stop = {first[i].text.substr(first[i].text.size() / 2, 2)};
        break;
      case 2:  // n = 2, seeded sampling: the two samples differ, each reproducible
        r.params.n = 2;
        r.params.temperature = 0.9f;
        r.params.seed = 1000 + i;
        break;
      case 3:  // seeded sampling with top-k / top-p
        r.params.temperature = 0.7f;
        r.params.top_k = 20;
        r.params.top_p = 0.9f;
        r.params.seed = 7 + i;
        break;
      default:  // max_tokens of 1 and 2: the sequence ends at its first or second step
        r.params.max_tokens = 1 + int32_t(i % 2);
        break;
    }
    reqs.push_back(r);
  }
  const auto want = run_samples(**plain, reqs);
  REQUIRE(wait_all_blocks_free(**plain));
  const engine_metrics mp = (*plain)->metrics();
  (*plain)->stop();

  auto ahead = engine::start(small_config());
  REQUIRE(ahead);
  const auto first_ahead = run_all(**ahead, base, true);  // the same history as `plain`
  const auto got = run_samples(**ahead, reqs);
  REQUIRE(wait_all_blocks_free(**ahead));
  const engine_metrics ma = (*ahead)->metrics();
  (*ahead)->stop();

  int stopped = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i);
    REQUIRE(want[i].error_code.empty());
    CHECK(got[i].error_code.empty());
    CHECK(got[i].tokens == want[i].tokens);
    CHECK(got[i].text == want[i].text);
    CHECK(got[i].finish == want[i].finish);
    for (const auto& [idx, f] : want[i].finish) stopped += f == finish_reason::stop;
  }
  CHECK(stopped >= 10);  // the stop ids and strings did fire
  // Every token a client was sent is counted by the time its stream has ended, and no other.
  int64_t streamed = 0;
  for (const auto& c : first_ahead) streamed += int64_t(c.tokens.size());
  for (const auto& g : got)
    for (const auto& [idx, t] : g.tokens) streamed += int64_t(t.size());
  CHECK(ma.generation_tokens == streamed);
  // Tokens counted: those streamed, in both (the extra step's tokens never count).
  CHECK(ma.generation_tokens == mp.generation_tokens);
  CHECK(ma.prompt_tokens == mp.prompt_tokens);
  CHECK(mp.steps_launched_ahead == 0);
  CHECK(ma.steps_launched_ahead > 0);  // two steps really were in flight
  CHECK(ma.preemptions > 0);
}

TEST_CASE(
    "step loop: requests cancelled at random points while steps are launched ahead end with abort, "
    "nothing leaks",
    "[actors][step_loop]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  auto eng = engine::start(small_config());
  REQUIRE(eng);
  const auto reqs = random_requests(32, 5, 40, 24);
  std::mt19937 rng(3);
  std::vector<int> cancel_at;
  for (size_t i = 0; i < reqs.size(); ++i) cancel_at.push_back(i % 4 == 3 ? -1 : int(rng() % 12));
  const auto got = run_all(**eng, reqs, true, cancel_at);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].error_code.empty());
    if (cancel_at[i] < 0) {
      CHECK(got[i].finish == finish_reason::length);
      CHECK(got[i].tokens.size() == size_t(reqs[i].params.max_tokens));
    } else {
      CHECK((got[i].finish == finish_reason::abort || got[i].finish == finish_reason::length));
    }
  }
  REQUIRE(wait_all_blocks_free(**eng));
  const engine_metrics m = (*eng)->metrics();
  CHECK(m.steps_launched_ahead > 0);
  CHECK(m.requests_running == 0);
  (*eng)->stop();
}
