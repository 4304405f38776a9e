#include "actors/kv_event_publisher.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <msgpack.hpp>

namespace coserve::actors {

namespace {

using packer = msgpack::packer<msgpack::sbuffer>;

void pack_str(packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void pack_hashes(packer& pk, const std::vector<uint64_t>& hashes) {
  pk.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) pk.pack_uint64(h);
}

struct event_packer {
  packer& pk;
  int32_t block_size;
  std::string_view medium;

  void operator()(const kv_block_stored& e) const {
    pk.pack_array(7);
    pack_str(pk, "BlockStored");
    pack_hashes(pk, e.hashes);
    if (e.parent)
      pk.pack_uint64(*e.parent);
    else
      pk.pack_nil();
    pk.pack_array(static_cast<uint32_t>(e.tokens.size()));
    for (int32_t t : e.tokens) pk.pack_int32(t);
    pk.pack_int32(block_size);
    pk.pack_nil();  // lora_id: adapters do not share the base model's blocks here
    pack_str(pk, medium);
  }
  void operator()(const kv_block_removed& e) const {
    pk.pack_array(3);
    pack_str(pk, "BlockRemoved");
    pack_hashes(pk, e.hashes);
    pack_str(pk, medium);
  }
  void operator()(const kv_all_blocks_cleared&) const {
    pk.pack_array(1);
    pack_str(pk, "AllBlocksCleared");
  }
};

void big_endian(int64_t v, unsigned char out[8]) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(u >> (56 - 8 * i));
}

// vLLM's rule: bind an address with a wildcard or a local transport, connect to any other.
bool binds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

std::string last_endpoint(void* socket) {
  char buf[1024];
  size_t size = sizeof buf;
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, buf, &size) != 0 || size == 0) return {};
  return std::string(buf, strnlen(buf, size));
}

// The frames of one multipart message.
std::vector<std::string> receive_frames(void* socket) {
  std::vector<std::string> frames;
  int more = 1;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      break;
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  return frames;
}

void send_frames(void* socket, std::initializer_list<std::string_view> frames) {
  size_t i = 0;
  for (std::string_view f : frames) {
    const int flags = ++i < frames.size() ? ZMQ_SNDMORE : 0;
    // PUB drops at its high-water mark rather than block; ROUTER drops for a peer gone.
    (void)zmq_send(socket, f.data(), f.size(), flags | ZMQ_DONTWAIT);
  }
}

}  // namespace

std::string encode_kv_event_batch(double ts, std::span<const kv_cache_event> events,
                                  int32_t block_size, std::string_view medium,
                                  int32_t data_parallel_rank) {
  msgpack::sbuffer buf;
  packer pk(buf);
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  const event_packer each{pk, block_size, medium};
  for (const kv_cache_event& e : events) std::visit(each, e);
  pk.pack_int32(data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

kv_event_publisher::kv_event_publisher(const kv_events_config& config, int32_t block_size,
                                       std::string medium)
    : config_(config), block_size_(block_size), medium_(std::move(medium)) {}

result<std::unique_ptr<kv_event_publisher>> kv_event_publisher::start(
    const kv_events_config& config, int32_t block_size, std::string medium) {
  std::unique_ptr<kv_event_publisher> p(
      new kv_event_publisher(config, block_size, std::move(medium)));
  if (auto r = p->open(); !r) return r.err();
  p->thread_ = std::thread([raw = p.get()] { raw->run(); });
  return p;
}

result<void> kv_event_publisher::open() {
  auto fail = [](const std::string& what, const std::string& endpoint) {
    return error{"invalid_argument", "--kv-events-config: cannot " + what + " " + endpoint + ": " +
                                         zmq_strerror(zmq_errno())};
  };
  if (pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0)
    return error{"io", std::string("kv events: pipe: ") + std::strerror(errno)};
  ctx_ = zmq_ctx_new();
  pub_ = zmq_socket(ctx_, ZMQ_PUB);
  const int hwm = config_.hwm, linger_ms = 1000;
  zmq_setsockopt(pub_, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(pub_, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
  const bool bind = binds(config_.endpoint);
  if ((bind ? zmq_bind(pub_, config_.endpoint.c_str())
            : zmq_connect(pub_, config_.endpoint.c_str())) != 0)
    return fail(bind ? "bind" : "connect to", config_.endpoint);
  endpoint_ = bind ? last_endpoint(pub_) : config_.endpoint;
  if (!config_.replay_endpoint.empty()) {
    replay_ = zmq_socket(ctx_, ZMQ_ROUTER);
    const int none = 0;
    zmq_setsockopt(replay_, ZMQ_LINGER, &none, sizeof none);
    if (zmq_bind(replay_, config_.replay_endpoint.c_str()) != 0)
      return fail("bind", config_.replay_endpoint);
    replay_endpoint_ = last_endpoint(replay_);
  }
  return {};
}

kv_event_publisher::~kv_event_publisher() {
  if (thread_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    const char byte = 0;
    (void)!write(wake_[1], &byte, 1);
    thread_.join();
  }
  if (replay_ != nullptr) zmq_close(replay_);
  if (pub_ != nullptr) zmq_close(pub_);
  if (ctx_ != nullptr) zmq_ctx_term(ctx_);  // waits up to the PUB socket's linger for subscribers
  for (int fd : wake_)
    if (fd >= 0) close(fd);
}

bool kv_event_publisher::publish(double ts, std::vector<kv_cache_event> events) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    const int64_t seq = next_seq_++;
    if (static_cast<int64_t>(queue_.size()) >= config_.max_queue_size) {
      if (dropped_.fetch_add(1, std::memory_order_relaxed) == 0)
        std::fprintf(stderr,
                     "coserve kv events: the publisher's queue is full (%lld batches); batches "
                     "are being dropped (their sequence numbers skipped)\n",
                     static_cast<long long>(config_.max_queue_size));
      return false;
    }
    wake = queue_.empty();
    queue_.push_back({seq, ts, std::move(events)});
  }
  if (wake) {
    const char byte = 0;
    (void)!write(wake_[1], &byte, 1);  // a full pipe already holds a wake-up
  }
  return true;
}

void kv_event_publisher::send(const batch& b) {
  std::string payload = encode_kv_event_batch(b.ts, b.events, block_size_, medium_, 0);
  unsigned char seq[8];
  big_endian(b.seq, seq);
  const std::string_view seq_view(reinterpret_cast<const char*>(seq), 8);
  send_frames(pub_, {config_.topic, seq_view, payload});
  if (replay_ == nullptr) return;
  sent_.emplace_back(b.seq, std::move(payload));
  while (static_cast<int64_t>(sent_.size()) > config_.buffer_steps) sent_.pop_front();
}

void kv_event_publisher::serve_replay() {
  const std::vector<std::string> frames = receive_frames(replay_);
  // [identity, "", start]: a DEALER's request as the ROUTER receives it.
  if (frames.size() != 3 || !frames[1].empty() || frames[2].size() != 8) return;
  int64_t start = 0;
  for (unsigned char c : frames[2])
    start = static_cast<int64_t>(static_cast<uint64_t>(start) << 8 | c);
  unsigned char seq[8];
  const std::string_view seq_view(reinterpret_cast<const char*>(seq), 8);
  for (const auto& [n, payload] : sent_) {
    if (n < start) continue;
    big_endian(n, seq);
    send_frames(replay_, {frames[0], "", seq_view, payload});
  }
  big_endian(-1, seq);
  send_frames(replay_, {frames[0], "", seq_view, ""});
}

void kv_event_publisher::run() {
  zmq_pollitem_t items[2] = {{nullptr, wake_[0], ZMQ_POLLIN, 0}, {replay_, 0, ZMQ_POLLIN, 0}};
  const int count = replay_ != nullptr ? 2 : 1;
  std::vector<batch> work;
  for (;;) {
    if (zmq_poll(items, count, -1) < 0 && zmq_errno() != EINTR) break;
    if (count == 2 && (items[1].revents & ZMQ_POLLIN)) serve_replay();
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    char drain[64];
    while (read(wake_[0], drain, sizeof drain) > 0) {
    }
    bool stop = false;
    {
      std::lock_guard lock(mu_);
      work.swap(queue_);
      stop = stopping_;
    }
    for (const batch& b : work) send(b);
    work.clear();
    if (stop) break;
  }
}

}  // namespace coserve::actors
