// `coserve bench tokenizer TOKENIZER --file TEXT [--seconds S] [--add-special-tokens]`: encode
// throughput of one thread. The file is encoded whole, repeatedly, for at least S seconds (after
// one warm-up pass, which also fills the BPE cache as a long-running server's would be).
// Prints {"tokenizer":...,"bytes":...,"mb_per_s":...,"tokens":...,"iterations":...,"seconds":...}.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "model/tokenizer/tokenizer.hpp"

namespace coserve::cli {

int bench_tokenizer(int argc, char** argv) {
  std::string path, file;
  double seconds = 3.0;
  bool add_special = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: coserve bench tokenizer TOKENIZER --file TEXT [--seconds S] [--add-special-tokens]\n"
                  "  single-threaded encode throughput of TEXT (whole file per call), in MB/s\n");
      return 0;
    }
    if (a == "--file" && i + 1 < argc) file = argv[++i];
    else if (a == "--seconds" && i + 1 < argc) seconds = std::stod(argv[++i]);
    else if (a == "--add-special-tokens") add_special = true;
    else if (!a.starts_with("--") && path.empty()) path = a;
    else {
      std::fprintf(stderr, "coserve bench tokenizer: unexpected argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (path.empty() || file.empty()) {
    std::fprintf(stderr, "usage: coserve bench tokenizer TOKENIZER --file TEXT [--seconds S]\n");
    return 2;
  }
  auto tok = tokenizer::load(path);
  if (!tok) {
    std::fprintf(stderr, "coserve bench tokenizer: %s\n", tok.err().message.c_str());
    return 1;
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "coserve bench tokenizer: cannot open %s\n", file.c_str());
    return 1;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  const std::size_t tokens = tok->encode(text, add_special).size();  // warm-up
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  long iterations = 0;
  double elapsed = 0;
  do {
    const auto ids = tok->encode(text, add_special);
    if (ids.size() != tokens) return 1;
    ++iterations;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < seconds);
  const double mb_per_s = static_cast<double>(text.size()) * static_cast<double>(iterations) / elapsed / 1e6;
  std::string name = path;
  for (char& c : name)
    if (c == '"' || c == '\\') c = '_';
  std::printf("{\"tokenizer\":\"%s\",\"bytes\":%zu,\"mb_per_s\":%.3f,\"tokens\":%zu,\"iterations\":%ld,\"seconds\":%.3f}\n",
              name.c_str(), text.size(), mb_per_s, tokens, iterations, elapsed);
  return 0;
}

}  // namespace coserve::cli
