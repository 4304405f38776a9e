// xgrammar's log sink (it is built with XGRAMMAR_LOG_CUSTOMIZE=1, model/xgrammar_logging.cpp):
// fatal errors throw as xgrammar's own LogFatalError without the time and source location in
// their message; warnings raised on a thread inside a capture are collected there (xgrammar warns
// when it ignores a JSON-schema keyword it does not support), other messages go to stderr.
#pragma once

#include <string>
#include <vector>

namespace coserve {

class xgrammar_warning_capture {
 public:
  xgrammar_warning_capture();
  ~xgrammar_warning_capture();
  xgrammar_warning_capture(const xgrammar_warning_capture&) = delete;
  xgrammar_warning_capture& operator=(const xgrammar_warning_capture&) = delete;
  const std::vector<std::string>& warnings() const noexcept { return warnings_; }

 private:
  std::vector<std::string> warnings_;
  xgrammar_warning_capture* outer_;
};

}  // namespace coserve
