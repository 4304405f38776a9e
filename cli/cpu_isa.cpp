// --cpu-isa NAME, shared by `serve` and `generate` (cli/commands.hpp).
#include <cstdio>
#include <string>
#include <string_view>

#include "cli/commands.hpp"
#include "model/cpu_kernels.hpp"

namespace coserve::cli {

bool apply_cpu_isa(const char* prog, const char* name) {
  if (std::string_view(name) == "auto") return cpu_isa_force("");
  if (cpu_isa_force(name)) return true;
  std::string runs;
  for (const std::string& isa : cpu_isa_available()) runs += (runs.empty() ? "" : ", ") + isa;
  std::fprintf(stderr, "%s: --cpu-isa %s: not an instruction set this CPU runs (auto, %s)\n", prog,
               name, runs.c_str());
  return false;
}

}  // namespace coserve::cli
