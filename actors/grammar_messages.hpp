// grammar_actor's protocol: compile structured-output grammars off the scheduler's path.
#pragma once

#include <memory>

#include "model/structured_output.hpp"
#include "runtime/message.hpp"
#include "runtime/reply.hpp"

namespace coserve::actors {

// engine::submit → grammar: compile (or find in the cache) one request's grammar.
struct compile_grammar {
  grammar_spec spec;
  rt::reply_ptr<std::shared_ptr<const compiled_grammar>> reply;
};

struct grammar_protocol {
  using messages = rt::message_list<compile_grammar>;
};

}  // namespace coserve::actors
