// The live step loop against the pure planner: the serving actor graph runs a random workload
// (preemption by recompute, cancellations at random points, n > 1 forks, prefix-cache hits,
// n-gram speculative decoding, two steps in flight) on a simulated device; the scheduler's journal
// of planner calls is then replayed through a step_planner and a kv_manager alone (as batch_planner
// composes them), and every plan the device received must equal the replay's plan of the same
// step, in the same order — step by step. The device also checks each step's block tables against
// the K/V it wrote, and every uncancelled request's tokens must equal its sequence run alone.
#include <catch2/catch.hpp>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "actors/engine.hpp"
#include "actors/kv_manager.hpp"
#include "actors/sequence.hpp"
#include "actors/step_planner.hpp"
#include "model/held_block_tables.hpp"
#include "tests/actors/pipeline_util.hpp"

using namespace coserve;
using namespace coserve::actors;
using namespace coserve::test;

namespace {

constexpr int32_t k_alphabet_base = 20, k_alphabet = 12;

// The simulated model: the next token depends on the sequence's seed and its last token only, so
// outputs soon repeat and n-gram proposals are often (not always) right.
int32_t next_token(uint64_t seed, int32_t last) {
  uint64_t h =
      (seed + 1) * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(last + 7) * 0x100000001b3ull;
  h ^= h >> 29;
  return k_alphabet_base + static_cast<int32_t>((h * 0xbf58476d1ce4e5b9ull >> 40) % k_alphabet);
}

std::vector<int32_t> run_alone(const std::vector<int32_t>& prompt, uint64_t seed, int32_t n) {
  std::vector<int32_t> out;
  int32_t last = prompt.back();
  for (int32_t i = 0; i < n; ++i) out.push_back(last = next_token(seed, last));
  return out;
}

// What the device received, in order (any thread; read after the engine stopped).
struct received_plans {
  std::mutex mu;
  std::vector<step_plan> plans;
};

// A device with two steps in flight: steps run in launch order on a thread of their own, after a
// random pause, and resolve k_token_from_last_step from the previous step's sample. It keeps a
// token "K/V" per block and, before sampling, requires the block table to show the sequence's
// whole history; proposals are verified against the model (accepted while they match).
class sim_device final : public executor {
 public:
  sim_device(std::shared_ptr<received_plans> rec, int32_t blocks, int32_t block_size, int32_t vocab,
             int32_t max_len)
      : rec_(std::move(rec)),
        bs_(block_size),
        vocab_(vocab),
        max_len_(max_len),
        kv_(static_cast<size_t>(blocks), std::vector<int32_t>(static_cast<size_t>(block_size), -7)),
        num_blocks_(blocks),
        thread_([this] { work(); }) {}
  ~sim_device() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  result<step_result> execute(const step_plan& plan) override { return run(plan); }
  void launch(step_plan plan, const asio::any_io_executor& ex,
              std::function<void()> ready) override {
    {
      std::lock_guard lock(rec_->mu);
      rec_->plans.push_back(plan);
    }
    std::lock_guard lock(mu_);
    queue_.push_back({std::move(plan), ex, std::move(ready)});
    cv_.notify_all();
  }
  result<step_result> collect() override {
    std::lock_guard lock(mu_);
    result<step_result> r = std::move(done_.front());
    done_.pop_front();
    return r;
  }
  int32_t max_in_flight() const override { return 2; }
  executor_info info() const override {
    executor_info i;
    i.num_kv_blocks = num_blocks_;
    i.block_size = bs_;
    i.vocab_size = vocab_;
    i.max_model_len = max_len_;
    i.device = "sim";
    i.verifies_proposals = true;
    return i;
  }
  int64_t accepted() const { return accepted_.load(); }
  // The first inconsistency a step showed ("" when none); read after the engine stopped.
  std::string first_error() const {
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  struct job {
    step_plan plan;
    asio::any_io_executor ex;
    std::function<void()> ready;
  };
  struct seq_state {
    std::vector<int32_t> history;
    uint64_t seed = 0;
  };

  void work() {
    std::mt19937 rng(99);
    for (;;) {
      job j;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        j = std::move(queue_.front());
        queue_.pop_front();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 400));
      result<step_result> r = run(j.plan);
      {
        std::lock_guard lock(mu_);
        done_.push_back(std::move(r));
      }
      asio::post(j.ex, std::move(j.ready));
    }
  }

  int32_t& slot(const scheduled_seq& s, int32_t pos) {
    return kv_[static_cast<size_t>(s.block_table[static_cast<size_t>(pos / bs_)])]
              [static_cast<size_t>(pos % bs_)];
  }

  // Records the first inconsistency (on the step thread: Catch2's assertions are for the test's).
  bool fails(bool bad, const std::string& what, seq_id_t id) {
    if (!bad) return false;
    std::lock_guard lock(mu_);
    if (error_.empty()) error_ = what + " (sequence " + std::to_string(id) + ")";
    return true;
  }

  // One sequence of a step: writes its inputs' K/V, checks the known ones, samples.
  bool run_seq(const scheduled_seq& s, step_result& res) {
    auto it = seqs_.find(s.seq_id);
    if (fails(it == seqs_.end(), "a sequence never registered", s.seq_id)) return false;
    seq_state& st = it->second;
    const auto n = static_cast<int32_t>(s.tokens.size());
    const int32_t known = n - s.num_draft;
    for (int32_t j = 0; j < n; ++j) {
      const int32_t pos = s.start_pos + j;
      int32_t tok = s.tokens[static_cast<size_t>(j)];
      if (tok == k_token_from_last_step) tok = st.history.back();
      if (j < known && fails(pos >= static_cast<int32_t>(st.history.size()) ||
                                 st.history[static_cast<size_t>(pos)] != tok,
                             "an input token that is not the history's", s.seq_id))
        return false;
      if (fails(pos / bs_ >= static_cast<int32_t>(s.block_table.size()), "a short block table",
                s.seq_id))
        return false;
      slot(s, pos) = tok;
    }
    if (!s.sample) return true;
    const int32_t end = s.start_pos + known;
    if (fails(end != static_cast<int32_t>(st.history.size()), "sampling before the end", s.seq_id))
      return false;
    for (int32_t p = 0; p < end; ++p)
      if (fails(slot(s, p) != st.history[static_cast<size_t>(p)], "K/V that is not the history",
                s.seq_id))
        return false;
    for (int32_t i = 0;; ++i) {
      const int32_t t = next_token(st.seed, st.history.back());
      st.history.push_back(t);
      res.outputs.push_back(seq_output{.seq_id = s.seq_id, .token = t});
      if (i >= s.num_draft || s.tokens[static_cast<size_t>(known + i)] != t) break;
      ++accepted_;
    }
    return true;
  }

  result<step_result> run(const step_plan& plan) {
    for (const new_seq& ns : plan.new_seqs) {
      if (fails(seqs_.count(ns.seq_id) != 0, "a sequence registered twice", ns.seq_id))
        return coserve::error{"internal", "sim device: inconsistent plan"};
      seq_state& st = seqs_[ns.seq_id];
      st.history = ns.prompt_ids;
      st.history.insert(st.history.end(), ns.output_ids.begin(), ns.output_ids.end());
      st.seed = ns.seed;
    }
    for (auto [src, dst] : plan.block_copies)
      kv_[static_cast<size_t>(dst)] = kv_[static_cast<size_t>(src)];
    step_result res;
    res.step_id = plan.step_id;
    bool ok = true;
    for (const scheduled_seq& s : plan.seqs) ok = run_seq(s, res) && ok;
    for (seq_id_t id : plan.finished) seqs_.erase(id);
    if (!ok) return coserve::error{"internal", "sim device: inconsistent plan"};
    return res;
  }

  std::shared_ptr<received_plans> rec_;
  int32_t bs_, vocab_, max_len_;
  std::vector<std::vector<int32_t>> kv_;  // the step thread's
  std::unordered_map<seq_id_t, seq_state> seqs_;
  int32_t num_blocks_;
  std::atomic<int64_t> accepted_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string error_;
  std::deque<job> queue_;
  std::deque<result<step_result>> done_;
  bool stop_ = false;
  std::thread thread_;
};

void check_same_plan(const step_plan& got, const step_plan& want) {
  CAPTURE(want.step_id);
  REQUIRE(got.step_id == want.step_id);
  REQUIRE(got.new_seqs.size() == want.new_seqs.size());
  for (size_t i = 0; i < got.new_seqs.size(); ++i) {
    CHECK(got.new_seqs[i].seq_id == want.new_seqs[i].seq_id);
    CHECK(got.new_seqs[i].prompt_ids == want.new_seqs[i].prompt_ids);
    CHECK(got.new_seqs[i].output_ids == want.new_seqs[i].output_ids);
    CHECK(got.new_seqs[i].seed == want.new_seqs[i].seed);
  }
  CHECK(got.block_copies == want.block_copies);
  REQUIRE(got.seqs.size() == want.seqs.size());
  for (size_t i = 0; i < got.seqs.size(); ++i) {
    const scheduled_seq& a = got.seqs[i];
    const scheduled_seq& b = want.seqs[i];
    CHECK(a.seq_id == b.seq_id);
    CHECK(a.tokens == b.tokens);
    CHECK(a.start_pos == b.start_pos);
    CHECK(a.block_table == b.block_table);
    CHECK(a.sample == b.sample);
    CHECK(a.num_draft == b.num_draft);
  }
  CHECK(got.finished == want.finished);
}

bool same_allocation(const step_allocation& a, const step_allocation& b) {
  if (a.step_id != b.step_id || a.seqs.size() != b.seqs.size() || a.preempted != b.preempted ||
      a.deferred != b.deferred || a.num_holders != b.num_holders)
    return false;
  for (size_t i = 0; i < a.seqs.size(); ++i)
    if (a.seqs[i].seq_id != b.seqs[i].seq_id || a.seqs[i].start_pos != b.seqs[i].start_pos ||
        a.seqs[i].tokens != b.seqs[i].tokens || a.seqs[i].cached_tokens != b.seqs[i].cached_tokens)
      return false;
  return true;
}

// Replays the scheduler's journal through the two pure cores; returns the plans the device must
// have received, in order (computing steps, and drop-only plans as the KV allocator sends them).
std::vector<step_plan> replay(const std::vector<planner_call>& journal, planner_config pc,
                              block_pool_options pool, int64_t& preemptions) {
  step_planner planner(std::move(pc));
  kv_manager kv(std::move(pool));
  std::map<uint64_t, step_allocation> allocations;
  std::vector<step_plan> plans;
  step_emission em;
  held_block_tables tables;  // as the executor actor expands each plan's table changes
  auto place = [&](step_draft d) {
    const bool drafted = d.step_id != 0;
    auto [plan, alloc] = kv.resolve(std::move(d));
    if (drafted) allocations[alloc.step_id] = alloc;
    if (plan.seqs.empty()) plan.step_id = 0;
    tables.expand(plan);
    if (!plan.seqs.empty() || !plan.finished.empty()) plans.push_back(std::move(plan));
  };
  for (const planner_call& c : journal) {
    switch (c.what) {
      case planner_call::kind::start:
        break;
      case planner_call::kind::add_request:
        planner.add_request(c.request_id, c.prompt, c.params, c.priority, {}, em, c.reason);
        break;
      case planner_call::kind::end_request:
        planner.end_request(c.request_id, c.reason, c.message, em);
        break;
      case planner_call::kind::finish_sample:
        planner.finish_sample(c.seq_id);
        break;
      case planner_call::kind::fail_all:
        planner.fail_all(c.message, em);
        break;
      case planner_call::kind::draft: {
        step_draft d = planner.draft();
        REQUIRE(d.step_id == c.step_id);
        if (d.step_id != 0 || !d.ops.empty()) place(std::move(d));
        break;
      }
      case planner_call::kind::take_kv_ops: {
        step_draft d;
        d.ops = planner.take_kv_ops();
        REQUIRE_FALSE(d.ops.empty());
        place(std::move(d));
        break;
      }
      case planner_call::kind::allocation: {
        auto it = allocations.find(c.allocation.step_id);
        REQUIRE(it != allocations.end());
        CHECK(same_allocation(it->second, c.allocation));  // the KV allocator placed it so
        planner.on_allocation(it->second, em);
        break;
      }
      case planner_call::kind::result:
        planner.on_result(c.result, em, c.ran);
        break;
      case planner_call::kind::failed_step:
        planner.on_failed_step(c.step_id, c.failure, em);
        break;
    }
  }
  preemptions = planner.num_preemptions();
  return plans;
}

}  // namespace

TEST_CASE("step loop: the live actor graph plans, step by step, what the pure planner plans",
          "[actors][step_loop]") {
  COSERVE_SKIP_UNLESS_EXISTS(default_tokenizer());
  static constexpr int32_t k_blocks = 30, k_block_size = 8, k_max_len = 256;
  auto rec = std::make_shared<received_plans>();
  std::shared_ptr<sim_device*> device = std::make_shared<sim_device*>(nullptr);
  std::mutex journal_mu;
  std::vector<planner_call> journal;
  engine_config cfg = small_config();
  cfg.max_num_seqs = 8;
  cfg.max_num_batched_tokens = 48;
  cfg.block_size = k_block_size;
  cfg.speculative_config =
      R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":3})";
  cfg.make_executor = [rec, device](const engine_config&) -> result<std::unique_ptr<executor>> {
    auto d = std::make_unique<sim_device>(rec, k_blocks, k_block_size, 1000, k_max_len);
    *device = d.get();
    return std::unique_ptr<executor>(std::move(d));
  };
  cfg.planner_journal = [&](const planner_call& c) {
    std::lock_guard lock(journal_mu);
    journal.push_back(c);
  };
  auto eng = engine::start(cfg);
  REQUIRE(eng);

  std::mt19937 rng(2026);
  std::vector<int32_t> shared_prefix;
  for (int i = 0; i < 16; ++i)
    shared_prefix.push_back(k_alphabet_base + int32_t(rng() % k_alphabet));
  const int k = 48;
  std::vector<generate_request> reqs;
  std::vector<int> cancel_at(k, -1);
  for (int i = 0; i < k; ++i) {
    generate_request r;
    std::vector<int32_t> ids = i % 3 == 0 ? shared_prefix : std::vector<int32_t>{};
    const int len = 1 + static_cast<int>(rng() % 24);
    for (int j = 0; j < len; ++j) ids.push_back(k_alphabet_base + int32_t(rng() % k_alphabet));
    r.input = ids;
    r.params.temperature = 0.0f;
    r.params.max_tokens = 1 + static_cast<int32_t>(rng() % 40);
    r.params.ignore_eos = true;
    if (i % 7 == 3) r.params.n = 2;
    if (i % 5 == 1) r.priority = 1;
    if (i % 4 == 2) cancel_at[size_t(i)] = static_cast<int>(rng() % 6);
    reqs.push_back(std::move(r));
  }
  const auto got = run_all(**eng, reqs, true, cancel_at);
  REQUIRE(wait_all_blocks_free(**eng));
  const engine_metrics m = (*eng)->metrics();
  const int64_t accepted_by_device = (*device)->accepted();
  const std::string device_error = (*device)->first_error();
  (*eng)->stop();
  CHECK(device_error.empty());

  // Every uncancelled single-sample request equals its sequence run alone.
  int aborted = 0;
  for (int i = 0; i < k; ++i) {
    CAPTURE(i);
    const collected& c = got[size_t(i)];
    REQUIRE(c.error_code.empty());
    if (c.finish == finish_reason::abort) ++aborted;
    if (cancel_at[size_t(i)] >= 0 || reqs[size_t(i)].params.n != 1) continue;
    const auto& prompt = std::get<std::vector<int32_t>>(reqs[size_t(i)].input);
    CHECK(c.tokens == run_alone(prompt, c.id * 7919, reqs[size_t(i)].params.max_tokens));
    CHECK(c.finish == finish_reason::length);
  }

  // The replay plans what the device received, step by step.
  REQUIRE_FALSE(journal.empty());
  REQUIRE(journal.front().what == planner_call::kind::start);
  CHECK(journal.front().config.max_num_seqs == cfg.max_num_seqs);
  CHECK(journal.front().config.speculation.num_speculative_tokens == 3);
  int64_t preemptions = 0;
  const std::vector<step_plan> want = replay(journal, journal.front().config,
                                             {.num_blocks = k_blocks,
                                              .block_size = k_block_size,
                                              .enable_prefix_caching = true,
                                              .hash = {}},
                                             preemptions);
  REQUIRE(rec->plans.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) check_same_plan(rec->plans[i], want[i]);

  // The workload did exercise what it is meant to.
  CHECK(preemptions > 0);
  CHECK(m.preemptions == preemptions);
  CHECK(aborted > 0);
  CHECK(m.prefix_hits > 0);
  CHECK(m.spec_drafts > 0);
  CHECK(m.spec_accepted_tokens > 0);
  // The device also verified proposals of steps whose sequences had finished (results dropped).
  CHECK(m.spec_accepted_tokens <= accepted_by_device);
  size_t forks = 0, drop_only = 0;
  for (const step_plan& p : rec->plans) {
    forks += p.block_copies.size();
    drop_only += p.seqs.empty() ? 1 : 0;
  }
  CHECK(forks > 0);
  CHECK(drop_only > 0);
}
