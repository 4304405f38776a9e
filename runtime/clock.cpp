#include "runtime/clock.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace coserve::rt {

int64_t trace_clock::steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

#if defined(__x86_64__)
// Invariant TSC (CPUID 0x80000007, EDX bit 8) and the kernel keeping time with it: Linux selects
// the "tsc" clocksource only after checking that the counters of all CPUs agree.
bool tsc_usable() noexcept {
  if (const char* force = std::getenv("COSERVE_TRACE_CLOCK");
      force != nullptr && std::string_view(force) == "steady_clock")
    return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  __cpuid(0x80000007u, a, b, c, d);
  if ((d & (1u << 8)) == 0) return false;
  try {
    std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    std::string name;
    return static_cast<bool>(f >> name) && name == "tsc";
  } catch (...) {
    return false;
  }
}
#endif

}  // namespace

trace_clock::scale trace_clock::calibrate() noexcept {
  scale s;
  s.ns0 = steady_ns();
#if defined(__x86_64__)
  if (!tsc_usable()) return s;
  // One (ticks, ns) pair: the steady_clock reading bracketed by two counter reads, the tightest
  // of a few tries, at the bracket's middle.
  struct pair {
    uint64_t ticks;
    int64_t ns;
  };
  auto sample = []() noexcept {
    pair best{0, 0};
    uint64_t best_width = ~uint64_t{0};
    for (int i = 0; i < 8; ++i) {
      const uint64_t a = read_counter();
      const int64_t ns = steady_ns();
      const uint64_t b = read_counter();
      if (b - a < best_width) {
        best_width = b - a;
        best = {a + (b - a) / 2, ns};
      }
    }
    return best;
  };
  const pair p0 = sample();
  const int64_t until = p0.ns + 2'000'000;  // 2 ms: the bracket's width is ~1e-5 of it
  while (steady_ns() < until) {
  }
  const pair p1 = sample();
  if (p1.ticks <= p0.ticks || p1.ns <= p0.ns) return s;
  s.mult =
      static_cast<uint64_t>((static_cast<uint128_t>(p1.ns - p0.ns) << 32) / (p1.ticks - p0.ticks));
  s.ticks0 = p0.ticks;
  s.ns0 = p0.ns;
  s.counter = s.mult != 0;
#elif defined(__aarch64__)
  uint64_t freq = 0;
  asm volatile("mrs %0, cntfrq_el0" : "=r"(freq));
  if (freq == 0) return s;
  s.mult = static_cast<uint64_t>((static_cast<uint128_t>(1'000'000'000) << 32) / freq);
  s.ticks0 = read_counter();
  s.ns0 = steady_ns();
  s.counter = s.mult != 0;
#endif
  return s;
}

const char* trace_clock::source() noexcept {
  if (!get().counter) return "steady_clock";
#if defined(__aarch64__)
  return "cntvct";
#else
  return "tsc";
#endif
}

}  // namespace coserve::rt
