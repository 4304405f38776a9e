#include "runtime/trace.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <fstream>
#include <limits>
#include <new>
#include <thread>

namespace coserve::rt {

struct tracer::ring {
  // The slots are an anonymous mapping, not a vector of value-initialised spans: its zero pages
  // become resident only when written, so a ring costs the memory of the spans its thread has
  // recorded (up to its capacity), not its whole capacity from the start. (calloc would not
  // promise this: it clears reused heap memory.) span is an aggregate, so the zeroed storage
  // holds span objects; readers touch only written slots.
  struct unmapper {
    std::size_t bytes = 0;
    void operator()(span* p) const noexcept { ::munmap(p, bytes); }
  };
  static span* map_slots(std::size_t cap) {
    void* p = ::mmap(nullptr, cap * sizeof(span), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<span*>(p);
  }
  ring(std::size_t cap, uint16_t index, std::thread::id who)
      : slots(map_slots(cap), unmapper{cap * sizeof(span)}),
        capacity(cap),
        thread(index),
        owner(who) {}
  std::unique_ptr<span[], unmapper> slots;
  const std::size_t capacity;
  // Written only by the owning thread; release so readers' acquire sees complete spans.
  std::atomic<uint64_t> count{0};
  const uint16_t thread;
  const std::thread::id owner;
};

namespace {

uint64_t next_tracer_id() noexcept {
  // Process-wide id source so a thread's cached ring is never mistaken for another tracer's.
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

struct ring_cache {
  uint64_t tracer_id = 0;
  void* ring = nullptr;
};
thread_local ring_cache t_cache;

void append_escaped(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
}

}  // namespace

tracer::tracer(bool enabled, std::size_t ring_capacity)
    : id_(next_tracer_id()),
      ring_capacity_(std::bit_ceil(ring_capacity < 16 ? std::size_t{16} : ring_capacity)),
      epoch_ns_(trace_clock::now_ns()),
      enabled_(enabled) {}

tracer::~tracer() = default;

uint32_t tracer::register_track(std::string name) {
  std::lock_guard lock(mu_);
  names_.push_back(std::move(name));
  return static_cast<uint32_t>(names_.size() - 1);
}

std::string tracer::track_name(uint32_t id) const {
  std::lock_guard lock(mu_);
  return id < names_.size() ? names_[id] : std::string("?");
}

tracer::ring* tracer::ring_for_this_thread() noexcept {
  if (t_cache.tracer_id == id_) return static_cast<ring*>(t_cache.ring);
  // A thread may record into several tracers (several systems): look up its ring for this one.
  // Not the hot path: the cache above hits for the common one-system-per-thread case.
  std::lock_guard lock(mu_);
  const auto me = std::this_thread::get_id();
  ring* found = nullptr;
  for (auto& r : rings_)
    if (r->owner == me) found = r.get();
  if (!found) {
    try {
      rings_.push_back(
          std::make_unique<ring>(ring_capacity_, static_cast<uint16_t>(rings_.size()), me));
      found = rings_.back().get();
    } catch (...) {
      return nullptr;
    }
  }
  t_cache = {id_, found};
  return found;
}

void tracer::record(const span& s) noexcept {
  ring* r = ring_for_this_thread();
  if (!r) return;
  // relaxed: only this thread writes count.
  const uint64_t n = r->count.load(std::memory_order_relaxed);
  span& slot = r->slots[n & (r->capacity - 1)];  // a power of two
  slot = s;
  slot.thread = r->thread;
  // release: the span's fields happen-before a reader's acquire load of count.
  r->count.store(n + 1, std::memory_order_release);
}

std::vector<span> tracer::spans() const { return spans_since(std::numeric_limits<int64_t>::min()); }

std::vector<span> tracer::spans_since(int64_t since_ns) const {
  std::vector<span> out;
  {
    std::lock_guard lock(mu_);
    for (const auto& r : rings_) {
      const uint64_t n = r->count.load(std::memory_order_acquire);
      const uint64_t cap = r->capacity;
      const uint64_t first = n > cap ? n - cap : 0;
      for (uint64_t i = n; i > first; --i) {
        const span& s = r->slots[(i - 1) % cap];
        if (s.end_ns < since_ns) break;
        out.push_back(s);
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const span& a, const span& b) { return a.start_ns < b.start_ns; });
  return out;
}

std::vector<span> tracer::spans_of_track(std::string_view name) const {
  std::vector<uint32_t> ids;
  {
    std::lock_guard lock(mu_);
    for (uint32_t i = 0; i < names_.size(); ++i)
      if (names_[i] == name) ids.push_back(i);
  }
  auto all = spans();
  std::erase_if(all, [&](const span& s) {
    return std::find(ids.begin(), ids.end(), s.track_id) == ids.end();
  });
  return all;
}

std::vector<span> tracer::spans_of_request(uint64_t request_id) const {
  auto all = spans();
  std::erase_if(all, [&](const span& s) { return s.request_id != request_id; });
  return all;
}

std::vector<span> tracer::spans_of_message(std::string_view message) const {
  auto all = spans();
  std::erase_if(all, [&](const span& s) { return message != s.message; });
  return all;
}

uint64_t tracer::dropped() const noexcept {
  std::lock_guard lock(mu_);
  uint64_t d = 0;
  for (const auto& r : rings_) {
    const uint64_t n = r->count.load(std::memory_order_acquire);
    if (n > r->capacity) d += n - r->capacity;
  }
  return d;
}

std::string tracer::chrome_json() const {
  const auto all = spans();
  std::vector<std::string> names;
  {
    std::lock_guard lock(mu_);
    names = names_;
  }
  std::string out;
  out.reserve(all.size() * 160 + names.size() * 80 + 64);
  out += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  bool first = true;
  char buf[256];
  // One track (tid) per actor, named after it.
  for (uint32_t id = 0; id < names.size(); ++id) {
    if (!first) out += ',';
    first = false;
    out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":";
    out += std::to_string(id);
    out += ",\"args\":{\"name\":\"";
    append_escaped(out, names[id]);
    out += "\"}}";
  }
  for (const span& s : all) {
    if (!first) out += ',';
    first = false;
    out += "{\"ph\":\"X\",\"name\":\"";
    append_escaped(out, s.message);
    out += "\",\"cat\":\"";
    append_escaped(out, s.track_id < names.size() ? names[s.track_id] : std::string("?"));
    std::snprintf(buf, sizeof buf,
                  "\",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"request_id\":%llu,"
                  "\"mailbox_depth\":%u,\"queued_us\":%.3f,\"thread\":%u%s}}",
                  s.track_id, double(s.start_ns) / 1e3, double(s.end_ns - s.start_ns) / 1e3,
                  static_cast<unsigned long long>(s.request_id), s.mailbox_depth,
                  double(s.start_ns - s.enqueue_ns) / 1e3, s.thread,
                  s.failed ? ",\"failed\":true" : "");
    out += buf;
  }
  out += "]}\n";
  return out;
}

result<void> tracer::write_chrome_json(const std::filesystem::path& file) const {
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  if (!f) return make_error("io", "cannot open trace file " + file.string());
  const std::string json = chrome_json();
  f.write(json.data(), static_cast<std::streamsize>(json.size()));
  if (!f) return make_error("io", "cannot write trace file " + file.string());
  return {};
}

void tracer::clear() noexcept {
  std::lock_guard lock(mu_);
  for (auto& r : rings_) r->count.store(0, std::memory_order_release);
}

}  // namespace coserve::rt
