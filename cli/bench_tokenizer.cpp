// `coserve bench tokenizer TOKENIZER --file TEXT [--seconds S] [--lines] [--add-special-tokens]`:
// encode throughput of one thread. The file is encoded whole (or, with --lines, one encode call per
// line, prompt-sized inputs), repeatedly, for at least S seconds after one warm-up pass (which also
// fills the BPE cache, as a long-running server's would be).
// Prints {"tokenizer":...,"bytes":...,"mb_per_s":...,"tokens":...,"iterations":...,"seconds":...}.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/tokenizer/tokenizer.hpp"

namespace coserve::cli {

int bench_tokenizer(int argc, char** argv) {
  std::string path, file;
  double seconds = 3.0;
  bool add_special = false;
  bool by_lines = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: coserve bench tokenizer TOKENIZER --file TEXT [--seconds S] [--lines] "
          "[--add-special-tokens]\n"
          "  single-threaded encode throughput of TEXT in MB/s: the whole file per call, or one\n"
          "  call per line with --lines\n");
      return 0;
    }
    if (a == "--file" && i + 1 < argc)
      file = argv[++i];
    else if (a == "--seconds" && i + 1 < argc)
      seconds = std::stod(argv[++i]);
    else if (a == "--add-special-tokens")
      add_special = true;
    else if (a == "--lines")
      by_lines = true;
    else if (!a.starts_with("--") && path.empty())
      path = a;
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

  std::vector<std::string_view> inputs;
  if (by_lines) {
    for (std::size_t b = 0; b < text.size();) {
      std::size_t e = text.find('\n', b);
      e = e == std::string::npos ? text.size() : e + 1;  // the newline stays with its line
      inputs.push_back(std::string_view(text).substr(b, e - b));
      b = e;
    }
  } else {
    inputs.push_back(text);
  }
  auto encode_all = [&] {
    std::size_t n = 0;
    for (auto input : inputs) n += tok->encode(input, add_special).size();
    return n;
  };
  const std::size_t tokens = encode_all();  // warm-up
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  long iterations = 0;
  double elapsed = 0;
  do {
    if (encode_all() != tokens) return 1;
    ++iterations;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < seconds);
  const double mb_per_s =
      static_cast<double>(text.size()) * static_cast<double>(iterations) / elapsed / 1e6;
  std::string name = path;
  for (char& c : name)
    if (c == '"' || c == '\\') c = '_';
  std::printf(
      "{\"tokenizer\":\"%s\",\"bytes\":%zu,\"mb_per_s\":%.3f,\"tokens\":%zu,\"iterations\":%ld,"
      "\"seconds\":%.3f,\"calls_per_iteration\":%zu}\n",
      name.c_str(), text.size(), mb_per_s, tokens, iterations, elapsed, inputs.size());
  return 0;
}

}  // namespace coserve::cli
