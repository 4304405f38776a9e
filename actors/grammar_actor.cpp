#include "actors/grammar_actor.hpp"

#include <chrono>

namespace coserve::actors {

void grammar_actor::handle(compile_grammar& m) {
  in_hand_ = m.reply;
  shared_->fault_point("grammar", "compile_grammar");
  auto r = compiler_->compile(m.spec);
  const grammar_compiler_stats& s = compiler_->stats();
  auto& pm = shared_->metrics;
  pm.grammar_compiles.store(s.compiles, std::memory_order_relaxed);
  pm.grammar_cache_hits.store(s.cache_hits, std::memory_order_relaxed);
  pm.grammar_failures.store(s.failures, std::memory_order_relaxed);
  pm.grammar_cache_bytes.store(s.cache_bytes, std::memory_order_relaxed);
  pm.grammar_compile_us.store(static_cast<int64_t>(s.compile_seconds * 1e6),
                              std::memory_order_relaxed);
  in_hand_ = {};
  m.reply->complete(std::move(r));
}

void grammar_actor::on_failure(const std::string& what) {
  if (in_hand_) in_hand_->complete(error{"internal_error", "grammar compilation failed: " + what});
  in_hand_ = {};
}

}  // namespace coserve::actors
