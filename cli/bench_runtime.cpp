#include <cstdio>

namespace coserve::cli {

int bench_runtime(int, char**) {
  std::fprintf(stderr, "coserve bench runtime: not available in this build yet\n");
  return 2;
}

}  // namespace coserve::cli
