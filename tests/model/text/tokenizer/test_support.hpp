// Shared helpers for the tokenizer tests: where the fixtures live and JSON reading (the shared
// test data and skipping come from tests/skip.hpp).
#pragma once

#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/skip.hpp"

namespace coserve::test {

inline std::filesystem::path fixtures() {
  return std::filesystem::path(COSERVE_SOURCE_DIR) / "tests/reference/fixtures/tokenizer";
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<int32_t> to_ids(simdjson::dom::array a) {
  std::vector<int32_t> v;
  for (auto x : a) v.push_back(static_cast<int32_t>(int64_t(x)));
  return v;
}

}  // namespace coserve::test
