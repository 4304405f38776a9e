// tokenizer_actor — chat template + encode + validation, off the I/O threads. A valid request is
// announced to the streamer, handed to the scheduler, and only then answered (so a cancel from
// the client always finds it); an invalid one is answered with "invalid_request" and never queued.
//
// Threads: an actor on the runtime's pool. The tokenizer and the template are shared read-only
// (both are thread-safe for concurrent use).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/tokenizer_messages.hpp"
#include "model/jinja/chat_template.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/actor.hpp"

namespace coserve::actors {

// What the tokenizer actor needs of the model; shared by the engine's synchronous helpers.
struct prompt_encoder {
  const tokenizer* tok = nullptr;        // null: token-id prompts only
  const chat_template* tmpl = nullptr;   // null: the model has none
  std::string template_error;            // why there is none (or no tokenizer)
  int32_t vocab_size = 0;
  int32_t max_model_len = 0;

  // Renders the chat template as Hugging Face's apply_chat_template does (messages, tools,
  // add_generation_prompt, bos/eos tokens, extra variables), then encodes without adding special
  // tokens (the template has them). Template errors are "invalid_request" with their message.
  result<std::vector<int32_t>> encode_chat(const chat_input& chat) const;
  // Prompt ids of any request input, validated: non-empty, ids in the vocabulary, prompt plus
  // max_tokens within max_model_len.
  result<std::vector<int32_t>> encode(const generate_request& req) const;
};

class tokenizer_actor {
 public:
  using messages = rt::message_list<tokenize_request>;

  tokenizer_actor(std::shared_ptr<pipeline> p, const prompt_encoder* enc) : p_(std::move(p)), enc_(enc) {}
  asio::awaitable<void> handle(tokenize_request& m);
  // Supervision hook: a handler threw; the request in hand is answered with an error.
  void on_failure(const std::string& what);

 private:
  std::shared_ptr<pipeline> p_;
  const prompt_encoder* enc_;
  submit_reply in_hand_;
  uint64_t in_hand_id_ = 0;
};

}  // namespace coserve::actors
