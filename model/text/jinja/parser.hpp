// Template source to syntax tree: the lexer applies jinja2's whitespace rules as Hugging Face sets
// them up (trim_blocks, lstrip_blocks, `-`/`+` modifiers); the parser follows jinja2's grammar and
// operator precedence. Syntax errors are values (code "template_syntax").
#pragma once

#include <string_view>

#include "base/result.hpp"
#include "model/text/jinja/ast.hpp"

namespace coserve::jinja {

result<body> parse_template(std::string_view source);

}  // namespace coserve::jinja
