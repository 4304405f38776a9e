#include <algorithm>
#include <variant>

#include "actors/tokenizer_messages.hpp"

namespace coserve::actors {

namespace {

int64_t chat_cost(const json::value& v) {
  if (v.is_string()) return static_cast<int64_t>(v.as_string().size());
  int64_t c = 1;
  if (v.is_array())
    for (const auto& x : v.as_array()) c += chat_cost(x);
  else if (v.is_object())
    for (const auto& [k, x] : v.as_object()) c += static_cast<int64_t>(k.size()) + chat_cost(x);
  return c;
}

}  // namespace

int64_t tokenize_cost(const generate_request& req) {
  if (const auto* t = std::get_if<std::string>(&req.input))
    return static_cast<int64_t>(t->size()) + 1;
  if (const auto* ids = std::get_if<std::vector<int32_t>>(&req.input))
    return static_cast<int64_t>(ids->size()) + 1;
  if (const auto* pair = std::get_if<text_pair>(&req.input))
    return static_cast<int64_t>(pair->first.size() + pair->second.size()) + 1;
  const auto& chat = std::get<chat_input>(req.input);
  return chat_cost(chat.messages) + chat_cost(chat.tools);
}

int64_t tokenize_cost(const tokenize_request_input& in) {
  if (const auto* t = std::get_if<std::string>(&in.input))
    return static_cast<int64_t>(t->size()) + 1;
  const auto& chat = std::get<chat_input>(in.input);
  return chat_cost(chat.messages) + chat_cost(chat.tools);
}

size_t tokenizer_pool::pick(int64_t cost) {
  size_t best = 0;
  int64_t best_load = load_[0].load(std::memory_order_relaxed);
  for (size_t i = 1; i < actors_.size(); ++i) {
    const int64_t l = load_[i].load(std::memory_order_relaxed);
    if (l < best_load) {
      best = i;
      best_load = l;
    }
  }
  load_[best].fetch_add(cost, std::memory_order_relaxed);
  return best;
}

int64_t tokenizer_pool::queued() const {
  int64_t n = 0;
  for (const auto& a : actors_) n += static_cast<int64_t>(a.queued());
  return n;
}

}  // namespace coserve::actors
