/*************************************************************************
 * The collective on real NCCL ranks, one GPU per rank: one thread per rank
 * (ncclCommInitRank), and one thread driving every GPU (ncclCommInitAll +
 * ncclDcpContextCreateGroup). Each test runs at cp = 2, 3, 4, 6 and 8
 * (non-powers of two included) when that many GPUs are present; with fewer
 * it skips, or fails when NCCL_DCP_REQUIRE_GPU promises at least that many.
 *
 * This is where the transports, LSA pointers to other GPUs, remote waits
 * and the agreement between ranks run through NCCL; on one GPU they run
 * only through loopback (test_loopback.cc).
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "context.h"
#include "device_problem.h"
#include "handles.h"
#include "reference.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

// Far above any test's calls (bounded waits end in seconds): a rank thread
// still out is stuck.
constexpr double kHangSeconds = 300;

// How a call is made.
struct CallOptions {
  bool strided = false;    // paddedStrides instead of strides NULL (packed)
  bool withOutLse = true;  // false: outLse NULL
};

// One collective call over fresh inputs: every rank's host data, the
// reference of the whole collective, and what each rank got back.
struct Collective {
  Config cfg;
  int batch = 0;
  CallOptions options;
  Strides strides;
  ncclDcpStrides_t api;
  std::vector<RankTensors> host, want, got;
  std::vector<ncclResult_t> called, async;  // per rank: the call's result, the context's async error

  const ncclDcpStrides_t* apiStrides() const { return options.strided ? &api : nullptr; }
};

// One rank's call of the Collective x on its buffers.
ncclResult_t callOn(RankBuffers& b, ncclDcpContext_t ctx, const Collective& x, cudaStream_t stream) {
  float* outLse = b.outLse.bytes ? b.outLse.as<float>() : nullptr;
  return ncclDcpA2aLseReduce(ctx, b.in.ptr, b.lse.as<float>(), b.out.ptr, outLse, x.batch, x.apiStrides(), stream);
}

#define CUDA_OR_FAIL(r, cmd)                                                                           \
  do {                                                                                                 \
    cudaError_t e_ = (cmd);                                                                            \
    if (e_ != cudaSuccess) return threads_.addFailure(r, std::string(#cmd) + ": " + cudaGetErrorString(e_)); \
  } while (0)

// The suite runs once per workspace provider of the fused path: NCCL's
// window, and CUDA IPC mappings of our own (threads of one process: peer
// access; processes: the perf binary's mpirun cases).
class Ranks : public testing::TestWithParam<std::tuple<int, int>> {
 protected:
  void SetUp() override {
    nRanks_ = std::get<0>(GetParam());
    provider_.provider = std::get<1>(GetParam());
    setEnvForTesting(&provider_);  // tests that set an environment of their own replace it
    DCP_REQUIRE_GPUS(nRanks_);
    ASSERT_EQ(ncclGetUniqueId(&id_), ncclSuccess);
    comms_.assign(nRanks_, nullptr);
    // One thread per rank, as one process per GPU would.
    threads_.run(nRanks_, [&](int r) {
      cudaSetDevice(r);
      ncclResult_t res = ncclCommInitRank(&comms_[r], nRanks_, id_, r);
      if (res != ncclSuccess) threads_.addFailure(r, std::string("ncclCommInitRank: ") + ncclGetErrorString(res));
    });
  }
  void TearDown() override {
    for (int r = 0; r < (int)comms_.size(); r++)
      if (comms_[r]) {
        cudaSetDevice(r);
        ncclCommDestroy(comms_[r]);
      }
    setEnvForTesting(nullptr);
  }

  // Fresh inputs for every rank and the reference of the whole collective.
  Collective prepare(const ncclDcpConfig_t& c, int batch, const CallOptions& o = {}) {
    Collective x;
    EXPECT_EQ(resolveConfig(&c, Env(), &x.cfg), ncclSuccess) << ncclDcpGetLastError();
    x.batch = batch;
    x.options = o;
    x.strides = o.strided ? paddedStrides(x.cfg, nRanks_) : packedStrides(x.cfg, nRanks_);
    x.api = test::apiStrides(x.strides);
    std::mt19937_64 rng(freshSeed());
    x.host = makeInputs(x.cfg, nRanks_, batch, x.strides, LseMix::Special, rng);
    if (!o.withOutLse)
      for (RankTensors& t : x.host) t.outLse.clear();
    x.want = x.got = x.host;
    std::vector<CallBuffers> ref;
    for (RankTensors& t : x.want) ref.push_back(t.buffers());
    referenceA2aLseReduce(x.cfg, nRanks_, batch, x.strides, ref.data());
    x.called.assign(nRanks_, ncclInternalError);
    x.async.assign(nRanks_, ncclInternalError);
    return x;
  }

  // Runs x on every rank, each in its own thread on its legacy stream;
  // rank r waits delayMs(r) before its call. Records results, checks none.
  void run(Collective& x, const std::vector<ncclDcpContext_t>& ctxs,
           const std::function<int(int)>& delayMs = nullptr) {
    threads_.run(nRanks_, [&](int r) {
      CUDA_OR_FAIL(r, cudaSetDevice(r));
      RankBuffers b(x.host[r]);
      CUDA_OR_FAIL(r, b.upload(x.host[r], nullptr));
      if (delayMs) std::this_thread::sleep_for(std::chrono::milliseconds(delayMs(r)));
      x.called[r] = callOn(b, ctxs[r], x, nullptr);
      if (x.called[r] != ncclSuccess) return threads_.addFailure(r, std::string("call: ") + ncclDcpGetLastError());
      CUDA_OR_FAIL(r, cudaDeviceSynchronize());
      ncclDcpGetAsyncError(ctxs[r], &x.async[r]);
      CUDA_OR_FAIL(r, b.download(&x.got[r], nullptr));
    });
  }

  // Every rank's call and context succeeded, every output matches the
  // reference, everything outside the views is still poisoned.
  void expectCorrect(const Collective& x) {
    for (int r = 0; r < nRanks_; r++) {
      EXPECT_EQ(x.called[r], ncclSuccess) << "rank " << r;
      EXPECT_EQ(x.async[r], ncclSuccess) << "rank " << r;
      std::string first;
      EXPECT_EQ(touchedPadding(x.cfg, x.batch, x.strides, x.got[r], &first), 0u) << "rank " << r << ": " << first;
    }
    const Mismatch m = withOracle(compareOutputs(x.cfg, nRanks_, x.batch, x.strides, x.got, x.want),
                                  oracleMismatches(oracleProblem(x.cfg, nRanks_, x.batch, x.strides, x.host), x.got));
    EXPECT_EQ(m.count, 0u) << m.first;
  }

  void callAndCheck(const std::vector<ncclDcpContext_t>& ctxs, const ncclDcpConfig_t& c, int batch,
                    const CallOptions& o = {}) {
    SCOPED_TRACE(testing::Message() << "cp " << nRanks_ << " batch " << batch << (o.strided ? " strided" : "")
                                    << (o.withOutLse ? "" : " outLse NULL"));
    Collective x = prepare(c, batch, o);
    run(x, ctxs);
    expectCorrect(x);
  }

  // Creates a context on every rank, each with its own config and, when
  // given, its own way to create (default ncclDcpContextCreate). Without
  // `results` a failed create is a test failure.
  std::vector<ncclDcpContext_t> createAll(
      const std::function<ncclDcpConfig_t(int)>& cfgOf, std::vector<ncclResult_t>* results = nullptr,
      std::vector<std::string>* messages = nullptr,
      const std::function<ncclResult_t(int, const ncclDcpConfig_t*, ncclDcpContext_t*)>& create = nullptr) {
    std::vector<ncclDcpContext_t> ctxs(nRanks_, nullptr);
    std::vector<ncclResult_t> res(nRanks_);
    std::vector<std::string> msg(nRanks_);
    threads_.run(nRanks_, [&](int r) {
      cudaSetDevice(r);
      const ncclDcpConfig_t c = cfgOf(r);
      res[r] = create ? create(r, &c, &ctxs[r]) : ncclDcpContextCreate(comms_[r], &c, &ctxs[r]);
      msg[r] = ncclDcpGetLastError();
      if (!results && res[r] != ncclSuccess) threads_.addFailure(r, "create: " + msg[r]);
    });
    if (results) *results = res;
    if (messages) *messages = msg;
    return ctxs;
  }

  void destroyAll(std::vector<ncclDcpContext_t>& ctxs) {
    threads_.run(nRanks_, [&](int r) {
      cudaSetDevice(r);
      if (ncclDcpContextDestroy(ctxs[r]) != ncclSuccess)
        threads_.addFailure(r, std::string("destroy: ") + ncclDcpGetLastError());
    });
  }

  // Every rank refused to create, with ncclInvalidUsage and one message
  // naming `field` and the last rank (the one that differs).
  void expectRefusedAlike(const std::vector<ncclDcpContext_t>& ctxs, const std::vector<ncclResult_t>& res,
                          const std::vector<std::string>& msg, const std::string& field) {
    for (int r = 0; r < nRanks_; r++) {
      EXPECT_EQ(res[r], ncclInvalidUsage) << "rank " << r;
      EXPECT_EQ(ctxs[r], nullptr) << "rank " << r;
      EXPECT_NE(msg[r].find(field), std::string::npos) << msg[r];
      EXPECT_NE(msg[r].find("rank " + std::to_string(nRanks_ - 1)), std::string::npos) << msg[r];
      EXPECT_EQ(msg[r], msg[0]);
    }
  }

  // Every rank's window over `bytes` of ncclMemAlloc memory filled with
  // 0x5a: allocated on every rank first, then registered (a collective
  // step every rank must reach).
  void registerWindows(size_t bytes, std::vector<void*>* pools, std::vector<ncclWindow_t>* wins) {
    pools->assign(nRanks_, nullptr);
    wins->assign(nRanks_, nullptr);
    threads_.run(nRanks_, [&](int r) {
      CUDA_OR_FAIL(r, cudaSetDevice(r));
      if (ncclMemAlloc(&(*pools)[r], bytes) != ncclSuccess) return threads_.addFailure(r, "ncclMemAlloc");
      CUDA_OR_FAIL(r, cudaMemset((*pools)[r], 0x5a, bytes));
    });
    if (HasFailure()) return;
    threads_.run(nRanks_, [&](int r) {
      cudaSetDevice(r);
      if (ncclCommWindowRegister(comms_[r], (*pools)[r], bytes, &(*wins)[r], NCCL_WIN_DEFAULT) != ncclSuccess)
        threads_.addFailure(r, std::string("ncclCommWindowRegister: ") + ncclGetLastError(comms_[r]));
    });
  }

  void releaseWindows(std::vector<void*>& pools, std::vector<ncclWindow_t>& wins) {
    threads_.run(nRanks_, [&](int r) {
      cudaSetDevice(r);
      if (wins[r] && ncclCommWindowDeregister(comms_[r], wins[r]) != ncclSuccess) threads_.addFailure(r, "deregister");
      if (pools[r]) ncclMemFree(pools[r]);
    });
  }

  ncclDcpPath_t pathOf(ncclDcpContext_t ctx) {
    ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
    EXPECT_EQ(ncclDcpGetTopology(ctx, &t), ncclSuccess) << ncclDcpGetLastError();
    return (ncclDcpPath_t)t.path;
  }

  int nRanks_ = 0;
  Env provider_;
  ncclUniqueId id_;
  std::vector<ncclComm_t> comms_;
  RankThreads threads_{kHangSeconds};
};

INSTANTIATE_TEST_SUITE_P(Cp, Ranks,
                         testing::Combine(testing::Values(2, 3, 4, 6, 8),
                                          testing::Values(ncclDcpProviderNcclWindow, ncclDcpProviderCudaIpc)),
                         [](const testing::TestParamInfo<std::tuple<int, int>>& i) {
                           return "cp" + std::to_string(std::get<0>(i.param)) +
                                  (std::get<1>(i.param) == ncclDcpProviderCudaIpc ? "_ipc" : "");
                         });

TEST_P(Ranks, EveryProtocolMatchesReference) {
  for (int proto : {ncclDcpProtoAuto, ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple})
    for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16, ncclFloat32}) {
      SCOPED_TRACE(testing::Message() << protocolName(proto) << " " << dtypeName(dtype));
      const ncclDcpConfig_t c = makeConfig(512, 16, dtype, dtype == ncclFloat16 ? ncclDcpLseBaseE : ncclDcpLseBase2, 8, proto);
      auto ctxs = createAll([&](int) { return c; });
      if (HasFailure()) return;
      EXPECT_EQ(pathOf(ctxs[0]), ncclDcpPathFused) << "ranks of one node should share an LSA team";
      ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
      DCP_ASSERT(ncclDcpGetTopology(ctxs[0], &t));
      EXPECT_EQ(t.provider, provider_.provider);
      EXPECT_EQ(t.lsaSize, nRanks_);
      for (int batch : {1, 3, 8, 9, 40}) callAndCheck(ctxs, c, batch);
      destroyAll(ctxs);
    }
}

TEST_P(Ranks, ShapesThatFillNoWholeLine) {
  for (auto [D, Hl] : {std::pair{64, 1}, std::pair{72, 3}, std::pair{128, 64}, std::pair{8, 4}}) {
    const ncclDcpConfig_t c = makeConfig(D, Hl, ncclBfloat16, ncclDcpLseBase2, 16);
    auto ctxs = createAll([&](int) { return c; });
    if (HasFailure()) return;
    callAndCheck(ctxs, c, 17);
    destroyAll(ctxs);
  }
}

// Heads longer than 512 elements and more than 64 local heads.
TEST_P(Ranks, HeadDimsAbove512AndHeadCountsAbove64) {
  for (auto [D, Hl] : {std::pair{1024, 2}, std::pair{NCCL_DCP_MAX_HEAD_DIM, 1}, std::pair{64, 128}}) {
    SCOPED_TRACE(testing::Message() << "D " << D << " Hl " << Hl);
    const ncclDcpConfig_t c = makeConfig(D, Hl, ncclBfloat16, ncclDcpLseBaseE, 4);
    auto ctxs = createAll([&](int) { return c; });
    if (HasFailure()) return;
    callAndCheck(ctxs, c, 9);
    destroyAll(ctxs);
  }
}

// Strided views and a NULL outLse through the public entry point, chunked
// batches included, on the fused and the fallback path.
TEST_P(Ranks, StridedViewsAndNullOutLse) {
  for (bool fallback : {false, true}) {
    SCOPED_TRACE(fallback ? "fallback" : "fused");
    std::unique_ptr<ScopedEnv> env(fallback ? new ScopedEnv(forcedFallbackEnv()) : nullptr);
    const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
    auto ctxs = createAll([&](int) { return c; });
    if (HasFailure()) return;
    EXPECT_EQ(pathOf(ctxs[0]), fallback ? ncclDcpPathFallback : ncclDcpPathFused);
    for (int batch : {1, 8, 21}) {
      callAndCheck(ctxs, c, batch, {/*strided=*/true, /*withOutLse=*/true});
      callAndCheck(ctxs, c, batch, {/*strided=*/false, /*withOutLse=*/false});
      callAndCheck(ctxs, c, batch, {/*strided=*/true, /*withOutLse=*/false});
    }
    destroyAll(ctxs);
  }
}

TEST_P(Ranks, ForcedFallback) {
  ScopedEnv env(forcedFallbackEnv());
  const ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBaseE, 8);
  auto ctxs = createAll([&](int) { return c; });
  if (HasFailure()) return;
  EXPECT_EQ(pathOf(ctxs[0]), ncclDcpPathFallback);
  for (int batch : {1, 8, 21}) callAndCheck(ctxs, c, batch);
  destroyAll(ctxs);
}

// AUTO with NCCL_DCP_SIMPLE_MIN_ROWS: rounds of at least 5 rows run SIMPLE,
// shorter ones LL128, in one call and across calls.
TEST_P(Ranks, AutoSwitchesLargeRoundsToSimple) {
  Env e;
  e.simpleMinRows = 5;
  ScopedEnv env(e);
  const ncclDcpConfig_t c = makeConfig(256, 4, ncclBfloat16, ncclDcpLseBase2, 8, ncclDcpProtoAuto);
  auto ctxs = createAll([&](int) { return c; });
  if (HasFailure()) return;
  for (int batch : {19, 3, 8, 4, 13, 1, 40}) callAndCheck(ctxs, c, batch);
  destroyAll(ctxs);
}

// The workspace carved from the application's windows, on the fused path
// and under the forced fallback.
TEST_P(Ranks, InsideTheApplicationsWindows) {
  for (bool fallback : {false, true}) {
    SCOPED_TRACE(fallback ? "fallback" : "fused");
    std::unique_ptr<ScopedEnv> env(fallback ? new ScopedEnv(forcedFallbackEnv()) : nullptr);
    const ncclDcpConfig_t c = makeConfig(256, 4, ncclFloat16, ncclDcpLseBase2, 8);
    size_t need = 0;
    DCP_ASSERT(ncclDcpWorkspaceSize(&c, nRanks_, &need));
    const size_t offset = NCCL_WIN_REQUIRED_ALIGNMENT;
    std::vector<void*> pools;
    std::vector<ncclWindow_t> wins;
    registerWindows(offset + need, &pools, &wins);
    if (!HasFailure()) {
      auto ctxs = createAll([&](int) { return c; }, nullptr, nullptr,
                            [&](int r, const ncclDcpConfig_t* cfg, ncclDcpContext_t* ctx) {
                              return ncclDcpContextCreateInWindow(comms_[r], wins[r], offset, need, cfg, ctx);
                            });
      if (!HasFailure()) {
        EXPECT_EQ(pathOf(ctxs[0]), fallback ? ncclDcpPathFallback : ncclDcpPathFused);
        for (int batch : {3, 8, 19}) callAndCheck(ctxs, c, batch);
        callAndCheck(ctxs, c, 11, {/*strided=*/true, /*withOutLse=*/false});
        destroyAll(ctxs);
      }
    }
    releaseWindows(pools, wins);
  }
}

// Every rank returns the same error, naming the field and the rank, for
// any field of the config that differs on one rank.
TEST_P(Ranks, ConfigMismatchFailsEveryRankAlike) {
  const ncclDcpConfig_t base = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 64, ncclDcpProtoAuto);
  const std::pair<const char*, std::function<void(ncclDcpConfig_t&)>> changes[] = {
      {"config->headDim", [](ncclDcpConfig_t& c) { c.headDim = 256; }},
      {"config->localHeads", [](ncclDcpConfig_t& c) { c.localHeads = 8; }},
      {"config->dtype", [](ncclDcpConfig_t& c) { c.dtype = ncclFloat16; }},
      {"config->lseBase", [](ncclDcpConfig_t& c) { c.lseBase = ncclDcpLseBaseE; }},
      {"config->maxBatch", [](ncclDcpConfig_t& c) { c.maxBatch = 32; }},
      {"config->protocol", [](ncclDcpConfig_t& c) { c.protocol = ncclDcpProtoLL; }},
      {"config->timeoutMs", [](ncclDcpConfig_t& c) { c.timeoutMs = 1234; }},
      // The scatter mode shapes the workspace rows (Hl or cp * Hl heads);
      // the LSE dtype is agreed as issue 27 asks.
      {"config->scatter", [](ncclDcpConfig_t& c) { c.scatter = ncclDcpScatterToken; }},
      {"config->lseDtype", [](ncclDcpConfig_t& c) { c.lseDtype = ncclBfloat16; }},
  };
  for (const auto& [field, change] : changes) {
    SCOPED_TRACE(field);
    std::vector<ncclResult_t> res;
    std::vector<std::string> msg;
    auto ctxs = createAll(
        [&](int r) {
          ncclDcpConfig_t c = base;
          if (r == nRanks_ - 1) change(c);
          return c;
        },
        &res, &msg);
    expectRefusedAlike(ctxs, res, msg, field);
  }
}

// The application's window on some ranks and not on others, or at another
// offset: every rank refuses alike before anything is allocated.
TEST_P(Ranks, WindowMismatchFailsEveryRankAlike) {
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  size_t need = 0;
  DCP_ASSERT(ncclDcpWorkspaceSize(&c, nRanks_, &need));
  const size_t align = NCCL_WIN_REQUIRED_ALIGNMENT;
  std::vector<void*> pools;
  std::vector<ncclWindow_t> wins;
  registerWindows(2 * align + need, &pools, &wins);
  const int last = nRanks_ - 1;
  if (!HasFailure()) {
    std::vector<ncclResult_t> res;
    std::vector<std::string> msg;
    // The last rank allocates its own workspace, the others use their windows.
    auto ctxs = createAll([&](int) { return c; }, &res, &msg,
                          [&](int r, const ncclDcpConfig_t* cfg, ncclDcpContext_t* ctx) {
                            return r == last ? ncclDcpContextCreate(comms_[r], cfg, ctx)
                                             : ncclDcpContextCreateInWindow(comms_[r], wins[r], align, need, cfg, ctx);
                          });
    expectRefusedAlike(ctxs, res, msg, "window (own vs. application's)");
    // Every rank in its window, the last one at another offset.
    ctxs = createAll([&](int) { return c; }, &res, &msg, [&](int r, const ncclDcpConfig_t* cfg, ncclDcpContext_t* ctx) {
      return ncclDcpContextCreateInWindow(comms_[r], wins[r], r == last ? 2 * align : align, need, cfg, ctx);
    });
    expectRefusedAlike(ctxs, res, msg, "window offset");
  }
  releaseWindows(pools, wins);
}

// A rank that never calls: every other rank reports a timeout within the
// configured time, and the processes live on.
TEST_P(Ranks, SilentRankTimesOut) {
  ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  c.timeoutMs = 500;
  auto ctxs = createAll([&](int) { return c; });
  if (HasFailure()) return;
  const int silent = nRanks_ - 1;
  threads_.run(nRanks_, [&](int r) {
    if (r == silent) return;
    cudaSetDevice(r);
    DeviceBuffer in(1 << 20), lse(1 << 14), out(1 << 20);
    const auto t0 = std::chrono::steady_clock::now();
    if (ncclDcpA2aLseReduce(ctxs[r], in.ptr, lse.as<float>(), out.ptr, nullptr, 4, nullptr, nullptr) != ncclSuccess)
      return threads_.addFailure(r, std::string("call: ") + ncclDcpGetLastError());
    cudaDeviceSynchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ncclResult_t async = ncclSuccess;
    ncclDcpGetAsyncError(ctxs[r], &async);
    if (async != ncclRemoteError) threads_.addFailure(r, "no timeout reported");
    if (s > 5.0) threads_.addFailure(r, "timeout took " + std::to_string(s) + " s");
    // Poisoned: the next call fails at once and leaves NaN, not stale data.
    CUDA_OR_FAIL(r, cudaMemset(out.ptr, 0, out.bytes));
    if (ncclDcpA2aLseReduce(ctxs[r], in.ptr, lse.as<float>(), out.ptr, nullptr, 4, nullptr, nullptr) != ncclRemoteError)
      return threads_.addFailure(r, "a call on the poisoned context did not return its error");
    CUDA_OR_FAIL(r, cudaDeviceSynchronize());
    std::vector<uint16_t> got(4 * 4 * 128);
    CUDA_OR_FAIL(r, cudaMemcpy(got.data(), out.ptr, got.size() * 2, cudaMemcpyDeviceToHost));
    for (uint16_t bits : got)
      if ((bits & 0x7fff) <= 0x7f80) return threads_.addFailure(r, "a poisoned call left a non-NaN output");
  });
  threads_.run(nRanks_, [&](int r) {  // abort, as an engine would after the timeout
    cudaSetDevice(r);
    if (ncclDcpContextAbort(ctxs[r]) != ncclSuccess) threads_.addFailure(r, "abort");
  });
}

// Destroy exchanges nothing with the peers (include/nccl_dcp.h): after a
// call on every rank, rank 0 destroys its context while every other rank
// still holds its own and waits (at most 10 s) for rank 0's destroy to
// return before destroying. A destroy with a collective step (a barrier, a
// collective deregistration or device-communicator teardown) would wait
// for the peers' destroys, which wait for it: the 10 s. One GPU cannot
// show it (a one-rank communicator's collectives complete alone).
TEST_P(Ranks, DestroyExchangesNothingWithPeers) {
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  auto ctxs = createAll([&](int) { return c; });
  if (HasFailure()) return;
  callAndCheck(ctxs, c, 5);
  std::atomic<bool> firstDestroyed{false};
  std::vector<double> ms(nRanks_, 0.0);
  threads_.run(nRanks_, [&](int r) {
    cudaSetDevice(r);
    if (r != 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!firstDestroyed.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (ncclDcpContextDestroy(ctxs[r]) != ncclSuccess)
      threads_.addFailure(r, std::string("destroy: ") + ncclDcpGetLastError());
    ms[r] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r == 0) firstDestroyed = true;
  });
  EXPECT_LT(ms[0], 5000.0) << "rank 0's destroy waited for its peers' destroys";
}

// timeoutMs = 0 waits as long as a peer takes, whatever the default: with
// NCCL_DCP_TIMEOUT_MS=500 in the environment, the last rank calls 2 s after
// the others and every rank completes, correct, with no error (a build that
// read 0 as the default would time out). The control: the config's timeout
// left unset takes the 500 ms, and the same delay times out.
TEST_P(Ranks, TimeoutZeroWaitsForALateRank) {
  const auto lateLast = [&](int r) { return r == nRanks_ - 1 ? 2000 : 0; };
  Env shortDefault = provider_;
  shortDefault.timeoutMs = 500;
  ScopedEnv env(shortDefault);
  for (int timeoutMs : {0, NCCL_CONFIG_UNDEF_INT}) {
    SCOPED_TRACE(testing::Message() << "timeoutMs " << (timeoutMs ? "unset (500 ms from the environment)" : "0"));
    ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
    c.timeoutMs = timeoutMs;
    auto ctxs = createAll([&](int) { return c; });
    if (HasFailure()) return;
    Collective x = prepare(c, 11);
    run(x, ctxs, lateLast);
    if (timeoutMs == 0) {
      expectCorrect(x);
      destroyAll(ctxs);
    } else {
      EXPECT_EQ(x.async[0], ncclRemoteError) << "rank 0 waited 2 s for the last rank without timing out";
      threads_.run(nRanks_, [&](int r) {
        cudaSetDevice(r);
        ncclDcpContextAbort(ctxs[r]);
      });
    }
  }
}

// Calls captured in a CUDA graph on every rank and replayed, between eager
// calls: every capture step and launch succeeds, and every replay of every
// captured call (chunked ones too) matches the reference.
TEST_P(Ranks, GraphReplaysOnRealRanks) {
  const ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBase2, 8);
  auto ctxs = createAll([&](int) { return c; });
  if (HasFailure()) return;
  callAndCheck(ctxs, c, 5);  // eager first
  const int batches[] = {5, 8, 13, 1};
  const int nCalls = 4, replays = 10;
  std::vector<Collective> calls;
  for (int batch : batches) calls.push_back(prepare(c, batch));
  // got[rep][i]: every rank's outputs of captured call i after replay rep.
  std::vector<std::vector<std::vector<RankTensors>>> got(replays);
  for (auto& rep : got)
    for (const Collective& x : calls) {
      rep.push_back(x.host);
      for (RankTensors& t : rep.back()) {  // outputs only
        t.partialOut.clear();
        t.partialLse.clear();
      }
    }
  threads_.run(nRanks_, [&](int r) {
    CUDA_OR_FAIL(r, cudaSetDevice(r));
    cudaStream_t s = nullptr;
    CUDA_OR_FAIL(r, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::unique_ptr<std::remove_pointer_t<cudaStream_t>, cudaError_t (*)(cudaStream_t)> stream(s, cudaStreamDestroy);
    if (ncclDcpContextBindStream(ctxs[r], s) != ncclSuccess) return threads_.addFailure(r, "bind");
    std::vector<std::unique_ptr<RankBuffers>> bufs;
    for (const Collective& x : calls) {
      bufs.emplace_back(new RankBuffers(x.host[r]));
      CUDA_OR_FAIL(r, bufs.back()->upload(x.host[r], s));
    }
    CUDA_OR_FAIL(r, cudaStreamSynchronize(s));
    cudaGraph_t graph = nullptr;
    CUDA_OR_FAIL(r, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    ncclResult_t captured = ncclSuccess;
    for (int i = 0; i < nCalls && captured == ncclSuccess; i++) captured = callOn(*bufs[i], ctxs[r], calls[i], s);
    const std::string why = ncclDcpGetLastError();
    CUDA_OR_FAIL(r, cudaStreamEndCapture(s, &graph));
    std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, cudaError_t (*)(cudaGraph_t)> graphOwner(graph,
                                                                                             cudaGraphDestroy);
    if (captured != ncclSuccess) return threads_.addFailure(r, "captured call: " + why);
    cudaGraphExec_t e = nullptr;
    CUDA_OR_FAIL(r, cudaGraphInstantiate(&e, graph, 0));
    std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, cudaError_t (*)(cudaGraphExec_t)> exec(
        e, cudaGraphExecDestroy);
    for (int rep = 0; rep < replays; rep++) {
      for (auto& b : bufs) CUDA_OR_FAIL(r, b->poison(s));
      CUDA_OR_FAIL(r, cudaGraphLaunch(e, s));
      CUDA_OR_FAIL(r, cudaStreamSynchronize(s));
      for (int i = 0; i < nCalls; i++) CUDA_OR_FAIL(r, bufs[i]->download(&got[rep][i][r], s));
    }
    ncclResult_t async = ncclInternalError;
    ncclDcpGetAsyncError(ctxs[r], &async);
    if (async != ncclSuccess) threads_.addFailure(r, std::string("async error: ") + ncclDcpGetLastError());
    if (ncclDcpContextBindStream(ctxs[r], nullptr) != ncclSuccess) threads_.addFailure(r, "rebind");
  });
  for (int rep = 0; rep < replays && !HasFailure(); rep++)
    for (int i = 0; i < nCalls; i++) {
      const Collective& x = calls[i];
      const Mismatch m =
          withOracle(compareOutputs(x.cfg, nRanks_, x.batch, x.strides, got[rep][i], x.want),
                     oracleMismatches(oracleProblem(x.cfg, nRanks_, x.batch, x.strides, x.host), got[rep][i]));
      ASSERT_EQ(m.count, 0u) << "replay " << rep << ", captured call " << i << " (batch " << x.batch << "): " << m.first;
      for (int r = 0; r < nRanks_; r++)
        ASSERT_EQ(touchedPadding(x.cfg, x.batch, x.strides, got[rep][i][r]), 0u) << "replay " << rep << " rank " << r;
    }
  if (!HasFailure()) callAndCheck(ctxs, c, 7);  // eager after the replays: rounds still in step
  destroyAll(ctxs);
}

// One thread drives every GPU: the group variants of create and destroy,
// DestroyGroup skipping the NULL entries among the contexts.
TEST_P(Ranks, OneThreadDrivesEveryGpu) {
  std::vector<ncclComm_t> comms(nRanks_);
  std::vector<int> devs(nRanks_);
  for (int r = 0; r < nRanks_; r++) devs[r] = r;
  ASSERT_EQ(ncclCommInitAll(comms.data(), nRanks_, devs.data()), ncclSuccess);
  const ncclDcpConfig_t c = makeConfig(512, 8, ncclBfloat16, ncclDcpLseBase2, 8);
  std::vector<ncclDcpContext_t> ctxs(nRanks_);
  DCP_ASSERT(ncclDcpContextCreateGroup(nRanks_, comms.data(), &c, ctxs.data()));
  callAndCheck(ctxs, c, 13);
  std::vector<ncclDcpContext_t> withGaps(2 * nRanks_ + 1, nullptr);
  for (int r = 0; r < nRanks_; r++) withGaps[2 * r + 1] = ctxs[r];
  DCP_ASSERT(ncclDcpContextDestroyGroup((int)withGaps.size(), withGaps.data()));
  for (ncclDcpContext_t ctx : withGaps) EXPECT_EQ(ctx, nullptr);
  for (int r = 0; r < nRanks_; r++) ncclCommDestroy(comms[r]);
}

// Create inside the caller's ncclGroupStart/End (issue 34, item 5), one
// thread per rank: NCCL defers create's all-gather to the caller's
// ncclGroupEnd, so its records would be read before it ran. Every rank
// fails on the spot, saying why, instead of reading uninitialised scratch
// ("ranks disagree on ...") or going on; it frees nothing the queued
// all-gather still uses, so each ncclGroupEnd runs it into live memory (no
// illegal address), and the communicators and GPUs stay good: a create
// after it works. (One rank defers nothing: test_create_unwind.cc.)
TEST_P(Ranks, CreateInsideTheCallersGroupFailsOnEveryRank) {
  const ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBase2, 16);
  std::vector<ncclResult_t> res(nRanks_, ncclInternalError);
  std::vector<std::string> msg(nRanks_);
  threads_.run(nRanks_, [&](int r) {
    CUDA_OR_FAIL(r, cudaSetDevice(r));
    ncclDcpContext_t ctx = nullptr;
    if (ncclGroupStart() != ncclSuccess) return threads_.addFailure(r, "ncclGroupStart failed");
    res[r] = ncclDcpContextCreate(comms_[r], &c, &ctx);
    msg[r] = ncclDcpGetLastError();
    if (ncclGroupEnd() != ncclSuccess) return threads_.addFailure(r, "ncclGroupEnd failed");  // runs the all-gather
    CUDA_OR_FAIL(r, cudaDeviceSynchronize());
    if (ctx != nullptr) {
      threads_.addFailure(r, "create inside a group gave a context");
      // Abandoned locally: destroy agrees across ranks and would wait for
      // a rank that holds no context.
      if (ncclDcpContextAbort(ctx) != ncclSuccess) threads_.addFailure(r, "abort of that context failed");
    }
  });
  for (int r = 0; r < nRanks_; r++) {
    EXPECT_EQ(res[r], ncclInvalidUsage) << "rank " << r << ": " << msg[r];
    EXPECT_NE(msg[r].find("called inside ncclGroupStart/End?"), std::string::npos) << msg[r];
    EXPECT_NE(msg[r].find("create step 'arguments' failed"), std::string::npos) << msg[r];
  }
  auto ctxs = createAll([&](int) { return c; });
  if (HasFailure()) return;
  callAndCheck(ctxs, c, 5);
  destroyAll(ctxs);
}

// One thread calls every GPU's context inside ncclDcpGroupStart/End, on the
// fused and on the forced fallback path (whose all-to-alls must be grouped),
// eagerly and captured (each GPU's stream its own capture).
TEST_P(Ranks, OneThreadCallsEveryGpuInAGroup) {
  std::vector<ncclComm_t> comms(nRanks_);
  std::vector<int> devs(nRanks_);
  for (int r = 0; r < nRanks_; r++) devs[r] = r;
  ASSERT_EQ(ncclCommInitAll(comms.data(), nRanks_, devs.data()), ncclSuccess);
  const ncclDcpConfig_t c = makeConfig(256, 4, ncclBfloat16, ncclDcpLseBaseE, 8);
  for (bool fallback : {false, true}) {
    SCOPED_TRACE(fallback ? "fallback" : "fused");
    std::unique_ptr<ScopedEnv> env(fallback ? new ScopedEnv(forcedFallbackEnv()) : nullptr);
    std::vector<ncclDcpContext_t> ctxs(nRanks_);
    DCP_ASSERT(ncclDcpContextCreateGroup(nRanks_, comms.data(), &c, ctxs.data()));
    EXPECT_EQ(pathOf(ctxs[0]), fallback ? ncclDcpPathFallback : ncclDcpPathFused);
    std::vector<cudaStream_t> streams(nRanks_);
    for (int r = 0; r < nRanks_; r++) {
      CUDA_ASSERT(cudaSetDevice(r));
      CUDA_ASSERT(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    }
    for (bool capture : {false, true}) {
      SCOPED_TRACE(capture ? "captured" : "eager");
      Collective x = prepare(c, 21);
      std::vector<std::unique_ptr<RankBuffers>> bufs;
      for (int r = 0; r < nRanks_; r++) {
        CUDA_ASSERT(cudaSetDevice(r));
        bufs.emplace_back(new RankBuffers(x.host[r]));
        CUDA_ASSERT(bufs[r]->upload(x.host[r], streams[r]));
        CUDA_ASSERT(cudaStreamSynchronize(streams[r]));
      }
      std::vector<cudaGraph_t> graphs(nRanks_, nullptr);
      for (int r = 0; capture && r < nRanks_; r++) {
        CUDA_ASSERT(cudaSetDevice(r));
        CUDA_ASSERT(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
      }
      DCP_ASSERT(ncclDcpGroupStart());
      for (int r = 0; r < nRanks_; r++) {
        CUDA_ASSERT(cudaSetDevice(r));
        x.called[r] = callOn(*bufs[r], ctxs[r], x, streams[r]);
      }
      DCP_ASSERT(ncclDcpGroupEnd());
      for (int r = 0; capture && r < nRanks_; r++) {
        CUDA_ASSERT(cudaSetDevice(r));
        CUDA_ASSERT(cudaStreamEndCapture(streams[r], &graphs[r]));
      }
      std::vector<cudaGraphExec_t> execs(nRanks_, nullptr);
      for (int r = 0; capture && r < nRanks_; r++) {  // every rank launched before any is waited for
        CUDA_ASSERT(cudaSetDevice(r));
        CUDA_ASSERT(cudaGraphInstantiate(&execs[r], graphs[r], 0));
        CUDA_ASSERT(cudaGraphLaunch(execs[r], streams[r]));
      }
      for (int r = 0; capture && r < nRanks_; r++) {
        CUDA_ASSERT(cudaSetDevice(r));
        CUDA_ASSERT(cudaStreamSynchronize(streams[r]));
        cudaGraphExecDestroy(execs[r]);
        cudaGraphDestroy(graphs[r]);
      }
      for (int r = 0; r < nRanks_; r++) {
        CUDA_ASSERT(cudaSetDevice(r));
        CUDA_ASSERT(bufs[r]->download(&x.got[r], streams[r]));
        DCP_ASSERT(ncclDcpGetAsyncError(ctxs[r], &x.async[r]));
      }
      expectCorrect(x);
    }
    for (int r = 0; r < nRanks_; r++) {
      cudaSetDevice(r);
      cudaStreamDestroy(streams[r]);
    }
    DCP_ASSERT(ncclDcpContextDestroyGroup(nRanks_, ctxs.data()));
  }
  for (int r = 0; r < nRanks_; r++) ncclCommDestroy(comms[r]);
}

// ---- The scatter modes (issue 27) on two ranks, one thread each: every
// mode on the fused path and the forced fallback (ncclAllGather + combine
// for TOKEN and NONE), fp32 and bf16 partial LSEs, empty shards, and for
// TOKEN uneven host counts (a rank of no rows) and device counts changed
// between CUDA-graph replays.
class ScatterRanks : public testing::TestWithParam<int> {
 protected:
  static constexpr int kRanks = 2;

  void SetUp() override {
    DCP_REQUIRE_GPUS(kRanks);
    ASSERT_EQ(ncclGetUniqueId(&id_), ncclSuccess);
    comms_.assign(kRanks, nullptr);
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      const ncclResult_t res = ncclCommInitRank(&comms_[r], kRanks, id_, r);
      if (res != ncclSuccess) threads_.addFailure(r, std::string("ncclCommInitRank: ") + ncclGetErrorString(res));
    });
  }
  void TearDown() override {
    for (int r = 0; r < (int)comms_.size(); r++)
      if (comms_[r]) {
        cudaSetDevice(r);
        ncclCommDestroy(comms_[r]);
      }
  }

  std::vector<ncclDcpContext_t> createAll(const ncclDcpConfig_t& c) {
    std::vector<ncclDcpContext_t> ctxs(kRanks, nullptr);
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      if (ncclDcpContextCreate(comms_[r], &c, &ctxs[r]) != ncclSuccess)
        threads_.addFailure(r, std::string("create: ") + ncclDcpGetLastError());
    });
    return ctxs;
  }

  void destroyAll(std::vector<ncclDcpContext_t>& ctxs) {
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      if (ctxs[r] && ncclDcpContextDestroy(ctxs[r]) != ncclSuccess)
        threads_.addFailure(r, std::string("destroy: ") + ncclDcpGetLastError());
    });
  }

  // The context's async error on rank r, a failure unless ncclSuccess.
  void expectNoAsyncError(int r, ncclDcpContext_t ctx) {
    ncclResult_t async = ncclInternalError;
    ncclDcpGetAsyncError(ctx, &async);
    if (async != ncclSuccess) threads_.addFailure(r, std::string("async error: ") + ncclDcpGetLastError());
  }

  // p's call on every rank (its thread, the legacy stream), outputs
  // poisoned first, then compared with the reference and the oracle
  // (p's strides passed when they are not packed).
  void callAndCheck(const std::vector<ncclDcpContext_t>& ctxs, DeviceProblem& p, const std::string& what) {
    SCOPED_TRACE(what);
    const Strides packed = packedStrides(p.config(), kRanks);
    const bool isPacked = memcmp(&packed, &p.strides(), sizeof(Strides)) == 0;
    const ncclDcpStrides_t api = p.apiStrides();
    threads_.run(kRanks, [&](int r) {
      CUDA_OR_FAIL(r, cudaSetDevice(r));
      p.poison(r, nullptr);
      const CallBuffers b = p.buffers(r);
      if (ncclDcpA2aLseReduceEx(ctxs[r], b.partialOut, b.partialLse, b.out, b.outLse, p.batch(),
                                isPacked ? nullptr : &api, p.args(r), nullptr) != ncclSuccess)
        return threads_.addFailure(r, std::string("call: ") + ncclDcpGetLastError());
      CUDA_OR_FAIL(r, cudaDeviceSynchronize());
      expectNoAsyncError(r, ctxs[r]);
    });
    const Mismatch m = p.checkAll();
    EXPECT_EQ(m.count, 0u) << m.first;
  }

  // TOKEN, device counts: one capture per rank (its staged inputs copied
  // in, its outputs poisoned, the call), replayed with new counts and new
  // inputs written before each replay; every replay checked.
  void graphReplaysWithNewCounts(const std::vector<ncclDcpContext_t>& ctxs, const Config& cfg, std::mt19937_64& rng) {
    const int batch = 19;  // chunked (maxBatch 8): three rounds per replay
    DeviceProblem p(cfg, kRanks, batch, LseMix::Normal, freshSeed(), CallSpec{{}, true, false, nullptr}, {0, 1});
    p.refill(LseMix::Normal, freshSeed(), /*toStaging=*/true);
    std::vector<cudaStream_t> streams(kRanks, nullptr);
    std::vector<cudaGraph_t> graphs(kRanks, nullptr);
    std::vector<cudaGraphExec_t> execs(kRanks, nullptr);
    threads_.run(kRanks, [&](int r) {
      CUDA_OR_FAIL(r, cudaSetDevice(r));
      CUDA_OR_FAIL(r, cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
      CUDA_OR_FAIL(r, cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
      p.stageInputs(r, streams[r]);
      p.poison(r, streams[r]);
      const CallBuffers b = p.buffers(r);
      const ncclResult_t called = ncclDcpA2aLseReduceEx(ctxs[r], b.partialOut, b.partialLse, b.out, b.outLse, batch,
                                                        nullptr, p.args(r), streams[r]);
      const std::string why = ncclDcpGetLastError();
      CUDA_OR_FAIL(r, cudaStreamEndCapture(streams[r], &graphs[r]));
      if (called != ncclSuccess) return threads_.addFailure(r, "captured call: " + why);
      CUDA_OR_FAIL(r, cudaGraphInstantiate(&execs[r], graphs[r], 0));
    });
    const std::vector<std::vector<int>> splits = {{0, batch}, {batch, 0}, {7, 12}, {13, 6}, {10, 9}};
    for (size_t rep = 0; rep < splits.size() + 3 && !HasFailure(); rep++) {
      std::vector<int> counts = rep < splits.size() ? splits[rep] : std::vector<int>{0, 0};
      if (rep >= splits.size()) {
        counts[0] = (int)(rng() % (batch + 1));
        counts[1] = batch - counts[0];
      }
      SCOPED_TRACE(testing::Message() << "replay " << rep << " counts " << testing::PrintToString(counts));
      p.setCounts(counts);
      p.refill(rep % 2 ? LseMix::Special : LseMix::Normal, freshSeed(), /*toStaging=*/true);
      threads_.run(kRanks, [&](int r) {
        CUDA_OR_FAIL(r, cudaSetDevice(r));
        CUDA_OR_FAIL(r, cudaGraphLaunch(execs[r], streams[r]));
        CUDA_OR_FAIL(r, cudaStreamSynchronize(streams[r]));
        expectNoAsyncError(r, ctxs[r]);
      });
      const Mismatch m = p.checkAll();
      EXPECT_EQ(m.count, 0u) << m.first;
    }
    for (int r = 0; r < kRanks; r++) {
      cudaSetDevice(r);
      if (execs[r]) cudaGraphExecDestroy(execs[r]);
      if (graphs[r]) cudaGraphDestroy(graphs[r]);
      if (streams[r]) cudaStreamDestroy(streams[r]);
    }
  }

  ncclDcpPath_t pathOf(ncclDcpContext_t ctx) {
    ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
    EXPECT_EQ(ncclDcpGetTopology(ctx, &t), ncclSuccess) << ncclDcpGetLastError();
    return (ncclDcpPath_t)t.path;
  }

  ncclUniqueId id_;
  std::vector<ncclComm_t> comms_;
  RankThreads threads_{kHangSeconds};
};

INSTANTIATE_TEST_SUITE_P(Modes, ScatterRanks,
                         testing::Values(ncclDcpScatterHead, ncclDcpScatterToken, ncclDcpScatterNone),
                         [](const testing::TestParamInfo<int>& i) { return std::string(scatterName(i.param)); });

// TOKEN's counts on real ranks, on ScatterRanks' communicators.
class TokenCountsRanks : public ScatterRanks {
 protected:
  void poisonedRankJoinsTheExchange(int wire);
};

// TOKEN host counts that are valid on each rank but differ between them:
// the ranks' splits differ, so their units must never be taken for each
// other's (SIMPLE would place them in the wrong rows). Each protocol tags
// TOKEN's flags with the split (device/modes.h): every rank's call times
// out alike (ncclRemoteError, the context poisoned) on LL, LL128 and
// SIMPLE, never a silent result.
TEST_F(TokenCountsRanks, CountsThatDifferBetweenRanksTimeOutOnEveryProtocol) {
  const int batch = 40;
  const std::vector<int> counts[kRanks] = {{10, 30}, {30, 10}};
  for (int proto : {ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple}) {
    SCOPED_TRACE(protocolName(proto));
    ncclDcpConfig_t c = withScatter(makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 64, proto), ncclDcpScatterToken);
    c.timeoutMs = 500;
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess) << ncclDcpGetLastError();
    DeviceProblem p(cfg, kRanks, batch, LseMix::Normal, freshSeed(), CallSpec{}, {0, 1});
    threads_.run(kRanks, [&](int r) {
      CUDA_OR_FAIL(r, cudaSetDevice(r));
      ncclDcpContext_t ctx = nullptr;
      if (ncclDcpContextCreate(comms_[r], &c, &ctx) != ncclSuccess)
        return threads_.addFailure(r, std::string("create: ") + ncclDcpGetLastError());
      ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
      args.rowCounts = counts[r].data();
      const CallBuffers b = p.buffers(r);
      if (ncclDcpA2aLseReduceEx(ctx, b.partialOut, b.partialLse, b.out, b.outLse, batch, nullptr, &args, nullptr) !=
          ncclSuccess)
        threads_.addFailure(r, std::string("call: ") + ncclDcpGetLastError());
      CUDA_OR_FAIL(r, cudaDeviceSynchronize());
      ncclResult_t async = ncclSuccess;
      ncclDcpGetAsyncError(ctx, &async);
      if (async != ncclRemoteError)
        threads_.addFailure(r, std::string("async error ") + ncclGetErrorString(async) + ", not ncclRemoteError");
      ncclDcpContextAbort(ctx);
    });
  }
}

// On the fallback a context poisoned by its own device counts still takes
// part in NCCL's all-gather: its peer, whose call is sound, completes (it
// waited in NCCL for ever before) and merges the poisoned rank's units to
// NaN. Call 1: rank 0's device counts are invalid (its combine poisons the
// context); call 2: valid counts on both ranks. Both wires: fp8's poisoned
// units cross as e4m3 bytes under the poisoned scale.
TEST_F(TokenCountsRanks, APoisonedFallbackRankStillJoinsTheExchange) {
  for (int wire : {(int)ncclDcpWireNative, (int)ncclDcpWireFp8E4m3}) {
    SCOPED_TRACE(wireName(wire));
    poisonedRankJoinsTheExchange(wire);
    if (HasFatalFailure()) return;
  }
}

void TokenCountsRanks::poisonedRankJoinsTheExchange(int wire) {
  ScopedEnv env(forcedFallbackEnv());
  const int batch = 40;
  ncclDcpConfig_t c = withScatter(makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 64), ncclDcpScatterToken);
  c.wire = wire;
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess) << ncclDcpGetLastError();
  DeviceProblem p(cfg, kRanks, batch, LseMix::Normal, freshSeed(), CallSpec{}, {0, 1});
  const int invalid[kRanks] = {-1, batch + 1}, valid[kRanks] = {batch / 2, batch - batch / 2};
  threads_.run(kRanks, [&](int r) {
    CUDA_OR_FAIL(r, cudaSetDevice(r));
    ncclDcpContext_t ctx = nullptr;
    if (ncclDcpContextCreate(comms_[r], &c, &ctx) != ncclSuccess)
      return threads_.addFailure(r, std::string("create: ") + ncclDcpGetLastError());
    int* counts = nullptr;
    CUDA_OR_FAIL(r, cudaMalloc(&counts, sizeof(valid)));
    const CallBuffers b = p.buffers(r);
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.rowCountsDevice = counts;
    for (int call = 0; call < 2; call++) {
      CUDA_OR_FAIL(r, cudaMemcpy(counts, call == 0 && r == 0 ? invalid : valid, sizeof(valid), cudaMemcpyHostToDevice));
      CUDA_OR_FAIL(r, cudaMemset(b.out, 0, (size_t)valid[r] * cfg.localHeads * kRanks * cfg.headDim * cfg.eltSize));
      const ncclResult_t res =
          ncclDcpA2aLseReduceEx(ctx, b.partialOut, b.partialLse, b.out, b.outLse, batch, nullptr, &args, nullptr);
      const ncclResult_t want = call == 1 && r == 0 ? ncclInvalidArgument : ncclSuccess;
      if (res != want)
        threads_.addFailure(r, "call " + std::to_string(call) + ": " + ncclGetErrorString(res) + ", want " +
                                   ncclGetErrorString(want) + ": " + ncclDcpGetLastError());
      CUDA_OR_FAIL(r, cudaDeviceSynchronize());
    }
    if (r == 1) {  // its rows, every head: each merges rank 0's poisoned unit
      const RankTensors got = p.outputs(r);
      const size_t elements = (size_t)valid[r] * cfg.localHeads * kRanks * cfg.headDim;
      size_t finite = 0;
      for (size_t i = 0; i < elements; i++) finite += !std::isnan(loadElement(cfg.dtype, got.out.data(), i));
      if (finite != 0) threads_.addFailure(r, std::to_string(finite) + " elements merged without rank 0's NaN");
    }
    cudaFree(counts);
    ncclDcpContextAbort(ctx);
  });
}

TEST_P(ScatterRanks, FusedAndFallback) {
  const int scatter = GetParam();
  std::mt19937_64 rng(freshSeed());
  const std::vector<int> devices = {0, 1};
  for (bool fallback : {false, true}) {
    std::unique_ptr<ScopedEnv> env(fallback ? new ScopedEnv(forcedFallbackEnv()) : nullptr);
    for (ncclDataType_t lseDtype : {ncclFloat32, ncclBfloat16}) {
      SCOPED_TRACE(testing::Message() << scatterName(scatter) << (fallback ? " fallback" : " fused") << " lse "
                                      << dtypeName(lseDtype));
      const ncclDcpConfig_t c =
          withScatter(makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8, ncclDcpProtoAuto), scatter, lseDtype);
      Config cfg;
      ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess) << ncclDcpGetLastError();
      auto ctxs = createAll(c);
      if (HasFailure()) return;
      EXPECT_EQ(pathOf(ctxs[0]), fallback ? ncclDcpPathFallback : ncclDcpPathFused);
      for (int batch : {1, 5, 21}) {
        std::vector<std::pair<std::string, CallSpec>> calls = {{"plain", CallSpec()}};
        CallSpec shards;
        shards.emptyShards = true;
        calls.push_back({"empty shards", shards});
        if (scatter == ncclDcpScatterToken) {
          const int first = (int)(rng() % (batch + 1));
          for (std::vector<int> counts : {std::vector<int>{0, batch}, std::vector<int>{batch, 0},
                                          std::vector<int>{first, batch - first}}) {
            CallSpec host;
            host.rowCounts = counts;
            calls.push_back({"host counts " + testing::PrintToString(counts), host});
          }
          CallSpec device;
          device.rowCounts = {first, batch - first};
          device.deviceCounts = true;
          device.emptyShards = true;
          calls.push_back({"device counts, empty shards", device});
        }
        for (const auto& [what, spec] : calls) {
          DeviceProblem p(cfg, kRanks, batch, LseMix::Special, freshSeed(), spec, devices);
          callAndCheck(ctxs, p, what + ", batch " + std::to_string(batch));
          if (HasFailure()) break;
        }
      }
      if (scatter == ncclDcpScatterToken && !HasFailure()) graphReplaysWithNewCounts(ctxs, cfg, rng);
      destroyAll(ctxs);
      if (HasFailure()) return;
    }
  }
}

// NONE in two phases on real ranks (NCCL_DCP_NONE_ALGO=two_phase: at cp 2
// `auto` runs direct): every protocol, batches within and beyond maxBatch,
// special LSEs and empty shards, each call against the reference.
class NoneTwoPhaseRanks : public ScatterRanks {};

// Each rank's context asserted to run two phases (its workspace layout),
// so that the test fails with them off; every dtype and LSE dtype, packed
// and padded strides.
TEST_F(NoneTwoPhaseRanks, EveryProtocolMatchesTheReference) {
  Env twoPhase;
  twoPhase.noneAlgo = (int)NoneAlgo::TwoPhase;
  ScopedEnv env(twoPhase);
  const std::vector<int> devices = {0, 1};
  const ncclDataType_t lseDtypes[] = {ncclFloat32, ncclBfloat16, ncclFloat16};
  int k = 0;
  for (int proto : {ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple, ncclDcpProtoAuto})
    for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16, ncclFloat32}) {
      const ncclDataType_t lseDtype = lseDtypes[k++ % 3];
      SCOPED_TRACE(testing::Message() << protocolName(proto) << " " << dtypeName(dtype) << " lse " << dtypeName(lseDtype));
      const ncclDcpConfig_t c =
          withScatter(makeConfig(128, 4, dtype, ncclDcpLseBase2, 8, proto), ncclDcpScatterNone, lseDtype);
      Config cfg;
      ASSERT_EQ(resolveConfig(&c, twoPhase, &cfg), ncclSuccess) << ncclDcpGetLastError();
      auto ctxs = createAll(c);
      if (HasFailure()) return;
      EXPECT_EQ(pathOf(ctxs[0]), ncclDcpPathFused);
      for (int r = 0; r < kRanks; r++)
        ASSERT_NE(contextOf(ctxs[r])->engine.layout.small.relayBytes, 0u)
            << "rank " << r << ": NCCL_DCP_NONE_ALGO=two_phase, but the workspace has no phase-2 half";
      const Strides strided = paddedStrides(cfg, kRanks);
      for (int batch : {1, 5, 21}) {
        CallSpec shards;
        shards.emptyShards = true;
        for (const CallSpec& spec : {CallSpec(), shards}) {
          const bool padded = batch == 21;
          DeviceProblem p(cfg, kRanks, batch, LseMix::Special, freshSeed(), spec, devices, 1, padded ? &strided : nullptr);
          callAndCheck(ctxs, p, std::string(spec.emptyShards ? "empty shards" : "plain") + ", batch " +
                                    std::to_string(batch) + (padded ? ", padded" : ""));
          if (HasFailure()) break;
        }
      }
      destroyAll(ctxs);
      if (HasFailure()) return;
    }
}

// NONE in two phases into registered outputs on real ranks
// (ncclDcpOutputRegister): each rank's out and outLse from ncclMemAlloc,
// registered as windows, so SIMPLE's phase 2 stores straight into the
// peer's. Each registration is asserted to take the direct path.
class NoneRegisteredRanks : public ScatterRanks {
 protected:
  // Per rank: out and outLse of p's sizes from ncclMemAlloc, registered on ctxs.
  struct Registered {
    std::vector<void*> out = std::vector<void*>(kRanks, nullptr);
    std::vector<float*> outLse = std::vector<float*>(kRanks, nullptr);
    std::vector<ncclDcpOutput_t> handle = std::vector<ncclDcpOutput_t>(kRanks, nullptr);
  };
  void registerAll(const std::vector<ncclDcpContext_t>& ctxs, const DeviceProblem& p, Registered* g) {
    threads_.run(kRanks, [&](int r) {
      CUDA_OR_FAIL(r, cudaSetDevice(r));
      if (ncclMemAlloc(&g->out[r], p.outBytes(r)) != ncclSuccess ||
          ncclMemAlloc((void**)&g->outLse[r], p.outLseBytes(r)) != ncclSuccess)
        return threads_.addFailure(r, "ncclMemAlloc of the outputs failed");
      if (ncclDcpOutputRegister(ctxs[r], g->out[r], p.outBytes(r), g->outLse[r], p.outLseBytes(r), &g->handle[r]) !=
          ncclSuccess)
        return threads_.addFailure(r, std::string("register: ") + ncclDcpGetLastError());
      if (!contextOf(ctxs[r])->outputs.back()->direct)
        threads_.addFailure(r, "the registration stages: the test would show nothing of the direct path");
    });
  }
  void releaseAll(const std::vector<ncclDcpContext_t>& ctxs, Registered* g) {
    threads_.run(kRanks, [&](int r) {
      cudaSetDevice(r);
      if (g->handle[r] && ncclDcpOutputDeregister(ctxs[r], g->handle[r]) != ncclSuccess)
        threads_.addFailure(r, std::string("deregister: ") + ncclDcpGetLastError());
      ncclMemFree(g->out[r]);
      ncclMemFree(g->outLse[r]);
    });
  }
  // p's call on every rank into the registered outputs at byte offset
  // shift[r] (poisoned first), then copied into p's outputs for its checks.
  void callRegistered(const std::vector<ncclDcpContext_t>& ctxs, DeviceProblem& p, const Registered& g,
                      const std::vector<size_t>& shift, std::vector<ncclResult_t>* async) {
    threads_.run(kRanks, [&](int r) {
      CUDA_OR_FAIL(r, cudaSetDevice(r));
      CUDA_OR_FAIL(r, cudaMemset(g.out[r], 0xff, p.outBytes(r)));
      CUDA_OR_FAIL(r, cudaMemset(g.outLse[r], 0xff, p.outLseBytes(r)));
      const CallBuffers b = p.buffers(r);
      char* out = (char*)g.out[r] + shift[r];
      if (ncclDcpA2aLseReduceEx(ctxs[r], b.partialOut, b.partialLse, out, g.outLse[r], p.batch(), nullptr, p.args(r),
                                nullptr) != ncclSuccess &&
          async == nullptr)
        return threads_.addFailure(r, std::string("call: ") + ncclDcpGetLastError());
      CUDA_OR_FAIL(r, cudaDeviceSynchronize());
      CUDA_OR_FAIL(r, cudaMemcpy(b.out, out, p.outBytes(r) - shift[r], cudaMemcpyDeviceToDevice));
      CUDA_OR_FAIL(r, cudaMemcpy(b.outLse, g.outLse[r], p.outLseBytes(r), cudaMemcpyDeviceToDevice));
      ncclResult_t e = ncclInternalError;
      ncclDcpGetAsyncError(ctxs[r], &e);
      if (async) (*async)[r] = e;
      else if (e != ncclSuccess) threads_.addFailure(r, std::string("async error: ") + ncclDcpGetLastError());
    });
  }
};

// SIMPLE, and AUTO crossing to SIMPLE at 5 rows (so 21 rows mix direct
// SIMPLE rounds with a staged line-protocol one), batches within and
// beyond maxBatch, against the reference and the oracle.
TEST_F(NoneRegisteredRanks, WriteThePeersOutputsDirectly) {
  Env twoPhase;
  twoPhase.noneAlgo = (int)NoneAlgo::TwoPhase;
  twoPhase.simpleMinRows = 5;
  ScopedEnv env(twoPhase);
  for (int proto : {ncclDcpProtoSimple, ncclDcpProtoAuto}) {
    SCOPED_TRACE(protocolName(proto));
    const ncclDcpConfig_t c =
        withScatter(makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8, proto), ncclDcpScatterNone);
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, twoPhase, &cfg), ncclSuccess) << ncclDcpGetLastError();
    auto ctxs = createAll(c);
    if (HasFailure()) return;
    for (int batch : {1, 5, 21}) {
      SCOPED_TRACE(testing::Message() << "batch " << batch);
      DeviceProblem p(cfg, kRanks, batch, LseMix::Special, freshSeed(), CallSpec{}, {0, 1});
      Registered g;
      registerAll(ctxs, p, &g);
      const uint64_t direct0 = contextOf(ctxs[0])->stats.directCalls;
      if (!HasFailure()) callRegistered(ctxs, p, g, {0, 0}, nullptr);
      EXPECT_EQ(contextOf(ctxs[0])->stats.directCalls, direct0 + 1) << "the call staged: it shows nothing";
      releaseAll(ctxs, &g);
      if (HasFailure()) break;
      const Mismatch m = p.checkAll();
      EXPECT_EQ(m.count, 0u) << m.first;
    }
    destroyAll(ctxs);
    if (HasFailure()) return;
  }
}

// NCCL addresses a peer's window at this rank's offset into its own
// allocation: ranges not at a multiple of 4096 of theirs, or at different
// offsets on different ranks, are refused on every rank, nothing left
// registered; ranges at the same aligned offset register.
TEST_F(NoneRegisteredRanks, RegistrationsNcclCannotMapAreRefusedOnEveryRank) {
  Env twoPhase;
  twoPhase.noneAlgo = (int)NoneAlgo::TwoPhase;
  ScopedEnv env(twoPhase);
  const ncclDcpConfig_t c = withScatter(makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8, ncclDcpProtoSimple),
                                        ncclDcpScatterNone);
  auto ctxs = createAll(c);
  if (HasFailure()) return;
  constexpr size_t kBytes = 16384;
  std::vector<void*> mem(kRanks, nullptr);
  threads_.run(kRanks, [&](int r) {
    CUDA_OR_FAIL(r, cudaSetDevice(r));
    if (ncclMemAlloc(&mem[r], 4 * kBytes) != ncclSuccess) threads_.addFailure(r, "ncclMemAlloc failed");
  });
  struct Case {
    const char* what;
    size_t offset[kRanks];
    const char* needle;  // in every rank's message; NULL: it registers
  };
  const Case cases[] = {{"256 bytes in on every rank", {256, 256}, "4096"},
                        {"offsets that differ", {0, 4096}, "every rank's must match"},
                        {"the same aligned offset", {4096, 4096}, nullptr}};
  for (const Case& k : cases) {
    if (HasFailure()) break;
    SCOPED_TRACE(k.what);
    threads_.run(kRanks, [&](int r) {
      CUDA_OR_FAIL(r, cudaSetDevice(r));
      const size_t before = contextOf(ctxs[r])->outputs.size();
      ncclDcpOutput_t h = nullptr;
      const ncclResult_t got =
          ncclDcpOutputRegister(ctxs[r], (char*)mem[r] + k.offset[r], kBytes, nullptr, 0, &h);
      const std::string why = ncclDcpGetLastError();
      if (k.needle == nullptr) {
        if (got != ncclSuccess) return threads_.addFailure(r, "register: " + why);
        if (ncclDcpOutputDeregister(ctxs[r], h) != ncclSuccess)
          threads_.addFailure(r, std::string("deregister: ") + ncclDcpGetLastError());
        return;
      }
      if (got != ncclInvalidArgument || why.find(k.needle) == std::string::npos)
        threads_.addFailure(r, "want ncclInvalidArgument naming \"" + std::string(k.needle) + "\", got " +
                                   std::to_string(got) + ": " + why);
      if (contextOf(ctxs[r])->outputs.size() != before) threads_.addFailure(r, "a refused registration stayed");
    });
  }
  threads_.run(kRanks, [&](int r) {
    cudaSetDevice(r);
    ncclMemFree(mem[r]);
  });
  destroyAll(ctxs);
}

// Ranks that pass their outputs at different offsets of their
// registrations break the symmetric rule: phase 2's flags carry the
// offsets' tag, so each rank's wait times out (ncclRemoteError) instead of
// reading a peer's heads that were written elsewhere; the gathered heads
// are NaN, never the peer's stale or misplaced data.
TEST_F(NoneRegisteredRanks, OffsetsThatDifferTimeOutInsteadOfReadingMisplacedHeads) {
  Env twoPhase;
  twoPhase.noneAlgo = (int)NoneAlgo::TwoPhase;
  ScopedEnv env(twoPhase);
  ncclDcpConfig_t c = withScatter(makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8, ncclDcpProtoSimple),
                                  ncclDcpScatterNone);
  c.timeoutMs = 300;
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, twoPhase, &cfg), ncclSuccess) << ncclDcpGetLastError();
  auto ctxs = createAll(c);
  if (HasFailure()) return;
  const int batch = 5;
  DeviceProblem p(cfg, kRanks, batch, LseMix::Normal, freshSeed(), CallSpec{}, {0, 1}, /*slackRows=*/2);
  Registered g;
  registerAll(ctxs, p, &g);
  std::vector<ncclResult_t> async(kRanks, ncclSuccess);
  if (!HasFailure()) callRegistered(ctxs, p, g, {0, (size_t)cfg.headDim * cfg.eltSize}, &async);
  for (int r = 0; r < kRanks; r++) {
    EXPECT_EQ(async[r], ncclRemoteError) << "rank " << r << ": the offsets differ, yet its phase 2 completed";
    const RankTensors t = p.outputs(r);
    const uint16_t* out = (const uint16_t*)t.out.data();
    const int H = kRanks * cfg.localHeads;
    size_t notNan = 0;
    for (int row = 0; row < batch; row++)
      for (int h = 0; h < H; h++) {
        if (h / cfg.localHeads == r) continue;  // its own merge
        for (int d = 0; d < cfg.headDim; d++) {
          const uint16_t x = out[((size_t)row * H + h) * cfg.headDim + d];
          notNan += (x & 0x7f80) != 0x7f80 || (x & 0x7f) == 0;
        }
      }
    EXPECT_EQ(notNan, 0u) << "rank " << r << ": gathered heads not NaN after the offsets' mismatch";
  }
  threads_.run(kRanks, [&](int r) {
    cudaSetDevice(r);
    ncclDcpContextAbort(ctxs[r]);  // poisoned: abort, which releases the registrations
    ncclMemFree(g.out[r]);
    ncclMemFree(g.outLse[r]);
  });
}

// fp8 on the wire on real ranks (config->wire; HEAD, bf16 / fp16): every
// protocol and the forced fallback, each call against the fp8 CPU model
// (DeviceProblem's reference follows the config's wire).
class Fp8WireRanks : public ScatterRanks {};

TEST_F(Fp8WireRanks, EveryProtocolAndTheFallbackMatchTheModel) {
  const std::vector<int> devices = {0, 1};
  for (bool fallback : {false, true}) {
    std::unique_ptr<ScopedEnv> env(fallback ? new ScopedEnv(forcedFallbackEnv()) : nullptr);
    const std::vector<int> protos = fallback ? std::vector<int>{ncclDcpProtoAuto}
                                             : std::vector<int>{ncclDcpProtoLL, ncclDcpProtoLL128,
                                                                ncclDcpProtoSimple, ncclDcpProtoAuto};
    for (int proto : protos)
      for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16}) {
        SCOPED_TRACE(testing::Message() << (fallback ? "fallback" : protocolName(proto)) << " " << dtypeName(dtype));
        ncclDcpConfig_t c = makeConfig(128, 4, dtype, ncclDcpLseBase2, 8, proto);
        c.wire = ncclDcpWireFp8E4m3;
        Config cfg;
        ASSERT_EQ(resolveConfig(&c, fallback ? forcedFallbackEnv() : Env(), &cfg), ncclSuccess)
            << ncclDcpGetLastError();
        auto ctxs = createAll(c);
        if (HasFailure()) return;
        EXPECT_EQ(pathOf(ctxs[0]), fallback ? ncclDcpPathFallback : ncclDcpPathFused);
        for (int r = 0; r < kRanks; r++) {
          ASSERT_EQ(contextOf(ctxs[r])->engine.cfg.wire, Wire::Fp8E4m3) << "rank " << r << ": the context is native";
          if (!fallback) {
            ASSERT_EQ(contextOf(ctxs[r])->engine.layout.small.wire, Wire::Fp8E4m3) << "rank " << r << ": native workspace";
          }
        }
        const Strides strided = paddedStrides(cfg, kRanks);
        for (int batch : {1, 5, 21}) {
          // Special LSEs and empty shards, padded strides on the chunked batch.
          CallSpec shards;
          shards.emptyShards = true;
          for (const CallSpec& spec : {CallSpec(), shards}) {
            DeviceProblem p(cfg, kRanks, batch, batch == 5 ? LseMix::Normal : LseMix::Special, freshSeed(), spec,
                            devices, 1, batch == 21 ? &strided : nullptr);
            callAndCheck(ctxs, p, "batch " + std::to_string(batch) + (spec.emptyShards ? ", empty shards" : ""));
            if (HasFailure()) break;
          }
        }
        destroyAll(ctxs);
        if (HasFailure()) return;
      }
  }
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
