#include "actors/kv_events.hpp"

#include "model/text/json/value.hpp"

namespace coserve::actors {

namespace {

error bad(const std::string& key, const std::string& why) {
  return error{"invalid_argument", "--kv-events-config: '" + key + "' " + why, key};
}

// A string naming a ZMQ endpoint: transport://address.
bool is_endpoint(const std::string& s) {
  const size_t at = s.find("://");
  return at != std::string::npos && at > 0 && at + 3 < s.size();
}

}  // namespace

result<kv_events_config> parse_kv_events_config(std::string_view text) {
  auto parsed = json::parse(text);
  if (!parsed)
    return error{"invalid_argument", "--kv-events-config: not valid JSON: " + parsed.err().message,
                 ""};
  const json::value& v = *parsed;
  if (!v.is_object())
    return error{"invalid_argument", "--kv-events-config: expected a JSON object", ""};
  kv_events_config c;
  bool have_publisher = false;
  auto count = [&](const std::string& key, const json::value& x, int64_t hi,
                   auto& out) -> result<void> {
    if (!x.is_int() || x.as_int() < 1 || x.as_int() > hi)
      return bad(key, "must be an integer in [1, " + std::to_string(hi) + "]");
    out = static_cast<std::remove_reference_t<decltype(out)>>(x.as_int());
    return {};
  };
  for (const auto& [key, x] : v.as_object()) {
    result<void> r;
    if (key == "enable_kv_cache_events") {
      if (!x.is_bool()) return bad(key, "must be true or false");
      c.enable_kv_cache_events = x.as_bool();
    } else if (key == "publisher") {
      if (!x.is_string() || (x.as_string() != "zmq" && x.as_string() != "null"))
        return bad(key, "must be \"zmq\" or \"null\"");
      c.publisher = x.as_string();
      have_publisher = true;
    } else if (key == "endpoint" || key == "replay_endpoint") {
      if (key == "replay_endpoint" && x.is_null()) {
        c.replay_endpoint.clear();
        continue;
      }
      if (!x.is_string() || !is_endpoint(x.as_string()))
        return bad(key, "must be a ZMQ endpoint such as \"tcp://*:5557\"");
      (key == "endpoint" ? c.endpoint : c.replay_endpoint) = x.as_string();
    } else if (key == "buffer_steps") {
      r = count(key, x, int64_t{1} << 30, c.buffer_steps);
    } else if (key == "hwm") {
      r = count(key, x, int64_t{1} << 30, c.hwm);
    } else if (key == "max_queue_size") {
      r = count(key, x, int64_t{1} << 30, c.max_queue_size);
    } else if (key == "topic") {
      if (!x.is_string()) return bad(key, "must be a string");
      c.topic = x.as_string();
    } else {
      return bad(key,
                 "is not a known key (known: enable_kv_cache_events, publisher, endpoint, "
                 "replay_endpoint, buffer_steps, hwm, max_queue_size, topic)");
    }
    if (!r) return r.err();
  }
  if (!have_publisher) c.publisher = c.enable_kv_cache_events ? "zmq" : "null";
  return c;
}

}  // namespace coserve::actors
