// stop_checker — stop strings over incrementally detokenized text.
//
// push(delta) returns the text that is safe to emit: text that can no longer become part of a stop
// string is released; a suffix that is a prefix of some stop string is held back until the next
// delta decides it. On a match the output ends at the stop string (excluded, or included when
// include_stop_str_in_output) and stopped() turns true; later pushes return "". flush() releases
// what is held back when the sequence ends for another reason.
//
// Threads: none (one per sample, owned by the streamer).
#pragma once

#include <string>
#include <vector>

namespace coserve::actors {

class stop_checker {
 public:
  stop_checker(std::vector<std::string> stops, bool include_stop_str_in_output);

  std::string push(const std::string& delta);
  std::string flush();
  bool stopped() const noexcept { return stopped_; }
  const std::string& matched() const noexcept { return matched_; }

 private:
  std::vector<std::string> stops_;
  bool include_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace coserve::actors
