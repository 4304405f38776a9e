// `coserve bench tp`: what tensor parallelism's communication costs per step, without the model's
// arithmetic: the step message broadcast from rank 0 (a decode batch of --tokens sequences with
// their block tables), two all-reduces of [tokens, hidden] fp32 per layer, and the gather of the
// LM head's vocabulary slices to rank 0 — the exact pattern of a tensor-parallel forward pass.
// Under mpirun the ranks are the job's processes (MPI); otherwise --ranks threads of this process.
// Warm-up steps first; one JSON line per token count, from rank 0.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "model/communicator.hpp"
#include "model/cpu_forward.hpp"
#include "model/tensor_parallel.hpp"

namespace coserve::cli {
namespace {

struct tp_bench_args {
  int32_t ranks = 2;
  int32_t hidden = 4096;
  int32_t layers = 32;
  int32_t vocab = 128256;
  int32_t context = 512;  // tokens per sequence so far (block table length)
  std::vector<int32_t> tokens{1, 8, 64};
  int32_t steps = 200;
  int32_t warmup = 20;
};

struct timing {
  double broadcast = 0, all_reduce = 0, gather = 0;
};

// One rank's run of `steps` steps at `tokens` decode sequences; returns the time per part.
result<timing> run_steps(communicator& c, const tp_bench_args& a, int32_t tokens, int32_t steps) {
  using clk = std::chrono::steady_clock;
  const size_t n = static_cast<size_t>(tokens);
  std::vector<int32_t> ids(n, 7);
  std::vector<std::vector<int32_t>> tables(n);
  std::vector<forward_seq> batch(n);
  for (int32_t s = 0; s < tokens; ++s) {
    for (int32_t b = 0; b < (a.context + 15) / 16; ++b) tables[size_t(s)].push_back(s * 64 + b);
    batch[size_t(s)] = forward_seq{&ids[size_t(s)], 1, a.context, &tables[size_t(s)], true, 1};
  }
  std::vector<float> x(size_t(tokens) * size_t(a.hidden), 0.5f);
  const auto [vb, ve] = vocab_range(a.vocab, c.size(), c.rank());
  std::vector<float> logits(size_t(tokens) * size_t(ve - vb), 0.25f);
  std::vector<unsigned char> msg, all;
  timing t;
  for (int32_t i = 0; i < steps; ++i) {
    auto t0 = clk::now();
    msg.clear();
    if (c.rank() == 0) msg = encode_tp_step({}, batch);
    if (auto r = c.broadcast(msg, 0); !r) return r.err();
    if (c.rank() != 0 && !decode_tp_step(msg))
      return make_error("internal", "bench: a malformed step message");
    auto t1 = clk::now();
    for (int32_t l = 0; l < 2 * a.layers; ++l)
      if (auto r = c.all_reduce_sum(x.data(), x.size()); !r) return r.err();
    auto t2 = clk::now();
    if (auto r = c.gather(logits.data(), logits.size() * sizeof(float),
                          c.rank() == 0 ? &all : nullptr, 0);
        !r)
      return r.err();
    auto t3 = clk::now();
    t.broadcast += std::chrono::duration<double>(t1 - t0).count();
    t.all_reduce += std::chrono::duration<double>(t2 - t1).count();
    t.gather += std::chrono::duration<double>(t3 - t2).count();
    // Keep the values bounded (the sums double every all-reduce otherwise).
    std::fill(x.begin(), x.end(), 0.5f);
  }
  return t;
}

bool parse_list(const char* v, std::vector<int32_t>& out) {
  out.clear();
  std::string s = v ? v : "";
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    const std::string part =
        s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    const long n = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || n <= 0 || n > 1 << 16) return false;
    out.push_back(int32_t(n));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return !out.empty();
}

}  // namespace

int bench_tp(int argc, char** argv) {
  tp_bench_args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto num = [&](int32_t& out) {
      if (!v) return false;
      out = std::atoi(v);
      ++i;
      return out > 0;
    };
    bool ok = true;
    if (f == "--help" || f == "-h") {
      std::printf(
          "usage: coserve bench tp [flags]   (or: mpirun -np N coserve bench tp [flags])\n"
          "  The communication of a tensor-parallel decode step: the step broadcast, 2 all-reduces "
          "of\n"
          "  [tokens, hidden] fp32 per layer, the logits gather. Defaults: Llama-3-8B's shapes.\n"
          "  --ranks N      in-process ranks (threads) when not under mpirun (default 2)\n"
          "  --hidden N     hidden size (default 4096)\n"
          "  --layers N     layers (default 32)\n"
          "  --vocab N      vocabulary (default 128256)\n"
          "  --context N    tokens per sequence so far: the block tables broadcast (default 512)\n"
          "  --tokens LIST  decode batch sizes, comma-separated (default 1,8,64)\n"
          "  --steps N      measured steps per batch size (default 200), after --warmup N (default "
          "20)\n");
      return 0;
    } else if (f == "--ranks")
      ok = num(a.ranks);
    else if (f == "--hidden")
      ok = num(a.hidden);
    else if (f == "--layers")
      ok = num(a.layers);
    else if (f == "--vocab")
      ok = num(a.vocab);
    else if (f == "--context")
      ok = num(a.context);
    else if (f == "--steps")
      ok = num(a.steps);
    else if (f == "--warmup")
      ok = num(a.warmup);
    else if (f == "--tokens") {
      ok = parse_list(v, a.tokens);
      ++i;
    } else
      ok = false;
    if (!ok) {
      std::fprintf(stderr, "coserve bench tp: bad flag or value '%s' (see --help)\n", f.c_str());
      return 2;
    }
  }
  const mpi_launch launch = detect_mpi_launch();
  std::vector<std::unique_ptr<communicator>> comms;
  if (launch.launched) {
    auto c = make_mpi_communicator();
    if (!c) {
      std::fprintf(stderr, "coserve bench tp: %s\n", c.err().message.c_str());
      return 1;
    }
    comms.push_back(std::move(*c));
  } else {
    comms = make_local_group(a.ranks);
  }
  const int32_t size = comms[0]->size();
  const std::string backend = comms[0]->backend();
  for (int32_t tokens : a.tokens) {
    std::vector<timing> per(comms.size());
    std::vector<std::string> errors(comms.size());
    auto rank_main = [&](size_t i) {
      auto w = run_steps(*comms[i], a, tokens, a.warmup);
      auto t = w ? run_steps(*comms[i], a, tokens, a.steps) : w;
      if (!t)
        errors[i] = t.err().message;
      else
        per[i] = *t;
    };
    std::vector<std::thread> threads;
    for (size_t i = 1; i < comms.size(); ++i) threads.emplace_back(rank_main, i);
    rank_main(0);
    for (auto& t : threads) t.join();
    for (const std::string& e : errors)
      if (!e.empty()) {
        std::fprintf(stderr, "coserve bench tp: %s\n", e.c_str());
        return 1;
      }
    if (comms[0]->rank() != 0) continue;
    const double us = 1e6 / a.steps;
    const timing& t = per[0];
    std::printf(
        "{\"bench\":\"tp_comm\",\"backend\":\"%s\",\"ranks\":%d,\"hidden\":%d,\"layers\":%d,"
        "\"vocab\":%d,"
        "\"tokens\":%d,\"context\":%d,\"steps\":%d,\"us_per_step\":%.1f,\"us_broadcast\":%.1f,"
        "\"us_all_reduce\":%.1f,\"us_per_all_reduce\":%.2f,\"us_gather_logits\":%.1f}\n",
        backend.c_str(), size, a.hidden, a.layers, a.vocab, tokens, a.context, a.steps,
        (t.broadcast + t.all_reduce + t.gather) * us, t.broadcast * us, t.all_reduce * us,
        t.all_reduce * us / (2 * a.layers), t.gather * us);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace coserve::cli
