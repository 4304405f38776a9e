// `coserve serve` under mpirun/srun (multi-process tensor parallelism, docs/distributed.md):
// joining the MPI job, the per-host demo model, the ranks other than 0, and ending rank 0 when its
// engine fails (the other ranks cannot be served anything after that).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "actors/engine.hpp"
#include "model/communicator.hpp"

namespace coserve::cli {

struct mpi_job {
  std::shared_ptr<communicator> world;  // null: not started as MPI ranks
  int exit_code = 0;                    // non-zero: leave with it (the reason is logged)
};
// Joins the job when this process was started as one of several MPI ranks (or with
// --tensor-parallel-size under a launcher): the rank count must equal the size, the device cpu or
// cuda.
mpi_job join_mpi_job(int32_t tensor_parallel_size, const std::string& device);

// Whether this process writes the demo model: always outside a job; in one, the first rank of each
// host (the others wait at mpi_startup_barrier).
bool writes_demo_model(const communicator* world);
// Every rank waits here until all have arrived (rank 0 last to be waited on).
bool mpi_startup_barrier(communicator& world);

// A rank other than 0: loads its shard and runs every step rank 0 broadcasts (on the CPU, or with
// --device cuda on its GPU); the exit status.
int serve_tp_rank(const std::filesystem::path& model_dir, int32_t cpu_threads,
                  const std::string& device, communicator& world);

// Rank 0: exits the process (status 1) when the engine fails while no signal was seen, once the
// failed requests' errors had half a second to reach their clients.
class engine_failure_exit {
 public:
  engine_failure_exit(engine& e, const std::atomic<int>& signals_seen);
  ~engine_failure_exit();
  engine_failure_exit(const engine_failure_exit&) = delete;
  engine_failure_exit& operator=(const engine_failure_exit&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace coserve::cli
