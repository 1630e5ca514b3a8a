/*************************************************************************
 * The ranks of one perf run, as nccl-tests sees them: threads (-t) in
 * each process, processes under mpirun (built with -Dmpi). One barrier and
 * one all-gather serve both: the threads of a process meet in shared
 * memory, then thread 0 speaks MPI for the process. Everything the sweep
 * exchanges (timings, wrong counts, the NCCL unique id, the ranks' header
 * lines, the exit code) goes through here. Not on any timed path.
 ************************************************************************/
#ifndef NCCL_DCP_PERF_TEAM_H_
#define NCCL_DCP_PERF_TEAM_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "harness.h"

namespace nccl_dcp {
namespace perf {

// The process's place among the MPI processes (processes = 1 without MPI).
struct ProcessGroup {
  int processes = 1, process = 0, localProcess = 0;
};

// Started under mpirun (an MPI launcher's environment) and built with MPI:
// MPI_Init, then this process's place. Otherwise one process, no MPI call.
// *error says why MPI could not start (the result is then one process).
bool startProcesses(int* argc, char*** argv, ProcessGroup* group, std::string* error);
void stopProcesses();
// Ends every process of the run at once (a failed call must not leave the
// others waiting in a collective): MPI_Abort under MPI, else _Exit.
[[noreturn]] void abortRun(int code);
// True when this binary was built with MPI.
bool builtWithMpi();

class Team {
 public:
  Team(const ProcessGroup& g, int threads);

  int threads() const { return threads_; }
  const ProcessGroup& group() const { return group_; }
  // Thread 0 of process 0 prints the table and writes the JSON.
  bool leader(int thread) const { return group_.process == 0 && thread == 0; }

  // Every thread of every process.
  void barrier(int thread);
  // Each thread contributes `bytes` (the same on every thread); `all` gets
  // every thread's bytes, process by process, thread by thread (rank order).
  void allGather(int thread, const void* mine, size_t bytes, void* all);
  // Thread 0 of process 0's bytes to everyone.
  void broadcast(int thread, void* data, size_t bytes);

  std::vector<double> allGather(int thread, const std::vector<double>& mine);
  int64_t sum(int thread, int64_t mine);
  int64_t max(int thread, int64_t mine);

 private:
  void threadBarrier();
  // Thread 0: the process's block, gathered across processes.
  void processAllGather(const void* block, size_t bytes, void* all);

  ProcessGroup group_;
  int threads_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
  std::vector<char> block_, all_;  // this process's threads' bytes; every process's
};

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_TEAM_H_
