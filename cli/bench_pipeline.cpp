// `coserve bench pipeline --seqs N --steps S [--prompt P] [--block-size B]`: the host CPU cost of
// one decode step of the serving pipeline with a null executor that samples instantly — planning,
// KV block bookkeeping, building the batch inputs and applying the results — with two steps in
// flight (plan N+1, then apply N's result). Prints one JSON line with p50/p99 microseconds per
// step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "actors/batch_planner.hpp"

namespace coserve::cli {

namespace {

// Samples instantly: one output per scheduled sequence that samples, a fixed non-eos token.
step_result null_execute(const step_plan& plan) {
  step_result r;
  r.step_id = plan.step_id;
  r.outputs.reserve(plan.seqs.size());
  for (const auto& s : plan.seqs)
    if (s.sample)
      r.outputs.push_back(seq_output{
          .seq_id = s.seq_id, .token = 5, .logprob = 0.0f, .top_logprobs = {}, .logits = {}});
  return r;
}

}  // namespace

int bench_pipeline(int argc, char** argv) {
  int32_t seqs = 256, steps = 1000, prompt = 16, block_size = 16;
  for (int i = 0; i + 1 < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seqs")
      seqs = std::atoi(argv[++i]);
    else if (a == "--steps")
      steps = std::atoi(argv[++i]);
    else if (a == "--prompt")
      prompt = std::atoi(argv[++i]);
    else if (a == "--block-size")
      block_size = std::atoi(argv[++i]);
  }
  if (seqs < 1 || steps < 1 || prompt < 1 || block_size < 1) {
    std::fprintf(
        stderr, "usage: coserve bench pipeline --seqs N --steps S [--prompt P] [--block-size B]\n");
    return 2;
  }
  const int32_t max_len = prompt + steps + 8;
  actors::planner_config cfg{.max_num_seqs = seqs,
                             .max_num_batched_tokens = std::max(2048, seqs * prompt),
                             .max_model_len = max_len,
                             .eos_id = 2};
  const int32_t blocks = seqs * ((max_len + block_size - 1) / block_size + 1);
  actors::batch_planner planner(
      cfg,
      {.num_blocks = blocks, .block_size = block_size, .enable_prefix_caching = true, .hash = {}});
  for (int32_t i = 0; i < seqs; ++i) {
    actors::sequence s;
    s.id = static_cast<seq_id_t>(i + 1);
    s.request_id = s.id;
    s.arrival = s.id;
    for (int32_t k = 0; k < prompt; ++k) s.prompt.push_back(100 + (i * 7 + k) % 1000);
    s.params.max_tokens = steps + 4;
    s.params.temperature = 0.0f;
    planner.add(std::move(s));
  }
  // Warm-up: the prefill step, and one decode so two steps are in flight.
  std::optional<step_plan> inflight = planner.plan();
  std::vector<double> us, fill_us;
  us.reserve(static_cast<size_t>(steps));
  fill_us.reserve(static_cast<size_t>(steps));
  int64_t sampled = 0;
  using clock = std::chrono::steady_clock;
  for (int32_t s = 0; s < steps; ++s) {
    const auto t0 = clock::now();
    auto [next, alloc] = planner.draft_and_place();
    if (alloc.step_id != 0) planner.on_allocation(alloc);
    const auto t1 = clock::now();
    planner.expand_tables(next);  // the executor actor's part
    const auto t2 = clock::now();
    const step_result r = null_execute(*inflight);
    const auto t3 = clock::now();
    sampled += static_cast<int64_t>(planner.on_result(r).size());
    const auto t4 = clock::now();
    inflight =
        std::move(next);  // the step launched: the previous plan goes, as on the executor's thread
    us.push_back(std::chrono::duration<double, std::micro>((t1 - t0) + (t4 - t3)).count());
    fill_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  std::sort(us.begin(), us.end());
  std::sort(fill_us.begin(), fill_us.end());
  auto pct_of = [](const std::vector<double>& v, double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  auto pct = [&](double q) { return pct_of(us, q); };
  const int64_t expected = static_cast<int64_t>(seqs) * steps;
  if (sampled != expected) {
    std::fprintf(stderr, "bench pipeline: %lld tokens sampled, expected %lld\n",
                 static_cast<long long>(sampled), static_cast<long long>(expected));
    return 1;
  }
  std::printf(
      "{\"seqs\":%d,\"steps\":%d,\"us_per_step_p50\":%.1f,\"us_per_step_p99\":%.1f,"
      "\"table_expand_us_p50\":%.1f,\"table_expand_us_p99\":%.1f}\n",
      seqs, steps, pct(0.50), pct(0.99), pct_of(fill_us, 0.50), pct_of(fill_us, 0.99));
  return 0;
}

}  // namespace coserve::cli
