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
  record(source());  // the first sample before start() returns: the view has one at once
  thread_ = std::thread([this, source = std::move(source)] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
      lock.unlock();
      record(source());
      lock.lock();
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

value kv_blocks_json(const engine_metrics& m) {
  value kv = json::object{};
  kv["total"] = value(m.kv_blocks_total);
  kv["used"] = value(m.kv_blocks_total - m.kv_blocks_free);
  kv["cached"] = value(m.kv_blocks_cached_free);
  kv["free"] = value(m.kv_blocks_free - m.kv_blocks_cached_free);
  return kv;
}

// Rates over the last five seconds of samples.
value throughput_json(const std::vector<status_history::sample>& h) {
  value rates = json::object{};
  const auto* last = h.empty() ? nullptr : &h.back();
  const auto* five = sample_before(h, 5.0);
  const double dt = last && five ? last->t - five->t : 0.0;
  rates["generation_tokens_per_second"] =
      value(last ? rate(last->generation_tokens, five->generation_tokens, dt) : 0.0);
  rates["prompt_tokens_per_second"] =
      value(last ? rate(last->prompt_tokens, five->prompt_tokens, dt) : 0.0);
  return rates;
}

// The prefix-cache hit rate since start and over the last minute of samples.
value prefix_cache_json(const engine_metrics& m, const std::vector<status_history::sample>& h) {
  const auto* last = h.empty() ? nullptr : &h.back();
  const auto* minute = sample_before(h, 60.0);
  value prefix = json::object{};
  prefix["queries"] = value(m.prefix_queries);
  prefix["hits"] = value(m.prefix_hits);
  prefix["hit_rate"] =
      m.prefix_queries > 0 ? value(double(m.prefix_hits) / double(m.prefix_queries)) : value();
  const int64_t q = last && minute ? last->prefix_queries - minute->prefix_queries : 0;
  prefix["hit_rate_last_minute"] =
      q > 0 ? value(double(last->prefix_hits - minute->prefix_hits) / double(q)) : value();
  return prefix;
}

value totals_json(const engine_metrics& m) {
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
  return totals;
}

value requests_json(const std::vector<request_status>& requests) {
  json::array reqs;
  for (const auto& r : requests) {
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
  return value(std::move(reqs));
}

// One row of the actors table: an actor, or a pool of them.
struct actor_row {
  int64_t depth = 0, busy_ns = 0, spans = 0;
  int members = 0;
};

// What the trace tells the live view: each actor's busy time in the window, and the timelines of
// the newest requests.
class trace_view {
 public:
  trace_view(const rt::tracer& tr, const status_inputs& in) : tr_(tr), in_(in), now_(tr.now_ns()) {
    window_ = std::chrono::duration_cast<std::chrono::nanoseconds>(in.actor_window).count();
    spans_ = tr.spans_since(now_ - 3 * window_);  // timelines reach three windows back
  }

  // Busy time (the union of their handlers' spans in the window) and members of each row.
  void count_busy(std::map<std::string, actor_row>& rows) {
    std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> busy;
    for (const auto& s : spans_)
      if (s.end_ns >= now_ - window_) busy[s.track_id].emplace_back(s.start_ns, s.end_ns);
    for (auto& [id, iv] : busy) {
      actor_row& r = rows[row_of(name_of(id))];
      r.spans += static_cast<int64_t>(iv.size());
      r.busy_ns += covered_ns(iv, now_ - window_, now_);
    }
    // Pools count their members (every actor the trace names, busy or not).
    for (uint32_t id = 0;; ++id) {
      const std::string n = tr_.track_name(id);
      if (n == "?") break;
      auto it = rows.find(row_of(n));
      if (it != rows.end()) ++it->second.members;
    }
  }

  // The newest requests first, by their first span.
  json::array timelines() {
    std::unordered_map<uint64_t, std::vector<const rt::span*>> by_request;
    for (const auto& s : spans_)
      if (s.request_id != 0) by_request[s.request_id].push_back(&s);
    std::vector<std::pair<int64_t, uint64_t>> order;
    for (const auto& [rid, ss] : by_request) order.emplace_back(ss.front()->start_ns, rid);
    std::sort(order.rbegin(), order.rend());
    if (order.size() > in_.timelines) order.resize(in_.timelines);
    json::array out;
    for (const auto& [t0, rid] : order) out.push_back(timeline(rid, t0, by_request[rid]));
    return out;
  }

 private:
  const std::string& name_of(uint32_t id) {
    auto it = names_.find(id);
    if (it == names_.end()) it = names_.emplace(id, tr_.track_name(id)).first;
    return it->second;
  }

  value timeline(uint64_t rid, int64_t t0, const std::vector<const rt::span*>& ss) {
    int64_t end = t0;
    for (const auto* s : ss) end = std::max(end, s->end_ns);
    value tl = json::object{};
    tl["request_id"] = value(static_cast<int64_t>(rid));
    tl["active"] = value(std::any_of(in_.requests.begin(), in_.requests.end(),
                                     [rid](const request_status& r) { return r.id == rid; }));
    tl["age_seconds"] = value(double(now_ - t0) / 1e9);
    tl["duration_ms"] = value(double(end - t0) / 1e6);
    // Long requests keep their first quarter and newest three quarters of spans.
    const size_t cap = std::max<size_t>(in_.spans_per_timeline, 4);
    const size_t head = ss.size() > cap ? cap / 4 : ss.size();
    const size_t tail_from = ss.size() > cap ? ss.size() - (cap - head) : ss.size();
    tl["omitted_spans"] = value(static_cast<int64_t>(tail_from - head));
    json::array items;
    for (size_t i = 0; i < ss.size(); ++i) {
      if (i >= head && i < tail_from) continue;
      const rt::span& s = *ss[i];
      value it = json::object{};
      it["actor"] = value(name_of(s.track_id));
      it["message"] = value(s.message);
      it["start_ms"] = value(double(s.start_ns - t0) / 1e6);
      it["duration_ms"] = value(double(s.end_ns - s.start_ns) / 1e6);
      it["queued_ms"] = value(double(s.start_ns - s.enqueue_ns) / 1e6);
      items.push_back(std::move(it));
    }
    tl["spans"] = value(std::move(items));
    return tl;
  }

  const rt::tracer& tr_;
  const status_inputs& in_;
  const int64_t now_;
  int64_t window_ = 0;
  std::vector<rt::span> spans_;
  std::unordered_map<uint32_t, std::string> names_;
};

value actors_json(const std::map<std::string, actor_row>& rows, double window_s) {
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
  return value(std::move(actors));
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
  v["kv_blocks"] = kv_blocks_json(m);
  v["throughput"] = throughput_json(in.history);
  v["prefix_cache"] = prefix_cache_json(m, in.history);
  v["totals"] = totals_json(m);
  v["history"] = history_json(in.history, in.history_period_seconds);
  v["requests"] = requests_json(in.requests);

  // Actors: mailbox depth now; busy time from the trace.
  std::map<std::string, actor_row> rows;
  for (const auto& [name, depth] : m.mailbox_depth) rows[name].depth = depth;
  json::array timelines;
  value trace_info = json::object{};
  if (in.trace) {
    trace_view tv(*in.trace, in);
    tv.count_busy(rows);
    timelines = tv.timelines();
    trace_info["enabled"] = value(in.trace->enabled());
    trace_info["dropped_spans"] = value(static_cast<int64_t>(in.trace->dropped()));
  } else {
    trace_info["enabled"] = value(false);
  }
  const double window_s = std::chrono::duration<double>(in.actor_window).count();
  v["actor_window_seconds"] = value(window_s);
  v["actors"] = actors_json(rows, window_s);
  v["timelines"] = value(std::move(timelines));
  v["trace"] = std::move(trace_info);
  std::string out;
  json::dump_compact(v, out);
  return out;
}

}  // namespace coserve::http
