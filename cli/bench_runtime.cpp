// `coserve bench runtime [--n N] [--threads T] [--no-trace]`: the three workloads of the CAF
// anchor (../shared/bench/caf_anchor.cpp) with the same shapes, one JSON line each:
//   pingpong  two actors bounce one int N times (round trips per second)
//   fanin     4 producers each send N ints to one sink (messages per second)
//   pipeline  N ints through 5 forwarding stages to a sink (messages per second end to end)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "runtime/system.hpp"

namespace coserve::cli {
namespace {

using clk = std::chrono::steady_clock;

struct ball {
  int n;
};
struct done_signal {
  std::promise<void>* p;
};

// ---- pingpong ----
struct ponger;
struct pinger {
  using messages = rt::message_list<ball>;
  rt::actor_ref<ponger>* peer;
  int n;
  std::promise<void>* done;
  void handle(ball& b);
};
struct ponger {
  using messages = rt::message_list<ball>;
  rt::actor_ref<pinger>* peer;
  void handle(ball& b) { (void)peer->tell(ball{b.n}); }
};
void pinger::handle(ball& b) {
  if (b.n + 1 >= n) {
    done->set_value();
    return;
  }
  (void)peer->tell(ball{b.n + 1});
}

// ---- sink and stages ----
struct item {
  int v;
};
struct sink {
  using messages = rt::message_list<item>;
  long expect;
  std::promise<void>* done;
  long got = 0;
  void handle(item&) {
    if (++got == expect) done->set_value();
  }
};
template <class Next>
struct stage {
  using messages = rt::message_list<item>;
  rt::actor_ref<Next> next;
  // A stage never drops and keeps order: when the next mailbox is full it waits for space
  // before handling its own next message.
  static asio::awaitable<void> forward_when_space(rt::actor_ref<Next> to, item it) {
    co_await to.send(it);
  }
  rt::maybe_async handle(item& it) {
    if (next.tell(it) != rt::send_status::full) return std::nullopt;
    return forward_when_space(next, it);
  }
};

// A producer actor (as in the CAF anchor): on `go` it sends n items to its target, waiting for
// mailbox space whenever the target's bounded mailbox is full.
struct go {
  long n;
};
template <class Target>
struct producer {
  using messages = rt::message_list<go>;
  rt::actor_ref<Target> target;
  asio::awaitable<void> handle(go& g) {
    for (long i = 0; i < g.n; ++i) {
      if (target.tell(item{int(i)}) == rt::send_status::full) co_await target.send(item{int(i)});
    }
  }
};

void print(const char* workload, long n, double secs) {
  std::printf(
      "{\"runtime\":\"coserve\",\"workload\":\"%s\",\"n\":%ld,\"seconds\":%.4f,\"per_second\":%.0f}"
      "\n",
      workload, n, secs, double(n) / secs);
  std::fflush(stdout);
}

double secs_since(clk::time_point t) {
  return std::chrono::duration<double>(clk::now() - t).count();
}

}  // namespace

int bench_runtime(int argc, char** argv) {
  long n = 1000000;
  std::size_t threads = 0;
  bool trace = true;
  std::string only;  // one workload, or all three
  std::size_t release_chunk = rt::spawn_options{}.mailbox_release_chunk_bytes;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--n") && i + 1 < argc)
      n = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-trace"))
      trace = false;
    else if (!std::strcmp(argv[i], "--workload") && i + 1 < argc)
      only = argv[++i];
    else if (!std::strcmp(argv[i], "--mailbox-release-chunk") && i + 1 < argc)
      release_chunk = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--help")) {
      std::printf(
          "usage: coserve bench runtime [--n N] [--threads T] [--no-trace] [--workload W] "
          "[--mailbox-release-chunk B]\n"
          "  --n N        messages per workload (default 1000000)\n"
          "  --threads T  executor pool threads (default: core count)\n"
          "  --no-trace   disable per-actor tracing (on by default)\n"
          "  --workload W run only W: pingpong, fanin or pipeline (default: all three)\n"
          "  --mailbox-release-chunk B\n"
          "               the 2^16-slot mailboxes of fanin and pipeline hand consumed chunks\n"
          "               of B bytes back to the system (default %zu; 0 keeps every page)\n",
          release_chunk);
      return 0;
    } else {
      std::fprintf(stderr, "coserve bench runtime: unknown flag '%s'\n", argv[i]);
      return 2;
    }
  }
  // The fanin and pipeline receivers' mailboxes: 2^16 slots.
  auto big = [release_chunk](const char* name) {
    rt::spawn_options o;
    o.name = name;
    o.mailbox_capacity = 1 << 16;
    o.mailbox_release_chunk_bytes = release_chunk;
    return o;
  };
  rt::system_config cfg;
  cfg.threads = threads;
  cfg.tracing = trace;
  cfg.trace_ring_capacity = 1u << 16;
  if (!only.empty() && only != "pingpong" && only != "fanin" && only != "pipeline") {
    std::fprintf(stderr, "coserve bench runtime: unknown workload '%s'\n", only.c_str());
    return 2;
  }
  auto wanted = [&only](const char* w) { return only.empty() || only == w; };
  if (wanted("pingpong")) {
    rt::system sys(cfg);
    std::promise<void> done;
    rt::actor_ref<pinger> a;
    rt::actor_ref<ponger> b;
    a = sys.spawn<pinger>({.name = "pinger"}, &b, static_cast<int>(n), &done);
    b = sys.spawn<ponger>({.name = "ponger"}, &a);
    auto t = clk::now();
    (void)b.tell(ball{0});
    done.get_future().wait();
    print("pingpong", n, secs_since(t));
    sys.stop();
  }
  if (wanted("fanin")) {
    rt::system sys(cfg);
    std::promise<void> done;
    const int producers = 4;
    auto s = sys.spawn<sink>(big("sink"), long(n) * producers, &done);
    auto t = clk::now();
    std::vector<rt::actor_ref<producer<sink>>> ps;
    for (int p = 0; p < producers; ++p)
      ps.push_back(sys.spawn<producer<sink>>({.name = "producer" + std::to_string(p)}, s));
    for (auto& p : ps) (void)p.tell(go{n});
    done.get_future().wait();
    print("fanin", n * producers, secs_since(t));
    sys.stop();
  }
  if (wanted("pipeline")) {
    rt::system sys(cfg);
    std::promise<void> done;
    auto s = sys.spawn<sink>(big("sink"), n, &done);
    auto s5 = sys.spawn<stage<sink>>(big("stage5"), s);
    auto s4 = sys.spawn<stage<stage<sink>>>(big("stage4"), s5);
    auto s3 = sys.spawn<stage<stage<stage<sink>>>>(big("stage3"), s4);
    auto s2 = sys.spawn<stage<stage<stage<stage<sink>>>>>(big("stage2"), s3);
    auto s1 = sys.spawn<stage<stage<stage<stage<stage<sink>>>>>>(big("stage1"), s2);
    auto t = clk::now();
    auto source =
        sys.spawn<producer<stage<stage<stage<stage<stage<sink>>>>>>>({.name = "source"}, s1);
    (void)source.tell(go{n});
    done.get_future().wait();
    print("pipeline", n, secs_since(t));
    sys.stop();
  }
  return 0;
}

}  // namespace coserve::cli
