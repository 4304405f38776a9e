// `coserve bench <name>`: dispatches to one benchmark per file (cli/bench_*.cpp).
#include <cstdio>
#include <string_view>

#include "cli/commands.hpp"

namespace coserve::cli {

int bench_runtime(int argc, char** argv);    // cli/bench_runtime.cpp
int bench_pipeline(int argc, char** argv);   // cli/bench_pipeline.cpp
int bench_serve(int argc, char** argv);      // cli/bench_serve.cpp
int bench_tokenizer(int argc, char** argv);  // cli/bench_tokenizer.cpp
int bench_grammar(int argc, char** argv);    // cli/bench_grammar.cpp
int bench_tp(int argc, char** argv);         // cli/bench_tp.cpp
int bench_steps(int argc, char** argv);      // cli/bench_steps.cpp

int cmd_bench(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "--help") {
    std::fprintf(
        argc < 2 ? stderr : stdout,
        "usage: coserve bench <runtime|pipeline|serve|tokenizer|grammar|tp|steps> [flags]\n"
        "  runtime    actor runtime: pingpong, fanin, pipeline (--n N)\n"
        "  pipeline   CPU cost of one scheduler step with a null executor (--seqs N --steps S)\n"
        "  serve      concurrent streaming clients against the HTTP server\n"
        "  tokenizer  encode throughput (MB/s) of a tokenizer.json\n"
        "  grammar    structured outputs: grammar compile time, cache hits, token-mask time\n"
        "  tp         tensor parallelism's communication per decode step (threads, or MPI ranks)\n"
        "  steps      the engine's step loop: steps launched ahead vs one at a time (MODEL_DIR)\n"
        "Each prints one JSON object per line.\n");
    return argc < 2 ? 2 : 0;
  }
  std::string_view name = argv[1];
  if (name == "runtime") return bench_runtime(argc - 1, argv + 1);
  if (name == "pipeline") return bench_pipeline(argc - 1, argv + 1);
  if (name == "serve") return bench_serve(argc - 1, argv + 1);
  if (name == "tokenizer") return bench_tokenizer(argc - 1, argv + 1);
  if (name == "grammar") return bench_grammar(argc - 1, argv + 1);
  if (name == "tp") return bench_tp(argc - 1, argv + 1);
  if (name == "steps") return bench_steps(argc - 1, argv + 1);
  std::fprintf(stderr, "coserve bench: unknown benchmark '%s'\n", argv[1]);
  return 2;
}

}  // namespace coserve::cli
