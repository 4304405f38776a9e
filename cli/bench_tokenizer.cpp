#include <cstdio>

namespace coserve::cli {

int bench_tokenizer(int, char**) {
  std::fprintf(stderr, "coserve bench tokenizer: not available in this build yet\n");
  return 2;
}

}  // namespace coserve::cli
