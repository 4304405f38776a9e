#include "actors/intake.hpp"

#include "runtime/system.hpp"

namespace coserve::actors {

void intake::publish() {
  {
    std::lock_guard lock(shared_->open_mu);
    shared_->metrics.open_requests.store(static_cast<int64_t>(open_.size()),
                                         std::memory_order_relaxed);
  }
  if (open_.empty()) shared_->open_cv.notify_all();
}

asio::awaitable<void> intake::handle(submit_request& m) {
  const int64_t t0 = shared_->sys->trace().now_ns();
  in_hand_ = m.reply;
  shared_->fault_point("intake", "submit_request");
  if (shared_->health.failed()) {
    m.reply->complete(error{"engine_down", "the engine has failed: " + shared_->health.reason()});
    in_hand_.reset();
    co_return;
  }
  if (static_cast<int64_t>(open_.size()) >= max_open_) {
    shared_->metrics.rejected.fetch_add(1, std::memory_order_relaxed);
    m.reply->complete(error{"queue_full", "too many requests in flight (" +
                                              std::to_string(open_.size()) + "); retry later"});
    in_hand_.reset();
    co_return;
  }
  const uint64_t rid = shared_->next_request_id.fetch_add(1, std::memory_order_relaxed);
  const sampling_params& sp = m.request.params;
  const size_t n = static_cast<size_t>(std::max(1, sp.n));
  // Without a given max_tokens the tokenizer may raise it to the rest of the context.
  const int32_t most_tokens = m.request.context.max_tokens_given ? sp.max_tokens : max_model_len_;
  const size_t capacity = n * (static_cast<size_t>(std::max(0, most_tokens)) + 2) + 2;
  auto stream = std::make_shared<stream_impl>(rid, capacity, self_);
  open_.emplace(rid, stream);
  publish();
  if (shared_->sys->trace().enabled())
    trace_for_request(*shared_->sys, trace_id_, "submit_request", rid, t0,
                      shared_->sys->trace().now_ns());
  submit_reply reply = m.reply;
  const int64_t cost = tokenize_cost(m.request);
  const size_t which = to_.tokenizers->pick(cost);
  tokenize_request t{rid, std::move(m.request), std::move(stream), std::move(m.reply), cost};
  in_hand_.reset();  // the tokenizer answers it from here on
  const rt::send_status s = co_await (*to_.tokenizers)[which].send(std::move(t), rid);
  if (s != rt::send_status::ok) {
    to_.tokenizers->done(which, cost);
    reply->complete(error{"engine_down", "the engine is stopping"});
    open_.erase(rid);
    publish();
  }
}

void intake::on_failure(const std::string& what) {
  if (in_hand_) in_hand_->complete(error{"internal_error", "intake failed: " + what});
  in_hand_.reset();
  for (const auto& [rid, s] : open_) cancel(rid, s, finish_reason::error);
}

void intake::cancel(uint64_t rid, const std::weak_ptr<stream_impl>& s, finish_reason why) {
  if (auto stream = s.lock()) stream->mark_cancelled(why);
  (void)to_.scheduler.tell(cancel_sequences{rid, why});
}

void intake::handle(cancel_request& m) {
  shared_->fault_point("intake", "cancel_request");
  auto it = open_.find(m.request_id);
  if (it == open_.end()) return;  // ended already
  cancel(it->first, it->second, finish_reason::abort);
}

void intake::handle(request_closed& m) {
  open_.erase(m.request_id);
  publish();
}

void intake::handle(abort_all&) {
  for (const auto& [rid, s] : open_) cancel(rid, s, finish_reason::abort);
}

}  // namespace coserve::actors
