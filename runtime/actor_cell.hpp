// actor_cell<B>: the runtime side of one actor — its mailbox, its scheduling state, its behavior
// object B (the user's state and handlers) and its supervision policy.
//
// One handler at a time: the cell is either idle or "scheduled" (an atomic flag). A sender that
// turns it from idle to scheduled posts one run() to the actor's executor; run() handles up to
// `batch` messages, then either reschedules itself or goes idle. A handler that returns an
// asio::awaitable keeps the cell scheduled until the coroutine finishes, so the next message is
// never handled before the previous handler has completed.
//
// Handler forms B may declare, per message type M (see message.hpp for reply_type):
//   void handle(M&)                      R handle(M&)                     (M::reply_type == R)
//   asio::awaitable<void> handle(M&)     asio::awaitable<R> handle(M&)
//   rt::maybe_async handle(M&)           synchronous unless it returns a coroutine to finish the
//                                        work (e.g. waiting for space in a full mailbox); the
//                                        actor handles nothing else until that coroutine ends
//
// A handler that throws — in its synchronous part or in the coroutine that finishes it — goes to
// the supervision policy: the pending reply fails, B::on_failure(what) runs if B declares it (the
// last chance to settle what the behavior held, e.g. end the requests it was serving), then the
// behavior is rebuilt (restart) or released and the mailbox closed (stop).
//
// One file for the three classes (cell_base, mailbox_cell, actor_cell) though it passes 500 lines:
// the idle/scheduled handoff is split between mailbox_cell::notify and actor_cell's
// go_idle_or_continue, and its correctness argument reads across both.
#pragma once

#include <algorithm>
#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/defer.hpp>
#include <asio/execution/context.hpp>
#include <asio/post.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>

#include "runtime/mailbox.hpp"
#include "runtime/message.hpp"
#include "runtime/reply.hpp"
#include "runtime/trace.hpp"

namespace coserve::rt {

enum class restart_policy : uint8_t {
  restart,  // rebuild the behavior from its factory; keep the mailbox; continue
  stop,     // close the mailbox, fail pending asks, notify on_stopped
};

struct spawn_options {
  std::string name = "actor";
  std::size_t mailbox_capacity = 1024;  // rounded up to a power of two (see below)
  // Large mailboxes (at least 8 chunks) that go round slower than once a second hand the memory of
  // consumed chunks back to the system, so they stay resident only for what is queued; they then
  // hold one chunk less than mailbox_capacity (runtime/mpsc_queue.hpp). 0 keeps every page.
  std::size_t mailbox_release_chunk_bytes = k_default_mailbox_release_chunk_bytes;
  std::size_t batch = 64;  // messages per scheduling before yielding the thread
  restart_policy on_failure = restart_policy::restart;
  int max_restarts = 10;  // within restart_window; one more failure stops it
  std::chrono::milliseconds restart_window{10000};
  bool dedicated_thread = false;  // run on a thread of its own (blocking work: executors)
  // Called (on the actor's thread) when the actor stops after a failure: name, reason.
  std::function<void(const std::string&, const std::string&)> on_stopped;
};

// ---- envelopes ---------------------------------------------------------------------------------

struct no_reply {};

template <class M>
struct reply_slot {
  using type = no_reply;
};
template <has_reply M>
struct reply_slot<M> {
  using type = reply_ptr<typename M::reply_type>;
};

template <class M>
struct envelope {
  M msg;
  int64_t enqueue_ns = 0;
  uint64_t request_id = 0;
  typename reply_slot<M>::type reply{};
};

template <class List>
struct envelope_variant;
template <class... Ms>
struct envelope_variant<message_list<Ms...>> {
  using type = std::variant<envelope<Ms>...>;
};

// Return type of a mostly-synchronous handler (see the header comment).
using maybe_async = std::optional<asio::awaitable<void>>;

template <class B>
concept has_on_failure = requires(B& b, const std::string& what) {
  b.on_failure(what);
};

template <class T>
struct is_awaitable : std::false_type {};
template <class T, class E>
struct is_awaitable<asio::awaitable<T, E>> : std::true_type {};

// ---- type-independent part ---------------------------------------------------------------------

// The execution context (thread pool or dedicated thread) whose actor is running a synchronous
// handler on this thread, else null. An actor of that same context made ready by such a handler
// is deferred rather than posted (see actor_cell::schedule).
inline thread_local const void* t_sync_handler_context = nullptr;

// Marks the extent of one synchronous handler call on this thread.
class sync_handler_scope {
 public:
  explicit sync_handler_scope(const void* context) noexcept : saved_(t_sync_handler_context) {
    t_sync_handler_context = context;
  }
  ~sync_handler_scope() { t_sync_handler_context = saved_; }
  sync_handler_scope(const sync_handler_scope&) = delete;
  sync_handler_scope& operator=(const sync_handler_scope&) = delete;

 private:
  const void* saved_;
};

class cell_base {
 public:
  cell_base(spawn_options opts, tracer& tr, asio::any_io_executor ex)
      : opts_(std::move(opts)),
        tracer_(tr),
        ex_(std::move(ex)),
        context_(&asio::query(ex_, asio::execution::context)),
        trace_id_(tr.register_track(opts_.name)) {}
  virtual ~cell_base() = default;
  cell_base(const cell_base&) = delete;
  cell_base& operator=(const cell_base&) = delete;

  const std::string& name() const noexcept { return opts_.name; }
  uint32_t trace_id() const noexcept { return trace_id_; }
  const asio::any_io_executor& io_executor() const noexcept { return ex_; }
  const spawn_options& options() const noexcept { return opts_; }
  bool failed_stop() const noexcept { return failed_stop_.load(std::memory_order_acquire); }
  int restarts() const noexcept { return restarts_.load(std::memory_order_relaxed); }

  // Any thread. New sends fail with `closed`; queued messages are still handled.
  virtual void close() noexcept = 0;
  virtual std::size_t queued() const noexcept = 0;

  // Any thread: runs fn on `ex` once the actor is closed and has nothing queued or running.
  void when_drained(asio::any_io_executor ex, std::function<void()> fn) {
    bool now = false;
    {
      std::lock_guard lock(drain_mu_);
      if (drained_)
        now = true;
      else
        drain_waiters_.emplace_back(std::move(ex), std::move(fn));
    }
    if (now) asio::post(ex, std::move(fn));
  }

 protected:
  void signal_drained() {
    std::vector<std::pair<asio::any_io_executor, std::function<void()>>> ws;
    {
      std::lock_guard lock(drain_mu_);
      if (drained_) return;
      drained_ = true;
      ws.swap(drain_waiters_);
    }
    for (auto& [ex, fn] : ws) asio::post(ex, std::move(fn));
  }

  // Returns true when the policy allows another restart now.
  bool allow_restart() {
    if (opts_.on_failure != restart_policy::restart) return false;
    const auto now = std::chrono::steady_clock::now();
    while (!restart_times_.empty() && now - restart_times_.front() > opts_.restart_window)
      restart_times_.pop_front();
    if (static_cast<int>(restart_times_.size()) >= opts_.max_restarts) return false;
    restart_times_.push_back(now);
    restarts_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  spawn_options opts_;
  tracer& tracer_;
  asio::any_io_executor ex_;
  const void* const context_;  // ex_'s execution context (identity only)
  const uint32_t trace_id_;
  // idle <-> scheduled handoff (see mailbox_cell::notify); on a line of its own, since every
  // sender reads it and the actor writes it.
  alignas(64) std::atomic<bool> scheduled_{false};
  alignas(64) std::atomic<bool> failed_stop_{false};
  std::atomic<int> restarts_{0};
  std::deque<std::chrono::steady_clock::time_point> restart_times_;  // actor thread only

 private:
  std::mutex drain_mu_;
  bool drained_ = false;
  std::vector<std::pair<asio::any_io_executor, std::function<void()>>> drain_waiters_;
};

// ---- the mailbox of one protocol
// -----------------------------------------------------------------

// What a sender needs of an actor: its mailbox of one message list (the actor's protocol), and the
// scheduling handoff. actor_ref<P> holds this, so a sender names the messages it may send, never
// the receiver's implementation. The typed cell below derives from it.
template <class Messages>
class mailbox_cell : public cell_base {
 public:
  using env_variant = typename envelope_variant<Messages>::type;

  mailbox_cell(spawn_options opts, tracer& tr, asio::any_io_executor ex)
      : cell_base(std::move(opts), tr, std::move(ex)),
        mailbox_(opts_.mailbox_capacity, opts_.mailbox_release_chunk_bytes) {}

  // Producer side, any thread. On `full`/`closed` the value is not moved from.
  send_status push(env_variant&& v) {
    const send_status s = mailbox_.try_push(std::move(v));
    if (s == send_status::ok) notify();
    return s;
  }
  template <class M>
  send_status push(envelope<M>&& env) {
    env_variant v(std::move(env));
    return push(std::move(v));
  }

  mailbox<env_variant>& box() noexcept { return mailbox_; }
  // A message's enqueue time for its span: the tracer's clock, or 0 (not read) with tracing off.
  int64_t enqueue_ns() const noexcept { return tracer_.enabled() ? tracer_.now_ns() : 0; }

  std::size_t queued() const noexcept override { return mailbox_.size_approx(); }

 protected:
  // Handoff between senders and the running actor (a store-buffering pair, one seq_cst fence on
  // each side). A sender has published its message (or the close) and then fences and reads
  // scheduled_; the actor going idle writes false and then fences and looks at the ring again.
  // Of two seq_cst fences one precedes the other: if the actor's comes first, the sender's read
  // sees its `false` (or a later write) and the sender schedules the actor with an RMW (acq_rel:
  // the next run, perhaps on another thread, sees everything the last one did); if the sender's
  // comes first, the actor's look sees the message and the actor reschedules itself. A sender
  // that reads `true` left by another sender whose run is about to go idle is covered by that
  // run's own fence, which must then follow the sender's. So a sender to a running actor pays a
  // fence and a load of a line it shares with the actor, never a write to it.
  void notify() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (scheduled_.load(std::memory_order_relaxed)) return;
    if (!scheduled_.exchange(true, std::memory_order_acq_rel)) schedule();
  }
  // Posts one run of the actor to its executor (the typed cell's consumer loop).
  virtual void schedule() = 0;

  mailbox<env_variant> mailbox_;
};

// ---- the typed cell ----------------------------------------------------------------------------

template <class B>
class actor_cell final : public mailbox_cell<typename B::messages> {
  using base = mailbox_cell<typename B::messages>;
  using base::allow_restart;
  using base::ex_;
  using base::failed_stop_;
  using base::mailbox_;
  using base::opts_;
  using base::scheduled_;
  using base::trace_id_;
  using base::tracer_;

 public:
  using behavior = B;
  using env_variant = typename base::env_variant;
  using factory = std::function<std::unique_ptr<B>()>;
  using start_hook = std::function<void(B&)>;

  // A cell without a behavior yet: messages sent to it wait in its mailbox until start(). Actors
  // that send to each other in a circle are all reserved first, then started (supervisor::reserve).
  actor_cell(spawn_options opts, tracer& tr, asio::any_io_executor ex)
      : base(std::move(opts), tr, std::move(ex)) {
    // Held "scheduled" until start(): a send only queues.
    scheduled_.store(true, std::memory_order_relaxed);
  }

  void set_start_hook(start_hook hook) { on_start_ = std::move(hook); }

  // Builds the behavior from `make` (kept for restarts) and lets the actor handle what its mailbox
  // holds. Called once, by the supervisor, before the behavior can receive anything.
  void start(factory make) {
    make_ = std::move(make);
    build();
    started_.store(true, std::memory_order_release);
    schedule();  // releases the hold taken at construction: run() handles what queued
  }

  void close() noexcept override {
    mailbox_.close();
    if (!started_.load(std::memory_order_acquire)) {
      // Never started: nothing will ever run, so it is drained now.
      base::signal_drained();
      return;
    }
    this->notify();  // a closed, empty, idle actor must still report drained
  }

 private:
  // Made ready by a synchronous handler of an actor on the same context, this actor is deferred:
  // queued on the running thread's own queue, moved to the shared one when that handler's batch
  // returns, with no other thread woken for it then. A short handler chain (request and reply)
  // thus stays on one warm thread instead of paying a futex wake-up and a cache transfer per
  // hop; if more than one actor is ready when the batch returns, Asio wakes another thread for
  // the rest. From anywhere else (a coroutine, which may run long; another thread) it is posted.
  void schedule() override {
    if (t_sync_handler_context == this->context_)
      asio::defer(ex_, [this] { run(); });
    else
      asio::post(ex_, [this] { run(); });
  }
  // The actor goes on after a batch: deferred, it is queued on this thread's own queue (Asio moves
  // it to the shared one when this handler returns) without waking an idle thread, so an actor
  // with a backlog stays on the thread whose cache holds its mailbox unless another thread is free.
  void schedule_continuation() {
    asio::defer(ex_, [this] { run(); });
  }

  void build() {
    behavior_ = make_();
    if (on_start_) on_start_(*behavior_);
  }

  // What a batch keeps for its spans. The clock is read once per message: a span starts when the
  // previous one in the batch ended, or when its message was sent if that is later. The mailbox's
  // claim count (the producers' tail, a line they write on every send) is read once per batch and
  // again only when the consumer has caught up with it: a span's mailbox_depth counts the messages
  // queued behind it when it was last read.
  struct batch_trace {
    int64_t clock = -1;       // tracer time the next handler starts; -1: tracing off
    std::size_t claimed = 0;  // the mailbox's claim count as last read
  };

  // Consumer side: runs on the actor's executor, never concurrently with itself.
  void run() {
    batch_trace bt;
    if (tracer_.enabled()) bt = {tracer_.now_ns(), mailbox_.claimed()};
    for (std::size_t i = 0; i < opts_.batch; ++i) {
      auto env = mailbox_.try_pop();
      if (!env) break;
      if (dispatch(*env, bt)) {
        mailbox_.wake_space_waiters();
        return;  // a coroutine handler is running; it calls resume() when it finishes
      }
    }
    mailbox_.wake_space_waiters();
    go_idle_or_continue();
  }

  void go_idle_or_continue() {
    // Once scheduled_ is false a sender may schedule run() on another thread, which pops (writes
    // the queue's head): from the store on, this thread reads only atomics, at the position read
    // before it.
    const std::size_t head = mailbox_.consumer_position();
    scheduled_.store(false, std::memory_order_release);  // see notify()
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!mailbox_.empty_at(head)) {
      if (!scheduled_.exchange(true, std::memory_order_acq_rel)) schedule_continuation();
      return;
    }
    if (mailbox_.drained_at(head)) {
      // Closed and everything accepted before the close handled (a sender that claimed a slot
      // but has not published it yet notifies us after publishing, so waiting idle is safe):
      // the behavior is released on this thread, then waiters run.
      if (!scheduled_.exchange(true, std::memory_order_acq_rel)) {
        // The factory and the start hook go too: they may hold references to other actors, which
        // hold references back (a circle of actors is released once each is drained).
        behavior_.reset();
        make_ = nullptr;
        on_start_ = nullptr;
        this->signal_drained();
      }
    }
  }

  void resume() { run(); }

  // Returns true when a coroutine handler was started (the cell stays scheduled).
  // `bt.clock` is set to the time the handler ended when it returns synchronously.
  bool dispatch(env_variant& v, batch_trace& bt) {
    return std::visit([&](auto& env) { return handle_one(env, bt); }, v);
  }

  template <class M>
  bool handle_one(envelope<M>& env, batch_trace& bt) {
    span sp;
    int64_t& clock = bt.clock;
    const bool traced = clock >= 0;
    if (traced) {
      sp.message = message_name<M>();
      sp.request_id = env.request_id;
      sp.enqueue_ns = env.enqueue_ns;
      sp.track_id = trace_id_;
      const std::size_t head = mailbox_.consumer_position();
      if (bt.claimed <= head) bt.claimed = mailbox_.claimed();
      sp.mailbox_depth = static_cast<uint32_t>(bt.claimed > head ? bt.claimed - head : 0);
      // Not before it was sent: the previous span's end, read before this message was popped,
      // may precede its enqueue time.
      sp.start_ns = std::max(clock, env.enqueue_ns);
    }
    if (!behavior_) {  // stopped after a failure: refuse politely
      fail_reply(env, "actor '" + opts_.name + "' has stopped");
      return false;
    }
    using R = decltype(behavior_->handle(env.msg));
    if constexpr (std::is_same_v<R, maybe_async>) {
      static_assert(!has_reply<M>, "maybe_async handlers cannot reply");
      maybe_async rest;
      try {
        sync_handler_scope scope(this->context_);
        rest = behavior_->handle(env.msg);
      } catch (...) {
        sp.failed = true;
        on_failure(env, std::current_exception());
      }
      if (rest) {
        asio::co_spawn(ex_, finish_async(std::move(*rest), sp, traced),
                       [this](std::exception_ptr) { resume(); });
        return true;
      }
      if (traced) {
        sp.end_ns = clock = tracer_.now_ns();
        tracer_.record(sp);
      }
      return false;
    } else if constexpr (is_awaitable<R>::value) {
      asio::co_spawn(ex_, run_coroutine(std::move(env), sp, traced),
                     [this](std::exception_ptr) { resume(); });
      return true;
    } else {
      try {
        sync_handler_scope scope(this->context_);
        if constexpr (has_reply<M>) {
          env.reply->complete(behavior_->handle(env.msg));
        } else {
          behavior_->handle(env.msg);
        }
      } catch (...) {
        sp.failed = true;
        on_failure(env, std::current_exception());
      }
      if (traced) {
        sp.end_ns = clock = tracer_.now_ns();
        tracer_.record(sp);
      }
      return false;
    }
  }

  template <class M>
  asio::awaitable<void> run_coroutine(envelope<M> env, span sp, bool traced) {
    std::exception_ptr failure;
    try {
      if constexpr (has_reply<M>) {
        auto value = co_await behavior_->handle(env.msg);
        env.reply->complete(std::move(value));
      } else {
        co_await behavior_->handle(env.msg);
      }
    } catch (...) {
      failure = std::current_exception();
    }
    if (failure) {
      sp.failed = true;
      on_failure(env, failure);
    }
    if (traced) {
      sp.end_ns = tracer_.now_ns();
      tracer_.record(sp);
    }
  }

  asio::awaitable<void> finish_async(asio::awaitable<void> rest, span sp, bool traced) {
    std::exception_ptr failure;
    try {
      co_await std::move(rest);
    } catch (...) {
      failure = std::current_exception();
    }
    if (failure) {
      sp.failed = true;
      const std::string what = describe(failure);
      std::fprintf(stderr, "[coserve] actor '%s' failed finishing '%s': %s\n", opts_.name.c_str(),
                   sp.message, what.c_str());
      apply_policy(what);
    }
    if (traced) {
      sp.end_ns = tracer_.now_ns();
      tracer_.record(sp);
    }
  }

  template <class M>
  void fail_reply(envelope<M>& env, std::string why) {
    if constexpr (has_reply<M>) {
      if (env.reply) env.reply->complete(make_error("actor_failed", std::move(why)));
    }
  }

  static std::string describe(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      return ex.what();
    } catch (...) {
    }
    return "unknown exception";
  }

  template <class M>
  void on_failure(envelope<M>& env, std::exception_ptr e) {
    const std::string what = describe(e);
    std::fprintf(stderr, "[coserve] actor '%s' failed handling '%s': %s\n", opts_.name.c_str(),
                 message_name<M>(), what.c_str());
    fail_reply(env,
               "actor '" + opts_.name + "' failed handling '" + message_name<M>() + "': " + what);
    apply_policy(what);
  }

  // The supervision policy after a failure: the behavior's own hook, then restart or stop.
  void apply_policy(std::string what) {
    if constexpr (has_on_failure<B>) {
      if (behavior_) {
        try {
          behavior_->on_failure(what);
        } catch (...) {
          std::fprintf(stderr, "[coserve] actor '%s': on_failure threw\n", opts_.name.c_str());
        }
      }
    }
    if (allow_restart()) {
      std::fprintf(stderr, "[coserve] restarting actor '%s'\n", opts_.name.c_str());
      behavior_.reset();
      try {
        build();
        return;
      } catch (...) {
        what += " (restart failed)";
      }
    }
    behavior_.reset();
    failed_stop_.store(true, std::memory_order_release);
    mailbox_.close();
    if (opts_.on_stopped) opts_.on_stopped(opts_.name, what);
  }

  factory make_;
  start_hook on_start_;
  std::unique_ptr<B> behavior_;       // touched only on the actor's executor once started
  std::atomic<bool> started_{false};  // set by start(), before the actor can run
};

}  // namespace coserve::rt
