// Per-actor tracing: one span per handled message (the actor's track, message type, request id,
// enqueue/start/end time, mailbox depth), recorded into per-thread ring buffers cheap enough to
// leave on (no lock and no allocation on the recording path once a thread's ring exists). A track
// is a named lane of spans: every actor has one, and an actor may name more for work that is not
// a message it handles (the executor actor's "<name> steps": one span per device step).
//
// Threads: record() is called by the thread that ran the handler and writes only that thread's
// ring. Readers (spans(), chrome_json(), ...) may run on any thread at any time; they see every
// span published before the call. A ring keeps the newest `ring_capacity` spans of its thread;
// when a reader races with a writer that wraps around the ring, the oldest spans it reads may be
// torn — queries are exact when the traced system is quiescent (tests, shutdown export).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "runtime/clock.hpp"

namespace coserve::rt {

struct span {
  const char* message = "";  // static message type name
  uint64_t request_id = 0;   // 0: none
  int64_t enqueue_ns = 0;    // tracer clock (ns since the tracer's epoch)
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint32_t track_id = 0;       // register_track's id (an actor's own track, or another)
  uint32_t mailbox_depth = 0;  // messages still queued when the handler started
  uint16_t thread = 0;         // index of the recording thread (registration order)
  bool failed = false;         // the handler threw
};

class tracer {
 public:
  // ring_capacity: spans kept per thread, rounded up to a power of two (at least 16).
  explicit tracer(bool enabled = true, std::size_t ring_capacity = 1u << 18);
  ~tracer();
  tracer(const tracer&) = delete;
  tracer& operator=(const tracer&) = delete;

  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) noexcept { enabled_.store(on, std::memory_order_relaxed); }

  // Nanoseconds on the tracer's clock (runtime/clock.hpp's trace_clock, since construction).
  int64_t now_ns() const noexcept { return trace_clock::now_ns() - epoch_ns_; }

  // Names a track (an actor's, or another lane); returns its id. Any thread (takes a mutex: spawn
  // time only).
  uint32_t register_track(std::string name);
  std::string track_name(uint32_t id) const;

  // Records a span into the calling thread's ring. Any thread; lock-free after the thread's
  // first call (which registers its ring under a mutex).
  void record(const span& s) noexcept;

  // --- queries (any thread; see the header comment on exactness) ---
  std::vector<span> spans() const;                                // all, sorted by start_ns
  std::vector<span> spans_of_track(std::string_view name) const;  // sorted by start_ns
  std::vector<span> spans_of_request(uint64_t request_id) const;  // sorted by start_ns
  std::vector<span> spans_of_message(std::string_view message) const;
  // Spans that ended at or after `since_ns` (tracer clock), sorted by start_ns. Reads each ring
  // back from its newest span only as far as that point (a thread records in end order), so a
  // recent window costs what it holds, not the rings' capacity.
  std::vector<span> spans_since(int64_t since_ns) const;
  uint64_t dropped() const noexcept;  // spans overwritten because a ring wrapped

  // Chrome trace-event JSON (opens in Perfetto / chrome://tracing): one thread per track,
  // "X" events named after the message type, args with request id, mailbox depth, queue time.
  std::string chrome_json() const;
  result<void> write_chrome_json(const std::filesystem::path& file) const;

  // Forgets recorded spans. Only when no thread is recording.
  void clear() noexcept;

 private:
  struct ring;
  ring* ring_for_this_thread() noexcept;

  const uint64_t id_;  // distinguishes tracers in the thread-local cache
  const std::size_t ring_capacity_;
  const int64_t epoch_ns_;
  std::atomic<bool> enabled_;
  mutable std::mutex mu_;  // guards rings_ and names_ (registration, queries)
  std::vector<std::unique_ptr<ring>> rings_;
  std::vector<std::string> names_;
};

}  // namespace coserve::rt
