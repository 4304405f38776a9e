// kv_event_publisher — publishes the prefix cache's KV-cache events (actors/kv_events.hpp) over
// ZeroMQ as vLLM's ZmqEventPublisher does, for fleet routers (llm-d's KV-cache indexer, Dynamo's
// KV router) and vLLM's own subscriber example:
//
//   PUB, one message per batch: [topic, sequence number (8 bytes, big-endian), payload];
//   payload: msgpack, msgspec's array-like encoding of vLLM's KVEventBatch —
//     [ts (float64, unix seconds), [event, ...], data_parallel_rank]
//     ["BlockStored", [block_hash, ...], parent_block_hash | nil, [token_id, ...], block_size,
//      lora_id (nil), medium]
//     ["BlockRemoved", [block_hash, ...], medium]
//     ["AllBlocksCleared"]
//   ROUTER (replay_endpoint, optional): a request [start sequence number (8 bytes, big-endian)]
//   (sent from a DEALER as ["", start]) is answered with every batch still buffered from that
//   number on, each as ["", seq, payload], then ["", -1 (8 bytes), ""].
//
// Sequence numbers count batches from 0. publish() never blocks the caller: a batch that finds
// the queue full is dropped, its sequence number skipped (a subscriber sees the gap) and counted.
//
// Threads: publish() from any thread; one thread of the publisher's own owns the sockets.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "actors/kv_events.hpp"
#include "base/result.hpp"

namespace coserve::actors {

// The payload of one batch (the msgpack bytes above).
std::string encode_kv_event_batch(double ts, std::span<const kv_cache_event> events,
                                  int32_t block_size, std::string_view medium,
                                  int32_t data_parallel_rank);

class kv_event_publisher {
 public:
  // Opens the sockets (config.publishes() must be true) and starts the thread; an endpoint that
  // cannot be bound or connected is an error naming it.
  static result<std::unique_ptr<kv_event_publisher>> start(const kv_events_config& config,
                                                           int32_t block_size, std::string medium);
  ~kv_event_publisher();  // sends what is queued, then closes the sockets
  kv_event_publisher(const kv_event_publisher&) = delete;
  kv_event_publisher& operator=(const kv_event_publisher&) = delete;

  // Queues one batch (ts: unix seconds); false when the queue was full and the batch dropped.
  bool publish(double ts, std::vector<kv_cache_event> events);

  // The endpoints as bound (a wildcard port resolved: "tcp://*:0" becomes tcp://0.0.0.0:N).
  const std::string& endpoint() const noexcept { return endpoint_; }
  const std::string& replay_endpoint() const noexcept { return replay_endpoint_; }
  int64_t batches_dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct batch {
    int64_t seq = 0;
    double ts = 0;
    std::vector<kv_cache_event> events;
  };
  kv_event_publisher(const kv_events_config& config, int32_t block_size, std::string medium);
  result<void> open();
  void run();
  void send(const batch& b);
  void serve_replay();

  kv_events_config config_;
  int32_t block_size_;
  std::string medium_;
  std::string endpoint_, replay_endpoint_;
  void* ctx_ = nullptr;
  void* pub_ = nullptr;
  void* replay_ = nullptr;
  int wake_[2] = {-1, -1};  // a pipe: publish() and the destructor wake the thread through it

  std::mutex mu_;
  std::vector<batch> queue_;  // guarded by mu_
  int64_t next_seq_ = 0;      // guarded by mu_
  bool stopping_ = false;     // guarded by mu_
  std::atomic<int64_t> dropped_{0};

  std::deque<std::pair<int64_t, std::string>> sent_;  // the replay buffer (the thread's)
  std::thread thread_;
};

}  // namespace coserve::actors
