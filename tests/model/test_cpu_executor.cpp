// The executor's step protocol: registration, k_token_from_last_step, block copies, finished,
// return_logits, errors, verification of proposals.
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <map>

#include "model_test_util.hpp"
#include "prompt_logprobs_case.hpp"
#include "verify_driver.hpp"

namespace coserve {
namespace {

std::unique_ptr<cpu_executor> make_executor(const test::temp_dir& dir, bool logits) {
  REQUIRE(make_demo_model(dir.str(), test::tiny_options(31)).ok());
  cpu_executor_options o;
  o.num_kv_blocks = 16;
  o.num_threads = 2;
  o.return_logits = logits;
  auto ex = cpu_executor::load(dir.str(), o);
  REQUIRE(ex.ok());
  return std::move(*ex);
}

// Greedy tokens of `prompt`, prefilled in one step then decoded with k_token_from_last_step.
std::vector<int32_t> generate(cpu_executor& ex, seq_id_t id, const std::vector<int32_t>& prompt,
                              int n, std::vector<int32_t> table) {
  return test::greedy_tokens(ex, id, prompt, n, std::move(table));
}

// Runs `plan` (one sequence, sampled), then decodes with k_token_from_last_step until `out` holds
// n tokens; returns them.
std::vector<int32_t> decode_until(executor& ex, step_plan plan, std::vector<int32_t> out,
                                  size_t n) {
  while (out.size() < n) {
    auto r = ex.execute(plan);
    REQUIRE(r.ok());
    out.push_back(r->outputs.at(0).token);
    plan.new_seqs.clear();
    plan.seqs[0].start_pos += int32_t(plan.seqs[0].tokens.size());
    plan.seqs[0].tokens = {k_token_from_last_step};
  }
  return out;
}

}  // namespace

TEST_CASE("executor: info, decode via the last step's token, finished drops state",
          "[model][executor]") {
  test::temp_dir dir("exec");
  auto ex = make_executor(dir, false);
  const executor_info info = ex->info();
  CHECK(info.num_kv_blocks == 16);
  CHECK(info.block_size == 16);
  CHECK(info.vocab_size == 96);
  CHECK(info.max_model_len == 256);
  CHECK_THAT(info.device, Catch::Contains("cpu"));

  const std::vector<int32_t> prompt{5, 9, 14, 3, 77};
  const auto a = generate(*ex, 1, prompt, 6, {0});
  CHECK(ex->num_live_sequences() == 0);
  // Same result when the prompt is fed token by token with explicit inputs.
  step_plan plan;
  plan.new_seqs.push_back(test::greedy_seq(2, {prompt[0]}));
  std::vector<int32_t> b;
  for (size_t i = 0; i < prompt.size() + 5; ++i) {
    const int32_t tok = i < prompt.size() ? prompt[i] : b.back();
    plan.seqs = {{2, {tok}, int32_t(i), {4}, i + 1 >= prompt.size()}};
    auto r = ex->execute(plan);
    REQUIRE(r.ok());
    plan.new_seqs.clear();
    if (i + 1 >= prompt.size()) {
      REQUIRE(r->outputs.size() == 1);
      b.push_back(r->outputs[0].token);
    } else {
      CHECK(r->outputs.empty());  // a prefill chunk that does not reach the end samples nothing
    }
  }
  CHECK(a == b);
}

TEST_CASE("executor: block copies fork a sequence, return_logits, errors", "[model][executor]") {
  test::temp_dir dir("exec2");
  auto ex = make_executor(dir, true);
  const std::vector<int32_t> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18};
  step_plan plan;
  plan.new_seqs.push_back(test::greedy_seq(1, prompt));
  plan.seqs.push_back({1, prompt, 0, {0, 1}, true});
  auto r = ex->execute(plan);
  REQUIRE(r.ok());
  REQUIRE(r->outputs.at(0).logits.size() == 96);
  const int32_t first = r->outputs[0].token;
  CHECK(r->outputs[0].logprob <= 0.0f);

  // Fork seq 2 from seq 1: share block 0, copy the partly filled block 1 to block 5.
  step_plan fork;
  new_seq child = test::greedy_seq(2, prompt);
  child.output_ids = {first};
  fork.new_seqs.push_back(child);
  fork.block_copies = {{1, 5}};
  fork.seqs.push_back({1, {k_token_from_last_step}, 18, {0, 1}, true});
  fork.seqs.push_back({2, {k_token_from_last_step}, 18, {0, 5}, true});
  auto f = ex->execute(fork);
  REQUIRE(f.ok());
  REQUIRE(f->outputs.size() == 2);
  CHECK(f->outputs[0].token == f->outputs[1].token);
  CHECK(test::max_abs_diff(f->outputs[0].logits, f->outputs[1].logits) <= 1e-6f);

  step_plan bad;
  bad.seqs.push_back({77, {1}, 0, {2}, true});
  CHECK_FALSE(ex->execute(bad).ok());  // never registered
  bad = {};
  bad.new_seqs.push_back(test::greedy_seq(3, {1}));
  bad.seqs.push_back({3, {k_token_from_last_step}, 0, {2}, true});
  CHECK_FALSE(ex->execute(bad).ok());  // nothing sampled yet
  bad = {};
  bad.block_copies = {{0, 16}};
  CHECK_FALSE(ex->execute(bad).ok());
  bad = {};
  bad.seqs.push_back({1, {1}, 300, {0, 1}, true});
  CHECK_FALSE(ex->execute(bad).ok());  // beyond max_model_len
}

TEST_CASE("executor: seeded sampling is reproducible across executors and across preemption",
          "[model][executor]") {
  test::temp_dir dir("exec3");
  auto ex = make_executor(dir, false);
  auto run = [&](seq_id_t id, uint64_t seed) {
    step_plan plan;
    new_seq n = test::greedy_seq(id, {4, 5, 6});
    n.params.temperature = 1.0f;
    n.params.top_p = 0.95f;
    n.seed = seed;
    plan.new_seqs.push_back(n);
    plan.seqs.push_back({id, {4, 5, 6}, 0, {int32_t(id % 8)}, true});
    return decode_until(*ex, plan, {}, 10);
  };
  CHECK(run(1, 1234) == run(2, 1234));
  CHECK(run(3, 1234) != run(4, 999));

  // Recomputed after preemption (registered again with its outputs so far, prompt and outputs
  // prefilled): the draws go on where they were, so the continuation is the one without preemption.
  const std::vector<int32_t> full = run(5, 4321);
  for (size_t cut : {size_t(1), size_t(4), size_t(9)}) {
    CAPTURE(cut);
    const seq_id_t id = 10 + cut;
    step_plan plan;
    new_seq n = test::greedy_seq(id, {4, 5, 6});
    n.params.temperature = 1.0f;
    n.params.top_p = 0.95f;
    n.seed = 4321;
    n.output_ids.assign(full.begin(), full.begin() + std::ptrdiff_t(cut));
    std::vector<int32_t> history{4, 5, 6};
    history.insert(history.end(), n.output_ids.begin(), n.output_ids.end());
    plan.new_seqs.push_back(n);
    plan.seqs.push_back({id, history, 0, {int32_t(id % 8)}, true});
    CHECK(decode_until(*ex, plan, n.output_ids, full.size()) == full);
    plan.seqs.clear();
    plan.finished = {id};
    REQUIRE(ex->execute(plan).ok());
  }
}

TEST_CASE("executor: finished, aborted, preempted and failed-step sequences all leave no state",
          "[model][executor]") {
  test::temp_dir dir("exec4");
  auto ex = make_executor(dir, false);
  std::map<seq_id_t, std::vector<int32_t>> sampled;
  uint64_t next_step = 1;
  auto run = [&](step_plan plan, bool drop_only = false) {
    plan.step_id = drop_only ? 0 : next_step++;
    auto r = ex->execute(plan);
    if (r.ok())
      for (const seq_output& o : r->outputs) sampled[o.seq_id].push_back(o.token);
    return r.ok();
  };
  auto decode = [](seq_id_t id, int32_t pos, int32_t block) {
    return scheduled_seq{id, {k_token_from_last_step}, pos, {block}, true};
  };
  const std::vector<int32_t> prompt{7, 8, 9};
  constexpr int k_rounds = 40;
  for (int round = 0; round < k_rounds; ++round) {
    CAPTURE(round);
    const seq_id_t a = seq_id_t(round) * 10 + 1, b = a + 1, c = a + 2, d = a + 3, e = a + 4;
    step_plan p;
    for (seq_id_t id : {a, b, c, d}) {
      p.new_seqs.push_back(test::greedy_seq(id, prompt));
      p.seqs.push_back({id, prompt, 0, {int32_t(id - a)}, true});
    }
    REQUIRE(run(p));
    CHECK(ex->num_live_sequences() == 4);
    p = {};
    for (seq_id_t id : {a, b, c, d}) p.seqs.push_back(decode(id, 3, int32_t(id - a)));
    REQUIRE(run(p));

    // a finishes: dropped with the next step that computes.
    p = {};
    for (seq_id_t id : {b, c, d}) p.seqs.push_back(decode(id, 4, int32_t(id - a)));
    p.finished = {a};
    REQUIRE(run(p));
    CHECK(ex->num_live_sequences() == 3);

    // b is aborted: a plan with only the notice.
    p = {};
    p.finished = {b};
    REQUIRE(run(p, true));
    CHECK(ex->num_live_sequences() == 2);

    // c is preempted in a step that fails: its state goes although the step does not succeed.
    p = {};
    p.new_seqs.push_back(test::greedy_seq(e, prompt));
    p.seqs.push_back({e, prompt, 0, {4}, true});
    p.seqs.push_back(decode(d, 5, 3));
    p.finished = {c};
    switch (round % 4) {
      case 0:
        p.block_copies = {{0, 16}};
        break;  // block outside the cache
      case 1:
        p.seqs.back().tokens = {1000};
        break;  // token outside the vocabulary
      case 2:
        p.seqs.push_back(decode(999999, 0, 5));
        break;  // never registered
      default:
        p.seqs.back().start_pos = 300;
        break;  // beyond max_model_len
    }
    REQUIRE_FALSE(run(p));
    CHECK(ex->num_live_sequences() == 2);  // d, and e (new_seqs of a failed step stay registered)

    // The failed step's sequences are ended.
    p = {};
    p.finished = {d, e};
    REQUIRE(run(p, true));
    CHECK(ex->num_live_sequences() == 0);

    // c comes back (recompute after preemption), runs one step, then finishes with a step that
    // fails.
    REQUIRE(sampled[c].size() == 3);
    new_seq again = test::greedy_seq(c, prompt);
    again.output_ids = sampled[c];
    std::vector<int32_t> history = prompt;
    history.insert(history.end(), sampled[c].begin(), sampled[c].end());
    p = {};
    p.new_seqs.push_back(again);
    p.seqs.push_back({c, history, 0, {2}, true});
    REQUIRE(run(p));
    CHECK(ex->num_live_sequences() == 1);
    p = {};
    p.seqs.push_back(decode(777777, 0, 5));
    p.finished = {c};
    REQUIRE_FALSE(run(p));
    CHECK(ex->num_live_sequences() == 0);
    sampled.clear();
  }
  CHECK(ex->num_live_sequences() == 0);
}

TEST_CASE(
    "executor: launch / collect with two steps in flight gives what execute() gives, and a failed "
    "step's "
    "sequences are left out of the step launched behind it",
    "[model][executor][launch]") {
  test::temp_dir dir("exec-launch");
  auto sync = make_executor(dir, false);
  cpu_executor_options o;
  o.num_kv_blocks = 16;
  o.num_threads = 2;
  auto ex = cpu_executor::load(dir.str(), o);
  REQUIRE(ex.ok());
  auto& async = **ex;
  CHECK(async.max_in_flight() == 2);

  const std::vector<int32_t> pa{5, 9, 14, 3, 77}, pb{40, 2, 2, 61};
  const auto want_a = generate(*sync, 1, pa, 8, {0});
  // b samples (seeded): its draws count every token before them, collected or not.
  new_seq b = test::greedy_seq(2, pb);
  b.params.temperature = 0.8f;
  b.seed = 99;
  step_plan pb_plan;
  pb_plan.new_seqs.push_back(b);
  pb_plan.seqs.push_back({2, pb, 0, {1}, true});
  const std::vector<int32_t> want_b = decode_until(*sync, pb_plan, {}, 8);

  asio::io_context io;
  auto work =
      asio::make_work_guard(io);  // run_one() waits for the completions, never stops the context
  int ready = 0;
  auto launch = [&](step_plan p) {
    async.launch(std::move(p), io.get_executor(), [&ready] { ++ready; });
  };
  int collected = 0;
  auto collect = [&]() {
    while (ready <= collected) io.run_one();
    ++collected;
    return async.collect();
  };
  // Step k + 1 is launched before step k is collected: its k_token_from_last_step inputs are the
  // ids step k samples, which the host has not seen yet.
  step_plan p;
  p.step_id = 1;
  p.new_seqs = {test::greedy_seq(1, pa), b};
  p.seqs = {{1, pa, 0, {0}, true}, {2, pb, 0, {1}, true}};
  launch(p);
  std::vector<int32_t> got_a, got_b;
  for (int step = 1; step <= 8; ++step) {
    if (step < 8) {
      step_plan n;
      n.step_id = uint64_t(step + 1);
      const int32_t pos_a = int32_t(pa.size()) + step - 1, pos_b = int32_t(pb.size()) + step - 1;
      n.seqs = {{1, {k_token_from_last_step}, pos_a, {0}, true},
                {2, {k_token_from_last_step}, pos_b, {1}, true}};
      launch(n);
    }
    auto r = collect();
    REQUIRE(r.ok());
    CHECK(r->step_id == uint64_t(step));
    REQUIRE(r->outputs.size() == 2);
    got_a.push_back(r->outputs[0].token);
    got_b.push_back(r->outputs[1].token);
  }
  CHECK(got_a == want_a);
  CHECK(got_b == want_b);

  // A failed step (a block copy outside the cache), with the step behind it already launched:
  // sequence 1 is left out of that one (its input would be a token never sampled), the new
  // sequence 3 runs.
  step_plan bad;
  bad.step_id = 20;
  bad.block_copies = {{0, 999}};
  bad.seqs = {{1, {k_token_from_last_step}, int32_t(pa.size()) + 8, {0}, true}};
  launch(bad);
  step_plan next;
  next.step_id = 21;
  next.new_seqs = {test::greedy_seq(3, pa)};
  next.seqs = {{1, {k_token_from_last_step}, int32_t(pa.size()) + 9, {0, 2}, true},
               {3, pa, 0, {3}, true}};
  next.finished = {2};
  launch(next);
  auto rb = collect();
  CHECK_FALSE(rb.ok());
  auto rn = collect();
  REQUIRE(rn.ok());
  REQUIRE(rn->outputs.size() == 1);
  CHECK(rn->outputs[0].seq_id == 3);
  CHECK(rn->outputs[0].token == want_a[0]);  // the same prompt as sequence 1
  step_plan end;
  end.finished = {1, 3};
  launch(end);
  REQUIRE(collect().ok());
  CHECK(async.num_live_sequences() == 0);
}

TEST_CASE("executor: the owner's io_context may go as soon as a launched step's ready has run",
          "[model][executor][launch]") {
  // model/executor.hpp (launch): the step thread touches the owner's context no more once `ready`
  // may run. Each round destroys its context right after `ready` ran, while the step thread may
  // still be returning from its post. A late touch is a use after free under ASan, or (the next
  // round's context taking the same stack slot) a stray end of work that stops that context, so
  // its run_one() returns 0.
  test::temp_dir dir("exec-launch-lifetime");
  (void)make_executor(dir, false);
  cpu_executor_options o;
  o.num_kv_blocks = 16;
  o.num_threads = 1;
  auto ex = cpu_executor::load(dir.str(), o);
  REQUIRE(ex.ok());
  const std::vector<int32_t> prompt{5, 9, 14};
  for (int round = 0; round < 200; ++round) {
    asio::io_context
        io;  // no work guard: the launched step's outstanding work keeps run_one() waiting
    bool ready = false;
    step_plan p;
    p.step_id = uint64_t(round + 1);
    p.new_seqs = {test::greedy_seq(1, prompt)};
    p.seqs = {{1, prompt, 0, {0}, true}};
    p.finished = {1};
    (*ex)->launch(std::move(p), io.get_executor(), [&ready] { ready = true; });
    while (!ready) REQUIRE(io.run_one() == 1);
    auto r = (*ex)->collect();
    REQUIRE(r.ok());
    REQUIRE(r->outputs.size() == 1);
  }
  CHECK((*ex)->num_live_sequences() == 0);
}

TEST_CASE(
    "executor: prompt logprobs across chunks and beside other sequences equal the next-token "
    "logits",
    "[model][executor]") {
  test::temp_dir dir("exec_plp");
  auto ex = make_executor(dir, true);
  test::prompt_logprobs_case(*ex, 96, 1e-4);
}

}  // namespace coserve

namespace coserve {

TEST_CASE(
    "executor: verifying proposals, accepted and corrupted, gives plain greedy decoding's tokens",
    "[model][executor][speculation]") {
  test::temp_dir dir("exec-verify");
  REQUIRE(make_demo_model(dir.str(), test::tiny_options(31)).ok());
  cpu_executor_options o;
  o.num_kv_blocks = 64;
  o.num_threads = 2;
  auto ex = cpu_executor::load(dir.str(), o);
  REQUIRE(ex.ok());
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < 6; ++i) {
    prompts.emplace_back();
    for (int32_t t = 0; t < 3 + 4 * i; ++t) prompts.back().push_back((t * 7 + i * 13) % 90 + 1);
  }
  sampling_params greedy;
  greedy.temperature = 0.0f;
  sampling_params with_top = greedy;
  with_top.logprobs = 2;
  const std::vector<sampling_params> params{greedy, with_top};
  const auto plain = test::drive_verify(**ex, prompts, 40, 16, params, {}, 0, 96, 1);
  const auto spec = test::drive_verify(**ex, prompts, 40, 16, params, plain.tokens, 4, 96, 2, 100);
  CHECK(spec.tokens == plain.tokens);
  CHECK(spec.proposed > 0);
  CHECK(spec.accepted > 0);
  CHECK(spec.accepted < spec.proposed);  // the corrupted runs were cut short
  for (size_t i = 1; i < prompts.size(); i += 2)
    for (size_t c : spec.top_counts[i])
      CHECK(c == 2);  // accepted proposals come with their logprobs
}

TEST_CASE(
    "executor: proposals from a draft model, the model itself or another, give plain greedy "
    "decoding's tokens",
    "[model][executor][speculation]") {
  // The driver the CUDA executor's draft test uses (tests/gpu/test_gpu_executor.cpp), here on the
  // CPU executor: every step asks the draft for up to 3 proposals.
  test::temp_dir dir("exec-draft"), other("exec-draft-other");
  REQUIRE(make_demo_model(dir.str(), test::tiny_options(31)).ok());
  REQUIRE(make_demo_model(other.str(), test::tiny_options(77)).ok());
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < 5; ++i) {
    prompts.emplace_back();
    for (int32_t t = 0; t < 4 + 5 * i; ++t) prompts.back().push_back((t * 11 + i * 7) % 90 + 1);
  }
  sampling_params greedy;
  greedy.temperature = 0.0f;
  cpu_executor_options o;
  o.num_kv_blocks = 64;
  o.num_threads = 2;
  auto plain_ex = cpu_executor::load(dir.str(), o);
  REQUIRE(plain_ex.ok());
  const auto plain = test::drive_verify(**plain_ex, prompts, 30, 16, {greedy}, {}, 0, 96, 1);
  for (const std::string& draft : {dir.str(), other.str()}) {
    cpu_executor_options d = o;
    d.draft_model_dir = draft;
    auto ex = cpu_executor::load(dir.str(), d);
    REQUIRE(ex.ok());
    const auto spec = test::drive_verify(**ex, prompts, 30, 16, {greedy}, {}, 3, 96, 2, 100, true);
    INFO(spec.accepted << " of " << spec.proposed << " accepted");
    CHECK(spec.tokens == plain.tokens);
    CHECK(spec.proposed > 0);
    if (draft == dir.str())
      CHECK(spec.accepted == spec.proposed);  // the model as its own draft
    else
      CHECK(spec.accepted < spec.proposed);
  }
}

}  // namespace coserve
