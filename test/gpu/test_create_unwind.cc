/*************************************************************************
 * Create's failures and abort on one GPU (cp 1), through the test build of
 * the library (failure injection, src/testing.h): a failure injected at
 * each step of create returns an error naming the step and the rank,
 * releases everything it had created (every allocation, stream, event,
 * window and device communicator counted exactly by live_resources.h, and
 * device memory back within 2 MiB), and a following create on the same
 * communicator works. Abort returns
 * within a second, on a 1-rank context and on loopback ranks whose waits
 * would otherwise last 20 s. The 2-GPU counterparts are in
 * test/multi/test_create_agreement.cc.
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "context.h"
#include "device_problem.h"
#include "live_resources.h"
#include "loopback.h"
#include "test_util.h"
#include "testing.h"

namespace nccl_dcp {
namespace test {
namespace {

// The steps a 1-rank create can fail at. Agree cannot fail with one rank:
// there is no other record to disagree with.
const CreateStep kLocalSteps[] = {CreateStep::Arguments,  CreateStep::DeviceCommunicators, CreateStep::ChoosePath,
                                  CreateStep::Workspace,  CreateStep::MapPeers,            CreateStep::Ready};

class CreateUnwind : public OneRankComm {
 protected:
  void TearDown() override {
    injectCreateFault(nullptr);
    OneRankComm::TearDown();
  }

  // One call on fresh data, checked against the reference.
  void callAndCheck(ncclDcpContext_t ctx, const ncclDcpConfig_t& c, int batch) {
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, env(), &cfg), ncclSuccess) << ncclDcpGetLastError();
    const uint64_t seed = freshSeed();
    SCOPED_TRACE(testing::Message() << "batch " << batch << " seed " << seed);
    DeviceProblem p(cfg, 1, batch, LseMix::Special, seed);
    const CallBuffers b = p.buffers(0);
    DCP_ASSERT(ncclDcpA2aLseReduce(ctx, b.partialOut, (const float*)b.partialLse, b.out, b.outLse, batch, nullptr, stream_));
    CUDA_ASSERT(cudaStreamSynchronize(stream_));
    ncclResult_t async = ncclInternalError;
    DCP_ASSERT(ncclDcpGetAsyncError(ctx, &async));
    EXPECT_EQ(async, ncclSuccess);
    const Mismatch m = p.check(0);
    EXPECT_EQ(m.count, 0u) << m.first;
  }

  // What the process holds now: the counted resources and free device memory.
  struct Held {
    LiveResources counted;
    size_t freeMemory;
  };
  static Held held() { return {liveResources(), freeDeviceMemory()}; }
  // Nothing more than at h: every counted resource exactly (one forgotten
  // stream or event shows), device memory within kMemorySlack (NCCL's own).
  static void nothingLeftSince(const Held& h) {
    EXPECT_EQ(resourceDifference(h.counted, liveResources()), "") << "resources not given back";
    const long long lost = (long long)h.freeMemory - (long long)freeDeviceMemory();
    EXPECT_LT(lost, kMemorySlack) << "device memory not given back: " << lost << " bytes";
  }

  // Create, a call, destroy: the communicator is still good for us.
  void createWorks(const ncclDcpConfig_t& c) {
    ncclDcpContext_t ctx = nullptr;
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
    callAndCheck(ctx, c, 2 * c.maxBatch + 3);
    DCP_ASSERT(ncclDcpContextDestroy(ctx));
  }

  // A fault at each step: the step and rank named, nothing left behind, the
  // next create fine. create(ctx*) is the create under test.
  template <typename Create>
  void everyStepUnwinds(const ncclDcpConfig_t& c, Create create) {
    createWorks(c);  // NCCL's own first-use allocations happen here
    if (HasFatalFailure()) return;
    for (CreateStep step : kLocalSteps) {
      SCOPED_TRACE(testing::Message() << "fault at step '" << createStepName(step) << "'");
      const Held before = held();
      const CreateFault fault = {step, 0, ncclSystemError};
      injectCreateFault(&fault);
      ncclDcpContext_t ctx = nullptr;
      EXPECT_EQ(create(&ctx), ncclSystemError);
      injectCreateFault(nullptr);
      const std::string msg = ncclDcpGetLastError();
      EXPECT_EQ(ctx, nullptr);
      EXPECT_NE(msg.find("step '" + std::string(createStepName(step)) + "' failed on rank 0"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("injected"), std::string::npos) << msg;
      nothingLeftSince(before);
      createWorks(c);
      if (HasFatalFailure()) return;
    }
  }
};

// The counting wrappers see this binary's library (the test build, linked
// statically): a live context holds counted resources and gives them all
// back, so the counts the unwind tests compare can show a leak.
TEST_F(CreateUnwind, TheCountersSeeTheTestLibrary) {
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 32);
  createWorks(c);  // first use
  const LiveResources before = liveResources();
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
  EXPECT_NE(resourceDifference(before, liveResources()), "") << "a live context holds no counted resource";
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
  EXPECT_EQ(resourceDifference(before, liveResources()), "");
}

TEST_F(CreateUnwind, FusedPathEveryStep) {
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 32);
  everyStepUnwinds(c, [&](ncclDcpContext_t* ctx) { return ncclDcpContextCreate(comm_, &c, ctx); });
}

// The cuda-ipc provider: its memory, its IPC handle and its mapping are
// released at every step (one rank: the handle is taken, none opened).
TEST_F(CreateUnwind, CudaIpcProviderEveryStep) {
  Env e;
  e.provider = ncclDcpProviderCudaIpc;
  setEnvForTesting(&e);
  const ncclDcpConfig_t c = makeConfig(512, 8, ncclBfloat16, ncclDcpLseBase2, 16);
  everyStepUnwinds(c, [&](ncclDcpContext_t* ctx) { return ncclDcpContextCreate(comm_, &c, ctx); });
}

TEST_F(CreateUnwind, FallbackPathEveryStep) {
  Env e;
  e.forceFallback = true;
  setEnvForTesting(&e);
  const ncclDcpConfig_t c = makeConfig(256, 8, ncclFloat16, ncclDcpLseBaseE, 16);
  everyStepUnwinds(c, [&](ncclDcpContext_t* ctx) { return ncclDcpContextCreate(comm_, &c, ctx); });
}

// In the application's window: nothing of the window is ours to release,
// and it stays registered and usable by the application.
TEST_F(CreateUnwind, ApplicationWindowEveryStep) {
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  size_t need = 0;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, 1, &need));
  void* pool = nullptr;
  ncclWindow_t win = nullptr;
  ASSERT_NO_FATAL_FAILURE(openAppWindow(need, &pool, &win));
  everyStepUnwinds(c, [&](ncclDcpContext_t* ctx) { return ncclDcpContextCreateInWindow(comm_, win, 0, need, &c, ctx); });
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreateInWindow(comm_, win, 0, need, &c, &ctx));
  callAndCheck(ctx, c, 19);
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
  closeAppWindow(pool, win);
}

// Local failures before a collective step (issue 34, item 6): waitForComm,
// the exchange's stream and scratch at create's start, and each gather's
// copy of the record to the device, go through the gather, so the error
// names the step and the rank as every rank would report it (on two GPUs:
// test/multi/test_create_agreement.cc shows the peers return with it
// instead of waiting in ncclAllGather). A failed copy of the records back
// is retried: create goes on. Nothing is left behind either way.
struct PointCase {
  CreatePoint point;
  CreateStep step;
  const char* named;  // in the message; "" when create succeeds
};
const PointCase kPointCases[] = {
    {CreatePoint::WaitForComm, CreateStep::Arguments, "step 'arguments' failed on rank 0: failure injected"},
    {CreatePoint::ExchangeStream, CreateStep::Arguments, "step 'arguments' failed on rank 0: failure injected"},
    {CreatePoint::ExchangeScratch, CreateStep::Arguments, "step 'arguments' failed on rank 0: failure injected"},
    {CreatePoint::RecordToDevice, CreateStep::Arguments, "step 'arguments' failed on rank 0: its record did not arrive"},
    {CreatePoint::RecordToDevice, CreateStep::DeviceCommunicators,
     "step 'device communicators' failed on rank 0: its record did not arrive"},
    {CreatePoint::RecordToDevice, CreateStep::ChoosePath, "step 'choose path' failed on rank 0: its record did not arrive"},
    {CreatePoint::RecordToDevice, CreateStep::Workspace, "step 'workspace' failed on rank 0: its record did not arrive"},
    {CreatePoint::RecordToDevice, CreateStep::Ready, "step 'ready' failed on rank 0: its record did not arrive"},
    {CreatePoint::RecordsToHost, CreateStep::Arguments, ""},
    {CreatePoint::RecordsToHost, CreateStep::Workspace, ""},
    {CreatePoint::RecordsToHost, CreateStep::Ready, ""},
};

TEST_F(CreateUnwind, LocalFailuresBeforeACollectiveStepGoThroughTheGather) {
  const ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBase2, 16);
  for (int provider : {ncclDcpProviderAuto, ncclDcpProviderCudaIpc}) {
    Env e;
    e.provider = provider;
    setEnvForTesting(&e);
    createWorks(c);  // first use: NCCL's allocations, the device's reserve scratch
    if (HasFatalFailure()) return;
    for (const PointCase& pc : kPointCases) {
      SCOPED_TRACE(testing::Message() << providerName(provider) << ": " << createPointName(pc.point) << " at step '"
                                      << createStepName(pc.step) << "'");
      const Held before = held();
      CreateFault fault = {pc.step, 0, ncclSystemError};
      fault.point = pc.point;
      injectCreateFault(&fault);
      ncclDcpContext_t ctx = nullptr;
      const ncclResult_t r = ncclDcpContextCreate(comm_, &c, &ctx);
      injectCreateFault(nullptr);
      const std::string msg = ncclDcpGetLastError();
      if (*pc.named == '\0') {
        EXPECT_EQ(r, ncclSuccess) << msg;
        if (ctx) callAndCheck(ctx, c, 5);
        if (ctx) DCP_ASSERT(ncclDcpContextDestroy(ctx));
      } else {
        EXPECT_EQ(r, ncclSystemError) << msg;
        EXPECT_EQ(ctx, nullptr);
        EXPECT_NE(msg.find(pc.named), std::string::npos) << msg;
      }
      CUDA_ASSERT(cudaGetLastError());
      nothingLeftSince(before);
      createWorks(c);
      if (HasFatalFailure()) return;
    }
  }
}

// Create inside the caller's ncclGroupStart/End on a one-rank
// communicator: NCCL runs a one-rank collective at once, group or not (a
// local copy; measured on one H200, NCCL 2.28.9), so nothing is deferred
// and create works, on every provider, and so do the context and the
// communicator after the caller's ncclGroupEnd. On 2+ ranks NCCL defers
// create's all-gather to that ncclGroupEnd and create fails on the spot,
// saying why: test_multi.cc's Ranks.CreateInsideTheCallersGroupFailsOnEveryRank.
TEST_F(CreateUnwind, CreateInsideTheCallersGroupOnOneRankRunsAtOnce) {
  const ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBase2, 16);
  for (int provider : {ncclDcpProviderAuto, ncclDcpProviderCudaIpc, ncclDcpProviderFallback}) {
    SCOPED_TRACE(providerName(provider));
    Env e;
    e.provider = provider;
    setEnvForTesting(&e);
    NCCL_TEST_ASSERT(ncclGroupStart());
    ncclDcpContext_t ctx = nullptr;
    const ncclResult_t r = ncclDcpContextCreate(comm_, &c, &ctx);
    const std::string msg = ncclDcpGetLastError();
    NCCL_TEST_ASSERT(ncclGroupEnd());
    CUDA_ASSERT(cudaDeviceSynchronize());
    CUDA_ASSERT(cudaGetLastError());
    EXPECT_EQ(r, ncclSuccess) << msg;
    ASSERT_NE(ctx, nullptr);
    callAndCheck(ctx, c, 5);
    DCP_ASSERT(ncclDcpContextDestroy(ctx));
    createWorks(c);
    if (HasFatalFailure()) return;
  }
}

// Arguments only a communicator can report to the peers: refused in the
// first step, naming the argument, and the communicator stays usable.
TEST_F(CreateUnwind, BadArgumentsAreRefusedInTheFirstStep) {
  const ncclDcpConfig_t good = makeConfig(64, 2, ncclBfloat16, ncclDcpLseBase2, 8);
  EXPECT_EQ(ncclDcpContextCreate(comm_, &good, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("(ctx / ctxs) is NULL"), std::string::npos)
      << ncclDcpGetLastError();
  ncclDcpContext_t ctx = nullptr;
  EXPECT_EQ(ncclDcpContextCreateInWindow(comm_, nullptr, 0, 1 << 20, &good, &ctx), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("step 'arguments' failed on rank 0: win is NULL"),
            std::string::npos)
      << ncclDcpGetLastError();
  // A window region whose end wraps around: refused before anything reads it.
  int notAWindow = 0;
  EXPECT_EQ(ncclDcpContextCreateInWindow(comm_, (ncclWindow_t)&notAWindow, 4096, SIZE_MAX - 100, &good, &ctx),
            ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("overflows"), std::string::npos) << ncclDcpGetLastError();
  ncclDcpConfig_t bad = good;
  bad.headDim = NCCL_CONFIG_UNDEF_INT;
  EXPECT_EQ(ncclDcpContextCreate(comm_, &bad, &ctx), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("config->headDim is not set"), std::string::npos)
      << ncclDcpGetLastError();
  EXPECT_EQ(ctx, nullptr);
  createWorks(good);
}

// Abort of a healthy 1-rank context: quick, everything back once the next
// create/destroy runs, and ncclCommAbort works after it.
TEST_F(CreateUnwind, AbortIsQuickAndGivesEverythingBack) {
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 64);
  createWorks(c);
  const Held before = held();
  for (int i = 0; i < 5; i++) {
    ncclDcpContext_t ctx = nullptr;
    DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
    callAndCheck(ctx, c, 70);
    const auto t0 = std::chrono::steady_clock::now();
    DCP_ASSERT(ncclDcpContextAbort(ctx));
    EXPECT_LT(secondsSince(t0), 1.0);
  }
  createWorks(c);  // frees what the aborts deferred
  nothingLeftSince(before);

  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
  DCP_ASSERT(ncclDcpContextAbort(ctx));
  NCCL_TEST_ASSERT(ncclCommAbort(comm_));
  comm_ = nullptr;
  int dev = 0;
  NCCL_TEST_ASSERT(ncclCommInitAll(&comm_, 1, &dev));
  createWorks(c);
}

// Loopback: virtual ranks whose waits would last 20 s (rank 2 is silent).
// Abort stops them at once: it returns within a second and the GPU is idle.
TEST_F(CreateUnwind, LoopbackAbortStopsWaitsAtOnce) {
  ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8, ncclDcpProtoLL128);
  c.timeoutMs = 20000;
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess);
  std::unique_ptr<Loopback> lb;
  DCP_ASSERT(Loopback::create(&c, 4, &lb));
  DeviceProblem p(cfg, 4, 20, LseMix::Normal, freshSeed());
  lb->setSilentRank(2);
  DCP_ASSERT(lb->call(p.allBuffers().data(), 20, nullptr, stream_));
  const auto t0 = std::chrono::steady_clock::now();
  while (cudaStreamQuery(stream_) == cudaErrorNotReady && secondsSince(t0) < 0.2) {
  }
  EXPECT_EQ(cudaStreamQuery(stream_), cudaErrorNotReady) << "the silent rank's peers should still be waiting";
  const auto t1 = std::chrono::steady_clock::now();
  DCP_ASSERT(lb->abort(kAbortDrainMs));
  EXPECT_LT(secondsSince(t1), 1.0);
  EXPECT_EQ(cudaStreamQuery(stream_), cudaSuccess) << "abort returned with the kernels still running";
  EXPECT_EQ(lb->call(p.allBuffers().data(), 20, nullptr, stream_), ncclInvalidUsage);
  lb.reset();
  CUDA_ASSERT(cudaGetLastError());
  // The GPU is fine: a fresh loopback gets the right answer.
  DCP_ASSERT(Loopback::create(&c, 4, &lb));
  DeviceProblem q(cfg, 4, 20, LseMix::Special, freshSeed());
  DCP_ASSERT(lb->call(q.allBuffers().data(), 20, nullptr, stream_));
  CUDA_ASSERT(cudaStreamSynchronize(stream_));
  DCP_ASSERT(lb->asyncError());
  for (int r = 0; r < 4; r++) EXPECT_EQ(q.check(r).count, 0u) << q.check(r).first;
}

// A silent rank times out first (the poisoned loopback), then abort.
TEST_F(CreateUnwind, LoopbackAbortAfterTimeout) {
  ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  c.timeoutMs = 300;
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess);
  std::unique_ptr<Loopback> lb;
  DCP_ASSERT(Loopback::create(&c, 4, &lb));
  DeviceProblem p(cfg, 4, 5, LseMix::Normal, freshSeed());
  lb->setSilentRank(1);
  DCP_ASSERT(lb->call(p.allBuffers().data(), 5, nullptr, stream_));
  CUDA_ASSERT(cudaStreamSynchronize(stream_));
  EXPECT_EQ(lb->asyncError(), ncclRemoteError);
  const auto t0 = std::chrono::steady_clock::now();
  DCP_ASSERT(lb->abort(kAbortDrainMs));
  EXPECT_LT(secondsSince(t0), 1.0);
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
