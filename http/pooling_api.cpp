// The pooling routes, as vLLM serves them: /v1/embeddings (OpenAI's shape), /v1/score (text
// pairs) and /v1/rerank, /v2/rerank (Jina / Cohere shape). Each input is one engine request with
// sampling_params::pooling set; its one output event carries the vector (an embedding model's) or
// the class logits (a cross-encoder's). Scores: a cross-encoder's sigmoid over its one label, or
// the cosine of an embedding model's normalised vectors. Over 500 lines: the four routes share
// their readers (model, inputs, truncation) and one runner (run_pooled), which a split by route
// would have to export.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "http/openai_api.hpp"
#include "http/request_fields.hpp"

namespace coserve::http {

using json::value;

namespace {

// Little-endian float32 bytes in base64 (what OpenAI's client decodes with numpy.frombuffer).
std::string base64_floats(const std::vector<float>& v) {
  static constexpr char k_alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + size_t(b)] = char((u >> (8 * b)) & 0xff);
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t chunk = 0;
    for (size_t k = 0; k < n; ++k) chunk |= uint32_t(uint8_t(bytes[i + k])) << (16 - 8 * k);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? k_alphabet[(chunk >> (18 - 6 * k)) & 0x3f] : '=';
  }
  return out;
}

api_error type_error(const std::string& field, const std::string& what) {
  return api_error::bad_request("'" + field + "' must be " + what, field);
}

// The request's model name (404 for one not served); "" when absent.
std::optional<api_error> read_model(const value& body, const model_limits& lim, std::string& out) {
  const value* m = body.find("model");
  if (m == nullptr || m->is_null()) return std::nullopt;
  if (!m->is_string()) return type_error("model", "a string");
  out = m->as_string();
  if (!out.empty() && !lim.serves(out))
    return api_error{404, "The model `" + out + "` does not exist.", "NotFoundError", "model",
                     "model_not_found"};
  return std::nullopt;
}

std::optional<api_error> read_truncate(const value& body, context_rule& ctx) {
  const value* t = body.find("truncate_prompt_tokens");
  if (t == nullptr || t->is_null()) return std::nullopt;
  if (!t->is_int() || t->as_int() < -1 || t->as_int() > INT32_MAX)
    return type_error("truncate_prompt_tokens", "an integer >= -1");
  ctx.truncate_prompt_tokens = int32_t(t->as_int());
  return std::nullopt;
}

constexpr size_t k_max_inputs = 2048;

// A list of strings (or one string): score's text_1 / text_2.
std::optional<api_error> read_texts(const value& body, const char* field,
                                    std::vector<std::string>& out, bool& single) {
  const value* v = body.find(field);
  if (v == nullptr || v->is_null())
    return api_error::bad_request(std::string("'") + field + "' is required", field);
  single = v->is_string();
  if (single) {
    out.push_back(v->as_string());
    return std::nullopt;
  }
  if (!v->is_array() || v->as_array().empty() || v->as_array().size() > k_max_inputs)
    return type_error(field, "a string or a list of 1 to 2048 strings");
  for (const value& x : v->as_array()) {
    if (!x.is_string()) return type_error(field, "a string or a list of strings");
    out.push_back(x.as_string());
  }
  return std::nullopt;
}

using embed_input = std::variant<std::string, std::vector<int32_t>, chat_input>;

// /v1/embeddings' input: a string, strings, token ids, or lists of token ids.
std::optional<api_error> read_embedding_inputs(const value& body, int32_t vocab,
                                               std::vector<embed_input>& out) {
  const value* v = body.find("input");
  if (v == nullptr || v->is_null()) return api_error::bad_request("'input' is required", "input");
  const char* shape =
      "a string, a list of strings, a list of token ids or a list of lists of "
      "token ids (1 to 2048 inputs)";
  auto ids_of = [&](const value& a, std::vector<int32_t>& ids) {
    for (const value& x : a.as_array()) {
      if (!x.is_int() || x.as_int() < 0 || x.as_int() >= vocab) return false;
      ids.push_back(int32_t(x.as_int()));
    }
    return !ids.empty();
  };
  if (v->is_string()) {
    out.emplace_back(v->as_string());
    return std::nullopt;
  }
  if (!v->is_array() || v->as_array().empty()) return type_error("input", shape);
  const value& first = v->as_array().front();
  if (first.is_int()) {
    std::vector<int32_t> ids;
    if (!ids_of(*v, ids))
      return type_error("input", "token ids in [0, " + std::to_string(vocab) + ")");
    out.emplace_back(std::move(ids));
    return std::nullopt;
  }
  if (v->as_array().size() > k_max_inputs) return type_error("input", shape);
  for (const value& x : v->as_array()) {
    if (x.is_string() && first.is_string()) {
      out.emplace_back(x.as_string());
    } else if (x.is_array() && first.is_array()) {
      std::vector<int32_t> ids;
      if (!ids_of(x, ids))
        return type_error("input", "lists of token ids in [0, " + std::to_string(vocab) + ")");
      out.emplace_back(std::move(ids));
    } else {
      return type_error("input", shape);
    }
  }
  return std::nullopt;
}

// The requested vector size against the model's (vLLM's rules and messages).
std::optional<api_error> read_dimensions(const value& body, const model_info& info, int32_t& out) {
  const value* d = body.find("dimensions");
  if (d == nullptr || d->is_null()) return std::nullopt;
  if (!d->is_int()) return type_error("dimensions", "an integer");
  if (d->as_int() < 1)
    return api_error::bad_request("Dimensions must be greater than 0", "dimensions");
  const std::string name = "Model \"" + info.served_model_name + "\"";
  if (!info.matryoshka)
    return api_error::bad_request(name +
                                      " does not support matryoshka representation, changing "
                                      "output dimensions will lead to poor results.",
                                  "dimensions");
  const auto& allowed = info.matryoshka_dimensions;
  if (d->as_int() > info.pooled_size ||
      (!allowed.empty() &&
       std::find(allowed.begin(), allowed.end(), d->as_int()) == allowed.end())) {
    std::string list;
    for (int32_t a : allowed) list += (list.empty() ? "" : ", ") + std::to_string(a);
    return api_error::bad_request(
        name + " only supports " +
            (allowed.empty() ? "up to " + std::to_string(info.pooled_size) : "[" + list + "]") +
            " matryoshka dimensions, use other output dimensions will lead to poor results.",
        "dimensions");
  }
  out = int32_t(d->as_int());
  return std::nullopt;
}

value usage_of(int64_t prompt_tokens) {
  value u = json::object{};
  u["prompt_tokens"] = value(prompt_tokens);
  u["total_tokens"] = value(prompt_tokens);
  return u;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

float dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) s += double(a[i]) * b[i];
  return float(s);
}

}  // namespace

asio::awaitable<std::variant<std::vector<openai_api::pooled>, api_error>> openai_api::run_pooled(
    std::vector<generate_request> requests, const char* param) {
  std::vector<std::shared_ptr<request_stream>> streams;
  streams.reserve(requests.size());
  for (auto& g : requests) {
    g.params.pooling.enabled = true;
    g.context.input_param = param;
    auto s = co_await eng().submit(std::move(g));
    if (!s) {
      for (auto& open : streams) open->cancel();
      co_return from_engine_error(s.err(), param);
    }
    streams.push_back(std::move(*s));
  }
  std::vector<pooled> out(streams.size());
  std::optional<api_error> failed;
  for (size_t i = 0; i < streams.size(); ++i) {
    while (auto ev = co_await streams[i]->next()) {
      if (ev->finish == finish_reason::error || ev->finish == finish_reason::abort) {
        if (!failed)
          failed =
              api_error{500,
                        ev->error_message.empty() ? "the request was aborted" : ev->error_message,
                        "InternalServerError",
                        {},
                        {}};
        continue;
      }
      out[i].vector = std::move(ev->embedding);
      out[i].prompt_tokens = ev->prompt_tokens;
    }
    if (!failed && out[i].vector.empty())
      failed = api_error{500, "the engine returned no vector", "InternalServerError", {}, {}};
  }
  if (failed) co_return *failed;
  co_return out;
}

asio::awaitable<void> openai_api::embeddings(http_request& req, response_writer& w) {
  std::variant<value, api_error> parsed = parse_json_object(req.body);
  std::string model;
  std::vector<embed_input> inputs;
  context_rule ctx;
  int32_t dims = 0;
  bool base64 = false, add_special = true;
  const model_info& info = eng().info();
  std::optional<api_error> err;
  if (auto* e = std::get_if<api_error>(&parsed)) err = *e;
  const value* body = std::get_if<value>(&parsed);
  if (!err) err = read_model(*body, limits_, model);
  if (!err && info.task != "embed")
    err = api_error::bad_request("The model `" + info.served_model_name +
                                     "` does not support the Embeddings API: it serves task '" +
                                     info.task + "'" +
                                     (info.task == "score" ? " (/v1/score, /v1/rerank)" : ""),
                                 "model");
  const value* messages = err ? nullptr : body->find("messages");
  if (messages && messages->is_null()) messages = nullptr;
  if (messages && body->find("input") && !body->find("input")->is_null())
    err = api_error::bad_request("give 'input' or 'messages', not both", "messages");
  if (!err && messages) {
    // vLLM's chat embedding request: the chat template renders the messages into one input (no
    // generation prompt unless asked; special tokens only from the template unless asked).
    chat_input chat;
    chat.add_generation_prompt = false;
    err = read_chat_input(*body, limits_, chat);
    if (!err) inputs.emplace_back(std::move(chat));
  } else if (!err) {
    err = read_embedding_inputs(*body, limits_.vocab_size, inputs);
  }
  if (!err) err = read_dimensions(*body, info, dims);
  if (!err) err = read_truncate(*body, ctx);
  if (const value* f = err ? nullptr : body->find("encoding_format"); f && !f->is_null()) {
    if (!f->is_string() || (f->as_string() != "float" && f->as_string() != "base64"))
      err = type_error("encoding_format", "\"float\" or \"base64\"");
    else
      base64 = f->as_string() == "base64";
  }
  if (const value* u = err ? nullptr : body->find("user"); u && !u->is_null() && !u->is_string())
    err = type_error("user", "a string");
  add_special = messages == nullptr;  // vLLM's defaults: text inputs true, messages false
  if (const value* a = err ? nullptr : body->find("add_special_tokens"); a && !a->is_null()) {
    if (!a->is_bool())
      err = type_error("add_special_tokens", "a boolean");
    else
      add_special = a->as_bool();
  }
  if (err) co_return co_await respond_error(w, *err);
  std::vector<generate_request> gens(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (auto* text = std::get_if<std::string>(&inputs[i])) {
      gens[i].input = std::move(*text);
    } else if (auto* chat = std::get_if<chat_input>(&inputs[i])) {
      chat->add_special_tokens = add_special;
      gens[i].input = std::move(*chat);
    } else {
      gens[i].input = std::move(std::get<std::vector<int32_t>>(inputs[i]));
    }
    gens[i].add_special_tokens = add_special;
    gens[i].context = ctx;
    gens[i].params.pooling.dimensions = dims;
    gens[i].params.lora_id = limits_.lora_id(model);  // an adapter named as the model
  }
  auto ran = co_await run_pooled(std::move(gens), messages ? "messages" : "input");
  if (auto* e = std::get_if<api_error>(&ran)) {
    const api_error e2 = *e;
    co_return co_await respond_error(w, e2);
  }
  auto& results = std::get<std::vector<pooled>>(ran);
  value out = json::object{};
  out["id"] = value(new_id("embd"));
  out["object"] = value("list");
  out["created"] = value(unix_now());
  out["model"] = value(model.empty() ? limits_.served_model_name : model);
  value data = json::array{};
  int64_t tokens = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    value d = json::object{};
    d["index"] = value(int64_t(i));
    d["object"] = value("embedding");
    if (base64) {
      d["embedding"] = value(base64_floats(results[i].vector));
    } else {
      value vec = json::array{};
      vec.as_array().reserve(results[i].vector.size());
      for (float x : results[i].vector) vec.push_back(value(x));
      d["embedding"] = std::move(vec);
    }
    data.push_back(std::move(d));
    tokens += results[i].prompt_tokens;
  }
  out["data"] = std::move(data);
  out["usage"] = usage_of(tokens);
  std::string text;
  json::dump_compact(out, text);
  co_await respond_json(w, 200, text);
}

// Scores of (first[i], second[i]) pairs: the cross-encoder's, or the cosine of an embedding
// model's vectors (each distinct text embedded once).
asio::awaitable<std::variant<std::vector<float>, api_error>> openai_api::score_pairs(
    const std::vector<std::pair<std::string, std::string>>& pairs, const context_rule& ctx,
    const char* param, int32_t lora_id, int64_t& prompt_tokens) {
  const model_info& info = eng().info();
  if (info.task != "embed" && info.task != "score")
    co_return api_error::bad_request("The model `" + info.served_model_name +
                                         "` does not support the Score API: it serves task '" +
                                         info.task + "'",
                                     "model");
  if (info.task == "score" && info.pooled_size != 1)
    co_return api_error::bad_request("The model `" + info.served_model_name + "` has " +
                                         std::to_string(info.pooled_size) +
                                         " labels; scores are read from a cross-encoder with one",
                                     "model");
  std::vector<generate_request> gens;
  std::vector<std::string> texts;  // embed: the distinct texts, in order of first use
  std::vector<std::pair<size_t, size_t>> index;
  if (info.task == "score") {
    for (const auto& [a, b] : pairs) {
      generate_request g;
      if (info.score_input == "concat") {
        g.input = a + b;
      } else if (info.score_input == "template") {
        chat_input chat;
        chat.messages = json::array{};
        for (const auto& [role, text] : {std::pair{"query", &a}, std::pair{"document", &b}}) {
          value m = json::object{};
          m["role"] = value(role);
          m["content"] = value(*text);
          chat.messages.push_back(std::move(m));
        }
        chat.add_generation_prompt = false;
        chat.add_special_tokens = true;
        g.input = std::move(chat);
      } else {
        g.input = text_pair{a, b};
      }
      g.context = ctx;
      g.params.lora_id = lora_id;
      gens.push_back(std::move(g));
    }
  } else {
    auto slot = [&](const std::string& t) {
      auto it = std::find(texts.begin(), texts.end(), t);
      if (it != texts.end()) return size_t(it - texts.begin());
      texts.push_back(t);
      return texts.size() - 1;
    };
    for (const auto& [a, b] : pairs) index.emplace_back(slot(a), slot(b));
    for (const std::string& t : texts) {
      generate_request g;
      g.input = t;
      g.context = ctx;
      g.params.pooling.normalize = true;
      g.params.lora_id = lora_id;
      gens.push_back(std::move(g));
    }
  }
  auto ran = co_await run_pooled(std::move(gens), param);
  if (auto* e = std::get_if<api_error>(&ran)) co_return *e;
  const auto& results = std::get<std::vector<pooled>>(ran);
  std::vector<float> scores;
  prompt_tokens = 0;
  for (const pooled& p : results) prompt_tokens += p.prompt_tokens;
  if (info.task == "score") {
    for (const pooled& p : results) scores.push_back(sigmoid(p.vector.at(0)));
  } else {
    for (const auto& [a, b] : index) scores.push_back(dot(results[a].vector, results[b].vector));
  }
  co_return scores;
}

asio::awaitable<void> openai_api::score(http_request& req, response_writer& w) {
  std::variant<value, api_error> parsed = parse_json_object(req.body);
  std::string model;
  std::vector<std::string> first, second;
  bool first_single = false, second_single = false;
  context_rule ctx;
  std::optional<api_error> err;
  if (auto* e = std::get_if<api_error>(&parsed)) err = *e;
  const value* body = std::get_if<value>(&parsed);
  if (!err) err = read_model(*body, limits_, model);
  if (!err) err = read_texts(*body, "text_1", first, first_single);
  if (!err) err = read_texts(*body, "text_2", second, second_single);
  if (!err) err = read_truncate(*body, ctx);
  if (!err && !first_single && first.size() != second.size())
    err = api_error::bad_request("text_1 holds " + std::to_string(first.size()) +
                                     " texts and text_2 " + std::to_string(second.size()) +
                                     ": give one text_1, or as many as text_2",
                                 "text_1");
  if (err) co_return co_await respond_error(w, *err);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; i < second.size(); ++i)
    pairs.emplace_back(first_single ? first[0] : first[i], second[i]);
  int64_t tokens = 0;
  const int32_t lora = limits_.lora_id(model);
  auto scored = co_await score_pairs(pairs, ctx, "text_1", lora, tokens);
  if (auto* e = std::get_if<api_error>(&scored)) {
    const api_error e2 = *e;
    co_return co_await respond_error(w, e2);
  }
  const auto& scores = std::get<std::vector<float>>(scored);
  value out = json::object{};
  out["id"] = value(new_id("score"));
  out["object"] = value("list");
  out["created"] = value(unix_now());
  out["model"] = value(model.empty() ? limits_.served_model_name : model);
  value data = json::array{};
  for (size_t i = 0; i < scores.size(); ++i) {
    value d = json::object{};
    d["index"] = value(int64_t(i));
    d["object"] = value("score");
    d["score"] = value(scores[i]);
    data.push_back(std::move(d));
  }
  out["data"] = std::move(data);
  out["usage"] = usage_of(tokens);
  std::string text;
  json::dump_compact(out, text);
  co_await respond_json(w, 200, text);
}

asio::awaitable<void> openai_api::rerank(http_request& req, response_writer& w) {
  std::variant<value, api_error> parsed = parse_json_object(req.body);
  std::string model, query;
  std::vector<std::string> docs;
  context_rule ctx;
  int64_t top_n = 0;
  bool return_documents = true;
  std::optional<api_error> err;
  if (auto* e = std::get_if<api_error>(&parsed)) err = *e;
  const value* body = std::get_if<value>(&parsed);
  if (!err) err = read_model(*body, limits_, model);
  if (!err) {
    const value* q = body->find("query");
    if (q == nullptr || !q->is_string())
      err = type_error("query", "a string");
    else
      query = q->as_string();
  }
  if (!err) {
    const value* d = body->find("documents");
    if (d == nullptr || !d->is_array() || d->as_array().empty() ||
        d->as_array().size() > k_max_inputs)
      err = type_error("documents", "a list of 1 to 2048 documents");
    for (size_t i = 0; !err && i < d->as_array().size(); ++i) {
      const value& x = d->as_array()[i];
      const value* t = x.is_object() ? x.find("text") : nullptr;
      if (x.is_string())
        docs.push_back(x.as_string());
      else if (t != nullptr && t->is_string())
        docs.push_back(t->as_string());
      else
        err = type_error("documents", "strings or objects with a string 'text'");
    }
  }
  if (const value* n = err ? nullptr : body->find("top_n"); n && !n->is_null()) {
    if (!n->is_int() || n->as_int() < 0 || n->as_int() > INT32_MAX)
      err = type_error("top_n", "an integer >= 0");
    else
      top_n = n->as_int();
  }
  if (const value* r = err ? nullptr : body->find("return_documents"); r && !r->is_null()) {
    if (!r->is_bool())
      err = type_error("return_documents", "a boolean");
    else
      return_documents = r->as_bool();
  }
  if (!err) err = read_truncate(*body, ctx);
  if (err) co_return co_await respond_error(w, *err);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& d : docs) pairs.emplace_back(query, d);
  int64_t tokens = 0;
  const int32_t lora = limits_.lora_id(model);
  auto scored = co_await score_pairs(pairs, ctx, "documents", lora, tokens);
  if (auto* e = std::get_if<api_error>(&scored)) {
    const api_error e2 = *e;
    co_return co_await respond_error(w, e2);
  }
  const auto& scores = std::get<std::vector<float>>(scored);
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  if (top_n > 0 && size_t(top_n) < order.size()) order.resize(size_t(top_n));
  value out = json::object{};
  out["id"] = value(new_id("rerank"));
  out["model"] = value(model.empty() ? limits_.served_model_name : model);
  value results = json::array{};
  for (size_t i : order) {
    value r = json::object{};
    r["index"] = value(int64_t(i));
    if (return_documents) {
      value doc = json::object{};
      doc["text"] = value(docs[i]);
      r["document"] = std::move(doc);
    }
    r["relevance_score"] = value(scores[i]);
    results.push_back(std::move(r));
  }
  out["results"] = std::move(results);
  value usage = json::object{};
  usage["total_tokens"] = value(tokens);
  out["usage"] = std::move(usage);
  std::string text;
  json::dump_compact(out, text);
  co_await respond_json(w, 200, text);
}

}  // namespace coserve::http
