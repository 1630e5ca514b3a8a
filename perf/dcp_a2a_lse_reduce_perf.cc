/*************************************************************************
 * dcp_a2a_lse_reduce_perf: the fused collective against NCCL's path (an
 * all-to-all of the partials + a combine kernel) and against the floors of
 * the hardware, on the same data, in the same run, nccl-tests style.
 *
 *   real ranks: processes (mpirun, built with -Dmpi) x threads (-t) x GPUs
 *               per thread (-g), one NCCL communicator over all of them
 *   loopback:   --virtual-ranks N on one GPU (one cooperative launch)
 *
 * main checks what needs no GPU first (sizes, config, -J: a refusal exits
 * 2 before any CUDA call), then places the ranks and starts the threads;
 * the sweep (sweep.cc) runs over the hooks of the mode (loopback_mode.cc,
 * rank_mode.cc).
 ************************************************************************/
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "env.h"
#include "harness.h"
#include "inputs.h"
#include "mode.h"
#include "sweep.h"
#include "team.h"

using namespace nccl_dcp;
using namespace nccl_dcp::perf;

namespace {

// The config checkBeforeGpu admitted (a failure here would be a bug).
Config resolvedConfig(const Args& a) {
  const ncclDcpConfig_t c = configOf(a);
  Config cfg;
  NCCL_OR_DIE(resolveConfig(&c, Env(), &cfg));
  return cfg;
}

// a: its sizes resolved to rows (checkBeforeGpu).
int runLoopback(const Args& a, const ProcessGroup& g) {
  Inputs inputs(resolvedConfig(a), a.virtualRanks, std::max<int64_t>(a.maxRows, 1));
  Team team(g, 1);
  std::unique_ptr<Mode> mode = makeLoopbackMode(a, inputs);
  return runSweep(a, team, 0, *mode);
}

// Every process checks that its GPUs exist; one that lacks them ends the
// run (the others would wait for it in NCCL's init).
Placement placeRanks(const Args& a, const ProcessGroup& g, int nDevices) {
  Placement p;
  p.processes = g.processes;
  p.process = g.process;
  p.localProcess = g.localProcess;
  p.threads = a.threads;
  p.gpusPerThread = a.gpusPerThread;
  const int last = p.deviceOf(a.threads - 1, a.gpusPerThread - 1);
  if (last >= nDevices) {
    fprintf(stderr, "nccl-dcp perf: process %d (number %d on its node) needs GPUs %d..%d for -t %d x -g %d, but "
            "this node has %d\n", g.process, g.localProcess, p.deviceOf(0, 0), last, a.threads, a.gpusPerThread,
            nDevices);
    abortRun(kExitBadArgs);
  }
  return p;
}

// Thread 0 runs on the main thread (the one MPI may be called from).
int runRanks(const Args& a, const ProcessGroup& g, int nDevices) {
  const Placement p = placeRanks(a, g, nDevices);
  Inputs inputs(resolvedConfig(a), p.nRanks(), std::max<int64_t>(a.maxRows, 1));
  Team team(g, a.threads);
  std::vector<int> rc(a.threads, kExitOk);
  auto body = [&](int t) {
    std::unique_ptr<Mode> mode = makeRankMode(a, p, t, team, inputs);
    rc[t] = runSweep(a, team, t, *mode);
  };
  std::vector<std::thread> others;
  for (int t = 1; t < a.threads; t++) others.emplace_back(body, t);
  body(0);
  for (std::thread& th : others) th.join();
  return rc[0];
}

int run(int argc, char** argv, const ProcessGroup& g) {
  const bool printer = g.process == 0;
  Args a;
  std::string error;
  switch (parseArgs(argc, argv, &a, &error)) {
    case ParseResult::Help:
      if (printer) printf("%s", usage(argv[0]).c_str());
      return kExitOk;
    case ParseResult::Version: {
      int dcp = 0, nccl = 0;  // neither call needs a GPU
      ncclDcpGetVersion(&dcp);
      ncclGetVersion(&nccl);
      if (printer) printf("%s", versionText(dcp, nccl).c_str());
      return kExitOk;
    }
    case ParseResult::Error:
      if (printer) fprintf(stderr, "%s: %s (--help lists the options)\n", argv[0], error.c_str());
      return kExitBadArgs;
    case ParseResult::Ok: break;
  }
  // Before the library's first call: it reads its environment once.
  if (!a.provider.empty()) setenv("NCCL_DCP_PROVIDER", a.provider.c_str(), 1);
  if (a.timeoutS >= 0) setenv("NCCL_DCP_TIMEOUT_MS", std::to_string(a.timeoutS * 1000LL).c_str(), 1);
  if (a.virtualRanks > 0 && g.processes > 1) {
    if (printer)
      fprintf(stderr, "%s: --virtual-ranks runs every virtual rank in one process: launch it without mpirun\n",
              argv[0]);
    return kExitBadArgs;
  }
  // Everything that needs no GPU, before the first CUDA call: the sizes
  // at the run's rank count, the config, and (process 0, where nccl-tests
  // opens its file at the start) that -J can be written; every process
  // learns process 0's answer about -J.
  if (!checkBeforeGpu(&a, ranksBeforeGpu(a, g.processes), false, &error)) {
    if (printer) fprintf(stderr, "%s: %s\n", argv[0], error.c_str());
    return kExitBadArgs;
  }
  int64_t badJson = printer && !a.json.empty() && !probeOutputFile(a.json, &error) ? 1 : 0;
  if (g.processes > 1) {
    Team agree(g, 1);
    badJson = agree.sum(0, badJson);
  }
  if (badJson) {
    if (printer) fprintf(stderr, "%s: %s\n", argv[0], error.c_str());
    return kExitBadArgs;
  }
  int nDevices = 0;  // left unwritten without a driver
  const cudaError_t e = cudaGetDeviceCount(&nDevices);
  if (e != cudaSuccess || nDevices == 0) {
    if (printer)
      fprintf(stderr, "%s: no CUDA GPU found (cudaGetDeviceCount: %s); nothing to measure\n", argv[0],
              e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return kExitNoGpu;
  }
  return a.virtualRanks > 0 ? runLoopback(a, g) : runRanks(a, g, nDevices);
}

}  // namespace

int main(int argc, char** argv) {
  ProcessGroup g;
  std::string error;
  if (!startProcesses(&argc, &argv, &g, &error)) {
    fprintf(stderr, "%s: %s\n", argv[0], error.c_str());
    return kExitBadArgs;
  }
  const int rc = run(argc, argv, g);
  stopProcesses();
  return rc;
}
