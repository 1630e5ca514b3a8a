/*************************************************************************
 * NCCL_DCP_* variables of the process environment take effect where the
 * library resolves a config: ncclDcpWorkspaceSize, loopback and context
 * create. The library reads the environment once, at its first use, so
 * this binary sets the variables before any library call (a gtest global
 * environment) and every test here sees them. The checks that need no GPU
 * run without one.
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <memory>

#include "context.h"
#include "handles.h"
#include "loopback.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

constexpr int kEnvMaxBatch = 6, kEnvSimpleMinRows = 4;

class ProcessEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    setenv("NCCL_DCP_PROTO", "LL", 1);
    setenv("NCCL_DCP_MAX_BATCH", std::to_string(kEnvMaxBatch).c_str(), 1);
    setenv("NCCL_DCP_TIMEOUT_MS", "0", 1);
    setenv("NCCL_DCP_PDL", "0", 1);
    setenv("NCCL_DCP_SIMPLE_MIN_ROWS", std::to_string(kEnvSimpleMinRows).c_str(), 1);
  }
};

testing::Environment* const kProcessEnvironment = testing::AddGlobalTestEnvironment(new ProcessEnvironment);

// A config that leaves protocol, maxBatch and timeoutMs to the environment.
ncclDcpConfig_t configLeavingDefaults() {
  ncclDcpConfig_t c = NCCL_DCP_CONFIG_INITIALIZER;
  c.headDim = 128;
  c.localHeads = 4;
  c.dtype = ncclBfloat16;
  c.lseBase = ncclDcpLseBase2;
  return c;
}

TEST(EnvironmentAtCreate, ReadIntoTheLibrarysEnv) {
  const Env& e = env();
  EXPECT_EQ(e.protocol, ncclDcpProtoLL);
  EXPECT_EQ(e.maxBatch, kEnvMaxBatch);
  EXPECT_EQ(e.timeoutMs, 0);
  EXPECT_EQ(e.pdl, 0);
  EXPECT_EQ(e.simpleMinRows, kEnvSimpleMinRows);
}

TEST(EnvironmentAtCreate, WorkspaceSizeFollowsIt) {
  ncclDcpConfig_t c = configLeavingDefaults();
  size_t bytes = 0;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, 4, &bytes));
  EXPECT_EQ(bytes, makeWorkspaceLayout(Proto::LL, false, 4, 4, 128, 2, kEnvMaxBatch).totalBytes)
      << "NCCL_DCP_PROTO=LL and NCCL_DCP_MAX_BATCH=" << kEnvMaxBatch << " not applied";
  // Values in the config win over the environment (SIMPLE: its layout alone).
  c.protocol = ncclDcpProtoSimple;
  c.maxBatch = 64;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, 4, &bytes));
  EXPECT_EQ(bytes, makeWorkspaceLayout(Proto::Simple, false, 4, 4, 128, 2, 64).totalBytes);
}

// Loopback takes the same path through the environment: AUTO (asked for
// in the config) adds SIMPLE for rounds of NCCL_DCP_SIMPLE_MIN_ROWS rows,
// and PDL is off.
TEST(EnvironmentAtCreate, LoopbackCreatedUnderIt) {
  DCP_REQUIRE_GPUS(1);
  ncclDcpConfig_t c = configLeavingDefaults();
  c.protocol = ncclDcpProtoAuto;
  std::unique_ptr<Loopback> lb;
  DCP_ASSERT(Loopback::create(&c, 2, &lb));
  EXPECT_EQ(lb->config().maxBatch, kEnvMaxBatch);
  EXPECT_EQ(lb->config().timeoutMs, 0);
  EXPECT_FALSE(lb->engine().pdl) << "NCCL_DCP_PDL=0 not applied";
  EXPECT_TRUE(lb->engine().policy.simpleForLarge) << "NCCL_DCP_SIMPLE_MIN_ROWS not applied";
  EXPECT_EQ(lb->engine().policy.simpleMinRows, kEnvSimpleMinRows);
}

// A context on a one-rank communicator: protocol, capacity (calls chunk at
// NCCL_DCP_MAX_BATCH rows), timeout and PDL come from the environment.
TEST(EnvironmentAtCreate, ContextCreatedUnderIt) {
  DCP_REQUIRE_GPUS(1);
  CUDA_ASSERT(cudaSetDevice(0));
  ncclComm_t comm = nullptr;
  int dev = 0;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, &dev), ncclSuccess);
  const ncclDcpConfig_t c = configLeavingDefaults();
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm, &c, &ctx));
  ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
  DCP_ASSERT(ncclDcpGetTopology(ctx, &t));
  EXPECT_EQ(t.protocol, ncclDcpProtoLL) << "NCCL_DCP_PROTO=LL not applied";
  const Context* inside = contextOf(ctx);
  ASSERT_NE(inside, nullptr);
  EXPECT_EQ(inside->engine.cfg.maxBatch, kEnvMaxBatch);
  EXPECT_EQ(inside->engine.cfg.timeoutMs, 0);
  EXPECT_FALSE(inside->engine.pdl);
  // 14 rows at 6 per round: 3 rounds, all of them run.
  const int batch = 14;
  DeviceBuffer in((size_t)batch * 4 * 128 * 2), lse((size_t)batch * 4 * 4), out((size_t)batch * 4 * 128 * 2);
  CUDA_ASSERT(cudaMemset(in.ptr, 0, in.bytes));
  CUDA_ASSERT(cudaMemset(lse.ptr, 0, lse.bytes));
  DCP_ASSERT(ncclDcpA2aLseReduce(ctx, in.ptr, lse.as<float>(), out.ptr, nullptr, batch, nullptr, nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  ncclResult_t async = ncclInternalError;
  DCP_ASSERT(ncclDcpGetAsyncError(ctx, &async));
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(inside->stats.rounds, 3u);
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
  ncclCommDestroy(comm);
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
