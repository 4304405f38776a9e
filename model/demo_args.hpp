// Command-line flags of `coserve make-demo-model` -> demo_options. Shared by the CLI and by the
// tests that rebuild fixture models from the flags recorded in a fixture.
#pragma once

#include <string>
#include <vector>

#include "base/result.hpp"
#include "model/demo_model.hpp"

namespace coserve {

struct demo_args {
  demo_options options;
  std::string dir;    // the positional DIR (may be empty)
  bool help = false;  // --help / -h seen
};

// The --help text (its list of architectures from model/architectures.hpp).
std::string demo_help();

// args: the flags after the subcommand name. Error "invalid_argument" naming the bad flag.
result<demo_args> parse_demo_args(const std::vector<std::string>& args);

}  // namespace coserve
