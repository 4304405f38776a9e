#include "actors/tokenizer_actor.hpp"

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "actors/stream_impl.hpp"
#include "model/text/tokenizer/normalizer.hpp"
#include "runtime/system.hpp"

namespace coserve {

result<void> apply_context_rule(const context_rule& rule, int32_t prompt_tokens,
                                int32_t max_model_len, sampling_params& params) {
  const std::string& where = rule.input_param;
  if (prompt_tokens <= 0)
    return error{"invalid_request", "the " + where + " is empty after tokenization", where};
  if (params.pooling.enabled) {  // nothing is generated: the input alone must fit
    if (prompt_tokens > max_model_len)
      return error{"invalid_request",
                   "This model's maximum context length is " + std::to_string(max_model_len) +
                       " tokens. However, you requested " + std::to_string(prompt_tokens) +
                       " tokens in the input for embedding generation. Please reduce the length "
                       "of the input.",
                   where};
    params.max_tokens = 1;
    return {};
  }
  if (!rule.max_tokens_given) {
    params.max_tokens = std::max(0, max_model_len - prompt_tokens);
    if (rule.default_max_tokens > 0)
      params.max_tokens = std::min(rule.default_max_tokens, params.max_tokens);
    // vLLM's SamplingParams check, on the max_tokens the request did not give (a given one is
    // checked with the request's fields).
    if (params.min_tokens > params.max_tokens && params.max_tokens > 0)
      return error{"invalid_request",
                   "min_tokens must be less than or equal to max_tokens=" +
                       std::to_string(params.max_tokens) + ", got " +
                       std::to_string(params.min_tokens) + ".",
                   "min_tokens"};
  }
  const int64_t total = int64_t{prompt_tokens} + std::max<int64_t>(params.max_tokens, 1);
  if (prompt_tokens >= max_model_len || total > max_model_len)
    return error{"invalid_request",
                 "This model's maximum context length is " + std::to_string(max_model_len) +
                     " tokens. However, you requested " + std::to_string(total) + " tokens (" +
                     std::to_string(prompt_tokens) + " in the " + where + ", " +
                     std::to_string(params.max_tokens) +
                     " in the completion). Please reduce the length of the " + where +
                     " or completion.",
                 rule.max_tokens_given ? rule.max_tokens_param : where};
  return {};
}

}  // namespace coserve

namespace coserve::actors {

namespace {

// The pool's threads run at a lower priority (nice +5) than the executor, the runtime's pool and
// the HTTP threads: where cores are few, encoding a long prompt slows running streams less and
// takes longer itself. Linux only (per-thread nice); elsewhere a no-op.
void lower_thread_priority_once() {
#if defined(__linux__)
  static thread_local bool done = false;
  if (done) return;
  done = true;
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  (void)::setpriority(PRIO_PROCESS, tid, ::getpriority(PRIO_PROCESS, tid) + 5);
#endif
}

// Gives a tokenizer's load back when the handler ends, thrown out of or not.
struct load_guard {
  tokenizer_pool* pool;
  size_t index;
  int64_t cost;
  ~load_guard() { release(); }
  void release() {
    if (cost != 0) pool->done(index, cost);
    cost = 0;
  }
};

}  // namespace

// Bounds on rendering a request's own chat template (the model's own renders without a step
// bound): far above what a chat template needs for a whole context (hundreds of steps per message;
// a prompt of 8 MiB is ~2M tokens), low enough that a runaway one fails within about a second on
// one core (docs/agent-api.md).
constexpr template_limits k_request_template_limits{400, 2'000'000, std::size_t{8} << 20};

result<std::vector<int32_t>> prompt_encoder::encode_chat(const chat_input& chat) const {
  std::optional<chat_template> own;  // the request's (--trust-request-chat-template)
  if (!chat.template_source.empty()) {
    auto parsed = chat_template::parse(chat.template_source);
    if (!parsed)
      return error{"invalid_request", "chat_template: " + parsed.err().message, "chat_template"};
    own = std::move(parsed.value());
  }
  const chat_template* tmpl = own ? &*own : this->tmpl;
  const template_limits limits = own ? k_request_template_limits : template_limits{};
  if (tmpl == nullptr || tok == nullptr)
    return error{"invalid_request", template_error, "messages"};
  // A template that never reads `tools` would drop them silently.
  if (chat.tools.is_array() && !chat.tools.as_array().empty() &&
      tmpl->source().find("tools") == std::string::npos)
    return error{"invalid_request",
                 "the model's chat template does not support tools (it never reads `tools`); "
                 "serve with --chat-template to give one that does",
                 "tools"};
  json::value ctx;
  ctx["messages"] = chat.messages;
  if (!chat.tools.is_null()) ctx["tools"] = chat.tools;
  ctx["add_generation_prompt"] = chat.add_generation_prompt && !chat.continue_final_message;
  ctx["bos_token"] = tok->bos_token();
  ctx["eos_token"] = tok->eos_token();
  if (chat.template_kwargs.is_object())
    for (const auto& [key, value] : chat.template_kwargs.as_object()) ctx[key] = value;
  auto text = chat.continue_final_message
                  ? render_continuing_final_message(*tmpl, std::move(ctx), std::nullopt, limits)
                  : tmpl->render(ctx, std::nullopt, limits);
  if (!text.ok())
    return error{"invalid_request", std::move(text).err().message,
                 own ? "chat_template" : "messages"};
  return tok->encode(*text, chat.add_special_tokens);
}

result<std::vector<int32_t>> prompt_encoder::encode_input(const tokenize_request_input& in) const {
  if (const auto* text = std::get_if<std::string>(&in.input)) {
    if (tok == nullptr) return error{"invalid_request", template_error, "prompt"};
    return tok->encode(lower_case ? unicode_lowercase(*text) : *text, in.add_special_tokens);
  }
  return encode_chat(std::get<chat_input>(in.input));
}

result<std::vector<int32_t>> prompt_encoder::encode(const generate_request& req,
                                                    sampling_params& params) const {
  const std::string& where = req.context.input_param;
  std::vector<int32_t> ids;
  if (tok == nullptr && std::get_if<std::vector<int32_t>>(&req.input) == nullptr)
    return error{"invalid_request", template_error, where};
  if (const auto* text = std::get_if<std::string>(&req.input)) {
    ids = tok->encode(lower_case ? unicode_lowercase(*text) : *text, req.add_special_tokens);
  } else if (const auto* given = std::get_if<std::vector<int32_t>>(&req.input)) {
    ids = *given;
  } else if (const auto* pair = std::get_if<text_pair>(&req.input)) {
    // Truncation of a pair: longest_first over the two texts, the template's tokens kept (as a
    // cross-encoder's tokenizer truncates with max_length).
    const int32_t t = req.context.truncate_prompt_tokens;
    const int32_t max_length = t == 0 ? 0 : t < 0 ? max_model_len : t;
    tokenizer::encoding e =
        lower_case
            ? tok->encode_pair(unicode_lowercase(pair->first), unicode_lowercase(pair->second),
                               req.add_special_tokens, max_length)
            : tok->encode_pair(pair->first, pair->second, req.add_special_tokens, max_length);
    ids = std::move(e.ids);
    params.pooling.token_types.assign(e.type_ids.begin(), e.type_ids.end());
  } else {
    auto chat_ids = encode_chat(std::get<chat_input>(req.input));
    if (!chat_ids.ok()) {
      error e = std::move(chat_ids).err();
      if (e.param != "tools" && e.param != "chat_template") e.param = where;
      return e;
    }
    ids = std::move(*chat_ids);
  }
  for (int32_t id : ids)
    if (id < 0 || id >= vocab_size)
      return error{"invalid_request",
                   "token id " + std::to_string(id) + " is outside the vocabulary", where};
  if (const int32_t t = req.context.truncate_prompt_tokens;
      t != 0 && std::get_if<text_pair>(&req.input) == nullptr) {  // the last `keep` tokens
    const auto keep = size_t(t < 0 ? max_model_len : t);
    if (ids.size() > keep) ids.erase(ids.begin(), ids.end() - std::ptrdiff_t(keep));
  }
  if (auto r =
          apply_context_rule(req.context, static_cast<int32_t>(ids.size()), max_model_len, params);
      !r)
    return std::move(r).err();
  return ids;
}

result<std::string> prompt_encoder::decode(const std::vector<int32_t>& ids) const {
  if (tok == nullptr) return error{"invalid_request", template_error, "tokens"};
  for (int32_t id : ids)
    if (id < 0 || id >= vocab_size)
      return error{"invalid_request",
                   "'tokens' must hold ids in [0, " + std::to_string(vocab_size) + ")", "tokens"};
  return tok->decode(ids, true);
}

void tokenizer_actor::on_failure(const std::string& what) {
  if (!in_hand_) return;
  // Answered before the stream was handed out: the request is closed here, nothing else has it.
  if (in_hand_->complete(error{"internal_error", "tokenization failed: " + what}))
    (void)to_.intake.tell(request_closed{in_hand_id_});
  in_hand_.reset();
}

void tokenizer_actor::handle(encode_text& m) {
  lower_thread_priority_once();
  load_guard g{to_.pool.get(), index_, m.cost};
  shared_->fault_point("tokenizer", "encode_text");
  m.reply->complete(enc_->encode_input(m.input));
}

void tokenizer_actor::handle(decode_ids& m) {
  lower_thread_priority_once();
  load_guard g{to_.pool.get(), index_, m.cost};
  shared_->fault_point("tokenizer", "decode_ids");
  m.reply->complete(enc_->decode(m.ids));
}

asio::awaitable<void> tokenizer_actor::handle(tokenize_request& m) {
  lower_thread_priority_once();
  const uint64_t rid = m.request_id;
  in_hand_ = m.reply;
  in_hand_id_ = rid;
  load_guard g{to_.pool.get(), index_, m.cost};
  shared_->fault_point("tokenizer", "tokenize_request");
  sampling_params params = m.request.params;
  auto ids = enc_->encode(m.request, params);
  auto reject = [&](error e) {
    m.reply->complete(std::move(e));
    (void)to_.intake.tell(request_closed{rid});
    in_hand_.reset();
  };
  if (!ids.ok()) {
    reject(std::move(ids).err());
    co_return;
  }
  // Admission by queued prompt tokens (one request is always admitted when none waits).
  const int64_t waiting = shared_->metrics.waiting_tokens.load(std::memory_order_relaxed);
  if (max_waiting_tokens_ > 0 && waiting > 0 &&
      waiting + static_cast<int64_t>(ids->size()) > max_waiting_tokens_) {
    shared_->metrics.rejected.fetch_add(1, std::memory_order_relaxed);
    reject(error{"queue_full",
                 "too many prompt tokens waiting (" + std::to_string(waiting) + "); retry later"});
    co_return;
  }
  std::string prompt_text;
  if (m.request.return_prompt_text) {
    if (auto* text = std::get_if<std::string>(&m.request.input)) {
      prompt_text = std::move(*text);
    } else if (std::get_if<std::vector<int32_t>>(&m.request.input) != nullptr &&
               enc_->tok != nullptr) {
      prompt_text = enc_->tok->decode(*ids, true);
    }
  }
  g.release();
  m.stream->set_prompt(*ids, std::move(prompt_text));
  open_stream os{rid, m.stream, params, m.request.return_logits, m.request.return_token_text};
  in_hand_.reset();  // from here on the streamer holds the request
  if (co_await to_.streamer.send(std::move(os), rid) != rt::send_status::ok) {
    m.reply->complete(error{"engine_down", "the engine is stopping"});
    co_return;
  }
  add_request add{rid,     std::move(*ids), params, m.request.priority, m.stream->submitted(),
                  m.stream};
  if (co_await to_.scheduler.send(std::move(add), rid) != rt::send_status::ok) {
    m.reply->complete(error{"engine_down", "the engine is stopping"});
    // The streamer holds the stream: it drops it and closes the request.
    (void)to_.streamer.tell(end_request{rid, finish_reason::error, "the engine is stopping"});
    co_return;
  }
  m.reply->complete(std::shared_ptr<request_stream>(m.stream));
}

}  // namespace coserve::actors
