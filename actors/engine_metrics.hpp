// The engine's counters, gauges and latency histograms as engine::metrics() returns them (and
// /metrics exports them).
//
// Threads: none (plain data).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/executor.hpp"

namespace coserve {

// A latency histogram (cumulative since start): counts[i] observations in (bounds[i-1], bounds[i]],
// the last count past every bound. Fixed size: memory does not grow with traffic.
struct histogram_snapshot {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // bounds.size() + 1
  double sum = 0.0;
  uint64_t count = 0;
};

// Counters, gauges and latency histograms for /metrics (cumulative since start; buckets as vLLM's).
struct engine_metrics {
  int64_t requests_running = 0, requests_waiting = 0;
  // The LoRA adapters (their --lora-modules names) of running and of waiting requests.
  std::vector<std::string> lora_running, lora_waiting;
  int64_t kv_blocks_total = 0, kv_blocks_free = 0;
  int64_t kv_blocks_cached_free = 0;            // of the free ones: still holding a cached prefix
  int64_t prefix_queries = 0, prefix_hits = 0;  // in tokens
  int64_t prompt_tokens = 0, generation_tokens = 0;
  int64_t preemptions = 0;
  int64_t finished_stop = 0, finished_length = 0, finished_abort = 0, finished_error = 0;
  int64_t rejected = 0;
  int64_t open_requests = 0;         // submitted, stream not ended yet
  int64_t steps = 0;                 // executor steps completed
  int64_t steps_launched_ahead = 0;  // launched while the previous step still ran
  // Structured outputs (grammar actor): grammars compiled, served from its cache, rejected; time
  // spent compiling.
  int64_t grammar_compiles = 0, grammar_cache_hits = 0, grammar_failures = 0,
          grammar_cache_bytes = 0;
  double grammar_compile_seconds = 0.0;
  // Speculative decoding (vLLM's spec_decode counters): verify steps with proposals, tokens
  // proposed, proposals accepted, and accepted per proposal position.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position;
  std::vector<std::pair<std::string, int64_t>> mailbox_depth;  // per actor: messages queued
  std::vector<rank_stats> tp_ranks;          // tensor parallel: per rank (empty without)
  histogram_snapshot ttft, itl, e2e, queue;  // seconds
};

}  // namespace coserve
