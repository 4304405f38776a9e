// The KV-event publisher over real ZMQ sockets on loopback: a SUB socket receives
// [topic, seq, payload] in order, a DEALER replays from a sequence number and gets the end marker,
// the replay buffer keeps only the newest buffer_steps batches, and an endpoint already bound is a
// clear error.
#include <zmq.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <msgpack.hpp>
#include <string>
#include <thread>
#include <vector>

#include "actors/kv_event_publisher.hpp"

using namespace coserve;
using namespace coserve::actors;

namespace {

struct zmq_context {
  void* ctx = zmq_ctx_new();
  ~zmq_context() { zmq_ctx_term(ctx); }
};

struct zmq_sock {
  void* s;
  zmq_sock(void* ctx, int type) : s(zmq_socket(ctx, type)) {
    const int none = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &none, sizeof none);
  }
  ~zmq_sock() { zmq_close(s); }
};

// One multipart message, waiting up to `ms`; empty when none came.
std::vector<std::string> receive(void* socket, int ms = 2000) {
  zmq_pollitem_t item{socket, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, ms) <= 0) return {};
  std::vector<std::string> frames;
  int more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    REQUIRE(zmq_msg_recv(&m, socket, 0) >= 0);
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  return frames;
}

int64_t seq_of(const std::string& frame) {
  REQUIRE(frame.size() == 8);
  uint64_t v = 0;
  for (unsigned char c : frame) v = v << 8 | c;
  return static_cast<int64_t>(v);
}

std::string seq_frame(int64_t seq) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint64_t>(seq) >> (56 - 8 * i));
  return out;
}

// The first stored hash of a batch's payload (each test batch stores one block).
uint64_t stored_hash(const std::string& payload) {
  msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& ev = oh.get().via.array.ptr[1].via.array.ptr[0];
  return ev.via.array.ptr[1].via.array.ptr[0].as<uint64_t>();
}

std::vector<kv_cache_event> one_block(uint64_t hash) {
  return {kv_block_stored{{hash}, std::nullopt, {1, 2}}};
}

}  // namespace

TEST_CASE("kv event publisher: PUB batches in order with sequence numbers, replay from a number",
          "[actors][kv_events]") {
  kv_events_config cfg;
  cfg.enable_kv_cache_events = true;
  cfg.publisher = "zmq";
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.replay_endpoint = "tcp://127.0.0.1:*";
  cfg.topic = "kv@test";
  cfg.buffer_steps = 4;
  auto started = kv_event_publisher::start(cfg, 2, "CPU");
  REQUIRE(started);
  kv_event_publisher& pub = **started;
  REQUIRE(pub.endpoint().rfind("tcp://127.0.0.1:", 0) == 0);
  REQUIRE(pub.replay_endpoint().rfind("tcp://127.0.0.1:", 0) == 0);

  zmq_context zc;
  zmq_sock sub(zc.ctx, ZMQ_SUB);
  REQUIRE(zmq_setsockopt(sub.s, ZMQ_SUBSCRIBE, "kv@", 3) == 0);  // a topic prefix, as ZMQ filters
  REQUIRE(zmq_connect(sub.s, pub.endpoint().c_str()) == 0);
  // A subscription takes a moment to reach the PUB socket: batches sent before are not delivered
  // (ZMQ's "slow joiner"). Publish probes until one arrives.
  std::vector<std::string> msg;
  uint64_t hash = 1000;
  for (int tries = 0; tries < 100 && msg.empty(); ++tries) {
    REQUIRE(pub.publish(1.0, one_block(++hash)));
    msg = receive(sub.s, 50);
  }
  REQUIRE(msg.size() == 3);
  CHECK(msg[0] == "kv@test");
  int64_t seq = seq_of(msg[1]);
  CHECK(stored_hash(msg[2]) == 1000 + static_cast<uint64_t>(seq) + 1);
  // Drain probes still in flight, then six batches arrive in order, numbered on.
  for (int64_t last = static_cast<int64_t>(hash - 1001); seq < last;) {
    msg = receive(sub.s);
    REQUIRE(msg.size() == 3);
    seq = seq_of(msg[1]);
  }
  for (int i = 0; i < 6; ++i) REQUIRE(pub.publish(2.0, one_block(5000 + static_cast<uint64_t>(i))));
  for (int i = 0; i < 6; ++i) {
    msg = receive(sub.s);
    REQUIRE(msg.size() == 3);
    CHECK(seq_of(msg[1]) == seq + 1 + i);
    CHECK(stored_hash(msg[2]) == 5000 + static_cast<uint64_t>(i));
  }
  const int64_t newest = seq + 6;

  // Replay from two before the newest: those two, then the end marker.
  zmq_sock dealer(zc.ctx, ZMQ_DEALER);
  REQUIRE(zmq_connect(dealer.s, pub.replay_endpoint().c_str()) == 0);
  auto ask = [&](int64_t start) {
    const std::string frame = seq_frame(start);
    REQUIRE(zmq_send(dealer.s, "", 0, ZMQ_SNDMORE) == 0);
    REQUIRE(zmq_send(dealer.s, frame.data(), 8, 0) == 8);
    std::vector<std::pair<int64_t, std::string>> got;
    for (;;) {
      std::vector<std::string> r = receive(dealer.s);
      REQUIRE(r.size() == 3);
      CHECK(r[0].empty());
      if (seq_of(r[1]) == -1) {
        CHECK(r[2].empty());
        return got;
      }
      got.emplace_back(seq_of(r[1]), r[2]);
    }
  };
  auto two = ask(newest - 1);
  REQUIRE(two.size() == 2);
  CHECK(two[0].first == newest - 1);
  CHECK(stored_hash(two[0].second) == 5004);
  CHECK(two[1].first == newest);
  // From 0: only the buffer's newest 4 batches are still there.
  auto all = ask(0);
  REQUIRE(all.size() == 4);
  CHECK(all.front().first == newest - 3);
  CHECK(stored_hash(all.back().second) == 5005);
  // Past the newest: only the end marker.
  CHECK(ask(newest + 1).empty());
  CHECK(pub.batches_dropped() == 0);
}

TEST_CASE("kv event publisher: an endpoint in use is an error naming it", "[actors][kv_events]") {
  kv_events_config cfg;
  cfg.enable_kv_cache_events = true;
  cfg.publisher = "zmq";
  cfg.endpoint = "tcp://*:*";
  auto first = kv_event_publisher::start(cfg, 16, "CPU");
  REQUIRE(first);
  // The same port again, with a wildcard host so that it is bound (vLLM's rule: an address
  // without a wildcard is connected to).
  const std::string bound = (*first)->endpoint();
  cfg.endpoint = "tcp://*:" + bound.substr(bound.rfind(':') + 1);
  auto second = kv_event_publisher::start(cfg, 16, "CPU");
  REQUIRE_FALSE(second);
  CHECK(second.err().message.find("--kv-events-config: cannot bind " + cfg.endpoint) == 0);
  cfg.endpoint = "tcp://127.0.0.1:*";
  cfg.replay_endpoint = "bogus://x";
  auto third = kv_event_publisher::start(cfg, 16, "CPU");
  REQUIRE_FALSE(third);
  CHECK(third.err().message.find("bogus://x") != std::string::npos);
}
