// Faults inside the serving graph, injected through the engine's seams (an executor factory that
// wraps the CPU executor, and the per-handler fault hook): a failed step fails only its requests,
// its blocks never enter the prefix cache, the executor holds no state for sequences whose requests
// ended (also those preempted in a failed step), a device that keeps failing (or stalls) fails the
// engine, and a throwing handler in any actor ends what that actor held. Nothing hangs: every
// scenario runs under a deadline.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "actors/engine.hpp"
#include "model/cpu_executor.hpp"
#include "model/demo_model.hpp"
#include "model/executor.hpp"
#include "tests/actors/pipeline_util.hpp"
#include "tests/model/model_test_util.hpp"

using namespace coserve;
using namespace std::chrono_literals;

namespace {

// What the test tells the executor to do, and what it saw.
struct fault_plan {
  std::atomic<int> fail_at{-1};  // fail the step with this ordinal (1-based, steps that compute)
  std::atomic<bool> fail_every{false};    // fail every step that computes
  std::atomic<bool> fatal{false};         // failures are executor_fatal
  std::atomic<bool> skip_forward{true};   // a failing step writes no K/V at all
  std::atomic<int> fail_period{0};        // > 0: fail every step whose ordinal is a multiple of it
  std::atomic<bool> fail_notices{false};  // fail every step that also drops sequences (preemption)
  std::atomic<bool> inner_fails{
      false};                     // the CPU executor itself fails the step (before any write)
  std::atomic<int64_t> live{-1};  // the CPU executor's live sequences after its last step
  std::atomic<int> stall_at{-1};  // block this step until release()
  std::atomic<int> steps{0};
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  std::set<uint64_t> failed_requests;  // request ids with a sequence in a failed step

  void release() {
    {
      std::lock_guard lock(mu);
      released = true;
    }
    cv.notify_all();
  }
};

class faulty_executor final : public executor {
 public:
  faulty_executor(std::unique_ptr<executor> inner, std::shared_ptr<fault_plan> plan)
      : inner_(std::move(inner)),
        plan_(std::move(plan)),
        cpu_(dynamic_cast<cpu_executor*>(inner_.get())) {}
  executor_info info() const override { return inner_->info(); }
  result<step_result> execute(const step_plan& p) override {
    auto r = execute_faulty(p);
    if (cpu_) plan_->live = static_cast<int64_t>(cpu_->num_live_sequences());
    return r;
  }

 private:
  result<step_result> execute_faulty(const step_plan& p) {
    if (p.seqs.empty()) return inner_->execute(p);
    const int k = plan_->steps.fetch_add(1) + 1;
    if (k == plan_->stall_at.load()) {
      std::unique_lock lock(plan_->mu);
      plan_->cv.wait(lock, [&] { return plan_->released; });
    }
    const int period = plan_->fail_period.load();
    if (k == plan_->fail_at.load() || plan_->fail_every.load() || (period > 0 && k % period == 0) ||
        (plan_->fail_notices.load() && !p.finished.empty())) {
      {
        std::lock_guard lock(plan_->mu);
        for (const auto& s : p.seqs) plan_->failed_requests.insert(s.seq_id >> 16);
      }
      if (plan_->inner_fails.load()) {
        step_plan bad = p;  // an invalid block copy first: rejected before anything is written
        bad.block_copies.insert(bad.block_copies.begin(), {-1, -1});
        (void)inner_->execute(bad);
      } else if (!plan_->skip_forward.load()) {
        (void)inner_->execute(p);
      } else {  // the step's notices still reach the executor, as from a device that failed it
        step_plan notices;
        notices.new_seqs = p.new_seqs;
        notices.finished = p.finished;
        (void)inner_->execute(notices);
      }
      return make_error(plan_->fatal.load() ? k_executor_fatal : "injected",
                        "injected failure at step " + std::to_string(k));
    }
    return inner_->execute(p);
  }

  std::unique_ptr<executor> inner_;
  std::shared_ptr<fault_plan> plan_;
  cpu_executor* cpu_;  // inner_ when it is the CPU executor, else nullptr
};

std::filesystem::path fault_model_dir() {
  static const std::filesystem::path dir = [] {
    // Per process: ctest runs this binary's cases as parallel processes, and a shared folder
    // would be rewritten while another process has its weights mapped.
    static const test::temp_dir tmp("faults-model");
    test::make_small_demo_model(tmp.str(), 9);
    return std::filesystem::path(tmp.str());
  }();
  return dir;
}

engine_config fault_config(const std::shared_ptr<fault_plan>& plan) {
  engine_config cfg;
  cfg.model_dir = fault_model_dir();
  cfg.skip_tokenizer_init = true;  // token ids in and out: no shared test data needed
  cfg.max_num_seqs = 8;
  cfg.max_num_batched_tokens = 64;
  cfg.block_size = 8;
  cfg.num_kv_blocks = 64;
  cfg.cpu_threads = 1;
  if (plan)
    cfg.make_executor = [plan](const engine_config& c) -> result<std::unique_ptr<executor>> {
      auto inner = make_default_executor(c);
      if (!inner) return inner.err();
      return std::unique_ptr<executor>(new faulty_executor(std::move(*inner), plan));
    };
  return cfg;
}

struct outcome {
  uint64_t id = 0;
  std::vector<int32_t> tokens;
  finish_reason finish = finish_reason::none;
  std::string error_message;
  std::string submit_error;  // code, when submit failed
  int32_t cached = 0;
  bool done = false;
};

// cancel_after > 0: the client goes away (cancel()) after that many events.
asio::awaitable<void> run_one(engine& eng, generate_request req, outcome& out,
                              int cancel_after = 0) {
  auto s = co_await eng.submit(std::move(req));
  if (!s) {
    out.submit_error = s.err().code;
    out.done = true;
    co_return;
  }
  out.id = (*s)->id();
  int events = 0;
  while (auto ev = co_await (*s)->next()) {
    if (++events == cancel_after) (*s)->cancel();
    out.tokens.insert(out.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
    out.cached = std::max(out.cached, ev->cached_prompt_tokens);
    if (ev->finish != finish_reason::none) {
      out.finish = ev->finish;
      out.error_message = ev->error_message;
    }
  }
  out.done = true;
}

// Runs every request concurrently; fails the test (instead of hanging) past the deadline.
std::vector<outcome> run_all(engine& eng, const std::vector<generate_request>& reqs,
                             std::chrono::seconds deadline = 60s) {
  std::vector<outcome> out(reqs.size());
  asio::io_context io;
  for (size_t i = 0; i < reqs.size(); ++i)
    asio::co_spawn(io, run_one(eng, reqs[i], out[i]), asio::detached);
  io.run_for(deadline);
  for (size_t i = 0; i < out.size(); ++i) {
    CAPTURE(i);
    REQUIRE(out[i].done);  // a stream that never ended is a hang
  }
  return out;
}

generate_request request(uint32_t seed, int prompt_len, int max_tokens) {
  std::mt19937 rng(seed);
  generate_request r;
  std::vector<int32_t> ids;
  for (int j = 0; j < prompt_len; ++j) ids.push_back(static_cast<int32_t>(rng() % 1000));
  r.input = ids;
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

std::vector<generate_request> requests(int k, uint32_t seed) {
  std::vector<generate_request> v;
  std::mt19937 rng(seed);
  for (int i = 0; i < k; ++i)
    v.push_back(request(seed * 100 + static_cast<uint32_t>(i), 4 + static_cast<int>(rng() % 40),
                        4 + static_cast<int>(rng() % 16)));
  return v;
}

bool wait_all_blocks_free(engine& eng) {
  for (int i = 0; i < 3000; ++i) {
    const engine_metrics m = eng.metrics();
    if (m.kv_blocks_free == m.kv_blocks_total && m.open_requests == 0) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// Greedy outputs of the requests on a healthy engine, each alone.
std::vector<outcome> reference(const std::vector<generate_request>& reqs) {
  auto eng = engine::start(fault_config(nullptr));
  REQUIRE(eng);
  std::vector<outcome> out;
  for (const auto& r : reqs) out.push_back(run_all(**eng, {r})[0]);
  (*eng)->stop();
  return out;
}

}  // namespace

TEST_CASE("faults: a failed step ends only the requests scheduled in it", "[actors][faults]") {
  const auto reqs = requests(24, 3);
  const auto ref = reference(reqs);
  for (int fail_at : {1, 4, 9}) {
    CAPTURE(fail_at);
    auto plan = std::make_shared<fault_plan>();
    plan->fail_at = fail_at;
    auto eng = engine::start(fault_config(plan));
    REQUIRE(eng);
    const auto got = run_all(**eng, reqs);
    std::set<uint64_t> failed;
    {
      std::lock_guard lock(plan->mu);
      failed = plan->failed_requests;
    }
    REQUIRE(!failed.empty());
    int errors = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      CAPTURE(i);
      REQUIRE(got[i].submit_error.empty());
      if (failed.count(got[i].id) != 0) {
        CHECK(got[i].finish == finish_reason::error);
        CHECK(got[i].error_message.find("injected failure") != std::string::npos);
        ++errors;
      } else {  // not in the failed step: undisturbed, same tokens as alone
        CHECK(got[i].finish == finish_reason::length);
        CHECK(got[i].tokens == ref[i].tokens);
      }
    }
    CHECK(errors == static_cast<int>(failed.size()));
    CHECK(errors < static_cast<int>(reqs.size()));
    CHECK((*eng)->healthy());  // one failure is not a broken device
    REQUIRE(wait_all_blocks_free(**eng));
    // The engine goes on serving.
    const auto after = run_all(**eng, {reqs[0]});
    CHECK(after[0].tokens == ref[0].tokens);
    (*eng)->stop();
  }
}

TEST_CASE(
    "faults: the executor keeps no sequence state once finished, failed, preempted and cancelled "
    "requests end",
    "[actors][faults]") {
  auto plan = std::make_shared<fault_plan>();
  plan->fail_period = 7;
  plan->fail_notices = true;  // a preempted sequence's notice rides in a failing step
  plan->inner_fails = true;   // the CPU executor's own error path
  auto cfg = fault_config(plan);
  cfg.num_kv_blocks = 12;  // 96 token slots for 8 running sequences of up to 64 tokens: preemption
  cfg.max_consecutive_step_failures = 1000;
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  // At least three rounds, and more (up to 12) until a preemption and a cancellation have both
  // happened: every request lives only until the next failing step (every 7th), so how many run
  // at once, and whether they run out of blocks, depends on how fast a loaded machine submits.
  for (int round = 0; round < 12; ++round) {
    if (round >= 3) {
      const engine_metrics seen = (*eng)->metrics();
      if (seen.preemptions > 0 && seen.finished_abort > 0) break;
    }
    CAPTURE(round);
    auto reqs = requests(24, 40 + static_cast<uint32_t>(round));
    // Parallel samples: a failed step ends the whole request, also a sample waiting after
    // preemption.
    for (size_t i = 1; i < reqs.size(); i += 3) reqs[i].params.n = 3;
    // Every fifth is cancelled at its first event: long enough (40 tokens) that the first event
    // is not already its last on a loaded machine, where a slow reader gets tokens in bunches.
    for (size_t i = 0; i < reqs.size(); i += 5) reqs[i].params.max_tokens = 40;
    std::vector<outcome> got(reqs.size());
    asio::io_context io;
    for (size_t i = 0; i < reqs.size(); ++i)
      asio::co_spawn(io, run_one(**eng, reqs[i], got[i], i % 5 == 0 ? 1 : 0), asio::detached);
    io.run_for(60s);
    for (const auto& o : got) REQUIRE(o.done);
    REQUIRE(wait_all_blocks_free(**eng));
    // The notices of released sequences reach the executor after their blocks are freed.
    for (int i = 0; i < 3000 && plan->live.load() != 0; ++i) std::this_thread::sleep_for(1ms);
    CHECK(plan->live.load() == 0);
  }
  // Whether a request of the rounds above gets through without meeting a failing step depends on
  // how the steps were batched. A short request alone (4 steps) lands between two failures
  // (every 7th step) within a few tries, and must then finish normally.
  bool finished_normally = false;
  for (int i = 0; i < 14 && !finished_normally; ++i)
    finished_normally = run_all(**eng, {request(900 + static_cast<uint32_t>(i), 6, 4)})[0].finish ==
                        finish_reason::length;
  CHECK(finished_normally);
  REQUIRE(wait_all_blocks_free(**eng));
  const engine_metrics m = (*eng)->metrics();
  CHECK((*eng)->healthy());
  CHECK(m.preemptions > 0);
  CHECK(m.finished_error > 0);
  CHECK(m.finished_abort > 0);
  CHECK(m.finished_length > 0);
  (*eng)->stop();
}

TEST_CASE("faults: blocks a failed step wrote never enter the prefix cache", "[actors][faults]") {
  // 40 tokens = 5 full blocks of 8: a successful prefill registers them (a hit reuses 4).
  const generate_request r = request(77, 40, 6);
  const auto ref = reference({r});
  auto plan = std::make_shared<fault_plan>();
  plan->fail_at = 1;  // the prefill of the first request; it writes no K/V
  auto eng = engine::start(fault_config(plan));
  REQUIRE(eng);
  const auto first = run_all(**eng, {r});
  CHECK(first[0].finish == finish_reason::error);
  REQUIRE(wait_all_blocks_free(**eng));
  const auto second = run_all(**eng, {r});
  CHECK(second[0].finish == finish_reason::length);
  CHECK(second[0].cached == 0);  // nothing reused from the failed step
  CHECK(second[0].tokens == ref[0].tokens);
  // After a successful run the same prompt does hit the cache (the check above could fail).
  const auto third = run_all(**eng, {r});
  CHECK(third[0].cached == 32);  // 4 full blocks: the last token is always computed
  CHECK(third[0].tokens == ref[0].tokens);
  (*eng)->stop();
}

TEST_CASE(
    "faults: consecutive failed steps fail the engine - open streams end and new requests are "
    "refused",
    "[actors][faults]") {
  auto plan = std::make_shared<fault_plan>();
  plan->fail_every = true;
  auto cfg = fault_config(plan);
  cfg.max_consecutive_step_failures = 3;
  cfg.max_num_seqs = 1;  // one request per step: three steps fail three different requests
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  const auto got = run_all(**eng, requests(6, 5));
  for (const auto& o : got) {
    if (!o.submit_error.empty()) {
      CHECK(o.submit_error == "engine_down");  // arrived after the engine failed
      continue;
    }
    CHECK(o.finish == finish_reason::error);
  }
  CHECK(plan->steps.load() == 3);
  CHECK_FALSE((*eng)->healthy());
  CHECK((*eng)->unhealthy_reason().find("3 failed steps in a row") != std::string::npos);
  const auto later = run_all(**eng, requests(1, 6));
  CHECK(later[0].submit_error == "engine_down");
  (*eng)->stop();
}

TEST_CASE("faults: a fatal executor error fails the engine at once", "[actors][faults]") {
  auto plan = std::make_shared<fault_plan>();
  plan->fail_at = 2;
  plan->fatal = true;
  auto eng = engine::start(fault_config(plan));
  REQUIRE(eng);
  const auto got = run_all(**eng, requests(8, 7));
  for (const auto& o : got) {
    if (!o.submit_error.empty()) continue;
    CHECK((o.finish == finish_reason::error || o.finish == finish_reason::length));
  }
  CHECK_FALSE((*eng)->healthy());
  CHECK((*eng)->unhealthy_reason().find("injected failure at step 2") != std::string::npos);
  (*eng)->stop();
}

TEST_CASE(
    "faults: a stalled step fails the engine after step_timeout and streams end with an error",
    "[actors][faults]") {
  auto plan = std::make_shared<fault_plan>();
  plan->stall_at = 3;
  auto cfg = fault_config(plan);
  cfg.step_timeout = 300ms;
  auto eng = engine::start(cfg);
  REQUIRE(eng);
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = run_all(**eng, requests(4, 8), 20s);
  const auto waited = std::chrono::steady_clock::now() - t0;
  for (const auto& o : got) {
    CHECK(o.submit_error.empty());
    CHECK(o.finish == finish_reason::error);
  }
  CHECK(waited < 10s);
  CHECK_FALSE((*eng)->healthy());
  CHECK((*eng)->unhealthy_reason().find("has not completed") != std::string::npos);
  plan->release();  // let the executor thread go, so stop() can join it
  (*eng)->stop();
}

TEST_CASE("faults: a handler that throws ends what its actor held and restartable actors recover",
          "[actors][faults]") {
  struct where {
    const char* actor;
    const char* message;
    bool engine_survives;
  };
  const where cases[] = {
      {"intake", "submit_request", true}, {"tokenizer", "tokenize_request", true},
      {"streamer", "token_batch", true},  {"streamer", "open_stream", true},
      {"scheduler", "step_done", false},  {"scheduler", "add_request", false},
      {"kv_allocator", "kv_step", false}, {"executor", "run_step", false},
  };
  const auto reqs = requests(6, 11);
  const auto ref = reference({reqs[0]});
  for (const where& w : cases) {
    CAPTURE(w.actor, w.message);
    auto cfg = fault_config(nullptr);
    auto hits = std::make_shared<std::atomic<int>>(0);
    cfg.fault_hook = [w, hits](std::string_view actor, std::string_view message) {
      // The third time this handler runs, it throws (once).
      if (actor == w.actor && message == w.message && hits->fetch_add(1) == 2)
        throw std::runtime_error("injected throw");
    };
    auto eng = engine::start(cfg);
    REQUIRE(eng);
    const auto got = run_all(**eng, reqs);  // REQUIREs every stream ended: nothing hangs
    int failed = 0;
    for (const auto& o : got) {
      if (!o.submit_error.empty() || o.finish == finish_reason::error)
        ++failed;
      else
        CHECK(o.finish == finish_reason::length);
    }
    CHECK(failed >= 1);  // the request(s) the actor held when it threw
    CHECK((*eng)->healthy() == w.engine_survives);
    if (w.engine_survives) {
      const auto after = run_all(**eng, {reqs[0]});
      CHECK(after[0].finish == finish_reason::length);
      CHECK(after[0].tokens == ref[0].tokens);
      REQUIRE(wait_all_blocks_free(**eng));
    } else {
      CHECK((*eng)->unhealthy_reason().find("injected throw") != std::string::npos);
      const auto after = run_all(**eng, {reqs[0]});
      CHECK(after[0].submit_error == "engine_down");
    }
    (*eng)->stop();
  }
}

TEST_CASE("faults: drain lets open requests finish, then aborts the rest", "[actors][faults]") {
  auto eng = engine::start(fault_config(nullptr));
  REQUIRE(eng);
  auto reqs = requests(4, 13);
  for (auto& r : reqs) r.params.max_tokens = 200;  // long enough to outlive a short grace
  std::vector<outcome> out(reqs.size());
  asio::io_context io;
  for (size_t i = 0; i < reqs.size(); ++i)
    asio::co_spawn(io, run_one(**eng, reqs[i], out[i]), asio::detached);
  std::thread client([&] { io.run_for(60s); });
  while ((*eng)->metrics().open_requests < static_cast<int64_t>(reqs.size()))
    std::this_thread::sleep_for(1ms);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t aborted = (*eng)->drain(0ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  client.join();
  CHECK(aborted == static_cast<int64_t>(reqs.size()));
  CHECK(took < 5s);
  for (const auto& o : out) {
    CHECK(o.done);
    CHECK(o.finish == finish_reason::abort);
  }
  CHECK_FALSE((*eng)->healthy());
  const auto later = run_all(**eng, {reqs[0]});
  CHECK(later[0].submit_error == "engine_down");
  REQUIRE(wait_all_blocks_free(**eng));
  (*eng)->stop();
}
