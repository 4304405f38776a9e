#include <cstdio>

namespace coserve::cli {

int bench_pipeline(int, char**) {
  std::fprintf(stderr, "coserve bench pipeline: not available in this build yet\n");
  return 2;
}

}  // namespace coserve::cli
