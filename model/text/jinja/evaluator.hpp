// Walks a parsed template and renders it against a context. One evaluator per render call; the
// syntax tree it walks is shared read-only.
#pragma once

#include <ctime>
#include <optional>
#include <string>

#include "model/text/jinja/ast.hpp"
#include "model/text/jinja/chat_template.hpp"
#include "model/text/json/value.hpp"

namespace coserve::jinja {

// Raised by the template's raise_exception(msg): the message is the template's own.
struct raised_error : template_error {
  using template_error::template_error;
};

// Renders `tree` with the members of `context` (an object) as top-level variables. `now` fixes the
// time strftime_now() formats (local time of the call when empty). Errors raise template_error.
// Going past a bound in `limits` raises template_error.
std::string evaluate(const body& tree, const json::value& context, std::optional<std::time_t> now,
                     const template_limits& limits);

}  // namespace coserve::jinja
