// Counter-based random numbers shared by the device sampler and its CPU reference, so a seeded
// request draws the same uniforms on both (bit-identical integers; the float conversion is exact).
// No state: uniform(seed, counter, index) is a pure function (SplitMix64 finalizer over a mix).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define COSERVE_HD __host__ __device__ __forceinline__
#else
#define COSERVE_HD inline
#endif

namespace coserve::gpu {

COSERVE_HD uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A uniform in (0, 1): 24 random bits, offset by half a step so it is never 0 or 1.
COSERVE_HD float uniform01(uint64_t seed, uint64_t counter, uint64_t index) {
  const uint64_t h = mix64(mix64(seed ^ mix64(counter)) + index);
  return (float(uint32_t(h >> 40)) + 0.5f) * (1.0f / 16777216.0f);
}

// Maps a float to an unsigned key with the same order (the sampler selects thresholds on it).
COSERVE_HD uint32_t float_order_key(uint32_t bits) {
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
COSERVE_HD uint32_t float_from_order_key(uint32_t key) {
  return (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
}

}  // namespace coserve::gpu
