/*************************************************************************
 * The collective on real NCCL ranks, one GPU per rank: one thread per rank
 * (ncclCommInitRank), and one thread driving every GPU (ncclCommInitAll +
 * ncclDcpContextCreateGroup). Each test runs at cp = 2, 4, 8 when that many
 * GPUs are present, and skips (fails under NCCL_DCP_REQUIRE_GPU=1) otherwise.
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "context.h"
#include "reference.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

// Inputs of every rank on the host, each rank's buffers on its GPU.
struct RankBuffers {
  DeviceBuffer in, lse, out, outLse;
};

class Ranks : public testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    nRanks_ = GetParam();
    DCP_REQUIRE_GPUS(nRanks_);
    ASSERT_EQ(ncclGetUniqueId(&id_), ncclSuccess);
    comms_.assign(nRanks_, nullptr);
    // One thread per rank, as one process per GPU would.
    runPerRank([&](int r) {
      cudaSetDevice(r);
      ncclResult_t res = ncclCommInitRank(&comms_[r], nRanks_, id_, r);
      if (res != ncclSuccess) addFailure(r, std::string("ncclCommInitRank: ") + ncclGetErrorString(res));
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

  void runPerRank(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < nRanks_; r++) threads.emplace_back(body, r);
    for (std::thread& t : threads) t.join();
    std::lock_guard<std::mutex> l(mutex_);
    for (const std::string& f : failures_) ADD_FAILURE() << f;
    failures_.clear();
  }
  void addFailure(int rank, const std::string& what) {
    std::lock_guard<std::mutex> l(mutex_);
    failures_.push_back("rank " + std::to_string(rank) + ": " + what);
  }

  // One call per rank on fresh data, every rank's output compared with the
  // reference of the whole collective.
  void callAndCheck(const std::vector<ncclDcpContext_t>& ctxs, const ncclDcpConfig_t& c, int batch) {
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess) << ncclDcpGetLastError();
    const Strides s = packedStrides(cfg, nRanks_);
    const uint64_t seed = freshSeed();
    SCOPED_TRACE(testing::Message() << "cp " << nRanks_ << " batch " << batch << " seed " << seed);
    std::mt19937_64 rng(seed);
    std::vector<RankTensors> host = makeInputs(cfg, nRanks_, batch, s, LseMix::Special, rng);
    std::vector<RankTensors> want = host, got = host;
    std::vector<CallBuffers> ref;
    for (RankTensors& t : want) ref.push_back(t.buffers());
    referenceA2aLseReduce(cfg, nRanks_, batch, s, ref.data());
    runPerRank([&](int r) {
      cudaSetDevice(r);
      RankBuffers b{DeviceBuffer(host[r].partialOut.size()), DeviceBuffer(host[r].partialLse.size() * 4),
                    DeviceBuffer(host[r].out.size()), DeviceBuffer(host[r].outLse.size() * 4)};
      cudaMemcpy(b.in.ptr, host[r].partialOut.data(), b.in.bytes, cudaMemcpyHostToDevice);
      cudaMemcpy(b.lse.ptr, host[r].partialLse.data(), b.lse.bytes, cudaMemcpyHostToDevice);
      cudaMemset(b.out.ptr, 0xff, b.out.bytes);
      cudaMemset(b.outLse.ptr, 0xff, b.outLse.bytes);
      ncclResult_t res = ncclDcpA2aLseReduce(ctxs[r], b.in.ptr, b.lse.as<float>(), b.out.ptr, b.outLse.as<float>(),
                                             batch, nullptr, nullptr);
      if (res != ncclSuccess) return addFailure(r, std::string("call: ") + ncclDcpGetLastError());
      if (cudaDeviceSynchronize() != cudaSuccess) return addFailure(r, "cudaDeviceSynchronize failed");
      ncclResult_t async;
      ncclDcpGetAsyncError(ctxs[r], &async);
      if (async != ncclSuccess) return addFailure(r, std::string("async error: ") + ncclDcpGetLastError());
      cudaMemcpy(got[r].out.data(), b.out.ptr, b.out.bytes, cudaMemcpyDeviceToHost);
      cudaMemcpy(got[r].outLse.data(), b.outLse.ptr, b.outLse.bytes, cudaMemcpyDeviceToHost);
    });
    Mismatch m = compareOutputs(cfg, nRanks_, batch, s, got, want);
    EXPECT_EQ(m.count, 0u) << m.first;
  }

  std::vector<ncclDcpContext_t> createAll(const std::function<ncclDcpConfig_t(int)>& cfgOf,
                                          std::vector<ncclResult_t>* results = nullptr,
                                          std::vector<std::string>* messages = nullptr) {
    std::vector<ncclDcpContext_t> ctxs(nRanks_, nullptr);
    std::vector<ncclResult_t> res(nRanks_);
    std::vector<std::string> msg(nRanks_);
    runPerRank([&](int r) {
      cudaSetDevice(r);
      const ncclDcpConfig_t c = cfgOf(r);
      res[r] = ncclDcpContextCreate(comms_[r], &c, &ctxs[r]);
      msg[r] = ncclDcpGetLastError();
      if (!results && res[r] != ncclSuccess) addFailure(r, "create: " + msg[r]);
    });
    if (results) *results = res;
    if (messages) *messages = msg;
    return ctxs;
  }

  void destroyAll(std::vector<ncclDcpContext_t>& ctxs) {
    runPerRank([&](int r) {
      cudaSetDevice(r);
      if (ncclDcpContextDestroy(ctxs[r]) != ncclSuccess) addFailure(r, std::string("destroy: ") + ncclDcpGetLastError());
    });
  }

  int nRanks_ = 0;
  ncclUniqueId id_;
  std::vector<ncclComm_t> comms_;
  std::mutex mutex_;
  std::vector<std::string> failures_;
};

INSTANTIATE_TEST_SUITE_P(Cp, Ranks, testing::Values(2, 4, 8),
                         [](const testing::TestParamInfo<int>& i) { return "cp" + std::to_string(i.param); });

TEST_P(Ranks, EveryProtocolMatchesReference) {
  for (int proto : {ncclDcpProtoAuto, ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple})
    for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16, ncclFloat32}) {
      SCOPED_TRACE(testing::Message() << protocolName(proto) << " " << dtypeName(dtype));
      const ncclDcpConfig_t c = makeConfig(512, 16, dtype, dtype == ncclFloat16 ? ncclDcpLseBaseE : ncclDcpLseBase2, 8, proto);
      auto ctxs = createAll([&](int) { return c; });
      if (HasFailure()) return;
      ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
      ASSERT_EQ(ncclDcpGetTopology(ctxs[0], &t), ncclSuccess);
      EXPECT_EQ(t.path, ncclDcpPathFused) << "ranks of one node should share an LSA team";
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

TEST_P(Ranks, ForcedFallback) {
  Env e;
  e.forceFallback = true;
  setEnvForTesting(&e);
  const ncclDcpConfig_t c = makeConfig(256, 8, ncclBfloat16, ncclDcpLseBaseE, 8);
  auto ctxs = createAll([&](int) { return c; });
  if (HasFailure()) return;
  ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
  ASSERT_EQ(ncclDcpGetTopology(ctxs[0], &t), ncclSuccess);
  EXPECT_EQ(t.path, ncclDcpPathFallback);
  for (int batch : {1, 8, 21}) callAndCheck(ctxs, c, batch);
  destroyAll(ctxs);
}

// Every rank returns the same error, naming the field and the rank.
TEST_P(Ranks, ConfigMismatchFailsEveryRankAlike) {
  std::vector<ncclResult_t> res;
  std::vector<std::string> msg;
  auto ctxs = createAll(
      [&](int r) { return makeConfig(r == nRanks_ - 1 ? 256 : 512, 16, ncclBfloat16, ncclDcpLseBase2); }, &res, &msg);
  for (int r = 0; r < nRanks_; r++) {
    EXPECT_EQ(res[r], ncclInvalidUsage) << "rank " << r;
    EXPECT_EQ(ctxs[r], nullptr);
    EXPECT_NE(msg[r].find("config->headDim"), std::string::npos) << msg[r];
    EXPECT_NE(msg[r].find("rank " + std::to_string(nRanks_ - 1)), std::string::npos) << msg[r];
    EXPECT_EQ(msg[r], msg[0]);
  }
}

// A rank that never calls: every other rank reports a timeout within the
// configured time, and the processes live on.
TEST_P(Ranks, SilentRankTimesOut) {
  ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 8);
  c.timeoutMs = 500;
  auto ctxs = createAll([&](int) { return c; });
  if (HasFailure()) return;
  const int silent = nRanks_ - 1;
  runPerRank([&](int r) {
    if (r == silent) return;
    cudaSetDevice(r);
    DeviceBuffer in(1 << 20), lse(1 << 14), out(1 << 20);
    const auto t0 = std::chrono::steady_clock::now();
    if (ncclDcpA2aLseReduce(ctxs[r], in.ptr, lse.as<float>(), out.ptr, nullptr, 4, nullptr, nullptr) != ncclSuccess)
      return addFailure(r, std::string("call: ") + ncclDcpGetLastError());
    cudaDeviceSynchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ncclResult_t async = ncclSuccess;
    ncclDcpGetAsyncError(ctxs[r], &async);
    if (async != ncclRemoteError) addFailure(r, "no timeout reported");
    if (s > 5.0) addFailure(r, "timeout took " + std::to_string(s) + " s");
  });
  destroyAll(ctxs);
}

TEST_P(Ranks, GraphReplaysOnRealRanks) {
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 16);
  auto ctxs = createAll([&](int) { return c; });
  if (HasFailure()) return;
  // Eager, then captured and replayed, then eager again: rounds stay in step.
  callAndCheck(ctxs, c, 5);
  runPerRank([&](int r) {
    cudaSetDevice(r);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (ncclDcpContextBindStream(ctxs[r], s) != ncclSuccess) return addFailure(r, "bind");
    DeviceBuffer in(512 * 16 * 2 * 16 * nRanks_), lse(16 * 16 * 4 * nRanks_), out(512 * 16 * 2 * 16);
    cudaMemset(in.ptr, 0x3c, in.bytes);
    cudaMemset(lse.ptr, 0, lse.bytes);
    cudaGraph_t g;
    cudaGraphExec_t e;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < 4; i++)
      ncclDcpA2aLseReduce(ctxs[r], in.ptr, lse.as<float>(), out.ptr, nullptr, 16, nullptr, s);
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&e, g, 0);
    for (int i = 0; i < 20; i++) cudaGraphLaunch(e, s);
    if (cudaStreamSynchronize(s) != cudaSuccess) addFailure(r, "replays failed");
    cudaGraphExecDestroy(e);
    cudaGraphDestroy(g);
    ncclDcpContextBindStream(ctxs[r], nullptr);
    cudaStreamDestroy(s);
  });
  callAndCheck(ctxs, c, 7);
  destroyAll(ctxs);
}

// One thread drives every GPU: the group variants of create and destroy.
TEST_P(Ranks, OneThreadDrivesEveryGpu) {
  std::vector<ncclComm_t> comms(nRanks_);
  std::vector<int> devs(nRanks_);
  for (int r = 0; r < nRanks_; r++) devs[r] = r;
  ASSERT_EQ(ncclCommInitAll(comms.data(), nRanks_, devs.data()), ncclSuccess);
  const ncclDcpConfig_t c = makeConfig(512, 8, ncclBfloat16, ncclDcpLseBase2, 8);
  std::vector<ncclDcpContext_t> ctxs(nRanks_);
  DCP_ASSERT(ncclDcpContextCreateGroup(nRanks_, comms.data(), &c, ctxs.data()));
  callAndCheck(ctxs, c, 13);
  DCP_ASSERT(ncclDcpContextDestroyGroup(nRanks_, ctxs.data()));
  for (int r = 0; r < nRanks_; r++) ncclCommDestroy(comms[r]);
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
