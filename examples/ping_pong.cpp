// Two actors bounce a ball N times; then the program asks one of them what it saw.
//   build/examples/ping_pong [N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>

#include "runtime/system.hpp"

namespace rt = coserve::rt;

struct player;
struct meet {  // introduces the partner; sent before the first ball (mailboxes are FIFO)
  rt::actor_ref<player> partner;
};
struct ball {
  int hits;
};
struct last_hit {  // asked: the reply type makes it a request
  using reply_type = int;
};

struct player {
  using messages = rt::message_list<meet, ball, last_hit>;

  int limit;
  std::promise<void>* done;
  rt::actor_ref<player> partner;
  int last = 0;

  void handle(meet& m) { partner = m.partner; }
  void handle(ball& b) {
    last = b.hits;
    if (b.hits >= limit) {
      done->set_value();
      return;
    }
    (void)partner.tell(ball{b.hits + 1});
  }
  int handle(last_hit&) { return last; }
};

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  rt::system sys;  // one pool thread per core, tracing on
  std::promise<void> done;

  auto ping = sys.spawn<player>({.name = "ping"}, n, &done);
  auto pong = sys.spawn<player>({.name = "pong"}, n, &done);
  (void)ping.tell(meet{pong});
  (void)pong.tell(meet{ping});

  const auto t0 = std::chrono::steady_clock::now();
  (void)ping.tell(ball{0});
  done.get_future().wait();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto seen = pong.ask_sync(last_hit{});  // blocking ask from a thread outside the runtime
  std::printf("%d hits in %.3f s (%.0f messages/s); pong's last hit: %d\n", n, secs, n / secs,
              seen.ok() ? *seen : -1);
  std::printf("trace: %zu spans recorded\n", sys.trace().spans().size());
  sys.stop();  // stops pong, then ping (reverse spawn order), draining each
}
