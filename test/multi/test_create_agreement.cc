/*************************************************************************
 * Create's agreement on two NCCL ranks (one thread and one GPU per rank,
 * as two processes would have, each thread with its own environment),
 * through the test build of the library (failure injection, src/testing.h):
 *  - a failure injected at each step on one rank fails every rank with the
 *    same code and message, naming the step and the rank; no rank hangs
 *    (a rank thread not back within a bound fails the run); every GPU gets
 *    its memory back within 2 MiB; the next create works;
 *  - each input that shapes the workspace, the protocol or the launches,
 *    from each of its sources, is refused on every rank when one rank
 *    differs, naming the input and the rank;
 *  - abort after a silent peer timed out returns within a second on the
 *    survivor, even with an NCCL collective stuck on the dead peer, and
 *    ncclCommAbort works after it;
 *  - abort while a call still waits for a silent peer stops the kernel's
 *    waits at once (the stream idle when abort returns).
 * Skips (fails under NCCL_DCP_REQUIRE_GPU >= 2) with fewer than 2 GPUs.
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "context.h"
#include "enums.h"
#include "handles.h"
#include "device_problem.h"
#include "test_util.h"
#include "testing.h"

namespace nccl_dcp {
namespace test {
namespace {

constexpr int kRanks = 2;
constexpr double kHangSeconds = 120;  // far above any create; a rank still out is stuck

// What every rank's create returned.
struct Outcome {
  std::vector<ncclResult_t> res = std::vector<ncclResult_t>(kRanks, ncclSuccess);
  std::vector<std::string> msg = std::vector<std::string>(kRanks);
  std::vector<ncclDcpContext_t> ctxs = std::vector<ncclDcpContext_t>(kRanks, nullptr);
};

class CreateRanks : public testing::Test {
 protected:
  void SetUp() override {
    DCP_REQUIRE_GPUS(kRanks);
    initComms();
  }
  void TearDown() override {
    injectCreateFault(nullptr);
    alterAgreementForTesting(-1, nullptr);
    setEnvForTesting(nullptr);
    for (int r = 0; r < (int)comms_.size(); r++)
      if (comms_[r]) {
        cudaSetDevice(r);
        ncclCommDestroy(comms_[r]);
      }
    comms_.clear();
  }

  void initComms() {
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    comms_.assign(kRanks, nullptr);
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      const ncclResult_t res = ncclCommInitRank(&comms_[r], kRanks, id, r);
      if (res != ncclSuccess) threads_.addFailure(r, std::string("ncclCommInitRank: ") + ncclGetErrorString(res));
    });
  }

  // create(r, &ctx) on every rank, each thread under envs[r] when given.
  Outcome createAll(const std::function<ncclResult_t(int, ncclDcpContext_t*)>& create,
                    const std::vector<Env>* envs = nullptr) {
    Outcome o;
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      if (envs) setThreadEnvForTesting(&(*envs)[r]);
      o.res[r] = create(r, &o.ctxs[r]);
      o.msg[r] = ncclDcpGetLastError();
      setThreadEnvForTesting(nullptr);
    });
    return o;
  }

  // Every rank failed with code and the same message, which names `what`
  // and `rank`; no context came back.
  void expectSameFailure(const Outcome& o, ncclResult_t code, const std::string& what, int rank) {
    for (int r = 0; r < kRanks; r++) {
      EXPECT_EQ(o.res[r], code) << "rank " << r << ": " << o.msg[r];
      EXPECT_EQ(o.ctxs[r], nullptr) << "rank " << r;
      EXPECT_EQ(o.msg[r], o.msg[0]) << "rank " << r << " and rank 0 report different errors";
      EXPECT_NE(o.msg[r].find(what), std::string::npos) << o.msg[r];
      EXPECT_NE(o.msg[r].find("rank " + std::to_string(rank)), std::string::npos) << o.msg[r];
    }
  }

  std::vector<size_t> freeMemoryPerRank() {
    std::vector<size_t> f(kRanks);
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      f[r] = freeDeviceMemory();
    });
    return f;
  }

  void expectMemoryBack(const std::vector<size_t>& before) {
    const std::vector<size_t> after = freeMemoryPerRank();
    for (int r = 0; r < kRanks; r++) {
      const long long lost = (long long)before[r] - (long long)after[r];
      EXPECT_LT(lost, kMemorySlack) << "GPU " << r << " lost " << lost << " bytes";
    }
  }

  // Create on every rank, one call checked against the reference, destroy.
  void createWorks(const ncclDcpConfig_t& c) {
    Outcome o = createAll([&](int r, ncclDcpContext_t* ctx) { return ncclDcpContextCreate(comms_[r], &c, ctx); });
    for (int r = 0; r < kRanks; r++) ASSERT_EQ(o.res[r], ncclSuccess) << "rank " << r << ": " << o.msg[r];
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, env(), &cfg), ncclSuccess);
    const int batch = 2 * cfg.maxBatch + 1;
    std::vector<int> devices = {0, 1};
    DeviceProblem p(cfg, kRanks, batch, LseMix::Special, freshSeed(), devices);
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      const CallBuffers b = p.buffers(r);
      if (ncclDcpA2aLseReduce(o.ctxs[r], b.partialOut, (const float*)b.partialLse, b.out, b.outLse, batch, nullptr, nullptr) !=
          ncclSuccess)
        return threads_.addFailure(r, std::string("call: ") + ncclDcpGetLastError());
      const cudaError_t synced = cudaDeviceSynchronize();
      if (synced != cudaSuccess) return threads_.addFailure(r, std::string("sync: ") + cudaGetErrorString(synced));
      ncclResult_t async = ncclInternalError;
      if (ncclDcpGetAsyncError(o.ctxs[r], &async) != ncclSuccess || async != ncclSuccess)
        return threads_.addFailure(r, std::string("async error: ") + ncclDcpGetLastError());
      const Mismatch m = p.check(r);
      if (m.count) threads_.addFailure(r, std::to_string(m.count) + " mismatches, first " + m.first);
    });
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      if (ncclDcpContextDestroy(o.ctxs[r]) != ncclSuccess)
        threads_.addFailure(r, std::string("destroy: ") + ncclDcpGetLastError());
    });
  }

  std::vector<ncclComm_t> comms_;
  RankThreads threads_{kHangSeconds};
};

const CreateStep kEverySteps[] = {CreateStep::Arguments, CreateStep::Agree,    CreateStep::DeviceCommunicators,
                                  CreateStep::ChoosePath, CreateStep::Workspace, CreateStep::MapPeers,
                                  CreateStep::Ready};

TEST_F(CreateRanks, InjectedFailureAtEveryStepFailsEveryRankAlike) {
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 16);
  for (int provider : {ncclDcpProviderNcclWindow, ncclDcpProviderCudaIpc, ncclDcpProviderFallback}) {
    Env path;
    path.provider = provider;
    setEnvForTesting(&path);
    createWorks(c);  // NCCL's own first-use allocations
    if (HasFailure()) return;
    for (CreateStep step : kEverySteps) {
      for (int faulty = 0; faulty < kRanks; faulty++) {
        SCOPED_TRACE(testing::Message() << providerName(provider) << ", fault at step '"
                                        << createStepName(step) << "' on rank " << faulty);
        const std::vector<size_t> before = freeMemoryPerRank();
        const CreateFault fault = {step, faulty, ncclSystemError};
        injectCreateFault(&fault);
        const auto t0 = std::chrono::steady_clock::now();
        Outcome o = createAll([&](int r, ncclDcpContext_t* ctx) { return ncclDcpContextCreate(comms_[r], &c, ctx); });
        injectCreateFault(nullptr);
        EXPECT_LT(secondsSince(t0), 30.0);
        // Agree cannot fail locally: the fault is a record that disagrees,
        // and the error names the first rank whose record differs from rank
        // 0's (rank 1 when rank 0 is the odd one out).
        const ncclResult_t code = step == CreateStep::Agree ? ncclInvalidUsage : ncclSystemError;
        const int blamed = step == CreateStep::Agree && faulty == 0 ? 1 : faulty;
        expectSameFailure(o, code, "step '" + std::string(createStepName(step)) + "' failed on rank " + std::to_string(blamed),
                          faulty);
        expectMemoryBack(before);
        createWorks(c);
        if (HasFailure()) return;
      }
    }
  }
}

// Local failures before a collective step on one rank (issue 34, item 6):
// waitForComm, the exchange's stream and scratch, a gather's copy of the
// record to the device. They used to return on that rank alone while its
// peer waited in ncclAllGather for ever (here: the rank threads' hang
// bound); now every rank returns together, with the same message naming
// the failing rank. A failed copy of the records back is retried: create
// goes on, on both ranks.
TEST_F(CreateRanks, LocalFailuresBeforeACollectiveStepFailEveryRankTogether) {
  const ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBase2, 16);
  struct PointCase {
    CreatePoint point;
    CreateStep step;
    const char* named;  // "" when create succeeds
  };
  const PointCase cases[] = {
      {CreatePoint::WaitForComm, CreateStep::Arguments, "step 'arguments' failed on rank 1: failure injected"},
      {CreatePoint::ExchangeStream, CreateStep::Arguments, "step 'arguments' failed on rank 1: failure injected"},
      {CreatePoint::ExchangeScratch, CreateStep::Arguments, "step 'arguments' failed on rank 1: failure injected"},
      {CreatePoint::RecordToDevice, CreateStep::Arguments, "step 'arguments' failed on rank 1: its record did not arrive"},
      {CreatePoint::RecordToDevice, CreateStep::DeviceCommunicators,
       "step 'device communicators' failed on rank 1: its record did not arrive"},
      {CreatePoint::RecordToDevice, CreateStep::Workspace, "step 'workspace' failed on rank 1: its record did not arrive"},
      {CreatePoint::RecordToDevice, CreateStep::Ready, "step 'ready' failed on rank 1: its record did not arrive"},
      {CreatePoint::RecordsToHost, CreateStep::Arguments, ""},
      {CreatePoint::RecordsToHost, CreateStep::Ready, ""},
  };
  for (int provider : {ncclDcpProviderAuto, ncclDcpProviderCudaIpc}) {
    Env path;
    path.provider = provider;
    setEnvForTesting(&path);
    createWorks(c);  // first use: NCCL's allocations, each device's reserve scratch
    if (HasFailure()) return;
    for (const PointCase& pc : cases) {
      SCOPED_TRACE(testing::Message() << providerName(provider) << ": " << createPointName(pc.point) << " at step '"
                                      << createStepName(pc.step) << "' on rank 1");
      const std::vector<size_t> before = freeMemoryPerRank();
      CreateFault fault = {pc.step, 1, ncclSystemError};
      fault.point = pc.point;
      injectCreateFault(&fault);
      const auto t0 = std::chrono::steady_clock::now();
      Outcome o = createAll([&](int r, ncclDcpContext_t* ctx) { return ncclDcpContextCreate(comms_[r], &c, ctx); });
      injectCreateFault(nullptr);
      EXPECT_LT(secondsSince(t0), 30.0);
      if (*pc.named == '\0') {
        for (int r = 0; r < kRanks; r++) EXPECT_EQ(o.res[r], ncclSuccess) << "rank " << r << ": " << o.msg[r];
        threads_.run(kRanks, [&](int r) {
          cudaSetDevice(r);
          if (o.ctxs[r] && ncclDcpContextDestroy(o.ctxs[r]) != ncclSuccess) threads_.addFailure(r, "destroy");
        });
      } else {
        expectSameFailure(o, ncclSystemError, pc.named, 1);
      }
      expectMemoryBack(before);
      createWorks(c);
      if (HasFailure()) return;
    }
  }
}

// cuda-ipc, one process (issue 34, item 4): rank 0 aborts its context and
// creates another on the same GPU while rank 1, late, still makes its call
// on the old one, writing into rank 0's old workspace through its pointer.
// That workspace must stay allocated until rank 1's context is gone: freed
// at the abort (the next create's flush), its range came back to the new
// workspace's cudaMalloc, and rank 1's late writes landed there.
TEST_F(CreateRanks, CudaIpcLateRankWritesIntoTheAbortedContextNotTheNextOne) {
  Env ipc;
  ipc.provider = ncclDcpProviderCudaIpc;
  setEnvForTesting(&ipc);
  ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBase2, 16);
  c.timeoutMs = 1000;
  createWorks(c);  // NCCL's and peer access's first use
  if (HasFailure()) return;
  const std::vector<size_t> before = freeMemoryPerRank();
  Outcome o = createAll([&](int r, ncclDcpContext_t* ctx) { return ncclDcpContextCreate(comms_[r], &c, ctx); });
  for (int r = 0; r < kRanks; r++) ASSERT_EQ(o.res[r], ncclSuccess) << "rank " << r << ": " << o.msg[r];
  Context* a0 = contextOf(o.ctxs[0]);
  ASSERT_NE(a0, nullptr);
  ASSERT_EQ(a0->provider, ncclDcpProviderCudaIpc);
  char* const old0 = (char*)a0->ownedMemory;
  const size_t bytes = a0->engine.layout.totalBytes;
  auto isDeviceMemory = [](const void* p) {
    cudaPointerAttributes a = {};
    const bool device = cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice;
    cudaGetLastError();
    return device;
  };

  // Rank 0 gives up on rank 1 and carries on alone: a new context on GPU 0.
  CUDA_ASSERT(cudaSetDevice(0));
  DCP_ASSERT(ncclDcpContextAbort(o.ctxs[0]));
  ncclComm_t solo = nullptr;
  int dev0 = 0;
  NCCL_TEST_ASSERT(ncclCommInitAll(&solo, 1, &dev0));
  ncclDcpContext_t b = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(solo, &c, &b));
  char* const new0 = (char*)contextOf(b)->ownedMemory;
  EXPECT_TRUE(new0 + bytes <= old0 || old0 + bytes <= new0)
      << "the aborted workspace's range came back to the next create while rank 1 may still write into it";
  EXPECT_TRUE(isDeviceMemory(old0)) << "the aborted workspace was freed while rank 1's context still maps it";
  std::vector<unsigned char> oldBefore(bytes), newBefore(bytes), oldAfter(bytes), newAfter(bytes);
  CUDA_ASSERT(cudaDeviceSynchronize());
  CUDA_ASSERT(cudaMemcpy(oldBefore.data(), old0, bytes, cudaMemcpyDeviceToHost));
  CUDA_ASSERT(cudaMemcpy(newBefore.data(), new0, bytes, cudaMemcpyDeviceToHost));

  // Rank 1, late: its call sends into rank 0's old workspace, then times out.
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, env(), &cfg), ncclSuccess);
  {
    DeviceProblem p(cfg, kRanks, 12, LseMix::Normal, freshSeed(), {0, 1});
    CUDA_ASSERT(cudaSetDevice(1));
    const CallBuffers b1 = p.buffers(1);
    DCP_ASSERT(ncclDcpA2aLseReduce(o.ctxs[1], b1.partialOut, (const float*)b1.partialLse, b1.out, b1.outLse, 12,
                                   nullptr, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
  }
  ncclResult_t async = ncclSuccess;
  DCP_ASSERT(ncclDcpGetAsyncError(o.ctxs[1], &async));
  EXPECT_EQ(async, ncclRemoteError) << "rank 1's call should have timed out waiting for rank 0";
  CUDA_ASSERT(cudaSetDevice(0));
  CUDA_ASSERT(cudaMemcpy(oldAfter.data(), old0, bytes, cudaMemcpyDeviceToHost));
  CUDA_ASSERT(cudaMemcpy(newAfter.data(), new0, bytes, cudaMemcpyDeviceToHost));
  EXPECT_NE(oldAfter, oldBefore) << "rank 1's late writes did not reach rank 0's old workspace: the test shows nothing";
  EXPECT_EQ(newAfter, newBefore) << "rank 1's late writes reached rank 0's new context";
  // The new context is correct.
  {
    DeviceProblem q(cfg, 1, 9, LseMix::Special, freshSeed(), {0});
    const CallBuffers qb = q.buffers(0);
    DCP_ASSERT(ncclDcpA2aLseReduce(b, qb.partialOut, (const float*)qb.partialLse, qb.out, qb.outLse, 9, nullptr,
                                   nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    const Mismatch m = q.check(0);
    EXPECT_EQ(m.count, 0u) << m.first;
  }

  // Rank 1 gives up too: the old workspace's last use is gone; it is freed
  // at GPU 0's next create or destroy (rank 0 aborted: deferred).
  CUDA_ASSERT(cudaSetDevice(1));
  DCP_ASSERT(ncclDcpContextAbort(o.ctxs[1]));
  CUDA_ASSERT(cudaSetDevice(0));
  DCP_ASSERT(ncclDcpContextDestroy(b));
  EXPECT_FALSE(isDeviceMemory(old0)) << "the old workspace outlived its last use";
  NCCL_TEST_ASSERT(ncclCommDestroy(solo));
  createWorks(c);  // both GPUs' deferred frees flushed, the communicator fine
  expectMemoryBack(before);
}

// One thread drives both GPUs (ncclDcpContextCreateGroup): the grouped
// gathers fail both contexts alike and release both.
TEST_F(CreateRanks, GroupCreateUnwindsEveryCommunicator) {
  std::vector<ncclComm_t> comms(kRanks);
  std::vector<int> devs = {0, 1};
  ASSERT_EQ(ncclCommInitAll(comms.data(), kRanks, devs.data()), ncclSuccess);
  const ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBaseE, 8);
  std::vector<ncclDcpContext_t> ctxs(kRanks, nullptr);
  DCP_ASSERT(ncclDcpContextCreateGroup(kRanks, comms.data(), &c, ctxs.data()));
  DCP_ASSERT(ncclDcpContextDestroyGroup(kRanks, ctxs.data()));
  const std::vector<size_t> before = freeMemoryPerRank();
  for (CreateStep step : {CreateStep::Workspace, CreateStep::MapPeers, CreateStep::Ready}) {
    const CreateFault fault = {step, 1, ncclSystemError};
    injectCreateFault(&fault);
    EXPECT_EQ(ncclDcpContextCreateGroup(kRanks, comms.data(), &c, ctxs.data()), ncclSystemError);
    injectCreateFault(nullptr);
    const std::string msg = ncclDcpGetLastError();
    EXPECT_NE(msg.find("step '" + std::string(createStepName(step)) + "' failed on rank 1"), std::string::npos) << msg;
    for (ncclDcpContext_t ctx : ctxs) EXPECT_EQ(ctx, nullptr);
  }
  expectMemoryBack(before);
  DCP_ASSERT(ncclDcpContextCreateGroup(kRanks, comms.data(), &c, ctxs.data()));
  DCP_ASSERT(ncclDcpContextDestroyGroup(kRanks, ctxs.data()));
  for (int r = 0; r < kRanks; r++) ncclCommDestroy(comms[r]);
}

// No symmetric memory (as under NCCL_CUMEM_ENABLE=0): every rank lands on
// cuda-ipc. Rank 1 alone without symmetric memory and without P2P to rank
// 0: every rank lands on the fallback, whose note names both GPUs. The
// calls are correct either way.
TEST_F(CreateRanks, ProviderIsAgreedWhenOneRankCannotPeer) {
  const ncclDcpConfig_t c = makeConfig(256, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  for (bool p2p : {true, false}) {
    SCOPED_TRACE(p2p ? "every pair peers" : "rank 1 cannot peer");
    alterRecordForTesting(-1, CreateStep::DeviceCommunicators, [](RankRecord* rec) {
      rec->devComm.capable = 0;
      rec->devComm.created = 0;
      rec->devComm.cumemDisabled = 1;
    });
    if (!p2p)  // replaces the alteration above
      alterRecordForTesting(1, CreateStep::DeviceCommunicators, [](RankRecord* rec) {
        rec->devComm.capable = 0;
        rec->devComm.created = 0;
        rec->ipc = {(int32_t)IpcBlock::NoP2p, 0};
      });
    Outcome o = createAll([&](int r, ncclDcpContext_t* ctx) { return ncclDcpContextCreate(comms_[r], &c, ctx); });
    alterRecordForTesting(-1, CreateStep::Count, nullptr);
    for (int r = 0; r < kRanks; r++) {
      ASSERT_EQ(o.res[r], ncclSuccess) << "rank " << r << ": " << o.msg[r];
      ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
      DCP_ASSERT(ncclDcpGetTopology(o.ctxs[r], &t));
      EXPECT_EQ(t.provider, p2p ? ncclDcpProviderCudaIpc : ncclDcpProviderFallback) << "rank " << r;
      const std::string note = t.pathNote;
      EXPECT_NE(note.find(p2p ? "NCCL_CUMEM_ENABLE=0" : "no P2P between GPU"), std::string::npos) << note;
      if (!p2p) {
        EXPECT_NE(note.find("(rank 1) and GPU"), std::string::npos) << note;
      }
    }
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, env(), &cfg), ncclSuccess);
    DeviceProblem p(cfg, kRanks, 19, LseMix::Special, freshSeed(), {0, 1});
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      const CallBuffers b = p.buffers(r);
      if (ncclDcpA2aLseReduce(o.ctxs[r], b.partialOut, (const float*)b.partialLse, b.out, b.outLse, 19, nullptr, nullptr) !=
          ncclSuccess)
        return threads_.addFailure(r, std::string("call: ") + ncclDcpGetLastError());
      const cudaError_t synced = cudaDeviceSynchronize();
      if (synced != cudaSuccess) return threads_.addFailure(r, std::string("sync: ") + cudaGetErrorString(synced));
      ncclResult_t async = ncclInternalError;
      if (ncclDcpGetAsyncError(o.ctxs[r], &async) != ncclSuccess || async != ncclSuccess)
        return threads_.addFailure(r, std::string("async error: ") + ncclDcpGetLastError());
      const Mismatch m = p.check(r);
      if (m.count) threads_.addFailure(r, std::to_string(m.count) + " mismatches, first " + m.first);
      if (ncclDcpContextDestroy(o.ctxs[r]) != ncclSuccess) threads_.addFailure(r, "destroy");
    });
  }
}

TEST_F(CreateRanks, NullWindowOnOneRankFailsEveryRank) {
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  size_t need = 0;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, kRanks, &need));
  std::vector<void*> pool(kRanks, nullptr);
  std::vector<ncclWindow_t> win(kRanks, nullptr);
  threads_.run(kRanks, [&](int r) {
    cudaSetDevice(r);
    if (ncclMemAlloc(&pool[r], need) != ncclSuccess) return threads_.addFailure(r, "ncclMemAlloc");
    if (ncclCommWindowRegister(comms_[r], pool[r], need, &win[r], NCCL_WIN_DEFAULT) != ncclSuccess)
      threads_.addFailure(r, "ncclCommWindowRegister");
  });
  if (HasFailure()) return;
  Outcome o = createAll([&](int r, ncclDcpContext_t* ctx) {
    return ncclDcpContextCreateInWindow(comms_[r], r == 1 ? nullptr : win[r], 0, need, &c, ctx);
  });
  expectSameFailure(o, ncclInvalidArgument, "step 'arguments' failed on rank 1: win is NULL", 1);
  threads_.run(kRanks, [&](int r) {
    cudaSetDevice(r);
    ncclCommWindowDeregister(comms_[r], win[r]);
    ncclMemFree(pool[r]);
  });
  createWorks(c);
}

// ---------------------------------------------------------------------------
// Every input that shapes the workspace, the protocol or the launches, from
// each of its sources: rank 1 differs, every rank refuses, naming it.

struct InputCase {
  const char* named;
  std::function<void(ncclDcpConfig_t*)> config;  // rank 1's config
  std::function<void(Env*)> environment;         // rank 1's environment
  void (*alter)(Agreement*);                     // rank 1's record (build options)
};

ncclDcpConfig_t withUnset(ncclDcpConfig_t c, int ncclDcpConfig_t::*field) {
  c.*field = NCCL_CONFIG_UNDEF_INT;
  return c;
}

TEST_F(CreateRanks, EveryInputMismatchIsRefusedOnEveryRank) {
  const ncclDcpConfig_t base = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 16, ncclDcpProtoAuto);
  const std::vector<InputCase> cases = {
      {"config->headDim", [](ncclDcpConfig_t* c) { c->headDim = 256; }, nullptr, nullptr},
      {"config->localHeads", [](ncclDcpConfig_t* c) { c->localHeads = 8; }, nullptr, nullptr},
      {"config->dtype", [](ncclDcpConfig_t* c) { c->dtype = ncclFloat16; }, nullptr, nullptr},
      {"config->lseBase", [](ncclDcpConfig_t* c) { c->lseBase = ncclDcpLseBaseE; }, nullptr, nullptr},
      {"config->maxBatch", [](ncclDcpConfig_t* c) { c->maxBatch = 32; }, nullptr, nullptr},
      {"config->protocol", [](ncclDcpConfig_t* c) { c->protocol = ncclDcpProtoLL; }, nullptr, nullptr},
      {"config->timeoutMs", [](ncclDcpConfig_t* c) { c->timeoutMs = 1000; }, nullptr, nullptr},
      {"NCCL_DCP_MAX_BATCH", [](ncclDcpConfig_t* c) { *c = withUnset(*c, &ncclDcpConfig_t::maxBatch); },
       [](Env* e) { e->maxBatch = 32; }, nullptr},
      {"NCCL_DCP_PROTO", [](ncclDcpConfig_t* c) { *c = withUnset(*c, &ncclDcpConfig_t::protocol); },
       [](Env* e) { e->protocol = ncclDcpProtoLL; }, nullptr},
      {"NCCL_DCP_TIMEOUT_MS", [](ncclDcpConfig_t* c) { *c = withUnset(*c, &ncclDcpConfig_t::timeoutMs); },
       [](Env* e) { e->timeoutMs = 1000; }, nullptr},
      {"NCCL_DCP_SIMPLE_MIN_ROWS", nullptr, [](Env* e) { e->simpleMinRows = 8; }, nullptr},
      {"NCCL_DCP_PDL", nullptr, [](Env* e) { e->pdl = 0; }, nullptr},
      {"NCCL_DCP_PROVIDER", nullptr, [](Env* e) { e->forceFallback = true; }, nullptr},
      {"NCCL_DCP_PROVIDER", nullptr, [](Env* e) { e->provider = ncclDcpProviderCudaIpc; }, nullptr},
      {"ll128_reread", nullptr, nullptr, [](Agreement* a) { a->ll128Reread = !a->ll128Reread; }},
  };
  for (const InputCase& in : cases) {
    SCOPED_TRACE(in.named);
    // The config-unset cases leave the field unset on both ranks, so only
    // the environment of rank 1 differs.
    ncclDcpConfig_t cfg0 = base, cfg1 = base;
    if (in.config) in.config(&cfg1);
    if (in.environment && in.config) in.config(&cfg0);
    std::vector<Env> envs(kRanks);
    if (in.environment) in.environment(&envs[1]);
    alterAgreementForTesting(1, in.alter);
    Outcome o = createAll(
        [&](int r, ncclDcpContext_t* ctx) { return ncclDcpContextCreate(comms_[r], r == 1 ? &cfg1 : &cfg0, ctx); },
        &envs);
    alterAgreementForTesting(-1, nullptr);
    expectSameFailure(o, ncclInvalidUsage, in.named, 1);
    for (const std::string& m : o.msg) EXPECT_NE(m.find("step 'agree'"), std::string::npos) << m;
  }
  createWorks(base);
}

// Own workspace on one rank, the application's window on the other; and two
// different offsets into the application's window.
TEST_F(CreateRanks, WindowMismatchIsRefusedOnEveryRank) {
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  size_t need = 0;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, kRanks, &need));
  const size_t bytes = need + NCCL_WIN_REQUIRED_ALIGNMENT;
  std::vector<void*> pool(kRanks, nullptr);
  std::vector<ncclWindow_t> win(kRanks, nullptr);
  threads_.run(kRanks, [&](int r) {
    cudaSetDevice(r);
    if (ncclMemAlloc(&pool[r], bytes) != ncclSuccess) return threads_.addFailure(r, "ncclMemAlloc");
    if (ncclCommWindowRegister(comms_[r], pool[r], bytes, &win[r], NCCL_WIN_DEFAULT) != ncclSuccess)
      threads_.addFailure(r, "ncclCommWindowRegister");
  });
  if (HasFailure()) return;
  Outcome o = createAll([&](int r, ncclDcpContext_t* ctx) {
    return r == 0 ? ncclDcpContextCreateInWindow(comms_[r], win[r], 0, need, &c, ctx)
                  : ncclDcpContextCreate(comms_[r], &c, ctx);
  });
  expectSameFailure(o, ncclInvalidUsage, "window (own vs. application's)", 1);
  o = createAll([&](int r, ncclDcpContext_t* ctx) {
    return ncclDcpContextCreateInWindow(comms_[r], win[r], r * NCCL_WIN_REQUIRED_ALIGNMENT, need, &c, ctx);
  });
  expectSameFailure(o, ncclInvalidUsage, "window offset", 1);
  threads_.run(kRanks, [&](int r) {
    cudaSetDevice(r);
    ncclCommWindowDeregister(comms_[r], win[r]);
    ncclMemFree(pool[r]);
  });
  createWorks(c);
}

// ---------------------------------------------------------------------------
// Abort: rank 1 goes silent; rank 0's call times out; rank 0 aborts within a
// second -- also with an NCCL all-gather stuck on the silent rank on another
// stream -- and ncclCommAbort works after it; the process lives on.

TEST_F(CreateRanks, AbortAfterSilentPeer) {
  for (bool stuckCollective : {false, true}) {
    SCOPED_TRACE(stuckCollective ? "with an NCCL collective stuck on the silent rank" : "alone");
    ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBase2, 8);
    c.timeoutMs = 500;
    Outcome o = createAll([&](int r, ncclDcpContext_t* ctx) { return ncclDcpContextCreate(comms_[r], &c, ctx); });
    for (int r = 0; r < kRanks; r++) ASSERT_EQ(o.res[r], ncclSuccess) << o.msg[r];
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess);
    DeviceProblem p(cfg, kRanks, 20, LseMix::Normal, freshSeed(), {0, 1});
    DeviceBuffer gathered;
    cudaStream_t side = nullptr;
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      if (r == 1) return;  // silent
      const CallBuffers b = p.buffers(0);
      if (ncclDcpA2aLseReduce(o.ctxs[0], b.partialOut, (const float*)b.partialLse, b.out, b.outLse, 20, nullptr, nullptr) !=
          ncclSuccess)
        return threads_.addFailure(r, std::string("call: ") + ncclDcpGetLastError());
      cudaStreamSynchronize(nullptr);
      ncclResult_t async = ncclSuccess;
      ncclDcpGetAsyncError(o.ctxs[0], &async);
      if (async != ncclRemoteError) return threads_.addFailure(r, "no timeout reported");
      if (stuckCollective) {
        gathered = DeviceBuffer(4096 * kRanks);
        cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        ncclAllGather(gathered.ptr, gathered.ptr, 4096, ncclUint8, comms_[0], side);
        if (cudaStreamQuery(side) != cudaErrorNotReady)
          threads_.addFailure(r, "the all-gather was expected to be stuck");
      }
      const auto t0 = std::chrono::steady_clock::now();
      if (ncclDcpContextAbort(o.ctxs[0]) != ncclSuccess)
        threads_.addFailure(r, std::string("abort: ") + ncclDcpGetLastError());
      const double s = secondsSince(t0);
      if (s > 1.0) threads_.addFailure(r, "abort took " + std::to_string(s) + " s");
    });
    // Both ranks abort their communicators (the silent one too: its peer is gone).
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      if (r == 1 && ncclDcpContextAbort(o.ctxs[1]) != ncclSuccess)
        threads_.addFailure(r, "abort of the silent rank's context");
      if (ncclCommAbort(comms_[r]) != ncclSuccess) threads_.addFailure(r, "ncclCommAbort");
      comms_[r] = nullptr;
      if (r == 0 && side) {
        if (cudaStreamSynchronize(side) != cudaSuccess)
          threads_.addFailure(r, "the stuck all-gather did not end with ncclCommAbort");
        cudaStreamDestroy(side);
      }
    });
    gathered = DeviceBuffer();
    initComms();
    createWorks(c);
    if (HasFailure()) return;
  }
}

// Abort while a call is still waiting: rank 1 stays silent, rank 0's call
// would wait 20 s for it (timeoutMs 20000). Rank 0's abort sends the stop
// to its kernel: abort returns within a second with the call's stream idle.
// Without the stop, abort gives up on the drain after kAbortDrainMs and
// returns as well (success: the memory is left in place), so only the
// stream tells: the kernel would still be waiting out its timeout.
TEST_F(CreateRanks, AbortStopsAWaitingCallAtOnce) {
  ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBase2, 8);
  c.timeoutMs = 20000;
  Outcome o = createAll([&](int r, ncclDcpContext_t* ctx) { return ncclDcpContextCreate(comms_[r], &c, ctx); });
  for (int r = 0; r < kRanks; r++) ASSERT_EQ(o.res[r], ncclSuccess) << o.msg[r];
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess);
  DeviceProblem p(cfg, kRanks, 20, LseMix::Normal, freshSeed(), {0, 1});
  threads_.run(kRanks, [&](int r) {
    cudaSetDevice(r);
    if (r == 1) return;  // silent
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const CallBuffers b = p.buffers(0);
    if (ncclDcpA2aLseReduce(o.ctxs[0], b.partialOut, (const float*)b.partialLse, b.out, b.outLse, 20, nullptr, s) !=
        ncclSuccess) {
      threads_.addFailure(r, std::string("call: ") + ncclDcpGetLastError());
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      while (cudaStreamQuery(s) == cudaErrorNotReady && secondsSince(t0) < 0.2) {
      }
      if (cudaStreamQuery(s) != cudaErrorNotReady)
        threads_.addFailure(r, "the call did not wait for the silent rank: the test shows nothing");
      const auto t1 = std::chrono::steady_clock::now();
      if (ncclDcpContextAbort(o.ctxs[0]) != ncclSuccess)
        threads_.addFailure(r, std::string("abort: ") + ncclDcpGetLastError());
      const double seconds = secondsSince(t1);
      if (seconds > 1.0) threads_.addFailure(r, "abort took " + std::to_string(seconds) + " s");
      if (cudaStreamQuery(s) != cudaSuccess)
        threads_.addFailure(r, "abort returned with the call still waiting: the stop did not reach the kernel");
    }
    cudaStreamSynchronize(s);  // at the latest when its wait times out
    cudaStreamDestroy(s);
    cudaGetLastError();
  });
  threads_.run(kRanks, [&](int r) {
    cudaSetDevice(r);
    if (r == 1 && ncclDcpContextAbort(o.ctxs[1]) != ncclSuccess)
      threads_.addFailure(r, "abort of the silent rank's context");
    if (ncclCommAbort(comms_[r]) != ncclSuccess) threads_.addFailure(r, "ncclCommAbort");
    comms_[r] = nullptr;
  });
  initComms();
  createWorks(c);
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
