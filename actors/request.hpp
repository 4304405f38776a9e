// The request vocabulary: what a client submits to the engine (generate_request, chat_input,
// context_rule), what it gets back (request_stream of output_event, ending with a finish_reason),
// and the status views' request_status. Every serving actor's messages speak it; the engine
// facade (actors/engine.hpp) hands it out.
//
// Threads: none (plain data), but request_stream, whose contract is below.
#pragma once

#include <asio/awaitable.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "base/result.hpp"
#include "model/sampling_params.hpp"
#include "model/step.hpp"
#include "model/structured_output.hpp"
#include "model/text/json/value.hpp"

namespace coserve {

// A chat request's input: rendered by the model's chat template in the tokenizer actor.
struct chat_input {
  json::value messages;  // array of {role, content (string | [{type:"text",...}]), ...}
  json::value tools;     // null or array
  bool add_generation_prompt = true;
  // The render ends inside the final message, so the model continues it (vLLM's
  // continue_final_message; an assistant prefill): render_continuing_final_message.
  bool continue_final_message = false;
  json::value template_kwargs;  // null or object: extra template variables
  // The rendered text is encoded with the tokenizer's special tokens (BOS) added, as a text prompt
  // is (vLLM's add_special_tokens; a score template's render); false: the template has them.
  bool add_special_tokens = false;
  // A request's own chat template (vLLM's chat_template field, honoured under
  // --trust-request-chat-template) instead of the model's; rendered within
  // k_request_template_limits.
  std::string template_source;
};

// How a prompt's length meets the context window, applied by the tokenizer once the prompt is
// encoded. Errors are "invalid_request" naming the field at fault in error::param.
struct context_rule {
  // false: max_tokens becomes max_model_len - prompt tokens, capped at default_max_tokens (when >
  // 0).
  bool max_tokens_given = true;
  int32_t default_max_tokens = 0;
  std::string input_param = "prompt";           // the input's field name ("prompt", "messages")
  std::string max_tokens_param = "max_tokens";  // or "max_completion_tokens"
  // vLLM's truncate_prompt_tokens: the prompt's last k tokens are kept (-1: max_model_len); a text
  // pair is cut to k tokens in all by longest_first (tokenizer::encode_pair), before
  // the rest of the rule applies; 0: the prompt as given.
  int32_t truncate_prompt_tokens = 0;
};

// Fills in a default max_tokens (see context_rule) and checks that the prompt is not empty and that
// prompt + max_tokens fits in max_model_len. The over-length message is vLLM's; its param is the
// max_tokens field when the client gave one, else the input field.
result<void> apply_context_rule(const context_rule& rule, int32_t prompt_tokens,
                                int32_t max_model_len, sampling_params& params);

// A pooling request's pair of texts (a cross-encoder's query and document): encoded together by
// the tokenizer's pair template, with token types (params.pooling.token_types).
struct text_pair {
  std::string first, second;
};

struct generate_request {
  // Exactly one input: prompt text, prompt token ids, chat messages, or (pooling requests) a pair
  // of texts.
  std::variant<std::string, std::vector<int32_t>, chat_input, text_pair> input;
  sampling_params params;
  bool add_special_tokens = true;  // BOS etc. for text prompts (chat: false, the template has them)
  int32_t priority = 0;            // lower runs first (vLLM convention); ties FCFS
  bool return_logits = false;      // fill output_event::logits (tests, `generate --logits`)
  context_rule context;            // default: max_tokens as given in params
  bool return_prompt_text = false;  // fill request_stream::prompt_text() (echo)
  bool return_token_text = false;   // fill output_event::token_texts / top_logprob_texts
  // Structured output: compiled by the grammar actor before the request is queued (errors are
  // "invalid_request" naming structured->param); params.grammar is then set from it.
  std::optional<grammar_spec> structured;
};

// Input of engine::tokenize: text or chat messages.
struct tokenize_request_input {
  std::variant<std::string, chat_input> input;
  bool add_special_tokens = true;  // text only
};

enum class finish_reason : uint8_t { none, stop, length, abort, error };
const char* to_string(finish_reason r) noexcept;  // "stop", "length", "abort", "error", ""

// One streamed delta of one sample (index in [0, n)).
struct output_event {
  int32_t index = 0;
  std::string text;                   // new text (held back while it may become a stop string)
  std::vector<int32_t> token_ids;     // tokens this event covers
  std::vector<float> token_logprobs;  // per token id, when params.logprobs >= 0
  std::vector<std::vector<token_logprob>> top_logprobs;  // per token id, when params.logprobs > 0
  // params.prompt_logprobs >= 0: on the sample's first event, one entry per prompt position
  // 1 .. prompt length - 1; with return_token_text, prompt_token_texts decodes every id they hold
  // and the prompt's first token, each on its own.
  std::vector<prompt_logprob> prompt_logprobs;
  std::vector<std::pair<int32_t, std::string>> prompt_token_texts;
  std::vector<std::vector<float>> logits;  // per token id, when request.return_logits
  // A pooling request (params.pooling.enabled): its one event carries the pooled vector (or a
  // cross-encoder's class logits); token_ids and text are then empty.
  std::vector<float> embedding;
  // When request.return_token_text: each token id decoded on its own (special tokens as ""), and
  // the same for each top_logprobs entry.
  std::vector<std::string> token_texts;
  std::vector<std::vector<std::string>> top_logprob_texts;
  finish_reason finish = finish_reason::none;  // set on the sample's last event
  std::string stop_reason;                     // the matched stop string, if any
  std::string error_message;                   // when finish == error
  int32_t prompt_tokens = 0;                   // usage, filled on every event
  int32_t completion_tokens = 0;               // tokens generated so far by this sample
  int32_t cached_prompt_tokens = 0;            // prompt tokens served from the prefix cache
};

// The output of one request: every sample's events, then end of stream.
class request_stream {
 public:
  virtual ~request_stream() = default;
  virtual uint64_t id() const noexcept = 0;
  virtual const std::vector<int32_t>& prompt_ids() const noexcept = 0;
  // The prompt decoded to text when the request asked (return_prompt_text), else "".
  virtual const std::string& prompt_text() const noexcept = 0;
  // Next event, or nullopt once every sample has finished. Single consumer. Resumes on the
  // awaiting coroutine's executor.
  virtual asio::awaitable<std::optional<output_event>> next() = 0;
  // Aborts the request (client gone): its sequences leave the batch at the next step and their KV
  // blocks are freed; remaining events end with finish_reason::abort. Idempotent, any thread.
  virtual void cancel() noexcept = 0;
};

// A request the scheduler holds (tokenized, not finished), for status views.
struct request_status {
  uint64_t id = 0;
  bool running = false;      // a sample of it is in the running batch; else all wait
  double age_seconds = 0.0;  // since submit()
  int32_t samples = 1;       // n
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;      // all samples together
  int32_t cached_prompt_tokens = 0;  // served from the prefix cache (first sample)
  int32_t max_tokens = 0;            // per sample
  int32_t preemptions = 0;           // all samples together
};

}  // namespace coserve
