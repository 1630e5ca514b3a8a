/*************************************************************************
 * cuda-ipc with ranks in two processes (issue 34, item 4): each rank maps
 * the other's workspace with cudaIpcOpenMemHandle, so destroy is
 * collective -- each rank closes its mapping, the ranks agree through the
 * communicator, then each frees its own workspace -- and an abort keeps
 * the workspace for the process's life (a peer may still map it).
 *
 * The test re-executes this binary twice, one process per rank and GPU
 * (IpcRank.Body, which runs only with DCP_IPC_RANK set), NCCL's unique id
 * passed in a file. Each rank:
 *  1. create, a call checked against the reference, destroy: destroy
 *     succeeds and nothing is kept;
 *  2. create again; rank 0 aborts, rank 1 destroys: rank 1's agreement
 *     times out after timeoutMs (ncclRemoteError naming what stays
 *     allocated), both keep their workspace (counted), neither hangs; both
 *     then abort the communicator.
 * Skips (fails under NCCL_DCP_REQUIRE_GPU >= 2) with fewer than 2 GPUs.
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "device_problem.h"
#include "env.h"
#include "ipc_lifetime.h"
#include "test_util.h"
#include "validate.h"

extern char** environ;

namespace nccl_dcp {
namespace test {
namespace {

constexpr int kRanks = 2;
constexpr int kTimeoutMs = 2000;

ncclDcpConfig_t rankConfig() {
  ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBase2, 16);
  c.timeoutMs = kTimeoutMs;
  return c;
}

// The file a rank's process writes once its body ran to the end: a
// filter that matches no test also exits 0.
std::string ranMarker(const std::string& idFile, int rank) { return idFile + ".ran." + std::to_string(rank); }

// One rank's process. Failures are gtest failures of this process: its
// exit status tells the parent.
TEST(IpcRank, Body) {
  const char* rankVar = getenv("DCP_IPC_RANK");
  if (rankVar == nullptr) GTEST_SKIP() << "runs in a rank's process only (IpcProcesses starts it)";
  const int rank = atoi(rankVar);
  ncclUniqueId id;
  {
    std::ifstream in(getenv("DCP_IPC_ID"), std::ios::binary);
    ASSERT_TRUE(in.read(id.internal, sizeof(id.internal))) << "no unique id";
  }
  const uint64_t seed = strtoull(getenv("DCP_IPC_SEED"), nullptr, 10);
  CUDA_ASSERT(cudaSetDevice(rank));
  ncclComm_t comm = nullptr;
  NCCL_TEST_ASSERT(ncclCommInitRank(&comm, kRanks, id, rank));
  Env e;
  e.provider = ncclDcpProviderCudaIpc;
  setEnvForTesting(&e);
  const ncclDcpConfig_t c = rankConfig();
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, env(), &cfg), ncclSuccess);

  // 1. Create, call, destroy: the agreement holds, nothing is kept.
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm, &c, &ctx));
  ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
  DCP_ASSERT(ncclDcpGetTopology(ctx, &t));
  ASSERT_EQ(t.provider, ncclDcpProviderCudaIpc);
  {
    DeviceProblem p(cfg, kRanks, 2 * cfg.maxBatch + 3, LseMix::Special, seed, {0, 1});
    const CallBuffers b = p.buffers(rank);
    DCP_ASSERT(ncclDcpA2aLseReduce(ctx, b.partialOut, (const float*)b.partialLse, b.out, b.outLse,
                                   2 * cfg.maxBatch + 3, nullptr, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    ncclResult_t async = ncclInternalError;
    DCP_ASSERT(ncclDcpGetAsyncError(ctx, &async));
    EXPECT_EQ(async, ncclSuccess);
    const Mismatch m = p.check(rank);
    EXPECT_EQ(m.count, 0u) << m.first;
  }
  CUDA_ASSERT(cudaSetDevice(rank));
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
  EXPECT_EQ(workspacesKeptForProcessLife(nullptr), 0u) << "destroy kept a workspace after the peers agreed";

  // 2. Rank 0 aborts, rank 1 destroys: no free on either side, no hang.
  DCP_ASSERT(ncclDcpContextCreate(comm, &c, &ctx));
  const auto t0 = std::chrono::steady_clock::now();
  if (rank == 0) {
    DCP_ASSERT(ncclDcpContextAbort(ctx));
  } else {
    EXPECT_EQ(ncclDcpContextDestroy(ctx), ncclRemoteError);
    const std::string msg = ncclDcpGetLastError();
    EXPECT_NE(msg.find("stays allocated for the process's life"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ncclCommAbort"), std::string::npos) << msg;
  }
  EXPECT_LT(secondsSince(t0), kTimeoutMs / 1000.0 + 5.0);
  size_t bytes = 0;
  EXPECT_EQ(workspacesKeptForProcessLife(&bytes), 1u) << "a workspace a peer in another process maps was freed";
  size_t need = 0;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, kRanks, &need));
  EXPECT_GT(bytes, 0u);
  EXPECT_LE(bytes, need);
  NCCL_TEST_ASSERT(ncclCommAbort(comm));  // rank 1's all-gather is stuck on it
  setEnvForTesting(nullptr);
  std::ofstream(ranMarker(getenv("DCP_IPC_ID"), rank)) << "ran\n";  // the parent checks that this body ran
}

// The parent: one process per rank, each bounded.
TEST(IpcProcesses, DestroyAgreesAcrossProcessesAndAbortKeepsTheWorkspace) {
  if (getenv("DCP_IPC_RANK")) GTEST_SKIP() << "a rank's process";
  DCP_REQUIRE_GPUS(kRanks);
  ncclUniqueId id;
  NCCL_TEST_ASSERT(ncclGetUniqueId(&id));
  const std::string idFile = testing::TempDir() + "dcp-ipc-id-" + std::to_string(getpid());
  {
    std::ofstream out(idFile, std::ios::binary);
    out.write(id.internal, sizeof(id.internal));
  }
  const std::string seed = std::to_string(freshSeed());
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; r++) {
    std::vector<std::string> env;
    for (char** e = environ; *e; e++) env.push_back(*e);
    env.push_back("DCP_IPC_RANK=" + std::to_string(r));
    env.push_back("DCP_IPC_ID=" + idFile);
    env.push_back("DCP_IPC_SEED=" + seed);
    std::vector<char*> envp;
    for (std::string& s : env) envp.push_back(&s[0]);
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe", filter = "--gtest_filter=IpcRank.Body";
    char* argv[] = {&self[0], &filter[0], nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
    pids.push_back(pid);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < kRanks; r++) {
    int status = 0;
    pid_t got = 0;
    while ((got = waitpid(pids[r], &status, WNOHANG)) == 0 && secondsSince(t0) < 180)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (got == 0) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &status, 0);
      ADD_FAILURE() << "rank " << r << "'s process did not finish within 180 s: a rank hangs";
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << "'s process failed (status " << status << "; its output is above)";
    EXPECT_EQ(access(ranMarker(idFile, r).c_str(), F_OK), 0)
        << "rank " << r << "'s process exited without running its body (--gtest_filter=IpcRank.Body matched no test?)";
    unlink(ranMarker(idFile, r).c_str());
  }
  unlink(idFile.c_str());
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
