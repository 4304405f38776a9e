// The MPI communicator (OpenMPI from the distribution, or any MPI with the C bindings) over
// MPI_COMM_WORLD, and the detection of an mpirun/srun launch. Built with COSERVE_HAVE_MPI; without
// it, make_mpi_communicator says so.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/communicator.hpp"

#if defined(COSERVE_HAVE_MPI)
// The C bindings only (mpi.h pulls in the deprecated C++ ones otherwise).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "model/executor.hpp"
#endif

namespace coserve {
namespace {

bool env_int(const char* name, int32_t& out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 20) return false;
  out = int32_t(x);
  return true;
}

}  // namespace

mpi_launch detect_mpi_launch() {
  mpi_launch l;
  int32_t rank = 0, size = 0;
  // OpenMPI's mpirun; MPICH/Intel's hydra (PMI); Slurm's srun with PMIx (rank from PMIx, size from
  // Slurm's task count).
  if ((env_int("OMPI_COMM_WORLD_SIZE", size) && env_int("OMPI_COMM_WORLD_RANK", rank)) ||
      (env_int("PMI_SIZE", size) && env_int("PMI_RANK", rank)) ||
      (env_int("SLURM_NTASKS", size) && env_int("PMIX_RANK", rank))) {
    l.launched = size >= 1;
    l.rank = rank;
    l.size = size;
  }
  return l;
}

#if defined(COSERVE_HAVE_MPI)
namespace {

std::atomic<bool> g_mpi_failed{false};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a failed collective the peers may be gone: finalizing would wait on them.
  if (!finalized && !g_mpi_failed.load()) MPI_Finalize();
}

class mpi_communicator final : public communicator {
 public:
  mpi_communicator(int32_t rank, int32_t size) : rank_(rank), size_(size) {}

  int32_t rank() const noexcept override { return rank_; }
  int32_t size() const noexcept override { return size_; }
  std::string backend() const override { return "mpi"; }

  result<void> all_reduce_sum(float* data, size_t n) override {
    if (size_ == 1 || n == 0) return {};
    // The order of the additions is the MPI library's (its allreduce algorithm), not rank order.
    return check(MPI_Allreduce(MPI_IN_PLACE, data, int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                 "MPI_Allreduce");
  }

  result<void> gather(const void* data, size_t bytes, std::vector<unsigned char>* out,
                      int32_t root) override {
    int mine = int(bytes);
    std::vector<int> sizes(rank_ == root ? size_t(size_) : 0), offsets;
    if (auto r =
            check(MPI_Gather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, MPI_COMM_WORLD),
                  "MPI_Gather");
        !r)
      return r;
    std::vector<unsigned char> scratch;
    std::vector<unsigned char>& dst = out ? *out : scratch;
    if (rank_ == root) {
      offsets.resize(size_t(size_));
      size_t total = 0;
      for (int32_t r = 0; r < size_; ++r) {
        offsets[size_t(r)] = int(total);
        total += size_t(sizes[size_t(r)]);
      }
      dst.resize(total);
    }
    return check(MPI_Gatherv(data, mine, MPI_BYTE, dst.data(), sizes.data(), offsets.data(),
                             MPI_BYTE, root, MPI_COMM_WORLD),
                 "MPI_Gatherv");
  }

  // A rank waiting for the root (the next step, while rank 0 samples, or an idle server) polls a
  // non-blocking broadcast of the size and sleeps between polls instead of spinning in MPI_Bcast,
  // which would take a core from the forward pass on the same host. The payload follows at once.
  result<void> broadcast(std::vector<unsigned char>& data, int32_t root) override {
    uint64_t n = data.size();
    // Non-blocking on every rank: a blocking and a non-blocking collective do not match in MPI.
    MPI_Request req;
    if (auto r = check(MPI_Ibcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD, &req), "MPI_Ibcast");
        !r)
      return r;
    if (rank_ == root) {
      if (auto r = check(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait"); !r) return r;
    } else {
      const auto start = std::chrono::steady_clock::now();
      for (int done = 0;;) {
        if (auto r = check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test"); !r) return r;
        if (done) break;
        // Spin 200 us (the next step is usually that close), then sleep 100 us between polls for
        // 10 ms, then 1 ms (an idle server).
        const auto waited = std::chrono::steady_clock::now() - start;
        if (waited > std::chrono::milliseconds(10))
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        else if (waited > std::chrono::microseconds(200))
          std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    if (rank_ != root) data.resize(size_t(n));
    if (n == 0) return {};
    return check(MPI_Bcast(data.data(), int(n), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }

 private:
  result<void> check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return {};
    g_mpi_failed.store(true);
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return make_error(k_executor_fatal,
                      std::string("tensor parallel rank ") + std::to_string(rank_) + ": " + what +
                          " failed (" + std::string(text, size_t(len)) + "): a peer rank is gone");
  }

  int32_t rank_, size_;
};

}  // namespace

bool mpi_available() noexcept { return true; }

result<std::unique_ptr<communicator>> make_mpi_communicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      return make_error("unavailable", "MPI_Init_thread failed");
    if (provided < MPI_THREAD_SERIALIZED)
      return make_error("unavailable",
                        "the MPI library does not allow calls from a thread other than main "
                        "(MPI_THREAD_SERIALIZED)");
    std::atexit(finalize_at_exit);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<communicator>(new mpi_communicator(rank, size));
}

#else

bool mpi_available() noexcept { return false; }

result<std::unique_ptr<communicator>> make_mpi_communicator() {
  return make_error("unavailable",
                    "this build has no MPI (install an MPI, e.g. Debian's libopenmpi-dev, and "
                    "reconfigure)");
}

#endif

}  // namespace coserve
