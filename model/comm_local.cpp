// The in-process communicator: ranks are threads sharing one state. Each collective publishes a
// pointer per rank, meets at a barrier, works on the published buffers, and meets again before
// anyone may touch its buffer. The all-reduce splits the vector into one segment per rank; each
// rank sums its segment over all ranks (in rank order) and writes the sum into every rank's
// buffer. abort() poisons the group: every barrier then returns at once and every collective
// fails.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "model/communicator.hpp"
#include "model/executor.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace coserve {
namespace {

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

struct local_shared {
  explicit local_shared(int32_t n) : size(n), ptrs(size_t(n)), sizes(size_t(n)) {}

  // Spins briefly (ranks usually arrive within microseconds of each other), then yields, then
  // sleeps on the generation (ranks may outnumber cores). False once the group was aborted.
  bool barrier() {
    const uint64_t g = generation.load();
    if (failed.load()) return false;
    if (arrived.fetch_add(1) + 1 == size) {
      arrived.store(0);
      generation.fetch_add(1);
      generation.notify_all();
      return !failed.load();
    }
    for (int i = 0; i < 4000; ++i) {
      if (generation.load() != g) return !failed.load();
      cpu_relax();
    }
    for (int i = 0; i < 64; ++i) {
      if (generation.load() != g) return !failed.load();
      std::this_thread::yield();
    }
    while (generation.load() == g) generation.wait(g);
    return !failed.load();
  }

  // Marks the group failed and wakes every rank waiting in a barrier.
  void abort(int32_t rank, const std::string& reason) {
    {
      std::lock_guard lk(mu);
      if (why.empty()) why = "rank " + std::to_string(rank) + ": " + reason;
    }
    failed.store(true);
    generation.fetch_add(1);
    generation.notify_all();
  }

  error failure() {
    std::lock_guard lk(mu);
    return error{k_executor_fatal, "tensor parallel group failed (" + why + ")"};
  }

  const int32_t size;
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string why;  // the first abort's reason (under mu)
  std::atomic<int32_t> arrived{0};
  std::atomic<uint64_t> generation{0};
  std::vector<const void*> ptrs;
  std::vector<size_t> sizes;
};

class local_communicator final : public communicator {
 public:
  local_communicator(std::shared_ptr<local_shared> s, int32_t rank)
      : s_(std::move(s)), rank_(rank) {}

  int32_t rank() const noexcept override { return rank_; }
  int32_t size() const noexcept override { return s_->size; }
  std::string backend() const override { return "local"; }

  result<void> all_reduce_sum(float* data, size_t n) override {
    local_shared& s = *s_;
    if (s.size == 1) return {};
    s.ptrs[size_t(rank_)] = data;
    s.sizes[size_t(rank_)] = n;
    if (!s.barrier()) return s.failure();
    for (int32_t r = 0; r < s.size; ++r)
      if (s.sizes[size_t(r)] != n) {
        s.abort(rank_, "all-reduce: ranks passed different sizes");
        return s.failure();
      }
    // This rank owns segment [b, e) of every rank's buffer: it sums it (rank 0 + rank 1 + ...) a
    // chunk at a time and writes the sum back into every buffer. Nobody else touches the segment,
    // and no rank touches its own buffer until the barrier below.
    const size_t per = (n + size_t(s.size) - 1) / size_t(s.size);
    const size_t b = std::min(n, per * size_t(rank_)), e = std::min(n, b + per);
    constexpr size_t k_chunk = 2048;
    float sum[k_chunk];
    for (size_t c = b; c < e; c += k_chunk) {
      const size_t m = std::min(k_chunk, e - c);
      const float* r0 = static_cast<const float*>(s.ptrs[0]) + c;
      const float* r1 = static_cast<const float*>(s.ptrs[1]) + c;
      for (size_t i = 0; i < m; ++i) sum[i] = r0[i] + r1[i];
      for (int32_t r = 2; r < s.size; ++r) {
        const float* src = static_cast<const float*>(s.ptrs[size_t(r)]) + c;
        for (size_t i = 0; i < m; ++i) sum[i] += src[i];
      }
      for (int32_t r = 0; r < s.size; ++r)
        std::memcpy(static_cast<float*>(const_cast<void*>(s.ptrs[size_t(r)])) + c, sum,
                    m * sizeof(float));
    }
    if (!s.barrier()) return s.failure();
    return {};
  }

  void abort(const std::string& why) override { s_->abort(rank_, why); }

  result<void> gather(const void* data, size_t bytes, std::vector<unsigned char>* out,
                      int32_t root) override {
    local_shared& s = *s_;
    s.ptrs[size_t(rank_)] = data;
    s.sizes[size_t(rank_)] = bytes;
    if (!s.barrier()) return s.failure();
    if (rank_ == root && out) {
      size_t total = 0;
      for (size_t b : s.sizes) total += b;
      out->resize(total);
      size_t at = 0;
      for (int32_t r = 0; r < s.size; ++r) {
        if (s.sizes[size_t(r)])
          std::memcpy(out->data() + at, s.ptrs[size_t(r)], s.sizes[size_t(r)]);
        at += s.sizes[size_t(r)];
      }
    }
    if (!s.barrier()) return s.failure();
    return {};
  }

  result<void> broadcast(std::vector<unsigned char>& data, int32_t root) override {
    local_shared& s = *s_;
    if (rank_ == root) s.ptrs[size_t(root)] = &data;
    if (!s.barrier()) return s.failure();
    if (rank_ != root) data = *static_cast<const std::vector<unsigned char>*>(s.ptrs[size_t(root)]);
    if (!s.barrier()) return s.failure();
    return {};
  }

 private:
  std::shared_ptr<local_shared> s_;
  int32_t rank_;
};

}  // namespace

std::vector<std::unique_ptr<communicator>> make_local_group(int32_t size) {
  auto shared = std::make_shared<local_shared>(std::max(1, size));
  std::vector<std::unique_ptr<communicator>> out;
  for (int32_t r = 0; r < shared->size; ++r)
    out.push_back(std::make_unique<local_communicator>(shared, r));
  return out;
}

}  // namespace coserve
