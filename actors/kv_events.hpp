// kv_events — what the prefix cache did, as vLLM's KV-cache events name it (BlockStored,
// BlockRemoved, AllBlocksCleared): a fleet router (llm-d's precise prefix scorer, Dynamo's KV
// router) replays them to know which prompt prefixes each server holds. block_pool records them
// when asked to (block_pool_options::record_events); the kv_allocator actor takes them after each
// step and hands them to the publisher (actors/kv_event_publisher.hpp).
//
// Threads: none (plain values).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/result.hpp"

namespace coserve::actors {

// Full blocks entering the prefix cache, a chain: hashes[i + 1]'s parent is hashes[i]; `parent`
// is the first one's (none for a sequence's first block: a request's cache_salt is folded into
// that block's hash, as vLLM folds it into its extra keys). `tokens` holds every block's tokens,
// block_size each, in order.
struct kv_block_stored {
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> parent;
  std::vector<int32_t> tokens;
};
// Cached blocks evicted (their hashes no longer find anything).
struct kv_block_removed {
  std::vector<uint64_t> hashes;
};
// Every cached block dropped at once (POST /reset_prefix_cache).
struct kv_all_blocks_cleared {};

using kv_cache_event = std::variant<kv_block_stored, kv_block_removed, kv_all_blocks_cleared>;

// vLLM's --kv-events-config (KVEventsConfig): where the events go.
struct kv_events_config {
  bool enable_kv_cache_events = false;
  std::string publisher = "null";  // "zmq" or "null" (events not published)
  // The PUB socket: bound when the address has a wildcard ('*' or '::') or is ipc:// or
  // inproc://, connected otherwise (vLLM's rule).
  std::string endpoint = "tcp://*:5557";
  // A ROUTER socket (bound) answering replay requests: none when empty.
  std::string replay_endpoint;
  int64_t buffer_steps = 10000;     // batches kept for replay
  int32_t hwm = 100000;             // the PUB socket's send high-water mark (messages)
  int64_t max_queue_size = 100000;  // batches waiting for the publisher thread at most
  std::string topic;                // the first frame of every message
  bool publishes() const noexcept { return enable_kv_cache_events && publisher == "zmq"; }
};

// Parses the flag's JSON object (vLLM's keys; unknown keys and wrong types are errors naming the
// key). "publisher" defaults to "zmq" when enable_kv_cache_events is true, else "null".
result<kv_events_config> parse_kv_events_config(std::string_view json);

}  // namespace coserve::actors
