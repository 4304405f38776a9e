// `coserve bench steps MODEL_DIR [--requests N] [--prompt P] [--max-tokens T] [--rounds R]
// [--cpu-threads N] [--device cpu|cuda]`: the executor's step loop through the whole engine, side
// by side in one run: the same concurrent greedy requests served with steps launched ahead (step
// N+1 queued behind step N, the default) and one step at a time (the executor's synchronous
// launch). A warm-up round first in each mode; then R timed rounds. One JSON line per mode, then
// the ratio.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "actors/engine.hpp"

namespace coserve::cli {
namespace {

asio::awaitable<void> drain(engine& eng, generate_request r, int64_t& tokens, bool& failed) {
  auto s = co_await eng.submit(std::move(r));
  if (!s) {
    failed = true;
    co_return;
  }
  while (auto ev = co_await (*s)->next()) {
    tokens += int64_t(ev->token_ids.size());
    if (ev->finish == finish_reason::error) failed = true;
  }
}

struct round_result {
  double seconds = 0;
  int64_t tokens = 0;
  bool failed = false;
};

round_result run_round(engine& eng, const std::vector<generate_request>& reqs) {
  round_result r;
  asio::io_context io;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& q : reqs) asio::co_spawn(io, drain(eng, q, r.tokens, r.failed), asio::detached);
  io.run();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace

int bench_steps(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(
        stderr,
        "usage: coserve bench steps MODEL_DIR [--requests N] [--prompt P] [--max-tokens T] "
        "[--rounds R] [--cpu-threads N] [--device cpu|cuda]\n");
    return 2;
  }
  engine_config base;
  base.model_dir = argv[1];
  int32_t requests = 16, prompt = 64, max_tokens = 64, rounds = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--requests")
      requests = std::atoi(argv[i + 1]);
    else if (a == "--prompt")
      prompt = std::atoi(argv[i + 1]);
    else if (a == "--max-tokens")
      max_tokens = std::atoi(argv[i + 1]);
    else if (a == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (a == "--cpu-threads")
      base.cpu_threads = std::atoi(argv[i + 1]);
    else if (a == "--device")
      base.device = argv[i + 1];
    else {
      std::fprintf(stderr, "coserve bench steps: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (requests < 1 || prompt < 1 || max_tokens < 1 || rounds < 1) {
    std::fprintf(stderr, "coserve bench steps: counts must be positive\n");
    return 2;
  }
  std::vector<generate_request> reqs;
  for (int32_t i = 0; i < requests; ++i) {
    generate_request r;
    std::vector<int32_t> ids;
    for (int32_t k = 0; k < prompt; ++k) ids.push_back(3 + (i * 131 + k * 17) % 200);
    r.input = ids;
    r.params.temperature = 0.0f;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    reqs.push_back(std::move(r));
  }
  double tps[2] = {0, 0};
  for (int mode = 0; mode < 2; ++mode) {
    engine_config cfg = base;
    if (mode == 1)
      cfg.make_executor = [](const engine_config& c) -> result<std::unique_ptr<executor>> {
        auto inner = make_default_executor(c);
        if (!inner) return inner.err();
        return std::unique_ptr<executor>(std::make_unique<one_step_at_a_time>(std::move(*inner)));
      };
    auto eng = engine::start(cfg);
    if (!eng) {
      std::fprintf(stderr, "coserve bench steps: %s\n", eng.err().message.c_str());
      return 1;
    }
    (void)run_round(**eng, reqs);  // warm-up
    round_result total;
    for (int32_t k = 0; k < rounds; ++k) {
      const round_result r = run_round(**eng, reqs);
      total.seconds += r.seconds;
      total.tokens += r.tokens;
      total.failed = total.failed || r.failed;
    }
    const engine_metrics m = (*eng)->metrics();
    (*eng)->stop();
    if (total.failed) {
      std::fprintf(stderr, "coserve bench steps: a request failed\n");
      return 1;
    }
    tps[mode] = double(total.tokens) / total.seconds;
    std::printf(
        "{\"bench\":\"steps\",\"mode\":\"%s\",\"requests\":%d,\"prompt\":%d,\"max_tokens\":%d,"
        "\"rounds\":%d,"
        "\"tokens_per_s\":%.1f,\"steps\":%lld,\"steps_launched_ahead\":%lld}\n",
        mode == 0 ? "launched_ahead" : "one_at_a_time", requests, prompt, max_tokens, rounds,
        tps[mode], static_cast<long long>(m.steps), static_cast<long long>(m.steps_launched_ahead));
    std::fflush(stdout);
  }
  std::printf("{\"bench\":\"steps\",\"ratio_launched_ahead_over_one_at_a_time\":%.3f}\n",
              tps[0] / tps[1]);
  return 0;
}

}  // namespace coserve::cli
