// id_map against std::unordered_map: the same contents after the same random insertions, lookups
// and erasures (backward-shift deletion over wrapped probe runs included).
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>

#include "base/id_map.hpp"

using coserve::id_map;

TEST_CASE("id_map: random operations give what std::unordered_map gives", "[base]") {
  std::mt19937_64 rng(11);
  for (const uint64_t key_space : {uint64_t{8}, uint64_t{64}, uint64_t{1} << 40}) {
    id_map<std::string> m;
    std::unordered_map<uint64_t, std::string> ref;
    for (int op = 0; op < 20000; ++op) {
      // Sequence-id-like keys: (request << 16) | index, never 0.
      const uint64_t key = ((rng() % key_space + 1) << 16) | (rng() % 3);
      switch (rng() % 4) {
        case 0:
        case 1: {
          const std::string v = std::to_string(op);
          const bool inserted = m.emplace(key, v).second;
          CHECK(inserted == ref.emplace(key, v).second);
          break;
        }
        case 2:
          CHECK(m.erase(key) == (ref.erase(key) == 1));
          break;
        default: {
          const std::string* got = m.find(key);
          auto it = ref.find(key);
          REQUIRE((got == nullptr) == (it == ref.end()));
          if (got) CHECK(*got == it->second);
        }
      }
      REQUIRE(m.size() == ref.size());
    }
    size_t seen = 0;
    m.for_each([&](uint64_t k, const std::string& v) {
      ++seen;
      REQUIRE(ref.count(k) == 1);
      CHECK(ref[k] == v);
    });
    CHECK(seen == ref.size());
    for (const auto& [k, v] : ref) REQUIRE(m.find(k) != nullptr);
  }
  id_map<int> m;
  m[7] = 1;
  m[7] += 2;
  CHECK(*m.find(7) == 3);
  CHECK(m.contains(7));
  CHECK_FALSE(m.contains(8));
}

TEST_CASE("id_map keeps its entries through reserve and works again after clear") {
  id_map<int> m;
  for (uint64_t k = 1; k <= 100; ++k) m.emplace(k * 977, static_cast<int>(k));
  m.reserve(5000);
  REQUIRE(m.size() == 100);
  for (uint64_t k = 1; k <= 100; ++k) REQUIRE(*m.find(k * 977) == static_cast<int>(k));
  m.reserve(10);  // never shrinks
  CHECK(*m.find(977) == 1);
  m.clear();  // back to the smallest table: every key must land inside it
  CHECK(m.empty());
  CHECK_FALSE(m.contains(977));
  for (uint64_t k = 1; k <= 40; ++k) m.emplace(k * 31337, static_cast<int>(k));
  for (uint64_t k = 1; k <= 40; ++k) REQUIRE(*m.find(k * 31337) == static_cast<int>(k));
  CHECK(m.size() == 40);
}
