#include <cstdio>

namespace coserve::cli {

int bench_serve(int, char**) {
  std::fprintf(stderr, "coserve bench serve: not available in this build yet\n");
  return 2;
}

}  // namespace coserve::cli
