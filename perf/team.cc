#include "team.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if NCCL_DCP_PERF_MPI
#include <mpi.h>
#endif

namespace nccl_dcp {
namespace perf {

namespace {

bool mpiActive = false;

// The world size an MPI launcher announces in the environment (Open MPI,
// MPICH / Hydra, PMIx, MVAPICH); 0 when not started by one.
int launcherWorldSize() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE"})
    if (const char* s = getenv(v)) return atoi(s);
  return getenv("PMIX_RANK") ? 1 : 0;
}

}  // namespace

bool builtWithMpi() { return NCCL_DCP_PERF_MPI != 0; }

#if NCCL_DCP_PERF_MPI

bool startProcesses(int* argc, char*** argv, ProcessGroup* g, std::string* error) {
  *g = ProcessGroup{};
  if (launcherWorldSize() == 0) return true;  // not under mpirun: one process, no MPI at all
  // Only thread 0 of each process calls MPI, and it runs on the main thread.
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    *error = "MPI_Init_thread failed";
    return false;
  }
  mpiActive = true;
  MPI_Comm_size(MPI_COMM_WORLD, &g->processes);
  MPI_Comm_rank(MPI_COMM_WORLD, &g->process);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g->process, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &g->localProcess);
  MPI_Comm_free(&node);
  return true;
}

void stopProcesses() {
  if (mpiActive) MPI_Finalize();
  mpiActive = false;
}

[[noreturn]] void abortRun(int code) {
  fflush(stdout);
  fflush(stderr);
  if (mpiActive) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void Team::processAllGather(const void* block, size_t bytes, void* all) {
  if (group_.processes == 1) {
    memcpy(all, block, bytes);
    return;
  }
  if (MPI_Allgather(block, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD) != MPI_SUCCESS) {
    fprintf(stderr, "nccl-dcp perf: MPI_Allgather of %zu bytes failed\n", bytes);
    abortRun(kExitFailed);
  }
}

#else  // built without MPI

bool startProcesses(int*, char***, ProcessGroup* g, std::string* error) {
  *g = ProcessGroup{};
  if (launcherWorldSize() > 1) {
    *error = "started by an MPI launcher with " + std::to_string(launcherWorldSize()) +
             " processes, but built without MPI: each would run alone (reconfigure with meson -Dmpi=enabled)";
    return false;
  }
  return true;
}

void stopProcesses() {}

[[noreturn]] void abortRun(int code) {
  fflush(stdout);
  fflush(stderr);
  std::_Exit(code);
}

void Team::processAllGather(const void* block, size_t bytes, void* all) { memcpy(all, block, bytes); }

#endif

Team::Team(const ProcessGroup& g, int threads) : group_(g), threads_(threads) {}

void Team::threadBarrier() {
  std::unique_lock<std::mutex> l(mutex_);
  const uint64_t gen = generation_;
  if (++waiting_ == threads_) {
    waiting_ = 0;
    generation_++;
    cv_.notify_all();
  } else {
    cv_.wait(l, [&] { return gen != generation_; });
  }
}

void Team::barrier(int thread) {
  if (group_.processes == 1) return threadBarrier();
  char none = 0;
  std::vector<char> sink((size_t)group_.processes * threads_);
  allGather(thread, &none, 1, sink.data());
}

void Team::allGather(int thread, const void* mine, size_t bytes, void* all) {
  const size_t processBytes = (size_t)threads_ * bytes;
  {
    std::lock_guard<std::mutex> l(mutex_);
    if (block_.size() < processBytes) block_.resize(processBytes);
    memcpy(block_.data() + (size_t)thread * bytes, mine, bytes);
  }
  threadBarrier();
  if (thread == 0) {
    all_.resize(processBytes * group_.processes);
    processAllGather(block_.data(), processBytes, all_.data());
  }
  threadBarrier();
  memcpy(all, all_.data(), all_.size());
  threadBarrier();  // block_ and all_ are free again
}

void Team::broadcast(int thread, void* data, size_t bytes) {
  std::vector<char> all((size_t)group_.processes * threads_ * bytes);
  allGather(thread, data, bytes, all.data());
  memcpy(data, all.data(), bytes);
}

std::vector<double> Team::allGather(int thread, const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * threads_ * group_.processes);
  allGather(thread, mine.data(), mine.size() * sizeof(double), all.data());
  return all;
}

int64_t Team::sum(int thread, int64_t mine) {
  std::vector<int64_t> all((size_t)threads_ * group_.processes);
  allGather(thread, &mine, sizeof(mine), all.data());
  int64_t s = 0;
  for (int64_t v : all) s += v;
  return s;
}

int64_t Team::max(int thread, int64_t mine) {
  std::vector<int64_t> all((size_t)threads_ * group_.processes);
  allGather(thread, &mine, sizeof(mine), all.data());
  int64_t m = all[0];
  for (int64_t v : all) m = v > m ? v : m;
  return m;
}

}  // namespace perf
}  // namespace nccl_dcp
