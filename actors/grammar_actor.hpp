// grammar_actor — compiles structured-output grammars (JSON schema, regex, choice, EBNF/Lark) off
// the scheduler's path, on a thread of its own: a complex schema takes milliseconds to seconds and
// holds only this actor. engine::submit awaits the compiled grammar before the request goes on to
// the tokenizer, so a request never reaches the scheduler (or its first decode) without it, and an
// invalid schema is answered as "invalid_request" naming the field before any output starts.
// Compiled grammars are cached (LRU keyed by the spec) and shared by every request using them.
#pragma once

#include <memory>

#include "actors/engine_shared.hpp"
#include "actors/grammar_messages.hpp"
#include "model/structured_output.hpp"
#include "runtime/actor.hpp"

namespace coserve::actors {

class grammar_actor {
 public:
  using messages = grammar_protocol::messages;

  // `compiler` is shared with the engine so a restarted actor keeps the cache.
  grammar_actor(std::shared_ptr<engine_shared> shared, std::shared_ptr<grammar_compiler> compiler)
      : shared_(std::move(shared)), compiler_(std::move(compiler)) {}
  void handle(compile_grammar& m);
  // Supervision hook: a handler threw; the request in hand is answered with an error.
  void on_failure(const std::string& what);

 private:
  std::shared_ptr<engine_shared> shared_;
  std::shared_ptr<grammar_compiler> compiler_;
  rt::reply_ptr<std::shared_ptr<const compiled_grammar>> in_hand_;
};

}  // namespace coserve::actors
