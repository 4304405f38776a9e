// The collectives tensor parallelism needs, behind one small interface with a backend per
// transport:
//   - in-process (make_local_group): ranks are threads of one process sharing memory; a
//     collective is a barrier, a read of every rank's buffer and a copy out;
//   - MPI (make_mpi_communicator, builds with COSERVE_HAVE_MPI): ranks are processes started by
//     mpirun or srun; MPI_Allreduce, MPI_Gatherv and MPI_Bcast on MPI_COMM_WORLD.
// Every rank of a group calls the same collectives in the same order (each is a rendezvous);
// one thread per rank calls them. A failed collective (a peer process gone) returns an error with
// code k_executor_fatal: the group is unusable afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace coserve {

class communicator {
 public:
  virtual ~communicator() = default;
  virtual int32_t rank() const noexcept = 0;
  virtual int32_t size() const noexcept = 0;
  virtual std::string backend() const = 0;  // "local" or "mpi"

  // data[0, n) = the element-wise sum over ranks, on every rank. The local backend sums in rank
  // order (rank 0 + rank 1 + ...); MPI in its allreduce algorithm's order.
  virtual result<void> all_reduce_sum(float* data, size_t n) = 0;
  // Root receives every rank's `bytes` bytes (sizes may differ per rank), concatenated in rank
  // order, into *out; other ranks pass out == nullptr.
  virtual result<void> gather(const void* data, size_t bytes, std::vector<unsigned char>* out,
                              int32_t root) = 0;
  // Root's `data` (any size) replaces `data` on every other rank.
  virtual result<void> broadcast(std::vector<unsigned char>& data, int32_t root) = 0;
  // This rank cannot go on (an exception in its forward pass): every rank's pending and later
  // collectives fail with k_executor_fatal naming `why`, instead of waiting for it. In-process
  // groups only; an MPI rank that fails exits, and mpirun ends the job.
  virtual void abort(const std::string& why) { (void)why; }
};

// `size` communicators (rank i at index i) of one in-process group; each goes to one thread.
std::vector<std::unique_ptr<communicator>> make_local_group(int32_t size);

// The process's place in an MPI job started by mpirun/srun: whether this process was started as
// one of several MPI ranks (OMPI_COMM_WORLD_SIZE, PMIX or PMI environment), and which.
struct mpi_launch {
  bool launched = false;
  int32_t rank = 0;
  int32_t size = 1;
};
mpi_launch detect_mpi_launch();

// MPI_Init_thread (MPI_THREAD_SERIALIZED: collectives run on an executor thread, one at a time)
// and a communicator over MPI_COMM_WORLD with errors returned rather than aborting. Errors: this
// build has no MPI, or MPI did not initialize. MPI_Finalize runs at process exit.
result<std::unique_ptr<communicator>> make_mpi_communicator();
// Whether this build has the MPI backend.
bool mpi_available() noexcept;

}  // namespace coserve
