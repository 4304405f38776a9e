// Syntax tree of a parsed chat template. A template owns its tree; the evaluator walks it
// read-only, so one parsed template can render on several threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/text/jinja/jvalue.hpp"

namespace coserve::jinja {

struct expr;
using expr_ptr = std::unique_ptr<expr>;

struct expr {
  enum class kind {
    literal,
    name,
    list,
    tuple,
    dict,
    attr,
    index,
    slice,
    call,
    filter,
    test,
    unop,
    binop,
    cond,
    compare
  };
  kind k = kind::literal;
  jvalue lit;           // literal
  std::string name;     // name / attr / filter / test / operator
  bool negate = false;  // test: `is not`
  // Children: list/tuple items; dict as key,value pairs; attr/index: [obj(, key)]; slice:
  // [obj, start, stop, step] (null when absent); call: [callee, positional...]; filter/test:
  // [subject (null in a filter block), positional...]; unop: [x]; binop: [a, b]; cond: [then, cond,
  // else|null]; compare (a chain of two or more comparisons): [operand0, operand1, ...] with `ops`
  // between them.
  std::vector<expr_ptr> args;
  std::vector<std::pair<std::string, expr_ptr>> kwargs;
  std::vector<std::string> ops;  // compare
};

struct node;
using node_ptr = std::unique_ptr<node>;
using body = std::vector<node_ptr>;

struct node {
  enum class kind {
    text,
    output,
    if_,
    for_,
    set,
    set_block,
    macro,
    call_block,
    filter_block,
    generation,
    break_,
    continue_,
    with
  };
  kind k = kind::text;
  std::string text;                  // text; macro name
  expr_ptr e;                        // output / set value / for iterable / filter chain / call
  std::vector<std::string> targets;  // for / set names; attribute set: {object, attribute}
  bool attr_target = false;
  bool recursive = false;
  expr_ptr cond;                                    // for ... if cond
  std::vector<std::pair<expr_ptr, body>> branches;  // if / elif / else (null condition)
  body children, else_children;
  std::vector<std::pair<std::string, expr_ptr>>
      params;  // macro / call-block caller params; with: name = value
};

}  // namespace coserve::jinja
