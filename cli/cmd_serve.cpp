#include <cstdio>

#include "cli/commands.hpp"

namespace coserve::cli {

int cmd_serve(int, char** argv) {
  std::fprintf(stderr, "coserve %s: not available in this build yet\n", argv[0]);
  return 2;
}

}  // namespace coserve::cli
