// Compiled into coserve_xgrammar (cmake/coserve_dependencies.cmake) with xgrammar's own sources,
// which call these two functions when XGRAMMAR_LOG_CUSTOMIZE is 1.
#include "model/xgrammar_logging.hpp"

#include <cstdio>

#include "support/logging.h"

namespace coserve {
namespace {
thread_local xgrammar_warning_capture* t_capture = nullptr;
thread_local std::vector<std::string>* t_sink = nullptr;
}  // namespace

xgrammar_warning_capture::xgrammar_warning_capture() : outer_(t_capture) {
  t_capture = this;
  t_sink = &warnings_;
}

xgrammar_warning_capture::~xgrammar_warning_capture() {
  t_capture = outer_;
  t_sink = outer_ ? const_cast<std::vector<std::string>*>(&outer_->warnings()) : nullptr;
}

}  // namespace coserve

namespace xgrammar {

[[noreturn]] void LogFatalImpl(const std::string& file, int lineno, const std::string& message) {
  throw LogFatalError(file, lineno, message);
}

void LogMessageImpl(const std::string& file, int lineno, int level, const std::string& message) {
  if (level == XGRAMMAR_LOG_LEVEL_WARNING && coserve::t_sink) {
    coserve::t_sink->push_back(message);
    return;
  }
  if (level == XGRAMMAR_LOG_LEVEL_DEBUG) return;
  std::fprintf(stderr, "xgrammar: %s (%s:%d)\n", message.c_str(), file.c_str(), lineno);
}

}  // namespace xgrammar
