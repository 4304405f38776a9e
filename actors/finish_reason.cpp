// coserve::to_string(finish_reason): the OpenAI finish_reason spellings.
#include "actors/request.hpp"

namespace coserve {

const char* to_string(finish_reason r) noexcept {
  switch (r) {
    case finish_reason::stop:
      return "stop";
    case finish_reason::length:
      return "length";
    case finish_reason::abort:
      return "abort";
    case finish_reason::error:
      return "error";
    case finish_reason::none:
      break;
  }
  return "";
}

}  // namespace coserve
