// `coserve bench serve [flags]`: runs tests/bench/bench_serve.py (N concurrent streaming clients
// against this binary's `serve --demo`; JSON with requests/s, tokens/s, TTFT/ITL/e2e percentiles,
// optional PNG). Run from the project root; uses .venv/bin/python when present (scripts/pyenv).
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace coserve::cli {

int bench_serve(int argc, char** argv) {
  const char* script = "tests/bench/bench_serve.py";
  if (!std::filesystem::exists(script)) {
    std::fprintf(stderr, "coserve bench serve: run from the project root (%s not found)\n", script);
    return 2;
  }
  std::string python = std::filesystem::exists(".venv/bin/python") ? ".venv/bin/python" : "python3";
  char self[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::vector<std::string> args = {python, script};
  if (n > 0) {
    args.push_back("--bin");
    args.emplace_back(self, static_cast<size_t>(n));
  }
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execvp(cargs[0], cargs.data());
  std::fprintf(stderr, "coserve bench serve: cannot run %s: %s\n", python.c_str(),
               std::strerror(errno));
  return 2;
}

}  // namespace coserve::cli
