// Reading the reference fixtures (tests/reference/fixtures/*, JSON) in the model tests: number
// arrays as vectors.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <vector>

namespace coserve::test {

inline std::vector<float> floats(simdjson::dom::array a) {
  std::vector<float> out;
  for (auto x : a) out.push_back(float(double(x)));
  return out;
}

inline std::vector<int32_t> ints(simdjson::dom::array a) {
  std::vector<int32_t> out;
  for (auto x : a) out.push_back(int32_t(int64_t(x)));
  return out;
}

}  // namespace coserve::test
