// The per-sequence random generator: xoshiro256** seeded through splitmix64. Deterministic for a
// given seed on every platform, so a request with a seed samples the same tokens every time.
#pragma once

#include <cstdint>

namespace coserve {

class seq_rng {
 public:
  explicit seq_rng(uint64_t seed = 0) noexcept {
    for (auto& w : s_) w = splitmix64(seed);
  }

  uint64_t next() noexcept {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept { return double(next() >> 11) * 0x1.0p-53; }

  // Standard normal (Box-Muller); used for random weights.
  double normal() noexcept;

 private:
  static uint64_t rotl(uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& x) noexcept {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  uint64_t s_[4];
};

}  // namespace coserve
