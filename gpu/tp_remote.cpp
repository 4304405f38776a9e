// Tensor-parallel GPU ranks in other processes (gpu/tp_peer.hpp): the jobs, setup and startup
// reports as bytes, and the loop of a rank other than 0 (run_remote_tp_rank).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>

#include "gpu/tp_peer.hpp"
#include "model/executor.hpp"
#include "model/tensor_parallel.hpp"

namespace coserve::gpu {

// ---- jobs as bytes ------------------------------------------------------------------------------

namespace {

constexpr uint32_t k_job_magic = 0x47504a42;  // "GPJB"

class job_writer {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* b = reinterpret_cast<const unsigned char*>(&v);
    out.insert(out.end(), b, b + sizeof v);
  }
  void ptr(const void* p) { put(uint64_t(reinterpret_cast<uintptr_t>(p))); }
  std::vector<unsigned char> out;
};

class job_reader {
 public:
  explicit job_reader(const std::vector<unsigned char>& b) : b_(b) {}
  template <class T>
  bool get(T& v) {
    if (sizeof v > b_.size() - at_) return false;
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return true;
  }
  template <class T>
  bool ptr(const T*& p) {
    uint64_t v = 0;
    if (!get(v)) return false;
    p = reinterpret_cast<const T*>(uintptr_t(v));
    return true;
  }
  bool bytes(std::vector<unsigned char>& v, uint64_t n) {
    if (n > b_.size() - at_) return false;
    v.assign(b_.begin() + ptrdiff_t(at_), b_.begin() + ptrdiff_t(at_ + n));
    at_ += n;
    return true;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  const std::vector<unsigned char>& b_;
  size_t at_ = 0;
};

}  // namespace

std::vector<unsigned char> encode_peer_job(const peer_job& j) {
  job_writer w;
  w.put(k_job_magic);
  w.put(int32_t(j.what));
  w.put(uint64_t(j.block_copies.size()));
  for (auto [a, b] : j.block_copies) {
    w.put(a);
    w.put(b);
  }
  w.put(uint8_t(j.forward));
  w.put(uint8_t(j.graph));
  w.put(j.bucket);
  w.put(uint64_t(j.meta.size()));
  w.out.insert(w.out.end(), j.meta.begin(), j.meta.end());
  w.ptr(j.base);
  for (const void* p :
       {static_cast<const void*>(j.in.ids), static_cast<const void*>(j.in.positions),
        static_cast<const void*>(j.in.slots), static_cast<const void*>(j.in.cu_seqlens),
        static_cast<const void*>(j.in.kv_lens), static_cast<const void*>(j.in.bt_offsets),
        static_cast<const void*>(j.in.block_tables), static_cast<const void*>(j.in.work),
        static_cast<const void*>(j.in.merges), static_cast<const void*>(j.in.attn_counts),
        static_cast<const void*>(j.row_slots)})
    w.ptr(p);
  w.put(j.in.num_tokens);
  w.put(j.in.num_work);
  w.put(j.in.num_merges);
  w.put(j.num_samples);
  w.put(uint64_t(j.arena_bytes));
  w.put(j.num_kv_blocks);
  w.put(j.pick_base);
  w.put(j.num_picks);
  const fi_step& f = j.in.fi;
  w.put(uint8_t(f.on));
  for (const void* p :
       {static_cast<const void*>(f.qo_indptr), static_cast<const void*>(f.kv_indptr),
        static_cast<const void*>(f.kv_indices), static_cast<const void*>(f.kv_last_page_len),
        static_cast<const void*>(f.request_indices), static_cast<const void*>(f.qo_tile_indices),
        static_cast<const void*>(f.kv_tile_indices), static_cast<const void*>(f.o_indptr),
        static_cast<const void*>(f.merge_indptr), static_cast<const void*>(f.kv_chunk_size),
        static_cast<const void*>(f.total_num_rows), static_cast<const void*>(f.block_valid_mask)})
    w.ptr(p);
  w.put(f.batch_size);
  w.put(f.num_rows);
  w.put(f.padded_batch_size);
  w.put(f.cta_tile_q);
  w.put(uint8_t(f.split_kv));
  w.put(uint8_t(f.cuda_graph));
  return std::move(w.out);
}

result<peer_job> decode_peer_job(const std::vector<unsigned char>& bytes) {
  job_reader r(bytes);
  peer_job j;
  uint32_t magic = 0;
  int32_t what = 0;
  uint64_t copies = 0, meta = 0, arena = 0;
  uint8_t forward = 0, graph = 0;
  const auto bad = [] {
    return make_error("internal", "tensor parallel: a malformed step message from rank 0");
  };
  if (!r.get(magic) || magic != k_job_magic || !r.get(what) || what < 0 ||
      what > int32_t(peer_job::kind::stop) || !r.get(copies) || copies > bytes.size())
    return bad();
  j.what = peer_job::kind(what);
  for (uint64_t c = 0; c < copies; ++c) {
    std::pair<int32_t, int32_t> bc;
    if (!r.get(bc.first) || !r.get(bc.second)) return bad();
    j.block_copies.push_back(bc);
  }
  if (!r.get(forward) || !r.get(graph) || !r.get(j.bucket) || !r.get(meta) ||
      !r.bytes(j.meta, meta) || !r.ptr(j.base) || !r.ptr(j.in.ids) || !r.ptr(j.in.positions) ||
      !r.ptr(j.in.slots) || !r.ptr(j.in.cu_seqlens) || !r.ptr(j.in.kv_lens) ||
      !r.ptr(j.in.bt_offsets) || !r.ptr(j.in.block_tables) || !r.ptr(j.in.work) ||
      !r.ptr(j.in.merges) || !r.ptr(j.in.attn_counts) || !r.ptr(j.row_slots) ||
      !r.get(j.in.num_tokens) || !r.get(j.in.num_work) || !r.get(j.in.num_merges) ||
      !r.get(j.num_samples) || !r.get(arena) || !r.get(j.num_kv_blocks) || !r.get(j.pick_base) ||
      !r.get(j.num_picks))
    return bad();
  fi_step& f = j.in.fi;
  uint8_t fi_on = 0, split = 0, fi_graph = 0;
  if (!r.get(fi_on) || !r.ptr(f.qo_indptr) || !r.ptr(f.kv_indptr) || !r.ptr(f.kv_indices) ||
      !r.ptr(f.kv_last_page_len) || !r.ptr(f.request_indices) || !r.ptr(f.qo_tile_indices) ||
      !r.ptr(f.kv_tile_indices) || !r.ptr(f.o_indptr) || !r.ptr(f.merge_indptr) ||
      !r.ptr(f.kv_chunk_size) || !r.ptr(f.total_num_rows) || !r.ptr(f.block_valid_mask) ||
      !r.get(f.batch_size) || !r.get(f.num_rows) || !r.get(f.padded_batch_size) ||
      !r.get(f.cta_tile_q) || !r.get(split) || !r.get(fi_graph) || !r.done())
    return bad();
  f.on = fi_on != 0;
  f.split_kv = split != 0;
  f.cuda_graph = fi_graph != 0;
  j.forward = forward != 0;
  j.graph = graph != 0;
  j.arena_bytes = size_t(arena);
  return j;
}

// ---- ranks in other processes --------------------------------------------------------------

namespace {
constexpr uint32_t k_setup_magic = 0x47505355;  // "GPSU"
}

std::vector<unsigned char> encode_remote_tp_setup(const remote_tp_setup& s) {
  job_writer w;
  w.put(k_setup_magic);
  w.put(s.max_num_tokens);
  w.put(s.block_size);
  w.put(s.last_token_slots);
  w.put(uint8_t(s.kv_type));
  w.put(s.gpu_memory_utilization);
  w.put(s.metadata_bytes);
  w.put(s.dummy_seed);
  w.put(s.fi_tmp_rows);
  w.put(uint8_t(s.tune_gemms));
  w.put(uint8_t(s.fp8));
  w.put(uint8_t(s.dummy));
  return std::move(w.out);
}

result<remote_tp_setup> decode_remote_tp_setup(const std::vector<unsigned char>& b) {
  job_reader r(b);
  remote_tp_setup s;
  uint32_t magic = 0;
  uint8_t kv = 0, tune = 0, fp8 = 0, dummy = 0;
  if (!r.get(magic) || magic != k_setup_magic || !r.get(s.max_num_tokens) || !r.get(s.block_size) ||
      !r.get(s.last_token_slots) || !r.get(kv) || kv > uint8_t(kv_elem::fp8_e5m2) ||
      !r.get(s.gpu_memory_utilization) || !r.get(s.metadata_bytes) || !r.get(s.dummy_seed) ||
      !r.get(s.fi_tmp_rows) || s.fi_tmp_rows < 0 || !r.get(tune) || !r.get(fp8) || !r.get(dummy) ||
      !r.done())
    return make_error("internal", "tensor parallel: a malformed setup message from rank 0");
  s.kv_type = kv_elem(kv);
  s.tune_gemms = tune != 0;
  s.fp8 = fp8 != 0;
  s.dummy = dummy != 0;
  return s;
}

std::vector<unsigned char> encode_remote_report(int32_t blocks, const std::string& error) {
  std::vector<unsigned char> b(k_remote_report_bytes, 0);
  std::memcpy(b.data(), &blocks, 4);
  std::memcpy(b.data() + 4, error.data(), std::min(error.size(), k_remote_report_bytes - 5));
  return b;
}

result<std::vector<int32_t>> decode_remote_reports(const std::vector<unsigned char>& all,
                                                   int32_t ranks) {
  if (all.size() != k_remote_report_bytes * size_t(ranks))
    return make_error("internal", "tensor parallel: malformed startup reports");
  std::vector<int32_t> fits;
  for (int32_t r = 0; r < ranks; ++r) {
    const unsigned char* b = all.data() + k_remote_report_bytes * size_t(r);
    int32_t blocks = 0;
    std::memcpy(&blocks, b, 4);
    if (blocks <= 0)
      return error{k_executor_fatal, "tensor parallel startup failed: rank " + std::to_string(r) +
                                         ": " + std::string(reinterpret_cast<const char*>(b + 4))};
    fits.push_back(blocks);
  }
  return fits;
}

result<void> run_remote_tp_rank(const std::string& model_dir, communicator& world, int32_t device) {
  const int32_t rank = world.rank(), size = world.size();
  COSERVE_CUDA_TRY(cuda_check(cudaSetDevice(device), "cudaSetDevice"));
  std::vector<unsigned char> msg;
  if (auto r = world.broadcast(msg, 0); !r) return r;
  auto setup = decode_remote_tp_setup(msg);
  if (!setup) return std::move(setup).err();
  std::vector<unsigned char> id;
  if (auto r = world.broadcast(id, 0); !r) return r;
  auto group = nccl_group::create_rank(id, size, rank);
  if (!group) return std::move(group).err();
  // The shard, uploaded by the peer's thread; its KV fit or error goes to rank 0 either way.
  tp_peer::options po;
  po.rank = rank;
  po.device = device;
  po.group = *group;
  po.max_num_tokens = setup->max_num_tokens;
  po.block_size = setup->block_size;
  po.kv_type = setup->kv_type;
  po.gpu_memory_utilization = setup->gpu_memory_utilization;
  po.last_token_slots = setup->last_token_slots;
  po.metadata_bytes = size_t(setup->metadata_bytes);
  po.tune_gemms = setup->tune_gemms;
  po.fp8 = setup->fp8;
  po.fi_tmp_rows = setup->fi_tmp_rows;
  auto started = [&]() -> result<std::unique_ptr<tp_peer>> {
    if (setup->dummy) {
      auto c = load_model_config(model_dir);
      if (!c) return std::move(c).err();
      model_weights probe;
      probe.config = *c;
      if (auto r = check_tensor_parallel_size(probe, size); !r) return r.err();
      po.dummy_config = rank_config(*c, shard_shape(*c, rank, size));
      po.dummy_seed = setup->dummy_seed + uint64_t(rank);
    } else {
      auto hw = load_weights(model_dir);
      if (!hw) return std::move(hw).err();
      auto sh = shard_weights(*hw, rank, size);
      if (!sh) return std::move(sh).err();
      po.fp8 = setup->fp8 || !hw->config.quantization.method.empty();  // as rank 0 decides
      po.shard = std::make_shared<const model_weights>(std::move(sh.value()));
    }
    return tp_peer::start(po);
  }();
  const std::vector<unsigned char> report =
      started ? encode_remote_report((*started)->kv_blocks_fit(), "")
              : encode_remote_report(0, started.err().message);
  if (auto r = world.gather(report.data(), report.size(), nullptr, 0); !r) return r;
  if (!started) return std::move(started).err();
  std::unique_ptr<tp_peer> peer = std::move(started.value());
  std::fprintf(stderr, "coserve gpu: %s\n", peer->description().c_str());
  std::fflush(stderr);
  // A failed peer leaves rank 0 inside a collective: leave, and mpirun ends the job.
  std::atomic<bool> running{true};
  std::thread watch([&] {
    while (running.load()) {
      if ((*group)->failed()) {
        std::fprintf(stderr, "coserve rank %d: %s; exiting\n", rank, (*group)->failure().c_str());
        std::fflush(stderr);
        std::_Exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  result<void> out;
  for (;;) {
    if (auto r = world.broadcast(msg, 0); !r) {
      out = std::move(r);
      break;
    }
    auto job = decode_peer_job(msg);
    if (!job) {
      out = std::move(job).err();
      break;
    }
    if (job->what == peer_job::kind::stop) break;
    peer->post(std::move(job.value()));
  }
  peer.reset();  // runs what was posted, then stops
  running.store(false);
  watch.join();
  return out;
}

}  // namespace coserve::gpu
