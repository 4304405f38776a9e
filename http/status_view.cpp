#include "http/status_view.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <unordered_map>

#include "model/text/json/value.hpp"
#include "runtime/trace.hpp"

namespace coserve::http {

using json::value;

status_history::status_history(size_t capacity, std::chrono::milliseconds period)
    : capacity_(std::max<size_t>(capacity, 2)),
      period_(std::max(period, std::chrono::milliseconds(1))) {}

status_history::~status_history() { stop(); }

void status_history::start(std::function<engine_metrics()> source) {
  if (thread_.joinable()) return;
  thread_ = std::thread([this, source = std::move(source)] {
    std::unique_lock lock(mu_);
    while (!stop_) {
      lock.unlock();
      record(source());
      lock.lock();
      cv_.wait_for(lock, period_, [this] { return stop_; });
    }
  });
}

void status_history::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void status_history::record(const engine_metrics& m) {
  sample s;
  s.t = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  s.kv_total = m.kv_blocks_total;
  s.kv_free = m.kv_blocks_free;
  s.kv_cached_free = m.kv_blocks_cached_free;
  s.running = m.requests_running;
  s.waiting = m.requests_waiting;
  s.prompt_tokens = m.prompt_tokens;
  s.generation_tokens = m.generation_tokens;
  s.prefix_queries = m.prefix_queries;
  s.prefix_hits = m.prefix_hits;
  std::lock_guard lock(mu_);
  samples_.push_back(s);
  while (samples_.size() > capacity_) samples_.pop_front();
}

std::vector<status_history::sample> status_history::samples() const {
  std::lock_guard lock(mu_);
  return {samples_.begin(), samples_.end()};
}

namespace {

double rate(int64_t later, int64_t earlier, double seconds) {
  return seconds > 0 ? std::max(0.0, double(later - earlier) / seconds) : 0.0;
}

// The newest sample at least `seconds` older than the last one (or the oldest there is).
const status_history::sample* sample_before(const std::vector<status_history::sample>& h,
                                            double seconds) {
  if (h.empty()) return nullptr;
  const double t = h.back().t - seconds;
  for (size_t i = h.size(); i-- > 0;)
    if (h[i].t <= t) return &h[i];
  return &h.front();
}

// A trace actor's row: the actor itself, or its pool ("tokenizer" for "tokenizer0", "tokenizer1").
std::string row_of(const std::string& actor) {
  size_t end = actor.size();
  while (end > 0 && std::isdigit(static_cast<unsigned char>(actor[end - 1]))) --end;
  return end == 0 ? actor : actor.substr(0, end);
}

// Total length of the union of [start, end) intervals clipped to [from, to).
int64_t covered_ns(std::vector<std::pair<int64_t, int64_t>>& iv, int64_t from, int64_t to) {
  std::sort(iv.begin(), iv.end());
  int64_t total = 0, cur_s = 0, cur_e = -1;
  bool open = false;
  for (auto [s, e] : iv) {
    s = std::max(s, from);
    e = std::min(e, to);
    if (e <= s) continue;
    if (open && s <= cur_e) {
      cur_e = std::max(cur_e, e);
      continue;
    }
    if (open) total += cur_e - cur_s;
    cur_s = s;
    cur_e = e;
    open = true;
  }
  if (open) total += cur_e - cur_s;
  return total;
}

value history_json(const std::vector<status_history::sample>& h, double period) {
  value out = json::object{};
  out["period_seconds"] = value(period);
  json::array t, used, cached, free_plain, running, waiting, gen_tps, prompt_tps;
  for (size_t i = 0; i < h.size(); ++i) {
    const auto& s = h[i];
    t.emplace_back(s.t);
    used.emplace_back(s.kv_total - s.kv_free);
    cached.emplace_back(s.kv_cached_free);
    free_plain.emplace_back(s.kv_free - s.kv_cached_free);
    running.emplace_back(s.running);
    waiting.emplace_back(s.waiting);
    const double dt = i > 0 ? s.t - h[i - 1].t : 0.0;
    gen_tps.emplace_back(i > 0 ? rate(s.generation_tokens, h[i - 1].generation_tokens, dt) : 0.0);
    prompt_tps.emplace_back(i > 0 ? rate(s.prompt_tokens, h[i - 1].prompt_tokens, dt) : 0.0);
  }
  out["t"] = value(std::move(t));
  out["kv_used"] = value(std::move(used));
  out["kv_cached"] = value(std::move(cached));
  out["kv_free"] = value(std::move(free_plain));
  out["running"] = value(std::move(running));
  out["waiting"] = value(std::move(waiting));
  out["generation_tokens_per_second"] = value(std::move(gen_tps));
  out["prompt_tokens_per_second"] = value(std::move(prompt_tps));
  return out;
}

}  // namespace

std::string status_json(const status_inputs& in) {
  const engine_metrics& m = in.metrics;
  value v = json::object{};
  v["model"] = value(in.model);
  v["uptime_seconds"] = value(in.uptime_seconds);
  v["healthy"] = value(in.unhealthy_reason.empty());
  v["unhealthy_reason"] = in.unhealthy_reason.empty() ? value() : value(in.unhealthy_reason);
  v["time"] = value(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  v["running"] = value(m.requests_running);
  v["waiting"] = value(m.requests_waiting);

  value kv = json::object{};
  kv["total"] = value(m.kv_blocks_total);
  kv["used"] = value(m.kv_blocks_total - m.kv_blocks_free);
  kv["cached"] = value(m.kv_blocks_cached_free);
  kv["free"] = value(m.kv_blocks_free - m.kv_blocks_cached_free);
  v["kv_blocks"] = std::move(kv);

  // Rates over the last five seconds of samples; the prefix-cache hit rate over the last minute
  // and since start.
  value rates = json::object{};
  const auto* last = in.history.empty() ? nullptr : &in.history.back();
  const auto* five = sample_before(in.history, 5.0);
  const auto* minute = sample_before(in.history, 60.0);
  const double dt = last && five ? last->t - five->t : 0.0;
  rates["generation_tokens_per_second"] =
      value(last ? rate(last->generation_tokens, five->generation_tokens, dt) : 0.0);
  rates["prompt_tokens_per_second"] =
      value(last ? rate(last->prompt_tokens, five->prompt_tokens, dt) : 0.0);
  v["throughput"] = std::move(rates);
  value prefix = json::object{};
  prefix["queries"] = value(m.prefix_queries);
  prefix["hits"] = value(m.prefix_hits);
  prefix["hit_rate"] =
      m.prefix_queries > 0 ? value(double(m.prefix_hits) / double(m.prefix_queries)) : value();
  const int64_t q = last && minute ? last->prefix_queries - minute->prefix_queries : 0;
  prefix["hit_rate_last_minute"] =
      q > 0 ? value(double(last->prefix_hits - minute->prefix_hits) / double(q)) : value();
  v["prefix_cache"] = std::move(prefix);

  value totals = json::object{};
  totals["prompt_tokens"] = value(m.prompt_tokens);
  totals["generation_tokens"] = value(m.generation_tokens);
  totals["steps"] = value(m.steps);
  totals["preemptions"] = value(m.preemptions);
  totals["finished_stop"] = value(m.finished_stop);
  totals["finished_length"] = value(m.finished_length);
  totals["finished_abort"] = value(m.finished_abort);
  totals["finished_error"] = value(m.finished_error);
  totals["rejected"] = value(m.rejected);
  v["totals"] = std::move(totals);
  v["history"] = history_json(in.history, in.history_period_seconds);

  json::array reqs;
  for (const auto& r : in.requests) {
    value o = json::object{};
    o["id"] = value(static_cast<int64_t>(r.id));
    o["state"] = value(r.running ? "running" : "waiting");
    o["age_seconds"] = value(r.age_seconds);
    o["samples"] = value(r.samples);
    o["prompt_tokens"] = value(r.prompt_tokens);
    o["generated_tokens"] = value(r.generated_tokens);
    o["cached_prompt_tokens"] = value(r.cached_prompt_tokens);
    o["max_tokens"] = value(r.max_tokens);
    o["preemptions"] = value(r.preemptions);
    reqs.push_back(std::move(o));
  }
  v["requests"] = value(std::move(reqs));

  // Actors: mailbox depth now; busy time = the union of their handlers' spans in the window.
  struct row {
    int64_t depth = 0, busy_ns = 0, spans = 0;
    int members = 0;
  };
  std::map<std::string, row> rows;
  for (const auto& [name, depth] : m.mailbox_depth) rows[name].depth = depth;
  json::array timelines;
  value trace_info = json::object{};
  if (in.trace) {
    const rt::tracer& tr = *in.trace;
    const int64_t now = tr.now_ns();
    const int64_t window =
        std::chrono::duration_cast<std::chrono::nanoseconds>(in.actor_window).count();
    const int64_t timeline_window = 3 * window;
    const auto spans = tr.spans_since(now - timeline_window);
    std::unordered_map<uint32_t, std::string> names;
    auto name_of = [&](uint32_t id) -> const std::string& {
      auto it = names.find(id);
      if (it == names.end()) it = names.emplace(id, tr.actor_name(id)).first;
      return it->second;
    };
    std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> busy;
    std::unordered_map<uint64_t, std::vector<const rt::span*>> by_request;
    for (const auto& s : spans) {
      if (s.end_ns >= now - window) busy[s.actor_id].emplace_back(s.start_ns, s.end_ns);
      if (s.request_id != 0) by_request[s.request_id].push_back(&s);
    }
    for (auto& [id, iv] : busy) {
      row& r = rows[row_of(name_of(id))];
      r.spans += static_cast<int64_t>(iv.size());
      r.busy_ns += covered_ns(iv, now - window, now);
    }
    // Pools count their members (every actor the trace names, busy or not).
    for (uint32_t id = 0;; ++id) {
      const std::string n = tr.actor_name(id);
      if (n == "?") break;
      auto it = rows.find(row_of(n));
      if (it != rows.end()) ++it->second.members;
    }
    // The newest requests first, by their first span.
    std::vector<std::pair<int64_t, uint64_t>> order;
    for (const auto& [rid, ss] : by_request) order.emplace_back(ss.front()->start_ns, rid);
    std::sort(order.rbegin(), order.rend());
    if (order.size() > in.timelines) order.resize(in.timelines);
    for (const auto& [t0, rid] : order) {
      const auto& ss = by_request[rid];
      int64_t end = t0;
      for (const auto* s : ss) end = std::max(end, s->end_ns);
      value tl = json::object{};
      tl["request_id"] = value(static_cast<int64_t>(rid));
      tl["active"] =
          value(std::any_of(in.requests.begin(), in.requests.end(),
                            [rid = rid](const request_status& r) { return r.id == rid; }));
      tl["age_seconds"] = value(double(now - t0) / 1e9);
      tl["duration_ms"] = value(double(end - t0) / 1e6);
      // Long requests keep their first quarter and newest three quarters of spans.
      const size_t cap = std::max<size_t>(in.spans_per_timeline, 4);
      const size_t head = ss.size() > cap ? cap / 4 : ss.size();
      const size_t tail_from = ss.size() > cap ? ss.size() - (cap - head) : ss.size();
      tl["omitted_spans"] = value(static_cast<int64_t>(tail_from - head));
      json::array items;
      for (size_t i = 0; i < ss.size(); ++i) {
        if (i >= head && i < tail_from) continue;
        const rt::span& s = *ss[i];
        value it = json::object{};
        it["actor"] = value(name_of(s.actor_id));
        it["message"] = value(s.message);
        it["start_ms"] = value(double(s.start_ns - t0) / 1e6);
        it["duration_ms"] = value(double(s.end_ns - s.start_ns) / 1e6);
        it["queued_ms"] = value(double(s.start_ns - s.enqueue_ns) / 1e6);
        items.push_back(std::move(it));
      }
      tl["spans"] = value(std::move(items));
      timelines.push_back(std::move(tl));
    }
    trace_info["enabled"] = value(tr.enabled());
    trace_info["dropped_spans"] = value(static_cast<int64_t>(tr.dropped()));
  } else {
    trace_info["enabled"] = value(false);
  }
  const double window_s = std::chrono::duration<double>(in.actor_window).count();
  json::array actors;
  for (const auto& [name, r] : rows) {
    value a = json::object{};
    a["name"] = value(name);
    a["actors"] = value(std::max(1, r.members));
    a["mailbox_depth"] = value(r.depth);
    a["busy_ms"] = value(double(r.busy_ns) / 1e6);
    a["busy_fraction"] =
        value(window_s > 0 ? double(r.busy_ns) / 1e9 / window_s / std::max(1, r.members) : 0.0);
    a["spans"] = value(r.spans);
    actors.push_back(std::move(a));
  }
  v["actor_window_seconds"] = value(window_s);
  v["actors"] = value(std::move(actors));
  v["timelines"] = value(std::move(timelines));
  v["trace"] = std::move(trace_info);
  std::string out;
  json::dump_compact(v, out);
  return out;
}

}  // namespace coserve::http
