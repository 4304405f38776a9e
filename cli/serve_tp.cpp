#include "cli/serve_tp.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "model/cpu_executor.hpp"

namespace coserve::cli {

mpi_job join_mpi_job(int32_t tensor_parallel_size, const std::string& device) {
  mpi_job job;
  const mpi_launch launch = detect_mpi_launch();
  if (!launch.launched || (launch.size <= 1 && tensor_parallel_size <= 1)) return job;
  if (launch.size != tensor_parallel_size) {
    std::fprintf(
        stderr,
        "coserve serve: rank %d: started as %d MPI ranks, and --tensor-parallel-size is %d: start "
        "one rank per shard (mpirun -np N ... --tensor-parallel-size N)\n",
        launch.rank, launch.size, tensor_parallel_size);
    job.exit_code = 2;
    return job;
  }
  if (device != "cpu" && device != "cuda") {
    std::fprintf(
        stderr,
        "coserve serve: --tensor-parallel-size under mpirun runs on --device cpu or cuda\n");
    job.exit_code = 2;
    return job;
  }
  auto made = make_mpi_communicator();
  if (!made) {
    std::fprintf(stderr, "coserve serve: rank %d: %s\n", launch.rank, made.err().message.c_str());
    job.exit_code = 1;
    return job;
  }
  job.world = std::move(*made);
  return job;
}

bool writes_demo_model(const communicator* world) {
  const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return !world || !local_rank || std::string_view(local_rank) == "0";
}

bool mpi_startup_barrier(communicator& world) {
  std::vector<unsigned char> none;
  return world.gather(nullptr, 0, nullptr, 0).ok() && world.broadcast(none, 0).ok();
}

int serve_tp_rank(const std::filesystem::path& model_dir, int32_t cpu_threads,
                  const std::string& device, communicator& world) {
  // Rank 0 decides when the job ends: a signal mpirun forwards to every rank starts rank 0's drain,
  // after which its stop message ends this loop (mpirun's SIGKILL, after odls_base_sigkill_timeout,
  // still ends a rank that would not).
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  std::fprintf(stderr, "coserve rank %d/%d: loading %s\n", world.rank(), world.size(),
               model_dir.string().c_str());
  std::fflush(stderr);
  result<void> r;
  try {
    // --device cuda: this rank's GPU is its local rank on the host (gpu/tp_peer.hpp).
    r = device == "cuda" ? run_cuda_tp_rank(model_dir, world)
                         : run_tp_rank(model_dir.string(), world, cpu_threads);
  } catch (const std::exception& e) {
    // Rank 0 is inside a collective of this step: leaving ends the job (mpirun stops every rank).
    std::fprintf(stderr, "coserve rank %d: forward pass failed: %s; exiting\n", world.rank(),
                 e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
  if (!r) {
    std::fprintf(stderr, "coserve rank %d: %s\n", world.rank(), r.err().message.c_str());
    std::fflush(stderr);
    // After a lost peer, MPI_Finalize would wait on it: leave at once.
    if (r.err().code == k_executor_fatal) std::_Exit(1);
    return 1;
  }
  std::fprintf(stderr, "coserve rank %d: rank 0 stopped; bye\n", world.rank());
  return 0;
}

engine_failure_exit::engine_failure_exit(engine& e, const std::atomic<int>& signals_seen)
    : thread_([this, &e, &signals_seen] {
        while (!stop_.load()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          // Not healthy without a signal: the engine failed (a lost rank, failed steps).
          if (e.healthy() || signals_seen.load() > 0 || stop_.load()) continue;
          std::fprintf(stderr, "[serve] tensor parallel: %s; exiting\n",
                       e.unhealthy_reason().c_str());
          std::fflush(stderr);
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          std::_Exit(1);
        }
      }) {}

engine_failure_exit::~engine_failure_exit() {
  stop_.store(true);
  thread_.join();
}

}  // namespace coserve::cli
