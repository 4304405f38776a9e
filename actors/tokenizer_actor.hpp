// tokenizer_actor — one actor of the tokenizer pool: chat template + encode + validation for
// submitted requests, and /tokenize and /detokenize, off the HTTP threads. Each actor of the pool
// runs on a thread of its own (at nice +5 on Linux), so a multi-megabyte prompt occupies that
// thread only. A valid request
// is announced to the streamer, handed to the scheduler, and only then answered (so a cancel from
// the client always finds it); an invalid one is answered with "invalid_request" (error::param
// names the field) and never queued.
//
// Sends to: the streamer (open_stream, end_request), the scheduler (add_request), intake
// (request_closed).
//
// Threads: the tokenizer and the template are shared read-only by the pool (both are thread-safe
// for concurrent use); each actor's own state is touched only by its handlers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine_shared.hpp"
#include "actors/intake_messages.hpp"
#include "actors/scheduler_messages.hpp"
#include "actors/streamer_messages.hpp"
#include "actors/tokenizer_messages.hpp"
#include "model/text/jinja/chat_template.hpp"
#include "model/text/tokenizer/tokenizer.hpp"
#include "runtime/actor.hpp"

namespace coserve::actors {

// What the tokenizer actors need of the model.
struct prompt_encoder {
  const tokenizer* tok = nullptr;       // null: token-id prompts only
  const chat_template* tmpl = nullptr;  // null: the model has none
  std::string template_error;           // why there is none (or no tokenizer)
  int32_t vocab_size = 0;
  int32_t max_model_len = 0;
  // sentence_bert_config.json's do_lower_case: text inputs and text pairs are lowercased
  // (unicode_lowercase) before encoding, as sentence-transformers does; chat renders are not (their
  // special tokens would change).
  bool lower_case = false;

  // Renders the chat template as Hugging Face's apply_chat_template does (messages, tools,
  // add_generation_prompt, bos/eos tokens, extra variables), then encodes without adding special
  // tokens (the template has them). Template errors are "invalid_request" with their message.
  result<std::vector<int32_t>> encode_chat(const chat_input& chat) const;
  // Text or chat messages to ids (no validation beyond the template's).
  result<std::vector<int32_t>> encode_input(const tokenize_request_input& in) const;
  // Prompt ids of a request, validated: non-empty, ids in the vocabulary, then the request's
  // context rule (which may set params.max_tokens). Errors name req.context.input_param or the
  // max_tokens field.
  result<std::vector<int32_t>> encode(const generate_request& req, sampling_params& params) const;
  // Ids to text, skipping special tokens; ids outside the vocabulary are an error.
  result<std::string> decode(const std::vector<int32_t>& ids) const;
};

class tokenizer_actor {
 public:
  using messages = tokenizer_protocol::messages;

  struct links {
    rt::actor_ref<streamer_protocol> streamer;
    rt::actor_ref<scheduler_protocol> scheduler;
    rt::actor_ref<intake_protocol> intake;
    std::shared_ptr<tokenizer_pool> pool;  // this actor's load is given back there
  };
  // Actor `index` of the pool. A request whose prompt would take the prompt tokens waiting past
  // max_waiting_tokens (0: no limit) is refused with "queue_full".
  tokenizer_actor(std::shared_ptr<engine_shared> shared, links to, const prompt_encoder* enc,
                  size_t index, int64_t max_waiting_tokens)
      : shared_(std::move(shared)),
        to_(std::move(to)),
        enc_(enc),
        index_(index),
        max_waiting_tokens_(max_waiting_tokens) {}
  asio::awaitable<void> handle(tokenize_request& m);
  void handle(encode_text& m);
  void handle(decode_ids& m);
  // Supervision hook: a handler threw; the request in hand is answered with an error.
  void on_failure(const std::string& what);

 private:
  std::shared_ptr<engine_shared> shared_;
  links to_;
  const prompt_encoder* enc_;
  size_t index_;
  int64_t max_waiting_tokens_;
  submit_reply in_hand_;
  uint64_t in_hand_id_ = 0;
};

}  // namespace coserve::actors
