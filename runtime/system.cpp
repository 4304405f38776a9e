#include "runtime/system.hpp"

#include <asio/async_result.hpp>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <future>

namespace coserve::rt {

namespace {
std::size_t default_threads(std::size_t requested) {
  if (requested != 0) return requested;
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}
}  // namespace

// ---- dedicated_thread --------------------------------------------------------------------------

dedicated_thread::dedicated_thread(const std::string& /*name*/)
    : guard_(io_.get_executor()), thread_([this] { io_.run(); }) {}

dedicated_thread::~dedicated_thread() { join(); }

void dedicated_thread::join() {
  guard_.reset();
  if (thread_.joinable()) thread_.join();
}

// ---- supervisor --------------------------------------------------------------------------------

supervisor::supervisor(system& sys, std::string name) : sys_(sys), name_(std::move(name)) {}

supervisor::~supervisor() { stop(); }

std::vector<supervisor::child> supervisor::take_children() {
  std::lock_guard lock(mu_);
  std::vector<child> out;
  out.swap(children_);
  return out;
}

std::vector<std::string> supervisor::children() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& c : children_) out.push_back(c.cell->name());
  return out;
}

void supervisor::stop() {
  auto kids = take_children();
  for (auto it = kids.rbegin(); it != kids.rend(); ++it) {
    std::promise<void> drained;
    auto fut = drained.get_future();
    it->cell->close();
    it->cell->when_drained(sys_.io_executor(), [&drained] { drained.set_value(); });
    fut.wait();
    if (it->thread) it->thread->join();
  }
}

asio::awaitable<void> supervisor::async_stop() {
  auto kids = take_children();
  auto ex = co_await asio::this_coro::executor;
  for (auto it = kids.rbegin(); it != kids.rend(); ++it) {
    it->cell->close();
    co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
        [&](auto handler) {
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          it->cell->when_drained(ex, [h]() mutable { (*h)(); });
        },
        asio::use_awaitable);
    if (it->thread) it->thread->join();
  }
}

// ---- system ------------------------------------------------------------------------------------

system::system(system_config cfg)
    : threads_(default_threads(cfg.threads)),
      tracer_(cfg.tracing, cfg.trace_ring_capacity),
      pool_(threads_),
      root_(*this, "root") {}

system::~system() { stop(); }

void system::stop() {
  std::call_once(stopped_, [this] {
    root_.stop();
    pool_.join();
  });
}

}  // namespace coserve::rt
