/*************************************************************************
 * The collective on a real ncclComm_t, one rank on one GPU: create / call /
 * destroy through the public API, the application's window, the forced
 * fallback, graph capture, stream binding, and create/destroy cycles that
 * must not leak device memory.
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <random>
#include <vector>

#include "context.h"
#include "reference.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

#define NCCL_TEST_ASSERT(cmd)                                                              \
  do {                                                                                     \
    ncclResult_t r_ = (cmd);                                                               \
    ASSERT_EQ(r_, ncclSuccess) << #cmd << ": " << ncclGetErrorString(r_) << " "           \
                               << ncclGetLastError(nullptr);                               \
  } while (0)

// A one-rank communicator on device 0.
class OneRankContext : public testing::Test {
 protected:
  void SetUp() override {
    DCP_REQUIRE_GPUS(1);
    CUDA_ASSERT(cudaSetDevice(0));
    int dev = 0;
    NCCL_TEST_ASSERT(ncclCommInitAll(&comm_, 1, &dev));
    CUDA_ASSERT(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
    setEnvForTesting(nullptr);
  }

  // One call on fresh data: device buffers in, outputs compared with the
  // reference (cp = 1: the normalised input, or 0 / -inf for empty rows).
  void callAndCheck(ncclDcpContext_t ctx, const ncclDcpConfig_t& c, int batch, bool capture = false) {
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess) << ncclDcpGetLastError();
    const Strides s = packedStrides(cfg, 1);
    const uint64_t seed = freshSeed();
    SCOPED_TRACE(testing::Message() << "batch " << batch << " seed " << seed);
    std::mt19937_64 rng(seed);
    std::vector<RankTensors> host = makeInputs(cfg, 1, batch, s, LseMix::Special, rng);
    std::vector<RankTensors> want = host;
    CallBuffers ref = want[0].buffers();
    referenceA2aLseReduce(cfg, 1, batch, s, &ref);
    DeviceBuffer in(host[0].partialOut.size()), lse(host[0].partialLse.size() * 4), out(host[0].out.size()),
        outLse(host[0].outLse.size() * 4);
    CUDA_ASSERT(cudaMemcpy(in.ptr, host[0].partialOut.data(), in.bytes, cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemcpy(lse.ptr, host[0].partialLse.data(), lse.bytes, cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemset(out.ptr, 0xff, out.bytes));
    CUDA_ASSERT(cudaMemset(outLse.ptr, 0xff, outLse.bytes));
    if (capture) {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CUDA_ASSERT(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      ncclResult_t r = ncclDcpA2aLseReduce(ctx, in.ptr, lse.as<float>(), out.ptr, outLse.as<float>(), batch, nullptr, stream_);
      CUDA_ASSERT(cudaStreamEndCapture(stream_, &graph));
      ASSERT_EQ(r, ncclSuccess) << ncclDcpGetLastError();
      CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
      for (int i = 0; i < 10; i++) {
        CUDA_ASSERT(cudaMemsetAsync(out.ptr, 0xff, out.bytes, stream_));
        CUDA_ASSERT(cudaGraphLaunch(exec, stream_));
      }
      CUDA_ASSERT(cudaStreamSynchronize(stream_));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    } else {
      DCP_ASSERT(ncclDcpA2aLseReduce(ctx, in.ptr, lse.as<float>(), out.ptr, outLse.as<float>(), batch, nullptr, stream_));
      CUDA_ASSERT(cudaStreamSynchronize(stream_));
    }
    ncclResult_t async = ncclInternalError;
    DCP_ASSERT(ncclDcpGetAsyncError(ctx, &async));
    EXPECT_EQ(async, ncclSuccess);
    std::vector<RankTensors> got = host;
    CUDA_ASSERT(cudaMemcpy(got[0].out.data(), out.ptr, out.bytes, cudaMemcpyDeviceToHost));
    CUDA_ASSERT(cudaMemcpy(got[0].outLse.data(), outLse.ptr, outLse.bytes, cudaMemcpyDeviceToHost));
    Mismatch m = compareOutputs(cfg, 1, batch, s, got, want);
    EXPECT_EQ(m.count, 0u) << m.first;
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

TEST_F(OneRankContext, CreateCallDestroyEveryProtocol) {
  for (int proto : {ncclDcpProtoAuto, ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple}) {
    for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16, ncclFloat32}) {
      SCOPED_TRACE(testing::Message() << "proto " << protocolName(proto) << " dtype " << dtypeName(dtype));
      const ncclDcpConfig_t c = makeConfig(512, 16, dtype, ncclDcpLseBase2, 8, proto);
      ncclDcpContext_t ctx = nullptr;
      DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
      for (int batch : {0, 1, 8, 9, 40}) callAndCheck(ctx, c, batch);
      DCP_ASSERT(ncclDcpContextDestroy(ctx));
    }
  }
}

TEST_F(OneRankContext, TopologyReport) {
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBaseE);
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
  ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
  DCP_ASSERT(ncclDcpGetTopology(ctx, &t));
  EXPECT_EQ(t.nRanks, 1);
  EXPECT_EQ(t.rank, 0);
  EXPECT_EQ(t.lsaSize, 1);
  EXPECT_EQ(t.path, ncclDcpPathFused);
  EXPECT_EQ(t.protocol, ncclDcpProtoLL128);
  EXPECT_EQ(t.link[0], ncclDcpLinkSelf);
  EXPECT_GT(strlen(t.busId[0]), 0u);
  ncclDcpTopology_t bad = t;
  bad.magic = 0;
  EXPECT_EQ(ncclDcpGetTopology(ctx, &bad), ncclInvalidArgument);
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
}

TEST_F(OneRankContext, StreamIsBoundByTheFirstCall) {
  const ncclDcpConfig_t c = makeConfig(64, 2, ncclBfloat16, ncclDcpLseBase2);
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
  callAndCheck(ctx, c, 3);  // binds stream_
  cudaStream_t other;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  DeviceBuffer in(1 << 16), lse(1 << 12), out(1 << 16);
  EXPECT_EQ(ncclDcpA2aLseReduce(ctx, in.ptr, lse.as<float>(), out.ptr, nullptr, 1, nullptr, other), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("bound"), std::string::npos) << ncclDcpGetLastError();
  DCP_ASSERT(ncclDcpContextBindStream(ctx, other));
  std::swap(other, stream_);
  callAndCheck(ctx, c, 2);
  std::swap(other, stream_);
  // Destroy does not touch the bound stream, which may be gone already.
  CUDA_ASSERT(cudaStreamDestroy(other));
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
}

TEST_F(OneRankContext, GraphCaptureReplays) {
  const ncclDcpConfig_t c = makeConfig(512, 8, ncclBfloat16, ncclDcpLseBaseE, 4);
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
  callAndCheck(ctx, c, 10, /*capture=*/true);
  callAndCheck(ctx, c, 3);  // eager after replays
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
}

TEST_F(OneRankContext, InsideTheApplicationsWindow) {
  const ncclDcpConfig_t c = makeConfig(256, 4, ncclFloat16, ncclDcpLseBase2, 16);
  size_t need = 0;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, 1, &need));
  const size_t offset = 2 * NCCL_WIN_REQUIRED_ALIGNMENT, total = offset + need + NCCL_WIN_REQUIRED_ALIGNMENT;
  void* pool = nullptr;
  NCCL_TEST_ASSERT(ncclMemAlloc(&pool, total));
  ncclWindow_t win = nullptr;
  NCCL_TEST_ASSERT(ncclCommWindowRegister(comm_, pool, total, &win, NCCL_WIN_DEFAULT));
  ncclDcpContext_t ctx = nullptr;
  EXPECT_EQ(ncclDcpContextCreateInWindow(comm_, win, offset + 100, need, &c, &ctx), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("offset"), std::string::npos) << ncclDcpGetLastError();
  EXPECT_EQ(ncclDcpContextCreateInWindow(comm_, win, offset, need - 1, &c, &ctx), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("bytes"), std::string::npos) << ncclDcpGetLastError();
  EXPECT_EQ(ncclDcpContextCreateInWindow(comm_, nullptr, offset, need, &c, &ctx), ncclInvalidArgument);
  EXPECT_EQ(ctx, nullptr);
  // Garbage where our workspace goes: create must zero it.
  CUDA_ASSERT(cudaMemset(pool, 0x5a, total));
  DCP_ASSERT(ncclDcpContextCreateInWindow(comm_, win, offset, need, &c, &ctx));
  for (int batch : {1, 16, 17, 50}) callAndCheck(ctx, c, batch);
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
  // The window and its memory are still the application's.
  NCCL_TEST_ASSERT(ncclCommWindowDeregister(comm_, win));
  NCCL_TEST_ASSERT(ncclMemFree(pool));
}

TEST_F(OneRankContext, ForcedFallback) {
  Env e;
  e.forceFallback = true;
  setEnvForTesting(&e);
  for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat32}) {
    const ncclDcpConfig_t c = makeConfig(128, 4, dtype, ncclDcpLseBaseE, 8);
    ncclDcpContext_t ctx = nullptr;
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
    ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
    DCP_ASSERT(ncclDcpGetTopology(ctx, &t));
    EXPECT_EQ(t.path, ncclDcpPathFallback);
    for (int batch : {1, 8, 21}) callAndCheck(ctx, c, batch);
    callAndCheck(ctx, c, 5, /*capture=*/true);
    DCP_ASSERT(ncclDcpContextDestroy(ctx));
  }
}

TEST_F(OneRankContext, HundredCyclesLeakNothing) {
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 256);
  auto cycle = [&](bool withCall) {
    ncclDcpContext_t ctx = nullptr;
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
    if (withCall) callAndCheck(ctx, c, 2);
    DCP_ASSERT(ncclDcpContextDestroy(ctx));
  };
  for (int i = 0; i < 3; i++) cycle(true);  // NCCL's own first-use allocations
  CUDA_ASSERT(cudaDeviceSynchronize());
  size_t freeBefore = 0, freeAfter = 0, total = 0;
  CUDA_ASSERT(cudaMemGetInfo(&freeBefore, &total));
  for (int i = 0; i < 100; i++) {
    cycle(i % 10 == 0);
    if (HasFatalFailure()) return;
  }
  CUDA_ASSERT(cudaDeviceSynchronize());
  CUDA_ASSERT(cudaMemGetInfo(&freeAfter, &total));
  size_t ws = 0;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, 1, &ws));
  const long long leaked = (long long)freeBefore - (long long)freeAfter;
  EXPECT_LT(leaked, 2ll << 20) << "device memory lost over 100 cycles: " << leaked << " bytes (workspace "
                               << ws << " bytes each)";
}

TEST_F(OneRankContext, CallArgumentsCheckedBeforeLaunch) {
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2);
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
  DeviceBuffer in(1 << 20), lse(1 << 12), out(1 << 20);
  EXPECT_EQ(ncclDcpA2aLseReduce(ctx, in.ptr, lse.as<float>(), out.ptr, nullptr, -1, nullptr, stream_), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("batch"), std::string::npos);
  EXPECT_EQ(ncclDcpA2aLseReduce(ctx, in.ptr, lse.as<float>(), (char*)out.ptr + 8, nullptr, 1, nullptr, stream_),
            ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("out"), std::string::npos);
  EXPECT_EQ(ncclDcpA2aLseReduce(ctx, in.ptr, lse.as<float>(), in.ptr, nullptr, 1, nullptr, stream_), ncclInvalidArgument);
  // Refused calls did not bind the stream.
  cudaStream_t other;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  std::swap(other, stream_);
  callAndCheck(ctx, c, 1);
  std::swap(other, stream_);
  cudaStreamDestroy(other);
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
