// small_vector against std::vector: the same values after the same operations, inside the object
// and past it.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "base/small_vector.hpp"

using coserve::small_vector;

TEST_CASE("small_vector: random operations give what std::vector gives", "[base]") {
  std::mt19937 rng(5);
  for (int round = 0; round < 200; ++round) {
    small_vector<int32_t, 4> s;
    std::vector<int32_t> v;
    for (int op = 0; op < 60; ++op) {
      const int32_t x = static_cast<int32_t>(rng() % 100);
      switch (rng() % 8) {
        case 0:
          s.push_back(x);
          v.push_back(x);
          break;
        case 1: {
          const size_t n = rng() % 12;
          s.resize(n, x);
          v.resize(n, x);
          break;
        }
        case 2: {
          const std::vector<int32_t> more(rng() % 6, x);
          const size_t at = v.empty() ? 0 : rng() % (v.size() + 1);
          s.insert(s.begin() + at, more.begin(), more.end());
          v.insert(v.begin() + static_cast<ptrdiff_t>(at), more.begin(), more.end());
          break;
        }
        case 3:
          if (!v.empty()) {
            const size_t at = rng() % v.size();
            s.erase(s.begin() + at, s.end());
            v.erase(v.begin() + static_cast<ptrdiff_t>(at), v.end());
          }
          break;
        case 4: {  // copies and moves, inside and on the heap
          small_vector<int32_t, 4> c = s;
          small_vector<int32_t, 4> m = std::move(c);
          s = m;
          break;
        }
        case 5:
          s = small_vector<int32_t, 4>(v.begin(), v.end());
          break;
        case 6:
          s.assign(v.begin(), v.end());
          break;
        default:
          if (!v.empty()) {  // push_back of its own element
            s.push_back(s.front());
            v.push_back(v.front());
          }
      }
      REQUIRE(s.size() == v.size());
      REQUIRE(s == v);
      REQUIRE(std::span<const int32_t>(s).size() == v.size());
      REQUIRE(s.capacity() >= s.size());
    }
  }
  small_vector<int32_t, 2> a{1, 2, 3};
  CHECK(a.capacity() >= 3);
  CHECK(a.back() == 3);
  CHECK(a.to_vector() == std::vector<int32_t>{1, 2, 3});
  a = {7};
  CHECK(a == std::vector<int32_t>{7});
  CHECK_FALSE(a == std::vector<int32_t>{7, 8});
}
