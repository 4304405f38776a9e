// Memory read bandwidth of this machine, the ceiling for a decode step that streams the weights:
// T threads each sum their slice of a 1 GiB buffer, one warm-up pass, then 8 timed passes.
// Prints {"threads":T,"read_gb_per_s":X}. Built and run by scripts/membw [THREADS] (default 2).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const size_t n = (size_t(1) << 30) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n, 1);
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  auto pass = [&] {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t b = n * size_t(t) / size_t(threads), e = n * size_t(t + 1) / size_t(threads);
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;  // independent chains: the loop vectorizes
        size_t i = b;
        for (; i + 4 <= e; i += 4) {
          a0 += buf[i];
          a1 += buf[i + 1];
          a2 += buf[i + 2];
          a3 += buf[i + 3];
        }
        for (; i < e; ++i) a0 += buf[i];
        sums[size_t(t)] = a0 + a1 + a2 + a3;
      });
    for (auto& th : pool) th.join();
  };
  pass();
  const auto t0 = std::chrono::steady_clock::now();
  const int passes = 8;
  for (int r = 0; r < passes; ++r) pass();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t total = 0;
  for (uint64_t x : sums) total += x;
  if (total != n) return 1;  // the sum is checked, so the reads cannot be optimised away
  std::printf("{\"threads\":%d,\"read_gb_per_s\":%.2f}\n", threads,
              double(passes) * double(n * sizeof(uint64_t)) / s / 1e9);
  return 0;
}
