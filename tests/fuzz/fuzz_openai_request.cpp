// OpenAI request parsing: any body gives a request or an api_error. Accepted requests respect the
// documented ranges; every error serialises to valid JSON (messages quote client input).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "http/openai_request.hpp"
#include "model/text/json/value.hpp"

namespace {

using namespace coserve;

void check_error(const http::api_error& e) {
  if (e.status < 400 || e.status > 499) std::abort();
  auto j = json::parse(http::error_json(e));
  if (!j || !j->is_object() || !j->find("error")) std::abort();
}

bool in_vocab(int32_t id, const http::model_limits& lim) { return id >= 0 && id < lim.vocab_size; }

void check_request(http::openai_request& r, const http::model_limits& lim, int32_t prompt_tokens) {
  const auto& p = r.params;
  if (!std::isfinite(p.temperature) || p.temperature < 0 || p.temperature > 2) std::abort();
  if (!(p.top_p > 0 && p.top_p <= 1) || !(p.min_p >= 0 && p.min_p <= 1)) std::abort();
  if (p.n < 1 || p.n > 128 || p.max_tokens < 1 || p.min_tokens < 0 || p.logprobs > 20) std::abort();
  for (const auto& [id, bias] : p.logit_bias)
    if (!in_vocab(id, lim) || !(bias >= -100 && bias <= 100)) std::abort();
  for (int32_t id : p.stop_token_ids)
    if (!in_vocab(id, lim)) std::abort();
  for (const auto& s : p.stop)
    if (s.empty()) std::abort();
  if (r.chat != r.prompts.empty()) std::abort();
  for (const auto& prompt : r.prompts)
    if (const auto* ids = std::get_if<std::vector<int32_t>>(&prompt))
      for (int32_t id : *ids)
        if (!in_vocab(id, lim)) std::abort();
  if (r.chat && !r.chat_in.messages.is_array()) std::abort();
  if (auto e = http::check_context(r, prompt_tokens, lim)) {
    check_error(*e);
    return;
  }
  if (prompt_tokens + std::max(r.params.max_tokens, 1) > lim.max_model_len) std::abort();
}

}  // namespace

// The first byte picks the endpoint (bit 0: chat) and the prompt length handed to check_context.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const int32_t prompt_tokens = data[0] >> 1;  // 0..127
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const http::model_limits lim{"fuzz-model", 1000, 96};
  auto parsed = http::parse_openai_request(body, chat, lim);
  if (auto* e = std::get_if<http::api_error>(&parsed))
    check_error(*e);
  else
    check_request(std::get<http::openai_request>(parsed), lim, prompt_tokens);
  return 0;
}
