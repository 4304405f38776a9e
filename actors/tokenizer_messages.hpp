// tokenizer_actor's protocol (chat template + encode + validation, off the I/O threads), and the
// pool of tokenizer actors its senders (intake, the engine facade) pick from.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/intake_messages.hpp"
#include "actors/request.hpp"
#include "runtime/actor.hpp"
#include "runtime/message.hpp"
#include "runtime/reply.hpp"

namespace coserve::actors {

class stream_impl;

// intake → tokenizer: a request to encode, validate and hand to the streamer and the scheduler.
// `cost` is what tokenizer_pool::pick added to this actor's load.
struct tokenize_request {
  uint64_t request_id = 0;
  generate_request request;
  std::shared_ptr<stream_impl> stream;
  submit_reply reply;
  int64_t cost = 0;
};

// engine::tokenize → tokenizer (/tokenize).
struct encode_text {
  tokenize_request_input input;
  rt::reply_ptr<std::vector<int32_t>> reply;
  int64_t cost = 0;
};

// engine::detokenize → tokenizer (/detokenize).
struct decode_ids {
  std::vector<int32_t> ids;
  rt::reply_ptr<std::string> reply;
  int64_t cost = 0;
};

struct tokenizer_protocol {
  using messages = rt::message_list<tokenize_request, encode_text, decode_ids>;
};

// What a request costs a tokenizer (for tokenizer_pool::pick): about its input's bytes.
int64_t tokenize_cost(const generate_request& req);
int64_t tokenize_cost(const tokenize_request_input& in);

// The tokenizer actors and the input bytes each has been sent and not yet handled: a sender picks
// the least loaded one (pick adds the cost), the actor gives the cost back when its handler ends.
// Any thread.
class tokenizer_pool {
 public:
  explicit tokenizer_pool(size_t size) : load_(std::make_unique<std::atomic<int64_t>[]>(size)) {}
  void add(rt::actor_ref<tokenizer_protocol> ref) { actors_.push_back(std::move(ref)); }
  size_t size() const noexcept { return actors_.size(); }
  const rt::actor_ref<tokenizer_protocol>& operator[](size_t i) const { return actors_[i]; }
  // The least loaded actor; adds `cost` to its load.
  size_t pick(int64_t cost);
  void done(size_t index, int64_t cost) { load_[index].fetch_sub(cost, std::memory_order_relaxed); }
  int64_t queued() const;  // messages waiting in the pool's mailboxes, summed

 private:
  std::vector<rt::actor_ref<tokenizer_protocol>> actors_;
  std::unique_ptr<std::atomic<int64_t>[]> load_;
};

}  // namespace coserve::actors
