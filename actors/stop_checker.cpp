#include "actors/stop_checker.hpp"

#include <algorithm>

namespace coserve::actors {

stop_checker::stop_checker(std::vector<std::string> stops, bool include_stop_str_in_output)
    : include_(include_stop_str_in_output) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string stop_checker::push(const std::string& delta) {
  if (stopped_) return {};
  if (stops_.empty()) return delta;
  held_ += delta;
  // Earliest complete match (ties: the longest stop string at that position).
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const auto& s : stops_) {
    const size_t p = held_.find(s);
    if (p == std::string::npos) continue;
    if (p < best || (p == best && s.size() > best_stop->size())) {
      best = p;
      best_stop = &s;
    }
  }
  if (best_stop != nullptr) {
    stopped_ = true;
    matched_ = *best_stop;
    std::string out = held_.substr(0, include_ ? best + best_stop->size() : best);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix of held_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string stop_checker::flush() {
  if (stopped_) return {};
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace coserve::actors
