// mpsc_queue<T>: a bounded, lock-free, multi-producer single-consumer ring (the mailbox storage).
//
// Algorithm: D. Vyukov's bounded queue, restricted to one consumer. Every slot carries a sequence
// number `seq`. For slot i of a ring of capacity C (a power of two):
//   seq == pos          the slot is free for the producer that claims position `pos`
//   seq == pos + 1      the slot holds the value written for position `pos` (consumer may read)
//   seq == pos + C      the consumer has emptied it; free for position pos + C
// Producers claim a position with a CAS on `tail_`, write the value, then publish it with a
// release store of seq. The consumer owns `head_` outright (plain loads/stores by one thread).
//
// Sides:
//   try_push  — producer side, any thread, wait-free apart from the CAS retry loop; never blocks.
//   try_pop, size_approx, empty  — consumer side (one thread at a time; the actor runtime
//              guarantees it: a mailbox is drained only by the thread running its actor).
//   size_approx may also be read by producers: it is then only a hint.
// Full: try_push returns push_result::full and leaves `value` untouched; what the sender sees
// next is decided by the mailbox above (an error, or waiting for space).
// Close: close() sets the top bit of `tail_`. A producer's claim is a CAS on `tail_`, so every
// claim is ordered against the close in tail_'s modification order: a claim before it succeeded
// (its value will be published and must be consumed), a claim after it fails with `closed`.
// After close the number of claimed positions is frozen, so the consumer knows exactly when it
// has consumed everything (drained()); a claimed-but-unpublished slot is never mistaken for the
// end of the queue.
//
// Memory: the ring is one anonymous mapping, and each slot stores seq - i (i = its index), which
// is 0 for a slot never used; so the mapping's zero pages need no initialization, and a ring costs
// only the pages of the slots used so far. Positions go round every slot in turn, however few
// values are queued at a time: once `capacity` values have passed through it, a ring is resident
// in full (as it was from the start when every slot was initialized at construction).
//
// A producer that claimed a position but has not yet published it makes the consumer see the
// queue as empty at that slot (try_pop returns nullopt) even if later slots are published; the
// consumer retries on its next wakeup, which the producer triggers after publishing. Nothing is
// lost and per-producer order is kept (positions are claimed in each producer's program order).
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

#include <sys/mman.h>

namespace coserve::rt {

inline constexpr std::size_t k_cache_line = 64;

enum class push_result : uint8_t { ok, full, closed };

template <class T>
class mpsc_queue {
 public:
  // capacity is rounded up to a power of two (at least 2).
  explicit mpsc_queue(std::size_t capacity)
      : mask_(std::bit_ceil(capacity < 2 ? std::size_t{2} : capacity) - 1), slots_(map_slots(mask_ + 1)) {}
  ~mpsc_queue() {
    while (try_pop()) {
    }
    munmap(slots_, (mask_ + 1) * sizeof(slot));
  }
  mpsc_queue(const mpsc_queue&) = delete;
  mpsc_queue& operator=(const mpsc_queue&) = delete;

  std::size_t capacity() const noexcept { return mask_ + 1; }

  // Producer side. `value` is moved from only when the result is `ok`.
  template <class U>
  push_result try_push(U&& value) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    // relaxed: the CAS below is what orders producers among themselves (and against close());
    // the slot's seq (acquire) is what orders us after the consumer's release of that slot.
    std::size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      if (pos & k_closed) return push_result::closed;
      slot& s = slots_[pos & mask_];
      // acquire: pairs with the consumer's release store of seq in try_pop, so the consumer's
      // destruction of the previous value happens-before our construction of the new one.
      const std::size_t seq = load_seq(pos);
      const auto diff = static_cast<std::intptr_t>(seq) - static_cast<std::intptr_t>(pos);
      if (diff == 0) {
        // relaxed CAS: claiming the position needs atomicity only; publication is via seq.
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          ::new (static_cast<void*>(s.storage)) T(std::forward<U>(value));
          // release: publishes the constructed value to the consumer's acquire load.
          store_seq(pos, pos + 1);
          return push_result::ok;
        }
        // CAS failure reloaded pos (possibly with the closed bit); retry.
      } else if (diff < 0) {
        return push_result::full;  // the slot still holds the value from one lap ago
      } else {
        pos = tail_.load(std::memory_order_relaxed);  // another producer moved on; catch up
      }
    }
  }

  // Consumer side. Returns the oldest published value, or nullopt when none is ready.
  std::optional<T> try_pop() noexcept(std::is_nothrow_move_constructible_v<T>) {
    slot& s = slots_[head_ & mask_];
    // acquire: pairs with the producer's release store; the value is fully constructed.
    if (load_seq(head_) != head_ + 1) return std::nullopt;
    T* p = std::launder(reinterpret_cast<T*>(s.storage));
    std::optional<T> out(std::move(*p));
    p->~T();
    // release: our reads and the destructor happen-before a producer reuses the slot.
    store_seq(head_, head_ + mask_ + 1);
    ++head_;
    // relaxed: head_copy_ only feeds size_approx, a hint.
    head_copy_.store(head_, std::memory_order_relaxed);
    return out;
  }

  // Any thread. Later claims fail with `closed`; claims made before stay and are consumed.
  // relaxed: the claim count is ordered by tail_'s modification order alone; the values are
  // published through each slot's seq.
  void close() noexcept { tail_.fetch_or(k_closed, std::memory_order_relaxed); }

  // Any thread.
  bool closed() const noexcept { return tail_.load(std::memory_order_relaxed) & k_closed; }

  // Consumer side: closed, and every position claimed before the close has been popped.
  // relaxed: see close(); a load that does not yet see the closed bit answers false, and the
  // consumer asks again when close() notifies it.
  bool drained() const noexcept { return drained_at(head_); }

  // Consumer side: the position of the next value to pop. A consumer that hands its role to
  // another thread reads it first and then asks empty_at / drained_at, which read no
  // consumer-owned state (the next consumer may already be popping).
  std::size_t head() const noexcept { return head_; }
  // Any thread: no value is published at consumer position `h`.
  bool empty_at(std::size_t h) const noexcept {
    return load_seq(h) != h + 1;
  }
  // Any thread: closed, and every position claimed before the close is below `h`.
  bool drained_at(std::size_t h) const noexcept {
    const std::size_t t = tail_.load(std::memory_order_relaxed);
    return (t & k_closed) && (t & ~k_closed) == h;
  }

  // Consumer side: true when the next slot holds no published value.
  bool empty() const noexcept {
    return empty_at(head_);
  }

  // Any thread: number of claimed-but-not-popped positions (a hint; exact when quiescent).
  std::size_t size_approx() const noexcept {
    const std::size_t t = tail_.load(std::memory_order_relaxed) & ~k_closed;
    const std::size_t h = head_copy_.load(std::memory_order_relaxed);
    return t >= h ? t - h : 0;
  }

 private:
  // A trivial type: the zero pages of the mapping are slots with seq_rel 0 (seq == index) as they
  // are; seq_rel is only accessed through std::atomic_ref.
  struct slot {
    alignas(std::atomic_ref<std::size_t>::required_alignment) std::size_t seq_rel;  // seq - index
    alignas(T) unsigned char storage[sizeof(T)];
  };
  static_assert(std::is_trivially_default_constructible_v<slot>);

  static slot* map_slots(std::size_t n) {
    void* p = mmap(nullptr, n * sizeof(slot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<slot*>(p);
  }
  // The seq of the slot holding position pos (acquire) / set to v (release).
  std::size_t load_seq(std::size_t pos) const noexcept {
    const std::size_t i = pos & mask_;
    return std::atomic_ref<std::size_t>(slots_[i].seq_rel).load(std::memory_order_acquire) + i;
  }
  void store_seq(std::size_t pos, std::size_t v) noexcept {
    const std::size_t i = pos & mask_;
    std::atomic_ref<std::size_t>(slots_[i].seq_rel).store(v - i, std::memory_order_release);
  }

  static constexpr std::size_t k_closed = std::size_t(1) << (sizeof(std::size_t) * 8 - 1);
  const std::size_t mask_;
  slot* const slots_;
  alignas(k_cache_line) std::atomic<std::size_t> tail_{0};   // producers
  alignas(k_cache_line) std::size_t head_ = 0;               // consumer only
  std::atomic<std::size_t> head_copy_{0};                    // consumer writes, anyone reads
};

}  // namespace coserve::rt
