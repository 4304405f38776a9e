#include "actors/engine_shared.hpp"

#include <algorithm>

#include "runtime/system.hpp"

namespace coserve::actors {

void latency_histogram::observe(double seconds) {
  const auto it =
      std::lower_bound(snap_.bounds.begin(), snap_.bounds.end(), seconds);  // le semantics
  const auto i = static_cast<size_t>(it - snap_.bounds.begin());
  std::lock_guard lock(mu_);
  ++snap_.counts[i];
  snap_.sum += seconds;
  ++snap_.count;
}

std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> request_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

void trace_for_request(rt::system& sys, uint32_t actor_trace_id, const char* what,
                       uint64_t request_id, int64_t start_ns, int64_t end_ns) {
  rt::span s;
  s.message = what;
  s.request_id = request_id;
  s.enqueue_ns = start_ns;
  s.start_ns = start_ns;
  s.end_ns = end_ns;
  s.track_id = actor_trace_id;
  sys.trace().record(s);
}

}  // namespace coserve::actors
