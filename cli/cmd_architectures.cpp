// `coserve architectures [--markdown]`: the model architectures coserve reads
// (model/architectures.hpp), one line each, or docs/models.md's table.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.hpp"
#include "model/architectures.hpp"

namespace coserve::cli {

namespace {

constexpr const char* k_help = R"(usage: coserve architectures [--markdown]

Lists the model architectures coserve reads: the model type (make-demo-model --architecture),
config.json's architectures name, GGUF's general.architecture, the executors and a summary.
  --markdown    print docs/models.md's table instead (scripts/models-table writes it there)
)";

}  // namespace

int cmd_architectures(int argc, char** argv) {
  bool markdown = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--markdown") == 0) {
      markdown = true;
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(k_help, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "architectures: unknown option %s\n\n%s", argv[i], k_help);
      return 2;
    }
  }
  if (markdown) {
    std::fputs(architecture_table_markdown().c_str(), stdout);
    return 0;
  }
  std::printf("%-10s %-20s %-14s %-9s %s\n", "type", "architectures", "GGUF", "executors",
              "summary");
  for (const architecture& a : architectures()) {
    // Its own GGUF name, else that of the files whose experts make them this architecture.
    std::string gguf(a.gguf.name);
    for (const architecture& b : architectures())
      if (gguf.empty() && b.gguf.with_experts == a.name)
        gguf = std::string(b.gguf.name) + "+experts";
    std::printf("%-10s %-20s %-14s %-9s %s\n", std::string(a.name).c_str(),
                std::string(a.hf_name).c_str(), gguf.empty() ? "-" : gguf.c_str(),
                a.cuda ? "cpu,cuda" : "cpu", std::string(a.summary).c_str());
  }
  return 0;
}

}  // namespace coserve::cli
