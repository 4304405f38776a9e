#include "actors/streamer.hpp"

#include <algorithm>
#include <span>
#include <unordered_set>

#include "runtime/system.hpp"

namespace coserve::actors {

namespace {
double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
}  // namespace

void streamer::handle(open_stream& m) {
  state& st = states_[m.request_id];
  st.stream = std::move(m.stream);
  shared_->fault_point("streamer",
                       "open_stream");  // after the insert: on_failure ends this one too
  st.params = std::move(m.params);
  st.return_logits = m.return_logits;
  st.return_token_text = m.return_token_text;
  const int32_t n = std::max(1, st.params.n);
  st.samples.resize(static_cast<size_t>(n));
  st.live = n;
  for (auto& smp : st.samples) {
    if (tok_ == nullptr) continue;  // token ids only
    smp.detok = std::make_unique<incremental_detokenizer>(*tok_, st.params.skip_special_tokens,
                                                          st.stream->prompt_ids());
    smp.stops =
        std::make_unique<stop_checker>(st.params.stop, st.params.include_stop_str_in_output);
  }
}

bool streamer::end_sample(uint64_t rid, state& st, output_event ev, rt::outbox& out) {
  auto& smp = st.samples[static_cast<size_t>(ev.index)];
  if (smp.done) return false;
  smp.done = true;
  auto& m = shared_->metrics;
  switch (ev.finish) {
    case finish_reason::stop:
      m.finished_stop.fetch_add(1, std::memory_order_relaxed);
      break;
    case finish_reason::length:
      m.finished_length.fetch_add(1, std::memory_order_relaxed);
      break;
    case finish_reason::abort:
      m.finished_abort.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      m.finished_error.fetch_add(1, std::memory_order_relaxed);
      break;
  }
  st.stream->send(std::move(ev));
  if (--st.live > 0) return false;
  m.e2e.observe(seconds(clock::now() - st.stream->submitted()));
  st.stream->end();
  out.tell(to_.intake, request_closed{rid});
  return true;
}

rt::maybe_async streamer::handle(token_batch& m) {
  shared_->fault_point("streamer", "token_batch");
  rt::outbox out;
  auto& tr = shared_->sys->trace();
  const int64_t t0 = tr.now_ns();
  const auto now = clock::now();
  traced_.clear();
  for (token_event& e : m.events) {
    auto it = states_.find(e.request_id);
    if (it == states_.end() || it->second.samples[static_cast<size_t>(e.index)].done) continue;
    traced_.push_back(e.request_id);
    if (emit(e, it->second, now, out)) states_.erase(it);
  }
  if (tr.enabled()) {
    const int64_t t1 = tr.now_ns();
    std::sort(traced_.begin(), traced_.end());
    traced_.erase(std::unique(traced_.begin(), traced_.end()), traced_.end());
    for (uint64_t rid : traced_)
      trace_for_request(*shared_->sys, trace_id_, "token_batch", rid, t0, t1);
  }
  return out.finish();
}

void streamer::add_token_texts(const token_event& e, const state& st, output_event& ev) const {
  auto text_of = [this](int32_t id) {
    const int32_t one[1] = {id};
    return tok_ ? tok_->decode(std::span<const int32_t>(one), true) : std::string();
  };
  ev.token_texts = {text_of(e.token)};
  if (!ev.top_logprobs.empty()) {
    std::vector<std::string> tops;
    tops.reserve(ev.top_logprobs.front().size());
    for (const auto& tl : ev.top_logprobs.front()) tops.push_back(text_of(tl.token));
    ev.top_logprob_texts.push_back(std::move(tops));
  }
  if (e.prompt_logprobs.empty()) return;
  std::unordered_set<int32_t> seen;
  auto note = [&](int32_t id) {
    if (seen.insert(id).second) ev.prompt_token_texts.emplace_back(id, text_of(id));
  };
  if (!st.stream->prompt_ids().empty()) note(st.stream->prompt_ids().front());
  for (const auto& pl : e.prompt_logprobs) {
    note(pl.token);
    for (const auto& tl : pl.top) note(tl.token);
  }
}

bool streamer::emit(token_event& e, state& st, clock::time_point now, rt::outbox& out) {
  auto& smp = st.samples[static_cast<size_t>(e.index)];
  if (st.stream->cancelled() && !st.cancel_sent) {  // the cancel message may not have got through
    st.cancel_sent = true;
    out.tell(to_.intake, cancel_request{e.request_id});
  }
  if (st.params.pooling.enabled) {  // no token: the vector, and the request's end
    output_event ev;
    ev.index = e.index;
    ev.embedding = std::move(e.embedding);
    ev.prompt_tokens = e.prompt_tokens;
    ev.finish = finish_reason::length;
    return end_sample(e.request_id, st, std::move(ev), out);
  }
  // Counted before the event is sent: a client that has seen its stream end reads a count that
  // includes every token it was sent.
  auto& metrics = shared_->metrics;
  metrics.generation_tokens.fetch_add(1, std::memory_order_relaxed);
  if (!st.first_token_seen)
    metrics.ttft.observe(seconds(now - st.stream->submitted()));
  else
    metrics.itl.observe(seconds(now - st.last_token));
  st.first_token_seen = true;
  st.last_token = now;

  output_event ev;
  ev.index = e.index;
  ev.token_ids = {e.token};
  if (st.params.logprobs >= 0) ev.token_logprobs = {e.logprob};
  if (st.params.logprobs > 0) ev.top_logprobs.push_back(std::move(e.top_logprobs));
  if (st.return_logits && !e.logits.empty()) ev.logits.push_back(std::move(e.logits));
  if (st.return_token_text) add_token_texts(e, st, ev);
  if (!e.prompt_logprobs.empty()) ev.prompt_logprobs = std::move(e.prompt_logprobs);
  ev.prompt_tokens = e.prompt_tokens;
  ev.completion_tokens = e.completion_tokens;
  ev.cached_prompt_tokens = e.cached_prompt_tokens;
  ev.finish = e.finish;
  if (smp.detok) {  // text and stop strings (without a tokenizer: ids only)
    const bool is_stop_token = e.finish == finish_reason::stop;
    std::string piece = smp.detok->push(e.token);
    if (is_stop_token && !st.params.skip_special_tokens) piece.clear();
    ev.text = smp.stops->push(piece);
    if (smp.stops->stopped()) {
      ev.finish = finish_reason::stop;
      ev.stop_reason = smp.stops->matched();
      if (e.finish == finish_reason::none)
        out.tell(to_.scheduler, finish_sequence{e.request_id, e.seq_id});
    } else if (e.finish != finish_reason::none) {
      ev.text += smp.stops->push(smp.detok->flush());
      ev.text += smp.stops->flush();
    }
  }
  if (ev.finish != finish_reason::none) return end_sample(e.request_id, st, std::move(ev), out);
  st.stream->send(std::move(ev));
  return false;
}

bool streamer::end_all_samples(uint64_t rid, state& st, finish_reason reason,
                               const std::string& message, rt::outbox& out) {
  bool ended = false;
  for (size_t i = 0; i < st.samples.size() && !ended; ++i) {
    if (st.samples[i].done) continue;
    output_event ev;
    ev.index = static_cast<int32_t>(i);
    ev.finish = reason;
    ev.error_message = message;
    ev.prompt_tokens = static_cast<int32_t>(st.stream->prompt_ids().size());
    ended = end_sample(rid, st, std::move(ev), out);
  }
  return ended;
}

rt::maybe_async streamer::handle(end_request& m) {
  shared_->fault_point("streamer", "end_request");
  rt::outbox out;
  auto it = states_.find(m.request_id);
  if (it == states_.end()) {
    // Never opened (cancelled before it was queued) or already ended: intake still counts it
    // open only in the first case, and closing twice is harmless.
    out.tell(to_.intake, request_closed{m.request_id});
    return out.finish();
  }
  if (end_all_samples(m.request_id, it->second, m.reason, m.message, out)) states_.erase(it);
  return out.finish();
}

rt::maybe_async streamer::handle(fail_all& m) {
  rt::outbox out;
  for (auto& [rid, st] : states_) end_all_samples(rid, st, finish_reason::error, m.reason, out);
  states_.clear();
  return out.finish();  // sends to actors already stopped are dropped
}

void streamer::on_failure(const std::string& what) {
  const std::string message = "internal error in the streamer: " + what;
  for (auto& [rid, st] : states_) {
    // A request whose open_stream failed has no samples yet: its first one still gets the error.
    const size_t n = std::max<size_t>(1, st.samples.size());
    for (size_t i = 0; i < n; ++i) {
      if (i < st.samples.size() && st.samples[i].done) continue;
      output_event ev;
      ev.index = static_cast<int32_t>(i);
      ev.finish = finish_reason::error;
      ev.error_message = message;
      ev.prompt_tokens = static_cast<int32_t>(st.stream->prompt_ids().size());
      shared_->metrics.finished_error.fetch_add(1, std::memory_order_relaxed);
      st.stream->send(std::move(ev));
    }
    st.stream->end();
    (void)to_.scheduler.tell(cancel_sequences{rid, finish_reason::error});
    (void)to_.intake.tell(request_closed{rid});
  }
  states_.clear();
}

}  // namespace coserve::actors
