// mpsc_queue<T>: a bounded, lock-free, multi-producer single-consumer ring (the mailbox storage).
//
// Algorithm: D. Vyukov's bounded queue, restricted to one consumer. Every slot carries a sequence
// number `seq`. For slot i of a ring of C slots (a power of two):
//   seq == pos          the slot is free for the producer that claims position `pos`
//   seq == pos + 1      the slot holds the value written for position `pos` (consumer may read)
//   seq == pos + C      the consumer has emptied it; free for position pos + C
//                       (with page release, the slot reads 0 instead: see Memory below)
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
// values are queued at a time, so a ring that kept every page it touched would be resident in full
// once `capacity` values had passed through it.
//
// Page release (rings of at least 8 release chunks; 256 KiB chunks by default): the ring is cut
// into chunks of S slots that start and end on page boundaries. When the consumer pops the first
// slot of a chunk it decides whether that chunk's pages go back to the system at its end: they do
// when the consumer's previous lap through the chunk began `release_after` ago or longer (1 s by
// default) or never. A ring that goes round faster keeps its pages, since writing a dropped page
// again costs a page fault (about 2 us in a VM: 100+ ns a message with 256-byte slots, where
// the push and pop take 20 ns); a slower one pays at most one fault per page per `release_after`.
// In a kept chunk each popped slot is handed back at once, as above. In a dropped chunk the
// consumer hands nothing back slot by slot: after popping its last slot it drops the chunk's pages
// (madvise MADV_DONTNEED: they read as zeros again and cost no memory until written) and then
// publishes its position in `head_copy_` (release). A slot that reads 0 at a position of a later
// lap (pos >= ring size) is free exactly when the consumer has passed pos - ring size: the
// producer checks `head_copy_` (acquire) for that, which also orders the consumer's destruction
// of the old value before the new one is constructed. Until the chunk is dropped its popped slots
// still read "full", so no producer writes into a chunk while it is being dropped. A ring whose
// chunks are dropped is resident only for the chunks between the consumer and the producers (the
// values queued plus up to two chunks), whatever has passed through it. `capacity()` is then the
// ring's slots less one chunk: that many values always fit (a push can fail only when the ring
// holds at least that many), so a sender waiting for space is not woken while none can be had.
//
// A producer that claimed a position but has not yet published it makes the consumer see the
// queue as empty at that slot (try_pop returns nullopt) even if later slots are published; the
// consumer retries on its next wakeup, which the producer triggers after publishing. Nothing is
// lost and per-producer order is kept (positions are claimed in each producer's program order).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <numeric>
#include <optional>
#include <type_traits>
#include <utility>

namespace coserve::rt {

inline constexpr std::size_t k_cache_line = 64;

enum class push_result : uint8_t { ok, full, closed };

// Release chunks of this many bytes (rounded to whole pages and a power of two of slots) when the
// ring is at least 8 chunks; 0 turns page release off (mpsc_queue and spawn_options' default).
inline constexpr std::size_t k_default_mailbox_release_chunk_bytes = std::size_t(256) << 10;

template <class T>
class mpsc_queue {
 public:
  static constexpr std::size_t k_default_release_chunk_bytes =
      k_default_mailbox_release_chunk_bytes;
  // A chunk is dropped when the consumer's previous lap through it began this long ago or longer.
  static constexpr std::chrono::nanoseconds k_default_release_after = std::chrono::seconds(1);

  // capacity is rounded up to a power of two (at least 2): the ring's slots. With page release,
  // capacity() is one release chunk less (at most 1/8 less).
  explicit mpsc_queue(std::size_t capacity,
                      std::size_t release_chunk_bytes = k_default_release_chunk_bytes,
                      std::chrono::nanoseconds release_after = k_default_release_after)
      : chunk_(chunk_slots(capacity, release_chunk_bytes)),
        mask_(std::bit_ceil(std::max<std::size_t>(capacity, 2)) - 1),
        slots_(map_slots(mask_ + 1, chunk_ != 0)),
        release_after_ns_(release_after.count()),
        lap_start_ns_(chunk_ ? new int64_t[(mask_ + 1) / chunk_]() : nullptr) {}
  ~mpsc_queue() {
    while (try_pop()) {
    }
    munmap(slots_, (mask_ + 1) * sizeof(slot));
  }
  mpsc_queue(const mpsc_queue&) = delete;
  mpsc_queue& operator=(const mpsc_queue&) = delete;

  // The number of values that always fit (pushes from an empty ring that cannot fail).
  std::size_t capacity() const noexcept { return mask_ + 1 - chunk_; }
  // Slots per release chunk; 0 when the ring keeps its pages.
  std::size_t release_chunk() const noexcept { return chunk_; }
  // Any thread: bytes of the ring's mapping resident in memory now (mincore; a measurement).
  std::size_t resident_bytes() const {
    const std::size_t page = page_size();
    const std::size_t bytes = (mask_ + 1) * sizeof(slot);
    const std::size_t pages = (bytes + page - 1) / page;
    std::unique_ptr<unsigned char[]> vec(new unsigned char[pages]);
    if (mincore(slots_, bytes, vec.get()) != 0) return 0;
    std::size_t n = 0;
    for (std::size_t i = 0; i < pages; ++i) n += vec[i] & 1;
    return n * page;
  }

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
      // A slot still holding the value from a lap ago is full, unless it belongs to a dropped
      // chunk that the consumer has passed (released_free).
      if (diff == 0 || (diff < 0 && released_free(pos, seq))) {
        // relaxed CAS: claiming the position needs atomicity only; publication is via seq.
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          ::new (static_cast<void*>(s.storage)) T(std::forward<U>(value));
          // release: publishes the constructed value to the consumer's acquire load.
          store_seq(pos, pos + 1);
          return push_result::ok;
        }
        // CAS failure reloaded pos (possibly with the closed bit); retry.
      } else if (diff < 0) {
        return push_result::full;
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
    if (chunk_ != 0 && (head_ & (chunk_ - 1)) == 0) dropping_ = drop_chunk_starting(head_);
    if (!dropping_) {
      // release: our reads and the destructor happen-before a producer reuses the slot.
      store_seq(head_, head_ + mask_ + 1);
    } else if (((head_ + 1) & (chunk_ - 1)) == 0) {
      release_chunk(head_ + 1 - chunk_);  // popped the chunk's last slot
    }
    ++head_;
    // release: with page release, a producer that finds a dropped slot acquires head_copy_ to see
    // that the consumer passed it (released_free); otherwise it only feeds size_approx.
    head_copy_.store(head_, std::memory_order_release);
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
  bool empty_at(std::size_t h) const noexcept { return load_seq(h) != h + 1; }
  // Any thread: closed, and every position claimed before the close is below `h`.
  bool drained_at(std::size_t h) const noexcept {
    const std::size_t t = tail_.load(std::memory_order_relaxed);
    return (t & k_closed) && (t & ~k_closed) == h;
  }

  // Consumer side: true when the next slot holds no published value.
  bool empty() const noexcept { return empty_at(head_); }

  // Any thread: positions claimed so far (published or not; the closed bit masked off). Less the
  // consumer's position, the values queued at the moment of the read.
  std::size_t claimed() const noexcept { return tail_.load(std::memory_order_relaxed) & ~k_closed; }

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

  static std::size_t page_size() noexcept {
    static const std::size_t page = [] {
      const long p = sysconf(_SC_PAGESIZE);
      return p > 0 ? static_cast<std::size_t>(p) : std::size_t{4096};
    }();
    return page;
  }
  // Slots per release chunk (a power of two whose bytes are whole pages), or 0: no page release.
  static std::size_t chunk_slots(std::size_t capacity, std::size_t chunk_bytes) noexcept {
    if (chunk_bytes == 0) return 0;
    const std::size_t page = page_size();
    std::size_t s = page / std::gcd(page, sizeof(slot));  // fewest slots filling whole pages
    while (s * sizeof(slot) < chunk_bytes) s *= 2;
    return std::bit_ceil(capacity) >= 8 * s ? s : 0;
  }
  static slot* map_slots(std::size_t n, bool release) {
    void* p =
        mmap(nullptr, n * sizeof(slot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    // Huge pages would keep 2 MiB resident for every chunk touched; a failure only costs memory.
    if (release) (void)madvise(p, n * sizeof(slot), MADV_NOHUGEPAGE);
    return static_cast<slot*>(p);
  }
  // Consumer side, at the first pop of the chunk starting at `pos`: whether it is dropped at its
  // end.
  bool drop_chunk_starting(std::size_t pos) noexcept {
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    int64_t& last = lap_start_ns_[(pos & mask_) / chunk_];
    const bool drop = last == 0 || now - last >= release_after_ns_;
    last = now;
    return drop;
  }
  // Consumer side: every value of the chunk starting at position `first` has been popped.
  void release_chunk(std::size_t first) noexcept {
    slot* s = &slots_[first & mask_];
    if (madvise(s, chunk_ * sizeof(slot), MADV_DONTNEED) == 0) return;
    // Not dropped (never expected for a private anonymous mapping): hand the slots back one by one.
    for (std::size_t pos = first; pos != first + chunk_; ++pos) store_seq(pos, pos + mask_ + 1);
  }
  // Producer side, for the slot of `pos` whose seq (as loaded) is behind pos: true when it is a
  // dropped chunk's slot (reads 0, i.e. seq == its index, in a later lap) and the consumer has
  // popped the value a lap before `pos`.
  bool released_free(std::size_t pos, std::size_t seq) const noexcept {
    if (chunk_ == 0 || pos <= mask_ || seq != (pos & mask_)) return false;
    // acquire: pairs with try_pop's release store, made after the old value was destroyed and
    // its chunk dropped.
    return head_copy_.load(std::memory_order_acquire) > pos - (mask_ + 1);
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
  const std::size_t chunk_;  // slots per release chunk, 0: no page release
  const std::size_t mask_;
  slot* const slots_;
  const int64_t release_after_ns_;
  const std::unique_ptr<int64_t[]> lap_start_ns_;  // per chunk: when the consumer last entered it
  bool dropping_ = false;                          // consumer only: the current chunk is dropped
  alignas(k_cache_line) std::atomic<std::size_t> tail_{0};  // producers
  alignas(k_cache_line) std::size_t head_ = 0;              // consumer only
  std::atomic<std::size_t> head_copy_{0};                   // consumer writes, anyone reads
};

}  // namespace coserve::rt
