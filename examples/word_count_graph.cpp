// A small custom actor graph embedded in an application: lines go to a splitter, words are
// counted by a counter, and a reporter asks for the totals. Writes a Chrome trace (Perfetto).
//   build/examples/word_count_graph [trace.json]
#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/use_future.hpp>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/system.hpp"

namespace rt = coserve::rt;

// ---- messages (each actor's typed interface) ----
struct word {
  uint64_t request_id;  // traced: every span of one line carries its id
  std::string text;
};
struct top_words {
  using reply_type = std::vector<std::pair<std::string, int>>;
  std::size_t k;
};
struct line {
  uint64_t request_id;
  std::string text;
};
struct flush {  // replies once every earlier line has been split and its words sent on
  using reply_type = bool;
};

// ---- actors ----
struct counter {
  using messages = rt::message_list<word, top_words>;
  std::map<std::string, int> counts;
  void handle(word& w) { ++counts[w.text]; }
  std::vector<std::pair<std::string, int>> handle(top_words& q) {
    std::vector<std::pair<std::string, int>> v(counts.begin(), counts.end());
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second > b.second; });
    if (v.size() > q.k) v.resize(q.k);
    return v;
  }
};

struct splitter {
  using messages = rt::message_list<line, flush>;
  rt::actor_ref<counter> out;
  bool handle(flush&) { return true; }  // mailboxes are FIFO: earlier lines are done
  // A coroutine handler: waits for mailbox space instead of failing when the counter is busy.
  asio::awaitable<void> handle(line& l) {
    std::istringstream in(l.text);
    for (std::string w; in >> w;) {
      // A named message, not a temporary inside co_await: GCC 12 mishandles class temporaries
      // that live across a suspension (docs/runtime.md).
      word msg{l.request_id, w};
      co_await out.send(std::move(msg));
    }
  }
};

int main(int argc, char** argv) {
  rt::system sys({.threads = 2});
  // Dependency order: the counter first, then what feeds it; stop() runs the reverse.
  auto count = sys.spawn<counter>({.name = "counter", .mailbox_capacity = 64});
  auto split = sys.spawn<splitter>({.name = "splitter"}, count);

  const char* text[] = {"the quick brown fox", "jumps over the lazy dog", "the dog sleeps",
                        "a fox runs", "the end"};
  uint64_t id = 0;
  for (const char* t : text) (void)split.tell(line{++id, t});

  // Ask from a coroutine running on the runtime's pool.
  auto top = asio::co_spawn(
                 sys.io_executor(),
                 [&]() -> asio::awaitable<top_words::reply_type> {
                   // Each mailbox is FIFO, but two actors are not ordered with each other: first
                   // make sure the splitter has sent every word on, then ask the counter (our ask
                   // queues behind those words).
                   co_await split.ask(flush{});
                   auto r = co_await count.ask(top_words{3});
                   co_return r.ok() ? *r : top_words::reply_type{};
                 },
                 asio::use_future)
                 .get();

  sys.stop();  // drain everything before reading the trace
  for (auto& [w, c] : top) std::printf("%-6s %d\n", w.c_str(), c);
  const auto spans = sys.trace().spans_of_request(2);
  std::printf("line 2 took %zu handler runs across the graph\n", spans.size());
  if (argc > 1 && sys.trace().write_chrome_json(argv[1]).ok())
    std::printf("trace written to %s (open it in Perfetto)\n", argv[1]);
}
