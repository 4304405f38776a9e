#include "gpu/tp_peer.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>

#include "gpu/cuda_stream.hpp"
#include "gpu/device_weights.hpp"
#include "gpu/gemm.hpp"
#include "gpu/kernels.hpp"
#include "model/executor.hpp"

#if defined(COSERVE_HAVE_NCCL)
#include <nccl.h>
#endif

namespace coserve::gpu {

#if defined(COSERVE_HAVE_NCCL)

bool nccl_available() noexcept { return true; }

namespace {
ncclComm_t comm_of(void* p) { return static_cast<ncclComm_t>(p); }
error nccl_error(ncclResult_t r, const char* what) {
  return error{k_executor_fatal, std::string("gpu: ") + what + ": " + ncclGetErrorString(r)};
}
}  // namespace

result<std::shared_ptr<nccl_group>> nccl_group::create(const std::vector<int32_t>& devices) {
  std::shared_ptr<nccl_group> g(new nccl_group());
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  const std::vector<int> devs(devices.begin(), devices.end());
  if (ncclResult_t r = ncclCommInitAll(comms.data(), int(devs.size()), devs.data());
      r != ncclSuccess)
    return nccl_error(r, "ncclCommInitAll");
  for (ncclComm_t c : comms) g->comms_.push_back(c);
  g->size_ = int32_t(comms.size());
  return g;
}

result<std::vector<unsigned char>> nccl_group::new_unique_id() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
    return nccl_error(r, "ncclGetUniqueId");
  const auto* b = reinterpret_cast<const unsigned char*>(&id);
  return std::vector<unsigned char>(b, b + sizeof id);
}

result<std::shared_ptr<nccl_group>> nccl_group::create_rank(
    const std::vector<unsigned char>& unique_id, int32_t size, int32_t rank) {
  ncclUniqueId id;
  if (unique_id.size() != sizeof id)
    return make_error("internal", "gpu: a malformed NCCL unique id");
  std::memcpy(&id, unique_id.data(), sizeof id);
  ncclComm_t c = nullptr;
  if (ncclResult_t r = ncclCommInitRank(&c, size, id, rank); r != ncclSuccess)
    return nccl_error(r, "ncclCommInitRank");
  std::shared_ptr<nccl_group> g(new nccl_group());
  g->comms_.push_back(c);
  g->first_rank_ = rank;
  g->size_ = size;
  return g;
}

nccl_group::~nccl_group() {
  if (aborted_) return;  // ncclCommAbort freed them
  for (void* c : comms_) (void)ncclCommDestroy(comm_of(c));
}

result<void> nccl_group::all_reduce_bf16(int32_t rank, void* data, size_t n, cudaStream_t s) {
  if (failed()) return error{k_executor_fatal, "gpu: tensor parallel group failed: " + failure()};
  if (ncclResult_t r = ncclAllReduce(data, data, n, ncclBfloat16, ncclSum, comm_of(comm(rank)), s);
      r != ncclSuccess)
    return nccl_error(r, "ncclAllReduce");
  return {};
}

result<void> nccl_group::broadcast_i32(int32_t rank, int32_t* data, size_t n, cudaStream_t s) {
  if (failed()) return error{k_executor_fatal, "gpu: tensor parallel group failed: " + failure()};
  if (ncclResult_t r = ncclBroadcast(data, data, n, ncclInt32, 0, comm_of(comm(rank)), s);
      r != ncclSuccess)
    return nccl_error(r, "ncclBroadcast");
  return {};
}

void nccl_group::fail(const std::string& why) {
  std::lock_guard lock(mu_);
  if (why_.empty()) why_ = why;
  failed_.store(true, std::memory_order_release);
  if (aborted_) return;
  aborted_ = true;
  for (void* c : comms_) (void)ncclCommAbort(comm_of(c));
}

std::string nccl_group::async_error() const {
  std::lock_guard lock(mu_);
  if (aborted_) return {};
  for (size_t r = 0; r < comms_.size(); ++r) {
    ncclResult_t e = ncclSuccess;
    if (ncclCommGetAsyncError(comm_of(comms_[r]), &e) == ncclSuccess && e != ncclSuccess &&
        e != ncclInProgress)
      return "rank " + std::to_string(first_rank_ + int32_t(r)) + ": " + ncclGetErrorString(e);
  }
  return {};
}

#else

bool nccl_available() noexcept { return false; }

result<std::shared_ptr<nccl_group>> nccl_group::create(const std::vector<int32_t>&) {
  return make_error("unavailable",
                    "gpu: this build has no NCCL (tensor parallelism on GPUs needs it)");
}
result<std::vector<unsigned char>> nccl_group::new_unique_id() {
  return make_error("unavailable",
                    "gpu: this build has no NCCL (tensor parallelism on GPUs needs it)");
}
result<std::shared_ptr<nccl_group>> nccl_group::create_rank(const std::vector<unsigned char>&,
                                                            int32_t, int32_t) {
  return make_error("unavailable",
                    "gpu: this build has no NCCL (tensor parallelism on GPUs needs it)");
}
nccl_group::~nccl_group() = default;
result<void> nccl_group::all_reduce_bf16(int32_t, void*, size_t, cudaStream_t) {
  return make_error("unavailable", "gpu: no NCCL");
}
result<void> nccl_group::broadcast_i32(int32_t, int32_t*, size_t, cudaStream_t) {
  return make_error("unavailable", "gpu: no NCCL");
}
void nccl_group::fail(const std::string& why) {
  std::lock_guard lock(mu_);
  if (why_.empty()) why_ = why;
  failed_.store(true, std::memory_order_release);
}
std::string nccl_group::async_error() const { return {}; }

#endif

std::string nccl_group::failure() const {
  std::lock_guard lock(mu_);
  return why_;
}

// ---- tp_peer --------------------------------------------------------------------------------

struct tp_peer::state {
  cuda_stream s;
  gemm_runner gemm;
  device_weights w;
  layer_scratch scratch;
  rope_tables rope;
  kv_store kv;
  device_buffer last_tokens, tokens, meta_dev, arena_dev;
  // Pinned staging of the posted metadata, used in turn; each slot's event marks when the upload
  // that read it has run, so the slot is rewritten only after that.
  struct staging {
    pinned_buffer bytes;
    event uploaded;
    bool used = false;
  };
  staging stage[3];
  int32_t next_stage = 0;
  std::map<int32_t, cudaGraphExec_t> graphs;  // decode bucket -> graph
  ~state() {
    if (s.get() != nullptr) (void)s.synchronize();
    for (auto& [b, g] : graphs) (void)cudaGraphExecDestroy(g);
  }
};

result<std::unique_ptr<tp_peer>> tp_peer::start(options o) {
  std::unique_ptr<tp_peer> p(new tp_peer());
  p->o_ = std::move(o);
  std::promise<result<int32_t>> started;
  auto fut = started.get_future();
  p->thread_ = std::thread(
      [self = p.get(), pr = std::move(started)]() mutable { self->run(std::move(pr)); });
  auto fit = fut.get();
  if (!fit) return std::move(fit).err();  // the thread has returned; the destructor joins it
  p->kv_fit_ = *fit;
  return p;
}

tp_peer::~tp_peer() {
  if (thread_.joinable()) {
    peer_job stop;
    stop.what = peer_job::kind::stop;
    post(std::move(stop));
    thread_.join();
  }
}

void tp_peer::post(peer_job job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void tp_peer::run(std::promise<result<int32_t>> started) {
  auto fit = setup();
  const bool ok = fit.ok();
  started.set_value(std::move(fit));
  if (!ok) {
    st_.reset();
    return;
  }
  for (;;) {
    peer_job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !jobs_.empty(); });
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    if (job.what == peer_job::kind::stop) break;
    result<void> r =
        o_.group->failed()
            ? result<void>(error{k_executor_fatal, "gpu: tensor parallel group failed"})
            : handle(job);
    if (!r.ok() && !o_.group->failed())
      o_.group->fail("rank " + std::to_string(o_.rank) + " (cuda:" + std::to_string(o_.device) +
                     "): " + r.err().message);
    if (job.done) job.done->set_value(std::move(r));
  }
  st_.reset();  // on this thread, with the device selected
}

result<int32_t> tp_peer::setup() {
  COSERVE_CUDA_TRY(cuda_check(cudaSetDevice(o_.device), "cudaSetDevice"));
  st_ = std::make_unique<state>();
  state& st = *st_;
  auto s = cuda_stream::create();
  if (!s) return std::move(s).err();
  st.s = std::move(s.value());
  auto g = gemm_runner::create();
  if (!g) return std::move(g).err();
  st.gemm = std::move(g.value());
  if (o_.shard) {
    model_weights local = *o_.shard;
    local.config = rank_config(o_.shard->config, o_.shard->shard);
    auto w = upload_weights(local, st.s.get(), {}, o_.fp8, /*lm_head=*/false);
    if (!w) return std::move(w).err();
    st.w = std::move(w.value());
    // The host shard (o and down columns copied out of the file) is not needed once on the device.
    local = {};
    o_.shard.reset();
  } else {
    auto w =
        dummy_weights(o_.dummy_config, o_.dummy_seed, st.s.get(), {}, o_.fp8, /*lm_head=*/false);
    if (!w) return std::move(w).err();
    st.w = std::move(w.value());
  }
  st.w.gemv = o_.gemv;
  const model_config& c = st.w.config;
  if (auto r = st.scratch.allocate(c, o_.max_num_tokens, st.w.fp8, o_.fi_tmp_rows); !r)
    return r.err();
  if (auto r = st.rope.upload(c); !r) return r.err();
  for (auto [buf, bytes] : {std::pair{&st.last_tokens, size_t(o_.last_token_slots) * 4},
                            std::pair{&st.tokens, size_t(o_.last_token_slots) * 4},
                            std::pair{&st.meta_dev, o_.metadata_bytes}}) {
    auto b = device_buffer::allocate(bytes);
    if (!b) return std::move(b).err();
    *buf = std::move(b.value());
  }
  COSERVE_CUDA_TRY(
      cuda_check(cudaMemset(st.last_tokens.get(), 0, st.last_tokens.bytes()), "last-token buffer"));
  for (state::staging& sg : st.stage) {
    auto b = pinned_buffer::allocate(o_.metadata_bytes);
    if (!b) return std::move(b).err();
    sg.bytes = std::move(b.value());
    auto e = event::create();
    if (!e) return std::move(e).err();
    sg.uploaded = std::move(e.value());
  }
  if (o_.tune_gemms) {
    auto shapes = layer_gemm_shapes(st.w, st.scratch);
    if (!shapes) return std::move(shapes).err();
    auto rep = st.gemm.tune(*shapes, st.s.get());
    if (!rep) return std::move(rep).err();
  }
  cudaDeviceProp prop{};
  COSERVE_CUDA_TRY(
      cuda_check(cudaGetDeviceProperties(&prop, o_.device), "cudaGetDeviceProperties"));
  description_ = "rank " + std::to_string(o_.rank) + ": cuda:" + std::to_string(o_.device) + " (" +
                 prop.name + "), " + std::to_string(c.num_attention_heads) + " query / " +
                 std::to_string(c.num_key_value_heads) + " KV heads, MLP width " +
                 std::to_string(c.intermediate_size) + ", weights " +
                 std::to_string(st.w.bytes >> 20) + " MiB";
  return kv_blocks_that_fit(c, o_.block_size, o_.kv_type, o_.gpu_memory_utilization);
}

result<void> tp_peer::forward(const peer_job& job, const layer_inputs& in,
                              const int32_t* row_slots) {
  state& st = *st_;
  const all_reduce_fn reduce = [this](bf16* data, size_t n, cudaStream_t s) {
    return o_.group->all_reduce_bf16(o_.rank, data, n, s);
  };
  if (job.num_picks > 0) {
    if (job.pick_base < 0 ||
        size_t(job.pick_base) + size_t(job.num_picks) > st.last_tokens.bytes() / 4)
      return make_error("internal", "gpu: draft picks outside a peer's last-token buffer");
    COSERVE_CUDA_TRY(o_.group->broadcast_i32(o_.rank, st.last_tokens.as<int32_t>() + job.pick_base,
                                             size_t(job.num_picks), st.s.get()));
  }
  COSERVE_CUDA_TRY(run_layers(st.w, st.gemm, st.scratch, st.kv, st.rope, in,
                              st.last_tokens.as<int32_t>(), reduce, st.s.get()));
  if (job.num_samples == 0) return {};
  // Rank 0's sampled ids, into this device's last-token buffer like rank 0's own.
  COSERVE_CUDA_TRY(o_.group->broadcast_i32(o_.rank, st.tokens.as<int32_t>(),
                                           size_t(job.num_samples), st.s.get()));
  return launch_scatter_tokens(st.last_tokens.as<int32_t>(), row_slots, st.tokens.as<int32_t>(),
                               job.num_samples, st.s.get());
}

result<void> tp_peer::handle(peer_job& job) {
  state& st = *st_;
  cudaStream_t s = st.s.get();
  const int32_t layers = st.w.config.num_hidden_layers;
  switch (job.what) {
    case peer_job::kind::allocate_kv:
      COSERVE_CUDA_TRY(st.kv.allocate(st.w.config, o_.block_size, job.num_kv_blocks, o_.kv_type));
      return {};
    case peer_job::kind::stop:
      return {};
    case peer_job::kind::capture:
    case peer_job::kind::step:
      break;
  }
  for (auto [src, dst] : job.block_copies) COSERVE_CUDA_TRY(st.kv.copy_block(layers, src, dst, s));
  if (!job.forward) return {};
  if (job.what == peer_job::kind::capture && st.arena_dev.bytes() < job.arena_bytes) {
    auto a = device_buffer::allocate(job.arena_bytes);
    if (!a) return std::move(a).err();
    st.arena_dev = std::move(a.value());
  }
  device_buffer& dst =
      job.graph || job.what == peer_job::kind::capture ? st.arena_dev : st.meta_dev;
  if (job.meta.size() > dst.bytes() || job.meta.size() > o_.metadata_bytes)
    return make_error("internal", "gpu: a step's metadata exceeds a peer's buffer");
  // Stage the bytes in pinned memory (a slot whose previous upload has run) and upload them.
  state::staging& sg = st.stage[st.next_stage];
  st.next_stage = (st.next_stage + 1) % 3;
  if (sg.used)
    COSERVE_CUDA_TRY(cuda_check(cudaEventSynchronize(sg.uploaded.get()), "staging reuse"));
  std::memcpy(sg.bytes.get(), job.meta.data(), job.meta.size());
  COSERVE_CUDA_TRY(cuda_check(
      cudaMemcpyAsync(dst.get(), sg.bytes.get(), job.meta.size(), cudaMemcpyHostToDevice, s),
      "peer metadata upload"));
  COSERVE_CUDA_TRY(sg.uploaded.record(s));
  sg.used = true;
  const layer_inputs in = rebase(job.in, job.base, dst.get());
  const int32_t* row_slots = rebase_ptr(job.row_slots, job.base, dst.get());
  if (job.what == peer_job::kind::capture) {
    // As rank 0 does at the same time: one eager run (collectives included), then the capture.
    auto exec = capture_graph(s, [&] { return forward(job, in, row_slots); });
    if (!exec) return std::move(exec).err();
    if (auto old = st.graphs.find(job.bucket); old != st.graphs.end())
      (void)cudaGraphExecDestroy(old->second);
    st.graphs[job.bucket] = *exec;
    COSERVE_CUDA_TRY(st.kv.zero_scratch_block(layers, s));
    return st.s.synchronize();
  }
  if (job.graph) {
    auto g = st.graphs.find(job.bucket);
    if (g == st.graphs.end())
      return make_error("internal",
                        "gpu: a peer has no graph for bucket " + std::to_string(job.bucket));
    return cuda_check(cudaGraphLaunch(g->second, s), "cudaGraphLaunch");
  }
  return forward(job, in, row_slots);
}

}  // namespace coserve::gpu
