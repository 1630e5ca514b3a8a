/*************************************************************************
 * The collective on a real ncclComm_t, one rank on one GPU: create / call /
 * destroy through the public API, strided views and a NULL outLse on the
 * fused and the fallback paths, the application's window, graph capture,
 * the workspace providers (nccl-window, cuda-ipc, fallback), handles that
 * stay defined after destroy and abort, destroy with calls in flight, the
 * group calls, and create/destroy cycles that must not leak a single
 * allocation.
 *
 * One GPU holds one NCCL rank (NCCL refuses two ranks of a communicator on
 * one device), so cp = 1 here: the kernel runs through NCCL's window and
 * its own control block (local pointer, round counter, at the application's
 * offset too), but no transport sends to a peer, no LSA pointer reaches
 * another GPU and no wait is remote. Those run on one GPU only through
 * loopback (test_loopback.cc, the same kernel body) and through NCCL in the
 * multi suite (test_multi.cc, 2+ GPUs).
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "context.h"
#include "device_problem.h"
#include "enums.h"
#include "handles.h"
#include "live_resources.h"
#include "loopback.h"
#include "reference.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

// How callAndCheck calls.
struct CallOptions {
  bool strided = false;     // paddedStrides instead of the packed default (strides NULL)
  bool withOutLse = true;   // false: outLse NULL
  bool capture = false;     // captured once, replayed 10 times
};

// A one-rank communicator on device 0 (OneRankComm).
class OneRankContext : public OneRankComm {
 protected:
  // A packed call of `batch` rows on fresh data, queued behind something a
  // test holds the stream with: its inputs uploaded on stream_, its
  // reference, and a context on comm_ made and idle.
  struct HeldCall {
    Config cfg;
    Strides s;
    std::vector<RankTensors> host, want;
    std::unique_ptr<RankBuffers> b;
    ncclDcpContext_t ctx = nullptr;

    ncclResult_t call(int batch, cudaStream_t stream) const {
      return ncclDcpA2aLseReduce(ctx, b->in.ptr, b->lse.as<float>(), b->out.ptr, b->outLse.as<float>(), batch,
                                 nullptr, stream);
    }
  };
  void prepareHeldCall(const ncclDcpConfig_t& c, int batch, HeldCall* h) {
    ASSERT_EQ(resolveConfig(&c, Env(), &h->cfg), ncclSuccess);
    h->s = packedStrides(h->cfg, 1);
    std::mt19937_64 rng(freshSeed());
    h->host = makeInputs(h->cfg, 1, batch, h->s, LseMix::Normal, rng);
    h->want = h->host;
    CallBuffers ref = h->want[0].buffers();
    referenceA2aLseReduce(h->cfg, 1, batch, h->s, &ref);
    h->b = std::make_unique<RankBuffers>(h->host[0]);
    CUDA_ASSERT(h->b->upload(h->host[0], stream_));
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &h->ctx));
    CUDA_ASSERT(cudaDeviceSynchronize());
  }
  // Its outputs (the stream synchronised) against the reference.
  void checkHeldCall(const HeldCall& h, int batch) {
    std::vector<RankTensors> got = h.host;
    CUDA_ASSERT(h.b->download(&got[0], stream_));
    const Mismatch m = withOracle(compareOutputs(h.cfg, 1, batch, h.s, got, h.want),
                                  oracleMismatches(oracleProblem(h.cfg, 1, batch, h.s, h.host), got));
    EXPECT_EQ(m.count, 0u) << m.first;
  }

  // One call on fresh data: device buffers in, outputs compared with the
  // reference (cp = 1: the normalised input, or 0 / -inf for empty rows),
  // and everything outside the view still poisoned.
  void callAndCheck(ncclDcpContext_t ctx, const ncclDcpConfig_t& c, int batch, const CallOptions& o = {}) {
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess) << ncclDcpGetLastError();
    const Strides s = o.strided ? paddedStrides(cfg, 1) : packedStrides(cfg, 1);
    const ncclDcpStrides_t api = apiStrides(s);
    const ncclDcpStrides_t* strides = o.strided ? &api : nullptr;
    SCOPED_TRACE(testing::Message() << "batch " << batch << (o.strided ? " strided" : "")
                                    << (o.withOutLse ? "" : " outLse NULL") << (o.capture ? " captured" : ""));
    std::mt19937_64 rng(freshSeed());
    std::vector<RankTensors> host = makeInputs(cfg, 1, batch, s, LseMix::Special, rng);
    if (!o.withOutLse) host[0].outLse.clear();
    std::vector<RankTensors> want = host;
    CallBuffers ref = want[0].buffers();
    referenceA2aLseReduce(cfg, 1, batch, s, &ref);
    RankBuffers b(host[0]);
    CUDA_ASSERT(b.upload(host[0], stream_));
    float* outLse = o.withOutLse ? b.outLse.as<float>() : nullptr;
    if (o.capture) {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CUDA_ASSERT(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      ncclResult_t r =
          ncclDcpA2aLseReduce(ctx, b.in.ptr, b.lse.as<float>(), b.out.ptr, outLse, batch, strides, stream_);
      CUDA_ASSERT(cudaStreamEndCapture(stream_, &graph));
      ASSERT_EQ(r, ncclSuccess) << ncclDcpGetLastError();
      CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
      for (int i = 0; i < 10; i++) {
        CUDA_ASSERT(b.poison(stream_));
        CUDA_ASSERT(cudaGraphLaunch(exec, stream_));
      }
      CUDA_ASSERT(cudaStreamSynchronize(stream_));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    } else {
      DCP_ASSERT(ncclDcpA2aLseReduce(ctx, b.in.ptr, b.lse.as<float>(), b.out.ptr, outLse, batch, strides, stream_));
      CUDA_ASSERT(cudaStreamSynchronize(stream_));
    }
    ncclResult_t async = ncclInternalError;
    DCP_ASSERT(ncclDcpGetAsyncError(ctx, &async));
    EXPECT_EQ(async, ncclSuccess);
    std::vector<RankTensors> got = host;
    CUDA_ASSERT(b.download(&got[0], stream_));
    const Mismatch m =
        withOracle(compareOutputs(cfg, 1, batch, s, got, want), oracleMismatches(oracleProblem(cfg, 1, batch, s, host), got));
    EXPECT_EQ(m.count, 0u) << m.first;
    std::string first;
    EXPECT_EQ(touchedPadding(cfg, batch, s, got[0], &first), 0u) << first;
  }

  // The round counter in the control block at `workspace` (device memory).
  uint32_t roundAt(const void* workspace) {
    uint32_t round = 0;
    EXPECT_EQ(cudaMemcpy(&round, &((const Control*)workspace)->round, sizeof(round), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return round;
  }
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

// Strided views through the public entry point, chunked batches included,
// and a NULL outLse, on the fused path.
TEST_F(OneRankContext, StridedViewsAndNullOutLseOnTheFusedPath) {
  for (int proto : {ncclDcpProtoAuto, ncclDcpProtoLL, ncclDcpProtoSimple})
    for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat32}) {
      SCOPED_TRACE(testing::Message() << "proto " << protocolName(proto) << " dtype " << dtypeName(dtype));
      const ncclDcpConfig_t c = makeConfig(128, 4, dtype, ncclDcpLseBaseE, 8, proto);
      ncclDcpContext_t ctx = nullptr;
      DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
      ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
      DCP_ASSERT(ncclDcpGetTopology(ctx, &t));
      EXPECT_EQ(t.path, ncclDcpPathFused);
      for (int batch : {1, 8, 21}) {
        callAndCheck(ctx, c, batch, {/*strided=*/true, /*withOutLse=*/true});
        callAndCheck(ctx, c, batch, {/*strided=*/false, /*withOutLse=*/false});
        callAndCheck(ctx, c, batch, {/*strided=*/true, /*withOutLse=*/false});
      }
      callAndCheck(ctx, c, 13, {/*strided=*/true, /*withOutLse=*/false, /*capture=*/true});
      DCP_ASSERT(ncclDcpContextDestroy(ctx));
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
  EXPECT_EQ(t.provider, ncclDcpProviderNcclWindow);
  EXPECT_STREQ(t.pathNote, "") << "the fastest path needs no note";
  EXPECT_EQ(t.protocol, ncclDcpProtoLL128);
  EXPECT_EQ(t.link[0], ncclDcpLinkSelf);
  EXPECT_GT(strlen(t.busId[0]), 0u);
  ncclDcpTopology_t bad = t;
  bad.magic = 0;
  EXPECT_EQ(ncclDcpGetTopology(ctx, &bad), ncclInvalidArgument);
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
}

// Every public function on a handle that was destroyed or aborted, and a
// handle given twice: ncclInvalidArgument with a message, never a crash;
// and destroy/abort never touch the stream of the last call, which may be
// gone already.
TEST_F(OneRankContext, StaleAndRepeatedHandlesAreRefused) {
  const ncclDcpConfig_t c = makeConfig(64, 2, ncclBfloat16, ncclDcpLseBase2);
  DeviceBuffer in(1 << 16), lse(1 << 12), out(1 << 16);
  auto expectStale = [&](ncclDcpContext_t ctx, const char* after) {
    SCOPED_TRACE(after);
    ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
    ncclResult_t async = ncclSuccess;
    EXPECT_EQ(ncclDcpA2aLseReduce(ctx, in.ptr, lse.as<float>(), out.ptr, nullptr, 1, nullptr, stream_),
              ncclInvalidArgument);
    EXPECT_NE(std::string(ncclDcpGetLastError()).find("not a live context"), std::string::npos)
        << ncclDcpGetLastError();
    EXPECT_EQ(ncclDcpGetTopology(ctx, &t), ncclInvalidArgument);
    EXPECT_EQ(ncclDcpGetAsyncError(ctx, &async), ncclInvalidArgument);
    EXPECT_EQ(ncclDcpContextBindStream(ctx, stream_), ncclInvalidArgument);
    EXPECT_EQ(ncclDcpContextDestroy(ctx), ncclInvalidArgument);
    EXPECT_EQ(ncclDcpContextAbort(ctx), ncclInvalidArgument);
    EXPECT_NE(std::string(ncclDcpGetLastError()).find("destroyed or aborted"), std::string::npos)
        << ncclDcpGetLastError();
    ncclDcpContext_t group[1] = {ctx};
    EXPECT_EQ(ncclDcpContextDestroyGroup(1, group), ncclInvalidArgument);
  };
  for (bool abort : {false, true}) {
    ncclDcpContext_t ctx = nullptr;
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
    cudaStream_t gone;
    CUDA_ASSERT(cudaStreamCreateWithFlags(&gone, cudaStreamNonBlocking));
    std::swap(gone, stream_);
    callAndCheck(ctx, c, 3);
    std::swap(gone, stream_);
    CUDA_ASSERT(cudaStreamDestroy(gone));
    DCP_ASSERT(abort ? ncclDcpContextAbort(ctx) : ncclDcpContextDestroy(ctx));
    expectStale(ctx, abort ? "after abort" : "after destroy");
  }
  // A handle twice in one group: refused whole, nothing destroyed.
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
  ncclDcpContext_t twice[2] = {ctx, ctx};
  EXPECT_EQ(ncclDcpContextDestroyGroup(2, twice), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("the same context"), std::string::npos) << ncclDcpGetLastError();
  callAndCheck(ctx, c, 2);  // still live
  // An address no create returned.
  int notAContext = 0;
  EXPECT_EQ(ncclDcpContextDestroy((ncclDcpContext_t)&notAContext), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("no ncclDcpContextCreate"), std::string::npos);
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
}

// Abort from a watchdog thread while the application's thread keeps
// calling: every call either runs or is refused as stale, never crashes.
TEST_F(OneRankContext, AbortFromAnotherThreadWhileCalling) {
  const ncclDcpConfig_t c = makeConfig(64, 2, ncclBfloat16, ncclDcpLseBase2);
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess);
  const Strides s = packedStrides(cfg, 1);
  std::mt19937_64 rng(freshSeed());
  std::vector<RankTensors> host = makeInputs(cfg, 1, 4, s, LseMix::Normal, rng);
  RankBuffers b(host[0]);
  CUDA_ASSERT(b.upload(host[0], stream_));
  for (int round = 0; round < 20; round++) {
    ncclDcpContext_t ctx = nullptr;
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
    std::atomic<int> ran{0}, refused{0}, other{0};
    std::thread caller([&] {
      for (int i = 0; i < 200; i++) {
        const ncclResult_t r =
            ncclDcpA2aLseReduce(ctx, b.in.ptr, b.lse.as<float>(), b.out.ptr, nullptr, 4, nullptr, stream_);
        (r == ncclSuccess ? ran : r == ncclInvalidArgument ? refused : other)++;
      }
    });
    std::this_thread::sleep_for(std::chrono::microseconds(50 * round));
    EXPECT_EQ(ncclDcpContextAbort(ctx), ncclSuccess) << ncclDcpGetLastError();
    caller.join();
    EXPECT_EQ(ran + refused, 200) << other << " calls failed otherwise";
  }
  CUDA_ASSERT(cudaDeviceSynchronize());
}

// NCCL_DCP_PROVIDER=cuda-ipc on one rank: the fused path on cudaMalloc
// memory of our own, every protocol, strided, captured; bitwise equal to
// nccl-window on the same inputs.
TEST_F(OneRankContext, CudaIpcProviderMatchesNcclWindowBitwise) {
  Env ipc;
  ipc.provider = ncclDcpProviderCudaIpc;
  for (int proto : {ncclDcpProtoAuto, ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple}) {
    SCOPED_TRACE(protocolName(proto));
    const ncclDcpConfig_t c = makeConfig(256, 4, ncclBfloat16, ncclDcpLseBase2, 8, proto);
    ncclDcpContext_t window = nullptr, mapped = nullptr;
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &window));
    {
      ScopedEnv env(ipc);
      DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &mapped));
    }
    ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
    DCP_ASSERT(ncclDcpGetTopology(mapped, &t));
    EXPECT_EQ(t.path, ncclDcpPathFused);
    EXPECT_EQ(t.provider, ncclDcpProviderCudaIpc);
    EXPECT_EQ(t.lsaSize, 1);
    callAndCheck(mapped, c, 21, {/*strided=*/true});
    callAndCheck(mapped, c, 6, {/*strided=*/false, /*withOutLse=*/true, /*capture=*/true});
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess);
    const Strides s = packedStrides(cfg, 1);
    std::mt19937_64 rng(freshSeed());
    std::vector<RankTensors> host = makeInputs(cfg, 1, 19, s, LseMix::Special, rng);
    std::vector<RankTensors> got[2] = {host, host};
    ncclDcpContext_t both[2] = {window, mapped};
    for (int k = 0; k < 2; k++) {
      RankBuffers b(host[0]);
      CUDA_ASSERT(b.upload(host[0], stream_));
      DCP_ASSERT(ncclDcpA2aLseReduce(both[k], b.in.ptr, b.lse.as<float>(), b.out.ptr, b.outLse.as<float>(), 19,
                                     nullptr, stream_));
      CUDA_ASSERT(b.download(&got[k][0], stream_));
    }
    EXPECT_EQ(got[0][0].out, got[1][0].out);
    EXPECT_EQ(got[0][0].outLse.size(), got[1][0].outLse.size());
    EXPECT_EQ(memcmp(got[0][0].outLse.data(), got[1][0].outLse.data(), got[0][0].outLse.size() * 4), 0);
    DCP_ASSERT(ncclDcpContextDestroy(window));
    DCP_ASSERT(ncclDcpContextAbort(mapped));  // abort frees cuda-ipc memory too (deferred)
  }
}

// A provider that cannot serve is refused on every rank, with the reason:
// nccl-window is NCCL's, so an application's window excludes cuda-ipc.
TEST_F(OneRankContext, ForcedProviderThatCannotServeIsRefused) {
  Env ipc;
  ipc.provider = ncclDcpProviderCudaIpc;
  ScopedEnv env(ipc);
  const ncclDcpConfig_t c = makeConfig(256, 2, ncclBfloat16, ncclDcpLseBase2, 8);
  size_t need = 0;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, 1, &need));
  void* pool = nullptr;
  ncclWindow_t win = nullptr;
  ASSERT_NO_FATAL_FAILURE(openAppWindow(need, &pool, &win));
  ncclDcpContext_t ctx = nullptr;
  EXPECT_EQ(ncclDcpContextCreateInWindow(comm_, win, 0, need, &c, &ctx), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("NCCL_DCP_PROVIDER=cuda-ipc is not available"), std::string::npos)
      << ncclDcpGetLastError();
  EXPECT_EQ(ctx, nullptr);
  closeAppWindow(pool, win);
}

TEST_F(OneRankContext, GraphCaptureReplays) {
  const ncclDcpConfig_t c = makeConfig(512, 8, ncclBfloat16, ncclDcpLseBaseE, 4);
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
  callAndCheck(ctx, c, 10, {/*strided=*/false, /*withOutLse=*/true, /*capture=*/true});
  callAndCheck(ctx, c, 3);  // eager after replays
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
}

// The workspace carved from the application's window, at a non-zero
// offset: created zeroed, addressed through NCCL at that offset (the round
// counter of the control block advances there, graph replays included),
// the bytes before it and the window itself left to the application.
TEST_F(OneRankContext, InsideTheApplicationsWindow) {
  const ncclDcpConfig_t c = makeConfig(256, 4, ncclFloat16, ncclDcpLseBase2, 16);
  size_t need = 0;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, 1, &need));
  const size_t offset = 2 * NCCL_WIN_REQUIRED_ALIGNMENT, total = offset + need + NCCL_WIN_REQUIRED_ALIGNMENT;
  void* pool = nullptr;
  ncclWindow_t win = nullptr;
  ASSERT_NO_FATAL_FAILURE(openAppWindow(total, &pool, &win));
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
  const char* workspace = (const char*)pool + offset;
  EXPECT_EQ(roundAt(workspace), 0u) << "the control block was not zeroed at the window offset";
  uint32_t rounds = 0;
  for (int batch : {1, 16, 17, 50}) {
    callAndCheck(ctx, c, batch);
    rounds += (batch + 15) / 16;
    EXPECT_EQ(roundAt(workspace), rounds) << "after a call of " << batch << " rows";
  }
  callAndCheck(ctx, c, 20, {/*strided=*/false, /*withOutLse=*/true, /*capture=*/true});  // 2 rounds, 10 replays
  EXPECT_EQ(roundAt(workspace), rounds + 2 * 10) << "after the graph replays";
  // Nothing before the offset was touched.
  std::vector<uint8_t> before(offset);
  CUDA_ASSERT(cudaMemcpy(before.data(), pool, offset, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < offset; i++) ASSERT_EQ(before[i], 0x5a) << "byte " << i << " before the workspace";
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
  // The window and its memory are still the application's.
  closeAppWindow(pool, win);
}

TEST_F(OneRankContext, ForcedFallback) {
  ScopedEnv env(forcedFallbackEnv());
  for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat32}) {
    SCOPED_TRACE(dtypeName(dtype));
    const ncclDcpConfig_t c = makeConfig(128, 4, dtype, ncclDcpLseBaseE, 8);
    ncclDcpContext_t ctx = nullptr;
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
    ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
    DCP_ASSERT(ncclDcpGetTopology(ctx, &t));
    EXPECT_EQ(t.path, ncclDcpPathFallback);
    EXPECT_EQ(t.provider, ncclDcpProviderFallback);
    EXPECT_NE(std::string(t.pathNote).find("NCCL_DCP_PROVIDER=fallback"), std::string::npos) << t.pathNote;
    for (int batch : {1, 8, 21}) {
      callAndCheck(ctx, c, batch);
      callAndCheck(ctx, c, batch, {/*strided=*/true, /*withOutLse=*/true});
      callAndCheck(ctx, c, batch, {/*strided=*/true, /*withOutLse=*/false});
    }
    callAndCheck(ctx, c, 5, {/*strided=*/false, /*withOutLse=*/true, /*capture=*/true});
    callAndCheck(ctx, c, 19, {/*strided=*/true, /*withOutLse=*/false, /*capture=*/true});
    DCP_ASSERT(ncclDcpContextDestroy(ctx));
  }
}

// The application's window under the forced fallback: the context is
// created (on the fallback path, which needs no window) and works.
TEST_F(OneRankContext, InsideTheApplicationsWindowUnderForcedFallback) {
  ScopedEnv env(forcedFallbackEnv());
  const ncclDcpConfig_t c = makeConfig(256, 2, ncclBfloat16, ncclDcpLseBase2, 8);
  size_t need = 0;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, 1, &need));
  void* pool = nullptr;
  ncclWindow_t win = nullptr;
  ASSERT_NO_FATAL_FAILURE(openAppWindow(need, &pool, &win));
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreateInWindow(comm_, win, 0, need, &c, &ctx));
  ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
  DCP_ASSERT(ncclDcpGetTopology(ctx, &t));
  EXPECT_EQ(t.path, ncclDcpPathFallback);
  for (int batch : {3, 17}) callAndCheck(ctx, c, batch, {/*strided=*/true});
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
  closeAppWindow(pool, win);
}

// Destroy waits for the calls still in flight: a call queued behind a
// 300 ms host function is complete (and correct) when destroy returns.
TEST_F(OneRankContext, DestroyWaitsForCallsInFlight) {
  for (bool fallback : {false, true}) {
    SCOPED_TRACE(fallback ? "fallback" : "fused");
    std::unique_ptr<ScopedEnv> env(fallback ? new ScopedEnv(forcedFallbackEnv()) : nullptr);
    const int batch = 40;
    HeldCall h;
    ASSERT_NO_FATAL_FAILURE(prepareHeldCall(makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 16), batch, &h));
    const auto t0 = std::chrono::steady_clock::now();
    CUDA_ASSERT(cudaLaunchHostFunc(
        stream_, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }, nullptr));
    DCP_ASSERT(h.call(batch, stream_));
    EXPECT_EQ(cudaStreamQuery(stream_), cudaErrorNotReady) << "the call was not in flight";
    DCP_ASSERT(ncclDcpContextDestroy(h.ctx));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(cudaStreamQuery(stream_), cudaSuccess) << "destroy returned with the call still queued";
    EXPECT_GE(ms, 250.0) << "destroy returned before the call could have run";
    checkHeldCall(h, batch);
  }
}

// ncclDcpGetAsyncError reads the context's error record (and, on the
// fallback path, NCCL's ncclCommGetAsyncError) and returns: it never waits
// for the GPU. A host function of the test holds the stream (at most 10 s)
// with a call queued behind it; GetAsyncError answers at once, with the
// call still queued, on both paths. A build that synchronised (the device,
// or the stream of the last call) would take the 10 s.
TEST_F(OneRankContext, GetAsyncErrorDoesNotSynchronize) {
  struct Gate {
    std::atomic<bool> open{false};
  };
  for (bool fallback : {false, true}) {
    SCOPED_TRACE(fallback ? "fallback" : "fused");
    std::unique_ptr<ScopedEnv> env(fallback ? new ScopedEnv(forcedFallbackEnv()) : nullptr);
    const int batch = 11;
    HeldCall h;
    ASSERT_NO_FATAL_FAILURE(prepareHeldCall(makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8), batch, &h));
    Gate gate;
    CUDA_ASSERT(cudaLaunchHostFunc(
        stream_,
        [](void* g) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (!static_cast<Gate*>(g)->open.load() && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        },
        &gate));
    DCP_ASSERT(h.call(batch, stream_));
    const auto t0 = std::chrono::steady_clock::now();
    ncclResult_t async = ncclInternalError;
    const ncclResult_t res = ncclDcpGetAsyncError(h.ctx, &async);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const cudaError_t busy = cudaStreamQuery(stream_);
    gate.open = true;
    CUDA_ASSERT(cudaStreamSynchronize(stream_));
    EXPECT_EQ(res, ncclSuccess) << ncclDcpGetLastError();
    EXPECT_EQ(async, ncclSuccess);
    EXPECT_EQ(busy, cudaErrorNotReady) << "the call was no longer queued when ncclDcpGetAsyncError returned";
    EXPECT_LT(ms, 1000.0) << "ncclDcpGetAsyncError waited for the GPU";
    checkHeldCall(h, batch);
    DCP_ASSERT(ncclDcpContextDestroy(h.ctx));
  }
}

// A nonblocking communicator (ncclConfig_t.blocking = 0) answers
// ncclInProgress: create, calls and destroy wait for NCCL the way NCCL
// documents, on every provider; the results are the reference's.
TEST_F(OneRankContext, NonblockingCommunicator) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclUniqueId id;
  NCCL_TEST_ASSERT(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  ASSERT_TRUE(init == ncclSuccess || init == ncclInProgress) << ncclGetErrorString(init);
  std::swap(comm, comm_);  // create waits for the initialisation itself
  for (int provider : {ncclDcpProviderNcclWindow, ncclDcpProviderCudaIpc, ncclDcpProviderFallback}) {
    SCOPED_TRACE(providerName(provider));
    Env e;
    e.provider = provider;
    ScopedEnv env(e);
    const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBaseE, 8);
    ncclDcpContext_t ctx = nullptr;
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
    for (int batch : {3, 20}) callAndCheck(ctx, c, batch);
    DCP_ASSERT(ncclDcpContextDestroy(ctx));
  }
  std::swap(comm, comm_);
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) NCCL_TEST_ASSERT(ncclCommGetAsyncError(comm, &state));
  EXPECT_EQ(state, ncclSuccess);
  ncclCommDestroy(comm);
}

// ncclDcpGroupStart/End on one thread: a fused and a fallback context, one
// call each, enqueued at the end (eagerly and under capture); a second call
// on a context in one group (failing its end, nothing enqueued), an end
// without a start and a context destroyed before the end are refused.
TEST_F(OneRankContext, GroupedCallsOnBothPaths) {
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  ncclDcpContext_t fused = nullptr, fallback = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &fused));
  {
    ScopedEnv env(forcedFallbackEnv());
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &fallback));
  }
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess);
  EXPECT_EQ(ncclDcpGroupEnd(), ncclInvalidUsage);
  for (bool capture : {false, true}) {
    SCOPED_TRACE(capture ? "captured" : "eager");
    DeviceProblem a(cfg, 1, 19, LseMix::Special, freshSeed()), b(cfg, 1, 7, LseMix::Normal, freshSeed());
    const CallBuffers ba = a.buffers(0), bb = b.buffers(0);
    cudaGraph_t graph = nullptr;
    if (capture) CUDA_ASSERT(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    DCP_ASSERT(ncclDcpGroupStart());
    DCP_ASSERT(ncclDcpGroupStart());  // nested
    DCP_ASSERT(ncclDcpA2aLseReduce(fallback, ba.partialOut, (const float*)ba.partialLse, ba.out, ba.outLse, 19, nullptr, stream_));
    DCP_ASSERT(ncclDcpGroupEnd());  // the inner end enqueues nothing
    DCP_ASSERT(ncclDcpA2aLseReduce(fused, bb.partialOut, (const float*)bb.partialLse, bb.out, bb.outLse, 7, nullptr, stream_));
    if (!capture) {
      EXPECT_EQ(cudaStreamQuery(stream_), cudaSuccess) << "a grouped call was enqueued before the end";
    }
    DCP_ASSERT(ncclDcpGroupEnd());
    if (capture) {
      CUDA_ASSERT(cudaStreamEndCapture(stream_, &graph));
      cudaGraphExec_t exec;
      CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
      CUDA_ASSERT(cudaGraphLaunch(exec, stream_));
      CUDA_ASSERT(cudaStreamSynchronize(stream_));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
    CUDA_ASSERT(cudaStreamSynchronize(stream_));
    EXPECT_EQ(a.check(0).count, 0u) << a.check(0).first;
    EXPECT_EQ(b.check(0).count, 0u) << b.check(0).first;
  }
  // A second call on one context is refused at once, and fails the
  // group's end with nothing of the group enqueued (NCCL's group error):
  // every output keeps its poison.
  {
    DeviceProblem a(cfg, 1, 19, LseMix::Normal, freshSeed()), b(cfg, 1, 7, LseMix::Normal, freshSeed());
    const CallBuffers ba = a.buffers(0), bb = b.buffers(0);
    DCP_ASSERT(ncclDcpGroupStart());
    DCP_ASSERT(ncclDcpA2aLseReduce(fallback, ba.partialOut, (const float*)ba.partialLse, ba.out, ba.outLse, 19, nullptr, stream_));
    DCP_ASSERT(ncclDcpA2aLseReduce(fused, bb.partialOut, (const float*)bb.partialLse, bb.out, bb.outLse, 7, nullptr, stream_));
    EXPECT_EQ(ncclDcpA2aLseReduce(fallback, ba.partialOut, (const float*)ba.partialLse, ba.out, ba.outLse, 19, nullptr, stream_),
              ncclInvalidUsage);
    EXPECT_NE(std::string(ncclDcpGetLastError()).find("one call per context per group"), std::string::npos);
    const uint64_t fusedCalls = contextOf(fused)->stats.calls, fallbackCalls = contextOf(fallback)->stats.calls;
    EXPECT_EQ(ncclDcpGroupEnd(), ncclInvalidUsage);
    EXPECT_NE(std::string(ncclDcpGetLastError()).find("a call of this group was refused"), std::string::npos)
        << ncclDcpGetLastError();
    EXPECT_EQ(contextOf(fused)->stats.calls, fusedCalls) << "the refused group enqueued a call";
    EXPECT_EQ(contextOf(fallback)->stats.calls, fallbackCalls) << "the refused group enqueued a call";
    CUDA_ASSERT(cudaStreamSynchronize(stream_));
    for (const DeviceProblem* p : {&a, &b}) {
      const RankTensors got = p->outputs(0);
      EXPECT_EQ(std::count(got.out.begin(), got.out.end(), (uint8_t)0xff), (std::ptrdiff_t)got.out.size())
          << "a call of the refused group wrote its out";
      size_t poisonedLse = 0;
      for (float l : got.outLse) poisonedLse += std::isnan(l);
      EXPECT_EQ(poisonedLse, got.outLse.size()) << "a call of the refused group wrote its outLse";
    }
  }
  DeviceProblem a(cfg, 1, 3, LseMix::Normal, freshSeed());
  const CallBuffers ba = a.buffers(0);
  DCP_ASSERT(ncclDcpGroupStart());
  DCP_ASSERT(ncclDcpA2aLseReduce(fused, ba.partialOut, (const float*)ba.partialLse, ba.out, ba.outLse, 3, nullptr, stream_));
  DCP_ASSERT(ncclDcpContextDestroy(fused));
  EXPECT_EQ(ncclDcpGroupEnd(), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("destroyed"), std::string::npos) << ncclDcpGetLastError();
  DCP_ASSERT(ncclDcpContextDestroy(fallback));
}

// A poisoned context in a group: its call writes NaN and its error fails
// the group's end, and the group's other calls are still enqueued (one
// left out would leave its peers' calls waiting for it until their
// timeout).
TEST_F(OneRankContext, PoisonedContextInAGroupLeavesTheOthersEnqueued) {
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  ncclDcpContext_t sick = nullptr, well = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &sick));
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &well));
  contextOf(sick)->engine.poison(ncclRemoteError, -1);
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess);
  DeviceProblem a(cfg, 1, 11, LseMix::Normal, freshSeed()), b(cfg, 1, 11, LseMix::Normal, freshSeed());
  const CallBuffers ba = a.buffers(0), bb = b.buffers(0);
  // The poisoned call's outputs zeroed (not the 0xff poison, NaN already):
  // only its NaN fill makes them NaN.
  const size_t elements = (size_t)11 * cfg.localHeads * cfg.headDim, lses = (size_t)11 * cfg.localHeads;
  CUDA_ASSERT(cudaMemset(ba.out, 0, elements * cfg.eltSize));
  CUDA_ASSERT(cudaMemset(ba.outLse, 0, lses * sizeof(float)));
  DCP_ASSERT(ncclDcpGroupStart());
  DCP_ASSERT(ncclDcpA2aLseReduce(sick, ba.partialOut, (const float*)ba.partialLse, ba.out, ba.outLse, 11, nullptr, stream_));
  DCP_ASSERT(ncclDcpA2aLseReduce(well, bb.partialOut, (const float*)bb.partialLse, bb.out, bb.outLse, 11, nullptr, stream_));
  EXPECT_EQ(ncclDcpGroupEnd(), ncclRemoteError);
  CUDA_ASSERT(cudaStreamSynchronize(stream_));
  const Mismatch m = b.check(0);
  EXPECT_EQ(m.count, 0u) << "the healthy context's call of the group: " << m.first;
  const RankTensors got = a.outputs(0);
  size_t nan = 0, nanLse = 0;
  for (size_t i = 0; i < elements; i++) nan += std::isnan(loadElement(cfg.dtype, got.out.data(), i));
  for (size_t i = 0; i < lses; i++) nanLse += std::isnan(got.outLse[i]);
  EXPECT_EQ(nan, elements) << "the poisoned context's call did not write NaN over its rows";
  EXPECT_EQ(nanLse, lses) << "the poisoned context's call did not write NaN over its outLse";
  DCP_ASSERT(ncclDcpContextDestroy(sick));
  DCP_ASSERT(ncclDcpContextDestroy(well));
}

// An error the application left pending (a failed cudaMalloc) is its own:
// create and a call on either path neither fail on it -- the fallback's
// call did, between its pack and the exchange its peers wait in; create
// did in its window kernels' launches -- nor consume it.
TEST_F(OneRankContext, AnErrorTheApplicationLeftPendingIsNotTheCalls) {
  for (bool fallback : {false, true}) {
    SCOPED_TRACE(fallback ? "fallback" : "fused");
    std::unique_ptr<ScopedEnv> env(fallback ? new ScopedEnv(forcedFallbackEnv()) : nullptr);
    const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
    void* huge = nullptr;
    ASSERT_EQ(cudaMalloc(&huge, (size_t)1 << 50), cudaErrorMemoryAllocation);
    ncclDcpContext_t ctx = nullptr;
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
    callAndCheck(ctx, c, 5);
    EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation)
        << "create or the call consumed the application's pending error";
    DCP_ASSERT(ncclDcpContextDestroy(ctx));
  }
}

// The group calls on one communicator: DestroyGroup skips NULL entries and
// clears the ones it destroyed.
TEST_F(OneRankContext, GroupCallsSkipNullEntries) {
  const ncclDcpConfig_t c = makeConfig(64, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  ncclDcpContext_t made = nullptr;
  DCP_ASSERT(ncclDcpContextCreateGroup(1, &comm_, &c, &made));
  ASSERT_NE(made, nullptr);
  callAndCheck(made, c, 5);
  ncclDcpContext_t ctxs[4] = {nullptr, made, nullptr, nullptr};
  DCP_ASSERT(ncclDcpContextDestroyGroup(4, ctxs));
  for (ncclDcpContext_t ctx : ctxs) EXPECT_EQ(ctx, nullptr);
}

// The counting wrappers (live_resources.h) see libnccl_dcp.so's calls, so
// the leak test below can fail. Runs without a GPU too: a call that fails
// for want of a driver is still seen. A failed create passes only where no
// GPU is there nor required (NCCL_DCP_REQUIRE_GPU, as DCP_REQUIRE_GPUS).
TEST(LiveResourceCounting, SeesTheLibrarysCalls) {
  const LiveResources before = liveResources();
  const ncclDcpConfig_t c = makeConfig(64, 2, ncclBfloat16, ncclDcpLseBase2, 4);
  std::unique_ptr<Loopback> lb;
  const ncclResult_t r = Loopback::create(&c, 2, &lb);
  EXPECT_GT(liveResources().calls, before.calls) << "Loopback::create made no counted call";
  if (r != ncclSuccess) {
    const std::string why = ncclDcpGetLastError();
    const GpuGate gate = gateGpus(1);
    ASSERT_EQ(gate.verdict, GpuGate::Skip) << "Loopback::create failed: " << why
                                           << (gate.verdict == GpuGate::Fail ? "; " + gate.message : "");
    return;  // no GPU: nothing was allocated
  }
  EXPECT_NE(resourceDifference(before, liveResources()), "") << "a live loopback holds no counted resource";
  lb.reset();
  EXPECT_EQ(resourceDifference(before, liveResources()), "");
}

// A loopback whose workspaces cannot fit the GPU (cp 16, rounds of the
// most rows a config takes: terabytes) says what they need, what sets it
// and what the GPU has free, and leaves nothing allocated and no error
// pending (the failure is reported, not left to the application's next
// cudaGetLastError).
TEST(LoopbackWorkspace, ThatDoesNotFitSaysWhatItNeeds) {
  DCP_REQUIRE_GPUS(1);
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, NCCL_DCP_MAX_BATCH_CAPACITY);
  const LiveResources before = liveResources();
  std::unique_ptr<Loopback> lb;
  EXPECT_EQ(Loopback::create(&c, 16, &lb), ncclUnhandledCudaError);
  const std::string why = ncclDcpGetLastError();
  for (const char* part : {"cudaMalloc of 16 virtual ranks' workspaces", "for rounds of maxBatch 1048576 rows",
                           "MiB free on this GPU", "NCCL_DCP_MAX_BATCH"})
    EXPECT_NE(why.find(part), std::string::npos) << "\"" << part << "\" not in: " << why;
  EXPECT_EQ(lb, nullptr);
  EXPECT_EQ(resourceDifference(before, liveResources()), "");
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failed cudaMalloc left its error pending";
}

// Create/destroy cycles, with calls now and then, on the fused and the
// fallback path: every allocation, stream, window and device communicator
// is given back (counted exactly), and no device memory is lost.
TEST_F(OneRankContext, CyclesLeakNothing) {
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 256);
  for (int provider : {ncclDcpProviderNcclWindow, ncclDcpProviderCudaIpc, ncclDcpProviderFallback}) {
    SCOPED_TRACE(providerName(provider));
    const bool fallback = provider == ncclDcpProviderFallback;
    Env e;
    e.provider = provider;
    ScopedEnv env(e);
    auto cycle = [&](bool withCall) {
      ncclDcpContext_t ctx = nullptr;
      DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
      if (withCall) callAndCheck(ctx, c, 2);
      DCP_ASSERT(ncclDcpContextDestroy(ctx));
    };
    for (int i = 0; i < 3; i++) cycle(true);  // NCCL's own first-use allocations
    CUDA_ASSERT(cudaDeviceSynchronize());
    const LiveResources before = liveResources();
    size_t freeBefore = 0, freeAfter = 0, total = 0;
    CUDA_ASSERT(cudaMemGetInfo(&freeBefore, &total));
    // A live context holds resources the counters see.
    ncclDcpContext_t ctx = nullptr;
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
    EXPECT_NE(resourceDifference(before, liveResources()), "") << "a live context holds no counted resource";
    DCP_ASSERT(ncclDcpContextDestroy(ctx));
    const int cycles = fallback ? 30 : 100;
    for (int i = 0; i < cycles; i++) {
      cycle(i % 10 == 0);
      if (HasFatalFailure()) return;
    }
    CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_EQ(resourceDifference(before, liveResources()), "") << "over " << cycles + 1 << " cycles";
    CUDA_ASSERT(cudaMemGetInfo(&freeAfter, &total));
    const long long leaked = (long long)freeBefore - (long long)freeAfter;
    EXPECT_LT(leaked, 2ll << 20) << "device memory lost over " << cycles + 1 << " cycles: " << leaked << " bytes";
  }
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
  // Refused calls left the context as it was.
  callAndCheck(ctx, c, 1);
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
}

// The arrays the kernels read (seqLens, queryStartLoc, TOKEN's
// rowCountsDevice) in host memory, pageable or pinned: refused at the call,
// naming the argument, with nothing enqueued (the output keeps its
// pattern, the CUDA context stays healthy); device and managed arrays are
// taken, eagerly and under stream capture (the check invalidates no
// capture). Without the check a host array faults the kernel: a sticky
// illegal address that ends the process's CUDA context.
TEST_F(OneRankContext, HostArraysForTheKernelsAreRefusedAtTheCall) {
  const int batch = 4;
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
  const size_t outBytes = (size_t)batch * 4 * 128 * 2;
  DeviceBuffer in(1 << 20), lse(1 << 12), out(outBytes);
  CUDA_ASSERT(cudaMemset(in.ptr, 0, in.bytes));
  CUDA_ASSERT(cudaMemset(lse.ptr, 0, lse.bytes));
  const int seqLens[1] = {5}, qsl[2] = {0, batch};
  std::vector<int> pageable(qsl, qsl + 2);
  int* pinned = nullptr;
  CUDA_ASSERT(cudaMallocHost((void**)&pinned, 2 * sizeof(int)));
  memcpy(pinned, qsl, sizeof(qsl));
  DeviceBuffer devLens(sizeof(seqLens)), devQsl(sizeof(qsl));
  CUDA_ASSERT(cudaMemcpy(devLens.ptr, seqLens, sizeof(seqLens), cudaMemcpyHostToDevice));
  CUDA_ASSERT(cudaMemcpy(devQsl.ptr, qsl, sizeof(qsl), cudaMemcpyHostToDevice));
  int* managed = nullptr;
  CUDA_ASSERT(cudaMallocManaged((void**)&managed, 2 * sizeof(int)));
  memcpy(managed, qsl, sizeof(qsl));

  auto call = [&](const int* lens, const int* starts, cudaStream_t s) {
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.seqLens = lens;
    args.queryStartLoc = starts;
    args.numSeqs = 1;
    return ncclDcpA2aLseReduceEx(ctx, in.ptr, lse.ptr, out.ptr, nullptr, batch, nullptr, &args, s);
  };
  const struct {
    const int *lens, *starts;
    const char* named;
  } bad[] = {{seqLens, devQsl.as<int>(), "args->seqLens"},
             {devLens.as<int>(), pageable.data(), "args->queryStartLoc"},
             {devLens.as<int>(), pinned, "args->queryStartLoc"}};
  for (const auto& b : bad) {
    SCOPED_TRACE(b.named);
    CUDA_ASSERT(cudaMemset(out.ptr, 0x5a, outBytes));
    CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_EQ(call(b.lens, b.starts, stream_), ncclInvalidArgument);
    const std::string msg = ncclDcpGetLastError();
    EXPECT_NE(msg.find(b.named), std::string::npos) << msg;
    EXPECT_NE(msg.find("not device memory"), std::string::npos) << msg;
    CUDA_ASSERT(cudaStreamSynchronize(stream_));
    std::vector<unsigned char> got(outBytes);
    CUDA_ASSERT(cudaMemcpy(got.data(), out.ptr, outBytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::count(got.begin(), got.end(), 0x5a), (long)outBytes) << "a refused call wrote its output";
  }
  // TOKEN's device counts on the host.
  ncclDcpConfig_t tc = c;
  tc.scatter = ncclDcpScatterToken;
  ncclDcpContext_t token = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &tc, &token));
  const int counts[1] = {batch};
  ncclDcpCallArgs_t targs = NCCL_DCP_CALL_ARGS_INITIALIZER;
  targs.rowCountsDevice = counts;
  EXPECT_EQ(ncclDcpA2aLseReduceEx(token, in.ptr, lse.ptr, out.ptr, nullptr, batch, nullptr, &targs, stream_),
            ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("args->rowCountsDevice"), std::string::npos)
      << ncclDcpGetLastError();
  DCP_ASSERT(ncclDcpContextDestroy(token));

  // Device and managed arrays: taken, eagerly and under capture (a host
  // array refused there too, the capture still valid).
  DCP_ASSERT(call(devLens.as<int>(), devQsl.as<int>(), stream_));
  DCP_ASSERT(call(devLens.as<int>(), managed, stream_));
  CUDA_ASSERT(cudaStreamSynchronize(stream_));
  cudaGraph_t graph = nullptr;
  // Thread-local, as the other capture tests: unsafe calls from this thread invalidate it.
  CUDA_ASSERT(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const ncclResult_t captured = call(devLens.as<int>(), devQsl.as<int>(), stream_);
  const ncclResult_t refused = call(seqLens, devQsl.as<int>(), stream_);
  CUDA_ASSERT(cudaStreamEndCapture(stream_, &graph));
  EXPECT_EQ(captured, ncclSuccess);
  EXPECT_EQ(refused, ncclInvalidArgument);
  cudaGraphExec_t exec = nullptr;
  CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_ASSERT(cudaGraphLaunch(exec, stream_));
  CUDA_ASSERT(cudaStreamSynchronize(stream_));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  ncclResult_t async = ncclInternalError;
  DCP_ASSERT(ncclDcpGetAsyncError(ctx, &async));
  EXPECT_EQ(async, ncclSuccess);
  CUDA_ASSERT(cudaGetLastError());
  callAndCheck(ctx, c, 3);  // the CUDA context and ctx are fine
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
  cudaFreeHost(pinned);
  cudaFree(managed);
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
