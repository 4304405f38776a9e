// JSON parser: any bytes parse to a value or an error; a parsed value dumps to JSON that parses
// back to an equal value.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/text/json/value.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto v = coserve::json::parse(text);
  if (!v) return 0;
  std::string out;
  coserve::json::dump_compact(*v, out);
  auto again = coserve::json::parse(out);
  if (!again || !(*again == *v)) std::abort();
  const std::string pretty =
      coserve::json::dump(*v, {.indent = 2, .ensure_ascii = true, .sort_keys = true});
  if (!coserve::json::parse(pretty)) std::abort();
  return 0;
}
