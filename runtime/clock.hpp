// trace_clock: the runtime's nanosecond clock for spans and enqueue times. With tracing on it is
// read twice per message (by the sender and by the actor), so its cost is part of every message's.
//
// Where the CPU's time-stamp counter is what the kernel itself keeps time with (x86-64: invariant
// TSC and Linux's clocksource "tsc", which the kernel only selects once it has found the counters
// of all CPUs synchronised; KVM guests of hosts with an invariant TSC select it too), now_ns() is
// one RDTSC scaled to nanoseconds with a multiplier measured once per process against
// steady_clock (2 ms, at the first call). On 64-bit Arm it is the generic timer's virtual counter
// (CNTVCT_EL0), whose frequency the CPU states (CNTFRQ_EL0). Elsewhere, or with
// COSERVE_TRACE_CLOCK=steady_clock in the environment, it is steady_clock (about 30 ns a read in
// a KVM guest against 12 ns for RDTSC; the runtime's benchmark then loses about half its fan-in
// and pipeline rates with tracing on: docs/benchmarks/runtime.md).
//
// The values are nanoseconds, equal to steady_clock's at the first call, monotonic on a thread and
// comparable across threads. RDTSC is not ordered with the loads before it, so a reading taken
// right after acquiring something another thread published may come out earlier than a reading
// that thread took before publishing: by as much as the load took, which for a contended line can
// be microseconds (up to ~3 us seen on a 2-vCPU VM under load). Spans allow for it
// (runtime/actor_cell.hpp); a trace's order across threads is good to a few microseconds. With the
// TSC they advance at the measured rate: they may drift from steady_clock by the calibration's
// error (about 1e-5 of elapsed time), which is why every span and every time-out measured on the
// tracer's clock reads this clock and no other.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace coserve::rt {

__extension__ using uint128_t = unsigned __int128;  // GCC and Clang, on 64-bit targets

class trace_clock {
 public:
  // Nanoseconds since the process's clock origin.
  static int64_t now_ns() noexcept {
    const scale& s = get();
#if defined(__x86_64__) || defined(__aarch64__)
    if (s.counter) {
      const uint64_t ticks = read_counter() - s.ticks0;
      return s.ns0 + static_cast<int64_t>((static_cast<uint128_t>(ticks) * s.mult) >> 32);
    }
#endif
    return steady_ns();
  }
  // "tsc", "cntvct" or "steady_clock": what now_ns() reads (for startup logs and benchmarks).
  static const char* source() noexcept;

 private:
  struct scale {
    bool counter = false;  // read the CPU's counter (else steady_clock)
    uint64_t ticks0 = 0;   // counter value at the origin
    int64_t ns0 = 0;       // steady_clock's nanoseconds at the origin
    uint64_t mult = 0;     // nanoseconds per tick, 32.32 fixed point
  };
  static const scale& get() noexcept {
    static const scale s = calibrate();
    return s;
  }
  static scale calibrate() noexcept;  // runtime/clock.cpp
  static int64_t steady_ns() noexcept;
#if defined(__x86_64__)
  // No LFENCE before it (the kernel's clock reads have one): an LFENCE costs the runtime's
  // benchmark a quarter of its fan-in rate, where the reads are two per message.
  static uint64_t read_counter() noexcept { return __rdtsc(); }
#elif defined(__aarch64__)
  static uint64_t read_counter() noexcept {
    uint64_t v;
    asm volatile("isb; mrs %0, cntvct_el0" : "=r"(v)::"memory");
    return v;
  }
#endif
};

}  // namespace coserve::rt
