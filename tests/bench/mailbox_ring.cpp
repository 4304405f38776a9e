// What page release costs a mailbox ring (runtime/mpsc_queue.hpp), one thread pushing and popping
// bursts through a 2^16-slot ring, side by side in one run:
//   keep    — release_chunk_bytes 0: every page written stays resident
//   default — 256 KiB chunks, dropped when the previous lap through them began >= 1 s ago (a ring
//             going round as fast as this one keeps its pages)
//   always  — every chunk dropped at its end (release_after 0): each page written again faults
// for 48- and 256-byte slots. One warm-up pass per case, then the timed pass. Prints one JSON line
// per case: ns per message (push + pop) and the ring's resident bytes at the end.
// Built and run by scripts/bench-mailbox-ring.
#include <array>
#include <chrono>
#include <cstdio>

#include "runtime/mpsc_queue.hpp"

namespace {

using coserve::rt::mpsc_queue;

template <std::size_t Bytes>
void run(const char* name, std::size_t chunk, std::chrono::nanoseconds after, std::size_t burst) {
  using payload = std::array<char, Bytes>;
  mpsc_queue<payload> q(std::size_t(1) << 16, chunk, after);
  payload p{};
  const std::size_t n = std::size_t(8) << 20;
  bool ok = true;
  auto pass = [&] {
    for (std::size_t i = 0; i < n; i += burst) {
      for (std::size_t j = 0; j < burst; ++j)
        ok = ok && q.try_push(p) == coserve::rt::push_result::ok;
      for (std::size_t j = 0; j < burst; ++j) ok = ok && q.try_pop().has_value();
    }
  };
  pass();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  pass();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "{\"case\":\"%s\",\"slot_bytes\":%zu,\"burst\":%zu,\"ns_per_message\":%.1f,\"resident_kib\":%"
      "zu,\"ok\":%s}\n",
      name, Bytes + 8, burst, s / double(n) * 1e9, q.resident_bytes() >> 10, ok ? "true" : "false");
}

template <std::size_t Bytes>
void cases(std::size_t burst) {
  constexpr std::size_t chunk = mpsc_queue<char>::k_default_release_chunk_bytes;
  run<Bytes>("keep", 0, std::chrono::seconds(1), burst);
  run<Bytes>("default", chunk, mpsc_queue<char>::k_default_release_after, burst);
  run<Bytes>("always", chunk, std::chrono::nanoseconds(0), burst);
}

}  // namespace

int main() {
  for (std::size_t burst : {1, 64}) {
    cases<40>(burst);
    cases<248>(burst);
  }
}
