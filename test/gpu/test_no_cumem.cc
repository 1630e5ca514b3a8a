/*************************************************************************
 * The process a vLLM user runs: NCCL_CUMEM_ENABLE=0 (vllm/env_override.py
 * sets it on every single-node machine), so NCCL has no symmetric memory.
 * The context must land on the cuda-ipc provider (the fused path on
 * memory of our own), say so once at the default log level, and compute
 * what the reference computes. NCCL reads the variable once per process,
 * so this binary sets it (and the log file) before its first NCCL call.
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <fstream>
#include <unistd.h>
#include <string>

#include "device_problem.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

std::string logPath() { return "/tmp/nccl-dcp-no-cumem-" + std::to_string(getpid()) + ".log"; }

class NoCumemEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    setenv("NCCL_CUMEM_ENABLE", "0", 1);
    setenv("NCCL_DCP_DEBUG_FILE", logPath().c_str(), 1);
    unsetenv("NCCL_DCP_DEBUG");  // the default level: WARN must still show
    unsetenv("NCCL_DCP_PROVIDER");
    unsetenv("NCCL_DCP_FORCE_FALLBACK");
  }
  void TearDown() override { remove(logPath().c_str()); }
};

testing::Environment* const kNoCumem = testing::AddGlobalTestEnvironment(new NoCumemEnvironment);

class NoCumem : public OneRankComm {};

TEST_F(NoCumem, ContextLandsOnCudaIpcAndSaysSoOnce) {
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 16);
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
  ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
  DCP_ASSERT(ncclDcpGetTopology(ctx, &t));
  EXPECT_EQ(t.path, ncclDcpPathFused) << "NCCL_CUMEM_ENABLE=0 must not cost the fused path";
  EXPECT_EQ(t.provider, ncclDcpProviderCudaIpc);
  const std::string note = t.pathNote;
  EXPECT_NE(note.find("NCCL_CUMEM_ENABLE=0"), std::string::npos) << note;
  std::ifstream in(logPath());
  std::string line, log;
  size_t warns = 0;
  while (std::getline(in, line)) {
    log += line + "\n";
    warns += line.find("NCCL-DCP WARN") != std::string::npos && line.find("cuda-ipc") != std::string::npos;
  }
  EXPECT_EQ(warns, 1u) << "one WARN naming the cuda-ipc path, at the default level; log:\n" << log;
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess);
  for (int batch : {1, 16, 40}) {
    DeviceProblem p(cfg, 1, batch, LseMix::Special, freshSeed());
    const CallBuffers b = p.buffers(0);
    DCP_ASSERT(ncclDcpA2aLseReduce(ctx, b.partialOut, (const float*)b.partialLse, b.out, b.outLse, batch, nullptr, stream_));
    CUDA_ASSERT(cudaStreamSynchronize(stream_));
    const Mismatch m = p.check(0);
    EXPECT_EQ(m.count, 0u) << "batch " << batch << ": " << m.first;
  }
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
}

// nccl-window forced where NCCL has no symmetric memory: refused, with why.
TEST_F(NoCumem, ForcedNcclWindowIsRefusedNamingTheVariable) {
  Env e;
  e.provider = ncclDcpProviderNcclWindow;
  ScopedEnv env(e);
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  ncclDcpContext_t ctx = nullptr;
  EXPECT_EQ(ncclDcpContextCreate(comm_, &c, &ctx), ncclInvalidUsage);
  const std::string msg = ncclDcpGetLastError();
  EXPECT_NE(msg.find("NCCL_DCP_PROVIDER=nccl-window is not available"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NCCL_CUMEM_ENABLE=0"), std::string::npos) << msg;
  EXPECT_EQ(ctx, nullptr);
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
