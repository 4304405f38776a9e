// `coserve`: one binary, several subcommands.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cli/commands.hpp"

namespace {

struct command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr command k_commands[] = {
    {"serve", coserve::cli::cmd_serve, "OpenAI-compatible HTTP server (serve --help)"},
    {"generate", coserve::cli::cmd_generate, "generate tokens from a model folder"},
    {"make-demo-model", coserve::cli::cmd_make_demo_model,
     "write a small random Hugging Face model folder"},
    {"architectures", coserve::cli::cmd_architectures,
     "list the model architectures coserve reads"},
    {"tokenize", coserve::cli::cmd_tokenize, "JSON strings on stdin -> JSON id arrays"},
    {"detokenize", coserve::cli::cmd_detokenize, "JSON id arrays on stdin -> JSON strings"},
    {"chat-template", coserve::cli::cmd_chat_template, "render a chat template"},
    {"gguf", coserve::cli::cmd_gguf,
     "show a GGUF file's metadata and tensors, dequantize a tensor"},
    {"bench", coserve::cli::cmd_bench, "benchmarks: runtime, pipeline, serve, tokenizer"},
};

void usage(std::FILE* out) {
  std::fprintf(out, "usage: coserve <command> [args...]\n\ncommands:\n");
  for (const auto& c : k_commands) std::fprintf(out, "  %-16s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`coserve <command> --help` explains each command's flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string_view name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("coserve 0.1.0\n");
    return 0;
  }
  for (const auto& c : k_commands)
    if (name == c.name) return c.run(argc - 1, argv + 1);
  std::fprintf(stderr, "coserve: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
