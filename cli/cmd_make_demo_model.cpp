// `coserve make-demo-model DIR [...]`: writes the random demo model folder (model/demo_model.hpp).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "model/demo_args.hpp"

namespace coserve::cli {

int cmd_make_demo_model(int argc, char** argv) {
  auto args = parse_demo_args(std::vector<std::string>(argv + 1, argv + argc));
  if (!args) {
    std::fprintf(stderr, "make-demo-model: %s\n", args.err().message.c_str());
    return 2;
  }
  if (args->help) {
    std::fputs(demo_help().c_str(), stdout);
    return 0;
  }
  if (args->dir.empty()) {
    std::fputs(demo_help().c_str(), stderr);
    return 2;
  }
  if (auto r = make_demo_model(args->dir, args->options); !r) {
    std::fprintf(stderr, "make-demo-model: %s\n", r.err().message.c_str());
    return 1;
  }
  std::fprintf(stderr, "make-demo-model: wrote %s\n", args->dir.c_str());
  return 0;
}

}  // namespace coserve::cli
