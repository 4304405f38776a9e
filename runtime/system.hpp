// system: the executor pool, the tracer and the root supervisor of an actor graph.
// supervisor: starts actors in dependency order (the order of spawn calls) and stops them in
// reverse, draining each mailbox before the next one is stopped.
//
// Threads: spawn, stop and the accessors may be called from any thread outside the runtime.
// stop() blocks until every actor has drained; calling it from a runtime thread would wait on
// itself, so code running inside the runtime uses `co_await async_stop()` instead.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/thread_pool.hpp>
#include <cstddef>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "runtime/actor.hpp"

namespace coserve::rt {

struct system_config {
  std::size_t threads = 0;                     // pool threads; 0: the core count
  bool tracing = true;                         // record a span per handled message
  std::size_t trace_ring_capacity = 1u << 18;  // spans kept per thread (a power of two)
};

// A thread of its own for one actor (blocking work such as a model executor).
class dedicated_thread {
 public:
  explicit dedicated_thread(const std::string& name);
  ~dedicated_thread();  // join()
  dedicated_thread(const dedicated_thread&) = delete;
  dedicated_thread& operator=(const dedicated_thread&) = delete;
  asio::any_io_executor io_executor() { return io_.get_executor(); }
  void join();  // lets the thread finish its queued work and exit

 private:
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

class system;

template <class B>
concept has_on_start = requires(B& b, actor_context<B>& ctx) {
  b.on_start(ctx);
};

class supervisor {
 public:
  explicit supervisor(system& sys, std::string name = "supervisor");
  ~supervisor();
  supervisor(const supervisor&) = delete;
  supervisor& operator=(const supervisor&) = delete;

  // Constructs B(args...) now, and again on each restart (args are kept by value). An aggregate B
  // without such a constructor is brace-initialised, B{args...} (compilers without C++20's
  // parenthesised aggregate initialisation, such as clang before 16, need that).
  template <class B, class... Args>
  actor_ref<B> spawn(spawn_options opts, Args... args) {
    return spawn_factory<B>(std::move(opts), [args...]() -> std::unique_ptr<B> {
      if constexpr (std::is_constructible_v<B, const Args&...>)
        return std::make_unique<B>(args...);
      else
        return std::unique_ptr<B>(new B{args...});
    });
  }

  // For behaviors built from move-only parts: `make` runs at spawn and on each restart.
  template <class B>
  actor_ref<B> spawn_factory(spawn_options opts, std::function<std::unique_ptr<B>()> make) {
    actor_ref<B> ref = reserve<B>(std::move(opts));
    start(ref, std::move(make));
    return ref;
  }

  // Two-phase spawn, for actors that send to each other in a circle: reserve() makes the actor's
  // mailbox (and its thread) and hands out its reference before any behavior exists; what is sent
  // to it waits in the mailbox until start(ref, make) builds the behavior. Order: actors stop in
  // reverse reserve order. One reserved and never started counts as drained when stopped.
  template <class B>
  actor_ref<B> reserve(spawn_options opts);
  // `ref` must come from reserve<B>; throws std::logic_error otherwise (a null reference too).
  template <class B>
  void start(const actor_ref<B>& ref,
             std::type_identity_t<std::function<std::unique_ptr<B>()>> make);

  // Reverse spawn order; each actor is closed and drained before the previous one is stopped.
  void stop();
  asio::awaitable<void> async_stop();

  std::vector<std::string> children() const;
  const std::string& name() const noexcept { return name_; }

 private:
  struct child {
    std::shared_ptr<cell_base> cell;
    std::unique_ptr<dedicated_thread> thread;
  };
  std::vector<child> take_children();

  system& sys_;
  std::string name_;
  mutable std::mutex mu_;
  std::vector<child> children_;
};

class system {
 public:
  explicit system(system_config cfg = {});
  ~system();  // stop()
  system(const system&) = delete;
  system& operator=(const system&) = delete;

  template <class B, class... Args>
  actor_ref<B> spawn(spawn_options opts, Args... args) {
    return root_.spawn<B>(std::move(opts), std::move(args)...);
  }

  supervisor& root() noexcept { return root_; }
  asio::any_io_executor io_executor() { return pool_.get_executor(); }
  tracer& trace() noexcept { return tracer_; }
  std::size_t threads() const noexcept { return threads_; }

  // Stops the root supervisor (reverse order, draining), then joins the pool. Idempotent.
  void stop();

 private:
  std::size_t threads_;
  tracer tracer_;
  asio::thread_pool pool_;
  supervisor root_;
  std::once_flag stopped_;
};

template <class B>
actor_ref<B> supervisor::reserve(spawn_options opts) {
  child c;
  asio::any_io_executor ex = sys_.io_executor();
  if (opts.dedicated_thread) {
    c.thread = std::make_unique<dedicated_thread>(opts.name);
    ex = c.thread->io_executor();
  }
  auto cell = std::make_shared<actor_cell<B>>(std::move(opts), sys_.trace(), ex);
  if constexpr (has_on_start<B>) {
    std::weak_ptr<actor_cell<B>> weak = cell;
    system* sys = &sys_;
    cell->set_start_hook([weak, sys](B& b) {
      actor_context<B> ctx{sys, actor_ref<B>(weak.lock())};
      b.on_start(ctx);
    });
  }
  c.cell = cell;
  {
    std::lock_guard lock(mu_);
    children_.push_back(std::move(c));
  }
  return actor_ref<B>(std::move(cell));
}

template <class B>
void supervisor::start(const actor_ref<B>& ref,
                       std::type_identity_t<std::function<std::unique_ptr<B>()>> make) {
  auto* cell = ref ? dynamic_cast<actor_cell<B>*>(&ref.cell()) : nullptr;
  if (cell == nullptr)
    throw std::logic_error("supervisor::start: not a reserved actor of this behavior");
  cell->start(std::move(make));
}

}  // namespace coserve::rt
