#include "actors/tokenizer_actor.hpp"

#include "actors/intake.hpp"
#include "actors/scheduler.hpp"
#include "actors/streamer.hpp"
#include "runtime/system.hpp"

namespace coserve::actors {

result<std::vector<int32_t>> prompt_encoder::encode_chat(const chat_input& chat) const {
  if (tmpl == nullptr) return error{"invalid_request", template_error};
  json::value ctx;
  ctx["messages"] = chat.messages;
  if (!chat.tools.is_null()) ctx["tools"] = chat.tools;
  ctx["add_generation_prompt"] = chat.add_generation_prompt;
  ctx["bos_token"] = tok->bos_token();
  ctx["eos_token"] = tok->eos_token();
  if (chat.template_kwargs.is_object())
    for (const auto& [key, value] : chat.template_kwargs.as_object()) ctx[key] = value;
  auto text = tmpl->render(ctx);
  if (!text.ok()) return error{"invalid_request", std::move(text).err().message};
  return tok->encode(*text, false);
}

result<std::vector<int32_t>> prompt_encoder::encode(const generate_request& req) const {
  std::vector<int32_t> ids;
  if (tok == nullptr && std::get_if<std::vector<int32_t>>(&req.input) == nullptr)
    return error{"invalid_request", template_error};
  if (const auto* text = std::get_if<std::string>(&req.input)) {
    ids = tok->encode(*text, req.add_special_tokens);
  } else if (const auto* given = std::get_if<std::vector<int32_t>>(&req.input)) {
    ids = *given;
  } else {
    auto chat_ids = encode_chat(std::get<chat_input>(req.input));
    if (!chat_ids.ok()) return std::move(chat_ids).err();
    ids = std::move(*chat_ids);
  }
  if (ids.empty()) return error{"invalid_request", "the prompt is empty"};
  for (int32_t id : ids)
    if (id < 0 || id >= vocab_size)
      return error{"invalid_request", "token id " + std::to_string(id) + " is outside the vocabulary"};
  const int64_t total = static_cast<int64_t>(ids.size()) + req.params.max_tokens;
  if (total > max_model_len)
    return error{"invalid_request",
                 "the prompt (" + std::to_string(ids.size()) + " tokens) plus max_tokens (" +
                     std::to_string(req.params.max_tokens) + ") exceeds the model context of " +
                     std::to_string(max_model_len) + " tokens"};
  return ids;
}

void tokenizer_actor::on_failure(const std::string& what) {
  if (!in_hand_) return;
  // Answered before the stream was handed out: the request is closed here, nothing else has it.
  if (in_hand_->complete(error{"internal_error", "tokenization failed: " + what}))
    (void)p_->intake_ref.tell(request_closed{in_hand_id_});
  in_hand_.reset();
}

asio::awaitable<void> tokenizer_actor::handle(tokenize_request& m) {
  const uint64_t rid = m.request_id;
  in_hand_ = m.reply;
  in_hand_id_ = rid;
  p_->fault_point("tokenizer", "tokenize_request");
  auto ids = enc_->encode(m.request);
  if (!ids.ok()) {
    m.reply->complete(std::move(ids).err());
    (void)p_->intake_ref.tell(request_closed{rid});
    in_hand_.reset();
    co_return;
  }
  m.stream->set_prompt(*ids);
  open_stream os{rid, m.stream, m.request.params, m.request.return_logits};
  in_hand_.reset();  // from here on the streamer holds the request
  if (co_await p_->streamer_ref.send(std::move(os), rid) != rt::send_status::ok) {
    m.reply->complete(error{"engine_down", "the engine is stopping"});
    co_return;
  }
  add_request add{rid, std::move(*ids), m.request.params, m.request.priority, m.stream->submitted()};
  if (co_await p_->scheduler_ref.send(std::move(add), rid) != rt::send_status::ok) {
    m.reply->complete(error{"engine_down", "the engine is stopping"});
    // The streamer holds the stream: it drops it and closes the request.
    (void)p_->streamer_ref.tell(end_request{rid, finish_reason::error, "the engine is stopping"});
    co_return;
  }
  m.reply->complete(std::shared_ptr<request_stream>(m.stream));
}

}  // namespace coserve::actors
