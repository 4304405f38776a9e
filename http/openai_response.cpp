#include "http/openai_response.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

namespace coserve::http {

using json::value;

void choice_state::add(const output_event& ev) {
  text += ev.text;
  token_ids.insert(token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
  token_logprobs.insert(token_logprobs.end(), ev.token_logprobs.begin(), ev.token_logprobs.end());
  top_logprobs.insert(top_logprobs.end(), ev.top_logprobs.begin(), ev.top_logprobs.end());
  if (!ev.prompt_logprobs.empty()) prompt_logprobs = ev.prompt_logprobs;
  completion_tokens = ev.completion_tokens;
  if (ev.finish != finish_reason::none) {
    finish = ev.finish;
    stop_reason = ev.stop_reason;
  }
}

void keep_best(std::vector<choice_state>& choices, int32_t n, int32_t keep) {
  std::vector<choice_state> out;
  const size_t group = size_t(n);
  for (size_t g = 0; g * group < choices.size(); ++g) {
    std::vector<size_t> idx(group);
    std::iota(idx.begin(), idx.end(), g * group);
    auto mean = [&](size_t i) {
      const auto& lp = choices[i].token_logprobs;
      if (lp.empty()) return -std::numeric_limits<double>::infinity();
      double sum = 0;
      for (float x : lp) sum += x;
      return sum / double(lp.size());
    };
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return mean(a) > mean(b); });
    std::vector<prompt_logprob> prompt_lps;
    for (size_t i : idx)
      if (!choices[i].prompt_logprobs.empty()) prompt_lps = choices[i].prompt_logprobs;
    for (size_t k = 0; k < size_t(keep) && k < idx.size(); ++k) {
      choice_state c = std::move(choices[idx[k]]);
      c.index = int32_t(out.size());
      if (k == 0) c.prompt_logprobs = prompt_lps;
      out.push_back(std::move(c));
    }
  }
  choices = std::move(out);
}

std::string_view finish_text(finish_reason r) noexcept {
  switch (r) {
    case finish_reason::stop:
      return "stop";
    case finish_reason::length:
      return "length";
    case finish_reason::abort:
      return "abort";
    case finish_reason::error:
      return "error";
    case finish_reason::none:
      break;
  }
  return {};
}

std::string sse_event(std::string_view json) {
  std::string s;
  s.reserve(json.size() + 8);
  s.append("data: ").append(json).append("\n\n");
  return s;
}

namespace {

value bytes_of(const std::string& s) {
  value a = json::array{};
  for (unsigned char c : s) a.push_back(value(static_cast<int64_t>(c)));
  return a;
}

value finish_value(std::string_view f) { return f.empty() ? value() : value(std::string(f)); }

value chunk_base(const response_header& h) {
  value v = json::object{};
  v["id"] = value(h.id);
  v["object"] = value(h.chat ? "chat.completion.chunk" : "text_completion");
  v["created"] = value(h.created);
  v["model"] = value(h.model);
  if (h.usage) v["usage"] = *h.usage;
  return v;
}

std::string finish_chunk(value v, value choice, bool usage_null) {
  value choices = json::array{};
  choices.push_back(std::move(choice));
  v["choices"] = std::move(choices);
  if (usage_null && !v.find("usage")) v["usage"] = value();
  std::string out;
  json::dump_compact(v, out);
  return out;
}

}  // namespace

int64_t chars_in(std::string_view t) {
  int64_t n = 0;
  for (unsigned char c : t) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

value completion_logprobs(const std::vector<int32_t>& ids, const std::vector<float>& lps,
                          const std::vector<std::vector<token_logprob>>& tops, int64_t text_offset,
                          const token_text_fn& text_of) {
  value tokens = json::array{}, token_lps = json::array{}, top = json::array{},
        offsets = json::array{};
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string t = text_of(ids[i]);
    offsets.push_back(value(text_offset));
    text_offset += chars_in(t);
    tokens.push_back(value(t));
    token_lps.push_back(i < lps.size() ? value(static_cast<double>(lps[i])) : value());
    // The top tokens and, as OpenAI's legacy completions do, always the sampled one: up to
    // logprobs + 1 entries.
    if (i < tops.size() || i < lps.size()) {
      value m = json::object{};
      if (i < tops.size())
        for (const auto& tl : tops[i])
          m[text_of(tl.token)] = value(static_cast<double>(tl.logprob));
      if (i < lps.size() && !m.find(t)) m[t] = value(static_cast<double>(lps[i]));
      top.push_back(std::move(m));
    } else {
      top.push_back(value());
    }
  }
  value v = json::object{};
  v["tokens"] = std::move(tokens);
  v["token_logprobs"] = std::move(token_lps);
  v["top_logprobs"] = std::move(top);
  v["text_offset"] = std::move(offsets);
  return v;
}

value completion_logprobs_echo(const std::vector<int32_t>& prompt_ids,
                               const std::vector<prompt_logprob>& prompt_lps,
                               const std::vector<int32_t>& ids, const std::vector<float>& lps,
                               const std::vector<std::vector<token_logprob>>& tops,
                               const token_text_fn& text_of) {
  value tokens = json::array{}, token_lps = json::array{}, top = json::array{},
        offsets = json::array{};
  int64_t offset = 0;
  for (size_t p = 0; p < prompt_ids.size(); ++p) {
    std::string t = text_of(prompt_ids[p]);
    offsets.push_back(value(offset));
    offset += chars_in(t);
    const prompt_logprob* e = p > 0 && p - 1 < prompt_lps.size() ? &prompt_lps[p - 1] : nullptr;
    if (e == nullptr) {
      token_lps.push_back(value());
      top.push_back(value());
    } else {
      token_lps.push_back(value(static_cast<double>(e->logprob)));
      value m = json::object{};
      for (const auto& tl : e->top) m[text_of(tl.token)] = value(static_cast<double>(tl.logprob));
      if (!m.find(t)) m[t] = value(static_cast<double>(e->logprob));
      top.push_back(std::move(m));
    }
    tokens.push_back(value(std::move(t)));
  }
  value v = json::object{};
  v["tokens"] = std::move(tokens);
  v["token_logprobs"] = std::move(token_lps);
  v["top_logprobs"] = std::move(top);
  v["text_offset"] = std::move(offsets);
  value gen = completion_logprobs(ids, lps, tops, offset, text_of);  // the generated tokens follow
  for (auto& [key, arr] : gen.as_object())
    for (auto& x : arr.as_array()) v[key].push_back(std::move(x));
  return v;
}

value prompt_logprobs_json(const std::vector<int32_t>& prompt_ids,
                           const std::vector<prompt_logprob>& prompt_lps,
                           const token_text_fn& text_of) {
  value out = json::array{};
  auto entry = [&](float logprob, int32_t rank, int32_t id) {
    value e = json::object{};
    e["logprob"] = value(static_cast<double>(logprob));
    e["rank"] = value(int64_t{rank});
    e["decoded_token"] = value(text_of(id));
    return e;
  };
  for (size_t p = 0; p < prompt_ids.size(); ++p) {
    const prompt_logprob* e = p > 0 && p - 1 < prompt_lps.size() ? &prompt_lps[p - 1] : nullptr;
    if (e == nullptr) {
      out.push_back(value());
      continue;
    }
    value m = json::object{};
    m[std::to_string(e->token)] = entry(e->logprob, e->rank, e->token);
    for (size_t k = 0; k < e->top.size(); ++k) {
      const std::string key = std::to_string(e->top[k].token);
      if (!m.find(key)) m[key] = entry(e->top[k].logprob, int32_t(k) + 1, e->top[k].token);
    }
    out.push_back(std::move(m));
  }
  return out;
}

value chat_logprobs(const std::vector<int32_t>& ids, const std::vector<float>& lps,
                    const std::vector<std::vector<token_logprob>>& tops,
                    const token_text_fn& text_of) {
  value content = json::array{};
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string t = text_of(ids[i]);
    value e = json::object{};
    e["token"] = value(t);
    e["logprob"] = value(i < lps.size() ? static_cast<double>(lps[i]) : 0.0);
    e["bytes"] = bytes_of(t);
    value top = json::array{};
    if (i < tops.size())
      for (const auto& tl : tops[i]) {
        std::string tt = text_of(tl.token);
        value x = json::object{};
        x["token"] = value(tt);
        x["logprob"] = value(static_cast<double>(tl.logprob));
        x["bytes"] = bytes_of(tt);
        top.push_back(std::move(x));
      }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  value v = json::object{};
  v["content"] = std::move(content);
  return v;
}

value usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  value u = json::object{};
  u["prompt_tokens"] = value(prompt_tokens);
  u["completion_tokens"] = value(completion_tokens);
  u["total_tokens"] = value(prompt_tokens + completion_tokens);
  if (cached_tokens > 0) {
    value d = json::object{};
    d["cached_tokens"] = value(cached_tokens);
    u["prompt_tokens_details"] = std::move(d);
  }
  return u;
}

std::string text_chunk(const response_header& h, int32_t index, std::string_view text,
                       const value& logprobs, std::string_view finish, bool usage_null) {
  value c = json::object{};
  c["index"] = value(int64_t{index});
  c["text"] = value(std::string(text));
  c["logprobs"] = logprobs;
  c["finish_reason"] = finish_value(finish);
  c["stop_reason"] = value();
  return finish_chunk(chunk_base(h), std::move(c), usage_null);
}

std::string chat_role_chunk(const response_header& h, int32_t index, bool usage_null) {
  value c = json::object{};
  c["index"] = value(int64_t{index});
  value delta = json::object{};
  delta["role"] = value("assistant");
  delta["content"] = value("");
  c["delta"] = std::move(delta);
  c["logprobs"] = value();
  c["finish_reason"] = value();
  return finish_chunk(chunk_base(h), std::move(c), usage_null);
}

std::string chat_delta_chunk(const response_header& h, int32_t index, std::string_view text,
                             const value& logprobs, std::string_view finish, bool usage_null) {
  value c = json::object{};
  c["index"] = value(int64_t{index});
  value delta = json::object{};
  if (!text.empty() || finish.empty()) delta["content"] = value(std::string(text));
  c["delta"] = std::move(delta);
  c["logprobs"] = logprobs;
  c["finish_reason"] = finish_value(finish);
  return finish_chunk(chunk_base(h), std::move(c), usage_null);
}

namespace {

std::string tool_delta_chunk(const response_header& h, int32_t index, value call, bool usage_null) {
  value c = json::object{};
  c["index"] = value(int64_t{index});
  value delta = json::object{};
  delta["tool_calls"] = json::array{std::move(call)};
  c["delta"] = std::move(delta);
  c["logprobs"] = value();
  c["finish_reason"] = value();
  return finish_chunk(chunk_base(h), std::move(c), usage_null);
}

}  // namespace

std::string chat_reasoning_chunk(const response_header& h, int32_t index, std::string_view text,
                                 bool usage_null) {
  value c = json::object{};
  c["index"] = value(int64_t{index});
  value delta = json::object{};
  delta["reasoning_content"] = value(std::string(text));
  c["delta"] = std::move(delta);
  c["logprobs"] = value();
  c["finish_reason"] = value();
  return finish_chunk(chunk_base(h), std::move(c), usage_null);
}

std::string chat_tool_header_chunk(const response_header& h, int32_t index, int32_t call_index,
                                   const std::string& id, const std::string& name,
                                   bool usage_null) {
  value call = json::object{};
  call["index"] = value(int64_t{call_index});
  call["id"] = value(id);
  call["type"] = value("function");
  value fn = json::object{};
  fn["name"] = value(name);
  fn["arguments"] = value("");
  call["function"] = std::move(fn);
  return tool_delta_chunk(h, index, std::move(call), usage_null);
}

std::string chat_tool_args_chunk(const response_header& h, int32_t index, int32_t call_index,
                                 std::string_view arguments, bool usage_null) {
  value call = json::object{};
  call["index"] = value(int64_t{call_index});
  value fn = json::object{};
  fn["arguments"] = value(std::string(arguments));
  call["function"] = std::move(fn);
  return tool_delta_chunk(h, index, std::move(call), usage_null);
}

std::string usage_chunk(const response_header& h, const value& usage) {
  value v = chunk_base(h);
  v["choices"] = json::array{};
  v["usage"] = usage;
  std::string out;
  json::dump_compact(v, out);
  return out;
}

namespace {

std::string body(const response_header& h, const std::vector<choice_state>& choices,
                 const std::vector<value>& logprobs, const value& usage,
                 const std::vector<value>* prompt_lps) {
  value v = json::object{};
  v["id"] = value(h.id);
  v["object"] = value(h.chat ? "chat.completion" : "text_completion");
  v["created"] = value(h.created);
  v["model"] = value(h.model);
  value arr = json::array{};
  for (size_t i = 0; i < choices.size(); ++i) {
    const auto& ch = choices[i];
    value c = json::object{};
    c["index"] = value(int64_t{ch.index});
    if (h.chat) {
      value msg = json::object{};
      msg["role"] = value("assistant");
      value calls = json::array{};
      for (const auto& t : ch.tool_calls) {
        value call = json::object{};
        call["id"] = value(t.id);
        call["type"] = value("function");
        value fn = json::object{};
        fn["name"] = value(t.name);
        fn["arguments"] = value(t.arguments);
        call["function"] = std::move(fn);
        calls.push_back(std::move(call));
      }
      msg["content"] = ch.tool_calls.empty() || !ch.text.empty() ? value(ch.text) : value();
      if (ch.has_reasoning) msg["reasoning_content"] = value(ch.reasoning);
      msg["tool_calls"] = std::move(calls);
      c["message"] = std::move(msg);
    } else {
      c["text"] = value(ch.text);
    }
    c["logprobs"] = i < logprobs.size() ? logprobs[i] : value();
    c["finish_reason"] = finish_value(!ch.tool_calls.empty() && ch.finish == finish_reason::stop
                                          ? std::string_view("tool_calls")
                                          : finish_text(ch.finish));
    c["stop_reason"] = ch.stop_reason.empty() ? value() : value(ch.stop_reason);
    if (prompt_lps && !h.chat)
      c["prompt_logprobs"] = i < prompt_lps->size() ? (*prompt_lps)[i] : value();
    arr.push_back(std::move(c));
  }
  v["choices"] = std::move(arr);
  if (prompt_lps && h.chat)
    v["prompt_logprobs"] = prompt_lps->empty() ? value() : prompt_lps->front();
  v["usage"] = usage;
  std::string out;
  json::dump_compact(v, out);
  return out;
}

}  // namespace

std::string completion_body(const response_header& h, const std::vector<choice_state>& choices,
                            const std::vector<value>& logprobs, const value& usage,
                            const std::vector<value>* prompt_logprobs) {
  return body(h, choices, logprobs, usage, prompt_logprobs);
}

std::string chat_body(const response_header& h, const std::vector<choice_state>& choices,
                      const std::vector<value>& logprobs, const value& usage,
                      const std::vector<value>* prompt_logprobs) {
  return body(h, choices, logprobs, usage, prompt_logprobs);
}

}  // namespace coserve::http
