// Skipping a test case so that ctest reports it as skipped, never as passed.
//
// COSERVE_SKIP(message) prints "skipped: <message>" to stdout, records the skip and returns from
// the enclosing function. The test main (tests/catch_main.cpp) then exits with kSkipExitCode when
// no assertion failed, and every discovered test carries SKIP_RETURN_CODE kSkipExitCode
// (cmake/coserve_helpers.cmake); a failure in the same run still reads as failed. Use it before a
// test case's assertions, or in a helper that is a test case's whole body.
#pragma once

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

namespace coserve::test {

// Must equal SKIP_RETURN_CODE in cmake/coserve_helpers.cmake (77, the automake convention).
inline constexpr int kSkipExitCode = 77;

// Whether a test case in this process called COSERVE_SKIP. Process-wide because the test main
// reads it after Catch has run; atomic because device and pipeline tests call it from any thread.
inline std::atomic<bool> g_skipped{false};

inline void note_skip(const std::string& message) {
  std::printf("skipped: %s\n", message.c_str());
  std::fflush(stdout);
  g_skipped.store(true, std::memory_order_relaxed);  // read by main after the run: no ordering
}

// The shared test data, relative to the project root (the tests' working directory).
inline std::filesystem::path testdata() { return "../shared/testdata"; }

}  // namespace coserve::test

// Skips the current test case with a message built like Catch's INFO: COSERVE_SKIP("a " << x).
#define COSERVE_SKIP(message)                                \
  do {                                                       \
    std::ostringstream coserve_skip_message_;                \
    coserve_skip_message_ << message;                        \
    ::coserve::test::note_skip(coserve_skip_message_.str()); \
    return;                                                  \
  } while (0)

// Skips the current test case when `file` (usually under testdata()) does not exist.
#define COSERVE_SKIP_UNLESS_EXISTS(file)                      \
  do {                                                        \
    const std::filesystem::path coserve_skip_path_ = (file);  \
    if (!std::filesystem::exists(coserve_skip_path_))         \
      COSERVE_SKIP(coserve_skip_path_.string() << " absent"); \
  } while (0)
