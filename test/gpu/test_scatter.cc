/*************************************************************************
 * The scatter modes of issue 27 on one GPU through loopback (cp virtual
 * ranks): HEAD, TOKEN and NONE over every protocol, TOKEN's splits (host
 * counts, device counts rewritten between CUDA-graph replays, device
 * counts that make no split), bf16 / fp16 partial LSEs, empty shards
 * (seqLens / queryStartLoc), and batch invariance: one row's bits the
 * same in every batch, at every position, under every protocol and mode,
 * and through the fallback's pack and combine kernels.
 *
 * Every call runs on fresh random data with poisoned outputs (a slack row
 * past each rank's share must stay poisoned) and is compared with the CPU
 * reference (referenceA2aLseReduce with the call's shape) and with the
 * fp64 oracle (test/common/oracle.h: its own even split, empty-row rule,
 * placement and merge; DeviceProblem::checkAll does both).
 ************************************************************************/
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "device_problem.h"
#include "fallback_rounds.h"
#include "enums.h"
#include "env.h"
#include "launch.h"
#include "loopback.h"
#include "reference.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

constexpr int kCap = 8;  // maxBatch of most cases: batches above it are chunked

// One call of p through lb on stream (p's strides: NULL when packed; p's
// args), finished.
void callAndWait(Loopback& lb, const DeviceProblem& p, cudaStream_t stream = nullptr) {
  const ncclDcpStrides_t s = p.apiStrides();
  const Strides packed = packedStrides(p.config(), (int)p.want().size());
  const bool isPacked = memcmp(&packed, &p.strides(), sizeof(Strides)) == 0;
  const std::vector<CallBuffers> b = p.allBuffers();
  DCP_ASSERT(lb.call(b.data(), p.batch(), isPacked ? nullptr : &s, stream, p.args(0)));
  CUDA_ASSERT(cudaGetLastError());
  CUDA_ASSERT(cudaStreamSynchronize(stream));
  DCP_ASSERT(lb.asyncError());
}

// A call of `batch` rows on fresh data (mix) through lb, compared with
// the reference.
void runAndCheck(Loopback& lb, const ncclDcpConfig_t& c, int nRanks, int batch, const CallSpec& spec = {},
                 LseMix mix = LseMix::Special, bool padded = false) {
  const uint64_t seed = freshSeed();
  const Config cfg = resolved(c);
  std::ostringstream counts;
  for (int n : spec.rowCounts) counts << n << ",";
  SCOPED_TRACE(testing::Message() << scatterName(c.scatter) << " " << protocolName(c.protocol) << " cp " << nRanks
                                  << " Hl " << c.localHeads << " D " << c.headDim << " " << dtypeName(c.dtype)
                                  << " lse " << dtypeName(cfg.lseDtype) << " batch " << batch << " maxBatch "
                                  << c.maxBatch << " counts [" << counts.str() << "]"
                                  << (spec.deviceCounts ? " on the device" : "")
                                  << (spec.emptyShards ? " empty shards" : "") << (padded ? " padded" : "")
                                  << " seed " << seed);
  const Strides strided = paddedStrides(cfg, nRanks);
  DeviceProblem p(cfg, nRanks, batch, mix, seed, spec, {}, 1, padded ? &strided : nullptr);
  ASSERT_NO_FATAL_FAILURE(callAndWait(lb, p));
  const Mismatch m = p.checkAll();
  EXPECT_EQ(m.count, 0u) << m.first;
}

// Counts of `batch` rows over nRanks: every row to a random rank among
// some (ranks left out get none), or (owner >= 0) all to one rank.
std::vector<int> randomCounts(int batch, int nRanks, std::mt19937_64& rng, int owner = -1) {
  std::vector<int> counts(nRanks, 0);
  if (owner >= 0) {
    counts[owner] = batch;
    return counts;
  }
  std::vector<int> active;
  for (int r = 0; r < nRanks; r++)
    if (rng() % 3 != 0) active.push_back(r);
  if (active.empty()) active.push_back((int)(rng() % nRanks));
  for (int b = 0; b < batch; b++) counts[active[rng() % active.size()]]++;
  return counts;
}

// ---- The matrix: mode x protocol, over cp, dtypes and batches.
using ModeProto = std::tuple<int /*scatter*/, int /*proto*/>;

class ScatterMatrix : public testing::TestWithParam<ModeProto> {
 protected:
  void SetUp() override { DCP_REQUIRE_GPUS(1); }
};

std::string modeProtoName(const testing::TestParamInfo<ModeProto>& info) {
  return std::string(scatterName(std::get<0>(info.param))) + "_" + protocolName(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Modes, ScatterMatrix,
                         testing::Combine(testing::Values(ncclDcpScatterHead, ncclDcpScatterToken,
                                                          ncclDcpScatterNone),
                                          testing::Values(ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple,
                                                          ncclDcpProtoAuto)),
                         modeProtoName);

// cp 2..16, bf16 and fp16 or fp32 payloads, batches 1, below cp, uneven
// and chunked (padded strides on one of them), the even split.
TEST_P(ScatterMatrix, MatchesReference) {
  const auto [scatter, proto] = GetParam();
  for (int cp : {2, 3, 4, 8, 16}) {
    const int Hl = cp >= 8 ? 1 : 2;
    for (ncclDataType_t dtype : {ncclBfloat16, cp == 3 || cp == 8 ? ncclFloat16 : ncclFloat32}) {
      const ncclDcpConfig_t c = withScatter(
          makeConfig(128, Hl, dtype, cp % 2 ? ncclDcpLseBaseE : ncclDcpLseBase2, kCap, proto), scatter);
      auto lb = makeLoopback(c, cp);
      ASSERT_TRUE(lb);
      std::vector<int> batches = {1, kCap + 3, 4 * kCap + 5};
      if (cp > 2) batches.insert(batches.begin() + 1, cp - 1);
      for (int batch : batches) {
        runAndCheck(*lb, c, cp, batch, {}, LseMix::Special, /*padded=*/batch == kCap + 3);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Partial LSEs in bf16 and fp16 (outLse stays fp32), huge spreads too.
TEST_P(ScatterMatrix, NarrowLseDtypes) {
  const auto [scatter, proto] = GetParam();
  for (int cp : {2, 4, 8})
    for (ncclDataType_t lseDtype : {ncclBfloat16, ncclFloat16}) {
      const ncclDcpConfig_t c = withScatter(
          makeConfig(128, 2, ncclBfloat16, lseDtype == ncclFloat16 ? ncclDcpLseBaseE : ncclDcpLseBase2, kCap, proto),
          scatter, lseDtype);
      auto lb = makeLoopback(c, cp);
      ASSERT_TRUE(lb);
      runAndCheck(*lb, c, cp, 3);
      runAndCheck(*lb, c, cp, 2 * kCap + 5, {}, LseMix::HugeSpread);
      if (HasFatalFailure()) return;
    }
}

// Empty shards: some sequences empty on some ranks, one on every rank,
// padding rows (empty everywhere: out 0, outLse -inf), garbage (NaN, inf,
// 1e30, 7) in their LSEs and payloads; TOKEN with uneven host counts and
// with device counts too.
TEST_P(ScatterMatrix, EmptyShards) {
  const auto [scatter, proto] = GetParam();
  const ncclDataType_t lseDtypes[] = {ncclFloat32, ncclBfloat16, ncclFloat16};
  int k = 0;
  for (int cp : {2, 3, 8})
    for (int batch : {1, 6, 3 * kCap + 5}) {
      const ncclDataType_t lseDtype = lseDtypes[k++ % 3];
      const ncclDcpConfig_t c =
          withScatter(makeConfig(64, 2, ncclBfloat16, ncclDcpLseBase2, kCap, proto), scatter, lseDtype);
      auto lb = makeLoopback(c, cp);
      ASSERT_TRUE(lb);
      CallSpec spec;
      spec.emptyShards = true;
      runAndCheck(*lb, c, cp, batch, spec, LseMix::Normal);
      if (scatter == ncclDcpScatterToken) {
        std::mt19937_64 rng(freshSeed());
        spec.rowCounts = randomCounts(batch, cp, rng);
        runAndCheck(*lb, c, cp, batch, spec, LseMix::Normal);
        spec.deviceCounts = true;
        spec.rowCounts = randomCounts(batch, cp, rng);
        runAndCheck(*lb, c, cp, batch, spec, LseMix::Special);
      }
      if (HasFatalFailure()) return;
    }
}

// ---- NONE's two algorithms (DESIGN §14), each forced by NCCL_DCP_NONE_ALGO,
// per protocol: both match the reference and give the same bits (phase 2
// copies what phase 1 merged), and the context runs the one asked for (a
// phase-2 half in its regions or not).
class NoneAlgorithms : public testing::TestWithParam<int /*proto*/> {
 protected:
  void SetUp() override { DCP_REQUIRE_GPUS(1); }
  static Env algoEnv(NoneAlgo algo) {
    Env e;
    e.noneAlgo = (int)algo;
    return e;
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, NoneAlgorithms,
                         testing::Values(ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple, ncclDcpProtoAuto),
                         [](const testing::TestParamInfo<int>& info) { return std::string(protocolName(info.param)); });

TEST_P(NoneAlgorithms, DirectAndTwoPhaseMatchTheReferenceBitwiseAlike) {
  for (int cp : {2, 3, 5, 8, 16}) {
    const int Hl = cp >= 8 ? 1 : 3;
    ncclDcpConfig_t c = withScatter(
        makeConfig(128, Hl, ncclBfloat16, cp % 2 ? ncclDcpLseBaseE : ncclDcpLseBase2, kCap, GetParam()),
        ncclDcpScatterNone);
    c.timeoutMs = 10000;  // a phase 2 that never comes fails in seconds
    for (int batch : {1, cp + 1, 4 * kCap + 5}) {
      const uint64_t seed = freshSeed();
      SCOPED_TRACE(testing::Message() << protocolName(GetParam()) << " cp " << cp << " batch " << batch << " seed "
                                      << seed);
      std::vector<RankTensors> outs[2];
      for (NoneAlgo algo : {NoneAlgo::Direct, NoneAlgo::TwoPhase}) {
        SCOPED_TRACE(noneAlgoName((int)algo));
        ScopedEnv env(algoEnv(algo));
        auto lb = makeLoopback(c, cp);
        ASSERT_TRUE(lb);
        const WorkspaceLayout& w = lb->engine().layout;
        EXPECT_EQ(w.small.relayBytes != 0, algo == NoneAlgo::TwoPhase);
        EXPECT_EQ(w.large.relayBytes != 0, algo == NoneAlgo::TwoPhase);
        DeviceProblem p(resolved(c), cp, batch, LseMix::Special, seed, CallSpec{});
        ASSERT_NO_FATAL_FAILURE(callAndWait(*lb, p));
        const Mismatch m = p.checkAll();
        EXPECT_EQ(m.count, 0u) << m.first;
        for (int r = 0; r < cp; r++) outs[algo == NoneAlgo::TwoPhase].push_back(p.outputs(r));
      }
      for (int r = 0; r < cp; r++) {
        EXPECT_TRUE(outs[0][r].out == outs[1][r].out) << "rank " << r << ": out differs between the algorithms";
        EXPECT_EQ(memcmp(outs[0][r].outLse.data(), outs[1][r].outLse.data(), outs[0][r].outLse.size() * 4), 0)
            << "rank " << r << ": outLse differs between the algorithms";
      }
      if (HasFatalFailure()) return;
    }
  }
}

// A silent rank under two phases: every other rank gives up after the
// timeout, records it, and leaves NaN over every head of every row -- its
// own merge and what it would have gathered -- not the zeros put there.
TEST_P(NoneAlgorithms, TwoPhaseSilentRankLeavesNanEverywhere) {
  const int cp = 4, batch = 5;
  ScopedEnv env(algoEnv(NoneAlgo::TwoPhase));
  ncclDcpConfig_t c = withScatter(makeConfig(128, 2, ncclBfloat16, ncclDcpLseBase2, kCap, GetParam()),
                                  ncclDcpScatterNone);
  c.timeoutMs = 200;
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  // The context runs two phases (a phase-2 half in its regions): with
  // direct, the NaN below would show nothing of phase 2.
  ASSERT_NE(lb->engine().layout.small.relayBytes, 0u) << "NCCL_DCP_NONE_ALGO=two_phase: no phase-2 half";
  DeviceProblem p(resolved(c), cp, batch, LseMix::Normal, freshSeed(), CallSpec{});
  const std::vector<CallBuffers> b = p.allBuffers();
  const size_t outBytes = (size_t)batch * cp * 2 * 128 * 2;
  for (int r = 0; r < cp; r++) {
    CUDA_ASSERT(cudaMemset(b[r].out, 0, outBytes));
    CUDA_ASSERT(cudaMemset(b[r].outLse, 0, (size_t)batch * cp * 2 * sizeof(float)));
  }
  lb->setSilentRank(2);
  DCP_ASSERT(lb->call(b.data(), batch, nullptr, nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(lb->asyncError(), ncclRemoteError);
  for (int r = 0; r < cp; r++) {
    if (r == 2) continue;
    const RankTensors t = p.outputs(r);
    const uint16_t* out = (const uint16_t*)t.out.data();
    size_t notNan = 0;
    for (size_t i = 0; i < outBytes / 2; i++) notNan += (out[i] & 0x7f80) != 0x7f80 || (out[i] & 0x7f) == 0;
    for (size_t i = 0; i < (size_t)batch * cp * 2; i++) notNan += !std::isnan(t.outLse[i]);
    EXPECT_EQ(notNan, 0u) << "rank " << r << ": outputs not NaN after the silent rank's timeout";
  }
}

// Two phases on one call of each kind, small enough for the sanitizers
// (scripts/gpu-check.sh sanitize): cp 4 over a chunked batch, padded
// strides with special LSEs, then empty shards; the layout asserted.
TEST_P(NoneAlgorithms, TwoPhaseOnce) {
  const int cp = 4, batch = kCap + 3;
  ScopedEnv env(algoEnv(NoneAlgo::TwoPhase));
  ncclDcpConfig_t c = withScatter(makeConfig(64, 2, ncclBfloat16, ncclDcpLseBaseE, kCap, GetParam()),
                                  ncclDcpScatterNone, ncclBfloat16);
  c.timeoutMs = 10000;
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  ASSERT_NE(lb->engine().layout.small.relayBytes, 0u) << "NCCL_DCP_NONE_ALGO=two_phase: no phase-2 half";
  runAndCheck(*lb, c, cp, batch, {}, LseMix::Special, /*padded=*/true);
  CallSpec shards;
  shards.emptyShards = true;
  runAndCheck(*lb, c, cp, batch, shards, LseMix::Normal);
}

// ---- NONE in two phases over every dtype, LSE dtype, protocol: packed and
// padded strides, special LSEs and huge spreads, empty shards; cp 3 and 8,
// batches of one row and chunked. Each context is asserted to run two
// phases (its layout), so the test fails with them off.
using TwoPhaseParam = std::tuple<int /*proto*/, ncclDataType_t /*dtype*/, ncclDataType_t /*lseDtype*/>;

class NoneTwoPhaseMatrix : public testing::TestWithParam<TwoPhaseParam> {
 protected:
  void SetUp() override { DCP_REQUIRE_GPUS(1); }
};

std::string twoPhaseName(const testing::TestParamInfo<TwoPhaseParam>& info) {
  return std::string(protocolName(std::get<0>(info.param))) + "_" + dtypeName(std::get<1>(info.param)) + "_lse_" +
         dtypeName(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Types, NoneTwoPhaseMatrix,
                         testing::Combine(testing::Values(ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple,
                                                          ncclDcpProtoAuto),
                                          testing::Values(ncclBfloat16, ncclFloat16, ncclFloat32),
                                          testing::Values(ncclFloat32, ncclBfloat16, ncclFloat16)),
                         twoPhaseName);

TEST_P(NoneTwoPhaseMatrix, MatchesReferenceAndOracle) {
  const auto [proto, dtype, lseDtype] = GetParam();
  Env twoPhase;
  twoPhase.noneAlgo = (int)NoneAlgo::TwoPhase;
  ScopedEnv env(twoPhase);
  for (int cp : {3, 8}) {
    ncclDcpConfig_t c = withScatter(
        makeConfig(dtype == ncclFloat32 ? 64 : 128, cp == 3 ? 3 : 1, dtype, cp == 3 ? ncclDcpLseBaseE : ncclDcpLseBase2,
                   kCap, proto),
        ncclDcpScatterNone, lseDtype);
    c.timeoutMs = 10000;
    auto lb = makeLoopback(c, cp);
    ASSERT_TRUE(lb);
    const WorkspaceLayout& w = lb->engine().layout;
    ASSERT_NE(w.small.relayBytes, 0u) << "two phases asked for, the workspace has no phase-2 half";
    if (w.hasLarge) {
      ASSERT_NE(w.large.relayBytes, 0u);
    }
    if (w.hasTiny) {
      ASSERT_NE(w.tiny.relayBytes, 0u);
    }
    for (int batch : {1, 2 * kCap + 5}) {
      runAndCheck(*lb, c, cp, batch, {}, LseMix::Special, /*padded=*/false);
      runAndCheck(*lb, c, cp, batch, {}, LseMix::HugeSpread, /*padded=*/true);
      CallSpec shards;
      shards.emptyShards = true;
      runAndCheck(*lb, c, cp, batch, shards, LseMix::Special, /*padded=*/batch > 1);
      if (HasFatalFailure()) return;
    }
  }
}

// ---- TOKEN's splits, per protocol.
class TokenSplit : public testing::TestWithParam<int> {
 protected:
  void SetUp() override { DCP_REQUIRE_GPUS(1); }
  ncclDcpConfig_t config(ncclDataType_t dtype = ncclBfloat16) const {
    return withScatter(makeConfig(128, 2, dtype, ncclDcpLseBase2, kCap, GetParam()), ncclDcpScatterToken);
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, TokenSplit,
                         testing::Values(ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple, ncclDcpProtoAuto),
                         [](const testing::TestParamInfo<int>& i) { return std::string(protocolName(i.param)); });

// The splits a test walks through for cp ranks and `batch` rows: ranks of
// no rows, one rank owning everything (first, last, one in the middle),
// the even split as counts, random ones.
std::vector<std::vector<int>> splitsFor(int batch, int cp, std::mt19937_64& rng) {
  std::vector<std::vector<int>> splits = {randomCounts(batch, cp, rng, 0), randomCounts(batch, cp, rng, cp - 1),
                                          randomCounts(batch, cp, rng, cp / 2)};
  std::vector<int> even(cp);
  for (int p = 0; p < cp; p++) even[p] = batch / cp + (p < batch % cp);
  splits.push_back(even);
  std::vector<int> alternate(cp, 0);  // every other rank, the rest to the last
  int left = batch;
  for (int p = 0; p < cp - 1; p += 2) {
    alternate[p] = std::min(left, batch / cp + 1);
    left -= alternate[p];
  }
  alternate[cp - 1] += left;
  splits.push_back(alternate);
  for (int i = 0; i < 3; i++) splits.push_back(randomCounts(batch, cp, rng));
  return splits;
}

// Uneven host counts: zero-row ranks, one rank owning everything, slices
// that cross the rounds of a chunked batch; B < cp.
TEST_P(TokenSplit, HostCounts) {
  std::mt19937_64 rng(freshSeed());
  for (int cp : {2, 3, 4, 8, 16}) {
    const ncclDcpConfig_t c = config(cp == 4 ? ncclFloat32 : ncclBfloat16);
    auto lb = makeLoopback(c, cp);
    ASSERT_TRUE(lb);
    for (int batch : {1, std::max(1, cp - 1), 3 * kCap + 1}) {
      for (const std::vector<int>& counts : splitsFor(batch, cp, rng)) {
        CallSpec spec;
        spec.rowCounts = counts;
        runAndCheck(*lb, c, cp, batch, spec);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// One call of each kind of split, small enough for the sanitizers
// (scripts/gpu-check.sh sanitize): uneven host counts with a rank of no
// rows and empty shards, device counts eager, then a graph captured once
// and replayed with two other device splits.
TEST_P(TokenSplit, HostAndDeviceCountsOnce) {
  const int cp = 4, batch = kCap + 3;
  const ncclDcpConfig_t c = config();
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  CallSpec host;
  host.rowCounts = {0, 5, kCap - 4, 2};
  host.emptyShards = true;
  runAndCheck(*lb, c, cp, batch, host);
  DeviceProblem p(resolved(c), cp, batch, LseMix::Special, freshSeed(), CallSpec{{}, true, false, nullptr});
  p.setCounts({3, 0, 6, kCap - 6});
  ASSERT_NO_FATAL_FAILURE(callAndWait(*lb, p));
  Mismatch m = p.checkAll();
  EXPECT_EQ(m.count, 0u) << "device counts, eager: " << m.first;
  cudaStream_t stream = nullptr;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<std::remove_pointer_t<cudaStream_t>, cudaError_t (*)(cudaStream_t)> streamOwner(stream, cudaStreamDestroy);
  p.refill(LseMix::Normal, freshSeed(), /*toStaging=*/true);
  const ncclDcpStrides_t s = p.apiStrides();
  const std::vector<CallBuffers> b = p.allBuffers();
  cudaGraph_t graph = nullptr;
  CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int r = 0; r < cp; r++) {
    p.stageInputs(r, stream);
    p.poison(r, stream);
  }
  const ncclResult_t captured = lb->call(b.data(), batch, &s, stream, p.args(0));
  CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
  std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, cudaError_t (*)(cudaGraph_t)> graphOwner(graph, cudaGraphDestroy);
  ASSERT_EQ(captured, ncclSuccess) << ncclDcpGetLastError();
  cudaGraphExec_t exec = nullptr;
  CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
  std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, cudaError_t (*)(cudaGraphExec_t)> execOwner(exec, cudaGraphExecDestroy);
  for (const std::vector<int>& counts : {std::vector<int>{batch, 0, 0, 0}, std::vector<int>{1, 1, 1, batch - 3}}) {
    SCOPED_TRACE(testing::Message() << "replay, counts " << testing::PrintToString(counts));
    p.setCounts(counts);
    p.refill(LseMix::Special, freshSeed(), /*toStaging=*/true);
    CUDA_ASSERT(cudaGraphLaunch(exec, stream));
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    DCP_ASSERT(lb->asyncError());
    m = p.checkAll();
    EXPECT_EQ(m.count, 0u) << m.first;
  }
}

// Device counts, eager: new counts into the same array before each call,
// one context throughout.
TEST_P(TokenSplit, DeviceCountsEager) {
  std::mt19937_64 rng(freshSeed());
  for (int cp : {3, 8}) {
    const ncclDcpConfig_t c = config();
    auto lb = makeLoopback(c, cp);
    ASSERT_TRUE(lb);
    const int batch = 2 * kCap + 3;
    DeviceProblem p(resolved(c), cp, batch, LseMix::Special, freshSeed(), CallSpec{{}, true, false, nullptr});
    for (const std::vector<int>& counts : splitsFor(batch, cp, rng)) {
      SCOPED_TRACE(testing::Message() << "cp " << cp << " counts " << testing::PrintToString(counts));
      p.setCounts(counts);
      p.refill(LseMix::Special, freshSeed());
      for (int r = 0; r < cp; r++) p.poison(r, nullptr);
      ASSERT_NO_FATAL_FAILURE(callAndWait(*lb, p));
      const Mismatch m = p.checkAll();
      ASSERT_EQ(m.count, 0u) << m.first;
    }
  }
}

// One capture of enqueue()'s calls on `stream`, instantiated; freed with
// the object. Call as ASSERT_NO_FATAL_FAILURE(capture(...)).
struct CapturedGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CapturedGraph() = default;
  CapturedGraph(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};
void capture(cudaStream_t stream, const std::function<ncclResult_t()>& enqueue, CapturedGraph* g) {
  CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const ncclResult_t captured = enqueue();
  const std::string why = ncclDcpGetLastError();
  CUDA_ASSERT(cudaStreamEndCapture(stream, &g->graph));
  ASSERT_EQ(captured, ncclSuccess) << why;
  CUDA_ASSERT(cudaGraphInstantiate(&g->exec, g->graph, 0));
}

// Device counts under a CUDA graph: one capture (a producer copying each
// rank's staged inputs in, the outputs poisoned, the call), replayed with
// new counts written into the device array and new inputs staged before
// each replay; an eager call with other counts half way. Every replay is
// checked.
TEST_P(TokenSplit, DeviceCountsGraphReplays) {
  std::mt19937_64 rng(freshSeed());
  const int cp = 4, batch = 2 * kCap + 5;  // chunked: the graph holds three rounds
  const ncclDcpConfig_t c = config();
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  cudaStream_t stream = nullptr;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<std::remove_pointer_t<cudaStream_t>, cudaError_t (*)(cudaStream_t)> streamOwner(stream, cudaStreamDestroy);
  DeviceProblem p(resolved(c), cp, batch, LseMix::Normal, freshSeed(), CallSpec{{}, true, false, nullptr});
  p.refill(LseMix::Normal, freshSeed(), /*toStaging=*/true);  // the staging buffers exist before the capture
  const ncclDcpStrides_t s = p.apiStrides();
  const std::vector<CallBuffers> b = p.allBuffers();
  auto enqueue = [&]() {
    for (int r = 0; r < cp; r++) {
      p.stageInputs(r, stream);
      p.poison(r, stream);
    }
    return lb->call(b.data(), batch, &s, stream, p.args(0));
  };
  CapturedGraph g;
  ASSERT_NO_FATAL_FAILURE(capture(stream, enqueue, &g));
  const cudaGraphExec_t exec = g.exec;
  std::vector<std::vector<int>> splits = splitsFor(batch, cp, rng);
  for (int i = 0; i < 4; i++) splits.push_back(randomCounts(batch, cp, rng));
  for (size_t rep = 0; rep < splits.size(); rep++) {
    SCOPED_TRACE(testing::Message() << "replay " << rep << " counts " << testing::PrintToString(splits[rep]));
    p.setCounts(splits[rep]);
    p.refill(rep % 2 ? LseMix::Special : LseMix::Normal, freshSeed(), /*toStaging=*/true);
    CUDA_ASSERT(cudaGraphLaunch(exec, stream));
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    DCP_ASSERT(lb->asyncError());
    Mismatch m = p.checkAll();
    ASSERT_EQ(m.count, 0u) << m.first;
    if (rep == splits.size() / 2) {  // an eager call between replays
      p.setCounts(randomCounts(batch, cp, rng));
      p.refill(LseMix::Normal, freshSeed(), /*toStaging=*/true);
      DCP_ASSERT(enqueue());
      CUDA_ASSERT(cudaStreamSynchronize(stream));
      DCP_ASSERT(lb->asyncError());
      m = p.checkAll();
      ASSERT_EQ(m.count, 0u) << "eager call between replays: " << m.first;
    }
  }
}

// After a refused call: rank r's first nanRows[r] out rows (of the first
// `rows`) are NaN in out and outLse, every other row bitwise as `before`.
void expectRefusedOutputs(const DeviceProblem& p, const Config& cfg, int cp, const std::vector<RankTensors>& before,
                          const std::vector<int>& nanRows, int rows) {
  const Strides& st = p.strides();
  const int H = cp * cfg.localHeads;
  for (int r = 0; r < cp; r++) {
    SCOPED_TRACE(testing::Message() << "rank " << r);
    const RankTensors got = p.outputs(r);
    const int outRows = (int)(got.outLse.size() / std::max<int64_t>(st.outLseRow, 1));
    for (int row = 0; row < std::min(outRows, rows); row++)
      for (int h = 0; h < H; h++) {
        const int64_t li = row * st.outLseRow + h * st.outLseHead;
        if (row < nanRows[r]) {
          ASSERT_TRUE(std::isnan(got.outLse[li])) << "outLse[" << row << "][" << h << "] = " << got.outLse[li];
          for (int d = 0; d < cfg.headDim; d++) {
            const float v = loadElement(cfg.dtype, got.out.data(), row * st.outRow + h * st.outHead + d);
            ASSERT_TRUE(std::isnan(v)) << "out[" << row << "][" << h << "][" << d << "] = " << v;
          }
        } else {  // outside the poisoned rows: as the valid call left it
          ASSERT_EQ(memcmp(&got.outLse[li], &before[r].outLse[li], 4), 0) << "outLse[" << row << "][" << h << "]";
          const size_t at = (size_t)(row * st.outRow + h * st.outHead) * cfg.eltSize;
          ASSERT_EQ(memcmp(got.out.data() + at, before[r].out.data() + at, (size_t)cfg.headDim * cfg.eltSize), 0)
              << "out[" << row << "][" << h << "]";
        }
      }
  }
}

// A graph replayed with valid device counts, then with counts that make no
// split (a sum of batch + 1): the refused replay writes NaN over every row
// the last valid split gave each rank -- the rows the previous replay
// filled -- so a caller that reads out before polling the async error never
// consumes the previous step's bits; rows outside stay as they were.
TEST_P(TokenSplit, RefusedReplayOverwritesThePreviousSliceWithNaN) {
  const int cp = 4, batch = 2 * kCap + 5;  // chunked: three rounds
  const ncclDcpConfig_t c = config();
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  cudaStream_t stream = nullptr;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<std::remove_pointer_t<cudaStream_t>, cudaError_t (*)(cudaStream_t)> streamOwner(stream, cudaStreamDestroy);
  DeviceProblem p(cfg, cp, batch, LseMix::Normal, freshSeed(), CallSpec{{}, true, false, nullptr});
  const ncclDcpStrides_t s = p.apiStrides();
  const std::vector<CallBuffers> b = p.allBuffers();
  CapturedGraph g;
  ASSERT_NO_FATAL_FAILURE(capture(stream, [&]() { return lb->call(b.data(), batch, &s, stream, p.args(0)); }, &g));
  const cudaGraphExec_t exec = g.exec;

  const std::vector<int> valid = {kCap + 3, 0, 5, kCap - 3};  // sums to batch; rank 0 crosses rounds
  p.setCounts(valid);
  CUDA_ASSERT(cudaGraphLaunch(exec, stream));
  CUDA_ASSERT(cudaStreamSynchronize(stream));
  DCP_ASSERT(lb->asyncError());
  const Mismatch m = p.checkAll();
  ASSERT_EQ(m.count, 0u) << m.first;
  std::vector<RankTensors> before;
  for (int r = 0; r < cp; r++) before.push_back(p.outputs(r));

  std::vector<int> bad = valid;
  bad[2] += 1;  // batch + 1
  p.setCounts(bad);
  CUDA_ASSERT(cudaGraphLaunch(exec, stream));
  CUDA_ASSERT(cudaStreamSynchronize(stream));
  EXPECT_EQ(lb->asyncError(), ncclInvalidArgument);
  expectRefusedOutputs(p, cfg, cp, before, valid, batch);
}

// The last accepted split is a larger call's: a refused call with a
// smaller batch writes NaN over that split cut at its own batch, never past
// it (its out holds no more rows). Valid counts at batch 2 kCap + 5 give
// rank 0 kCap + 3 rows; then batch 5 with counts that make no split on the
// same buffers: rank 0's rows [0, 5) NaN, every other row of every rank as
// the valid call left it.
TEST_P(TokenSplit, RefusedSmallerCallStaysWithinItsBatch) {
  const int cp = 4, batch = 2 * kCap + 5, small = 5;
  const ncclDcpConfig_t c = config();
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  DeviceProblem p(cfg, cp, batch, LseMix::Normal, freshSeed(), CallSpec{{}, true, false, nullptr});
  const ncclDcpStrides_t s = p.apiStrides();
  const std::vector<CallBuffers> b = p.allBuffers();
  p.setCounts({kCap + 3, 0, 5, kCap - 3});
  DCP_ASSERT(lb->call(b.data(), batch, &s, nullptr, p.args(0)));
  CUDA_ASSERT(cudaDeviceSynchronize());
  DCP_ASSERT(lb->asyncError());
  const Mismatch m = p.checkAll();
  ASSERT_EQ(m.count, 0u) << m.first;
  std::vector<RankTensors> before;
  for (int r = 0; r < cp; r++) before.push_back(p.outputs(r));

  p.setCounts({small, 0, 0, 1});  // sums to small + 1
  DCP_ASSERT(lb->call(b.data(), small, &s, nullptr, p.args(0)));
  CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(lb->asyncError(), ncclInvalidArgument);
  expectRefusedOutputs(p, cfg, cp, before, {small, 0, 0, 0}, batch);
}

// Device counts that make no split (a sum above or below the batch, a
// negative count): the kernels refuse the call, the context reports
// ncclInvalidArgument, every output byte is still poisoned; the next call
// returns the error and writes NaN over the rows its (valid) counts give
// each rank, nothing else. Host counts that make no split are refused
// before anything is enqueued.
TEST_P(TokenSplit, InvalidCounts) {
  const int cp = 4, batch = 13;
  const std::vector<std::vector<int>> invalid = {{3, 3, 3, 5}, {3, 3, 3, 3}, {-1, 7, 7, 0}, {0, 0, 0, 0}};
  const std::vector<int> valid = {5, 0, 6, 2};
  const ncclDcpConfig_t c = config();
  const Config cfg = resolved(c);
  for (const std::vector<int>& counts : invalid) {
    SCOPED_TRACE(testing::Message() << "counts " << testing::PrintToString(counts));
    auto lb = makeLoopback(c, cp);  // a refusal poisons the context: a fresh one each
    ASSERT_TRUE(lb);
    DeviceProblem p(cfg, cp, batch, LseMix::Normal, freshSeed(), CallSpec{{}, true, false, nullptr});
    const ncclDcpStrides_t s = p.apiStrides();
    std::vector<CallBuffers> b = p.allBuffers();

    // Host counts: refused at the call.
    ncclDcpCallArgs_t hostArgs = NCCL_DCP_CALL_ARGS_INITIALIZER;
    hostArgs.rowCounts = counts.data();
    EXPECT_EQ(lb->call(b.data(), batch, &s, nullptr, &hostArgs), ncclInvalidArgument);
    EXPECT_NE(std::string(ncclDcpGetLastError()).find("rowCounts"), std::string::npos) << ncclDcpGetLastError();
    CUDA_ASSERT(cudaDeviceSynchronize());
    DCP_ASSERT(lb->asyncError());

    // Device counts: refused by the kernels.
    p.setCounts(counts);
    DCP_ASSERT(lb->call(b.data(), batch, &s, nullptr, p.args(0)));
    CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_EQ(lb->asyncError(), ncclInvalidArgument);
    for (int r = 0; r < cp; r++) {
      const RankTensors got = p.outputs(r);
      for (size_t i = 0; i < got.out.size(); i++) ASSERT_EQ(got.out[i], 0xff) << "rank " << r << " out byte " << i;
      const uint8_t* lse = (const uint8_t*)got.outLse.data();
      for (size_t i = 0; i < got.outLse.size() * 4; i++) ASSERT_EQ(lse[i], 0xff) << "rank " << r << " outLse byte " << i;
    }

    // The poisoned context's next call: NaN over each rank's slice only.
    p.setCounts(valid);
    for (int r = 0; r < cp; r++) {
      CUDA_ASSERT(cudaMemset(b[r].out, 0, p.outputs(r).out.size()));
      CUDA_ASSERT(cudaMemset(b[r].outLse, 0, p.outputs(r).outLse.size() * sizeof(float)));
    }
    EXPECT_EQ(lb->call(b.data(), batch, &s, nullptr, p.args(0)), ncclInvalidArgument);
    CUDA_ASSERT(cudaDeviceSynchronize());
    const Strides& st = p.strides();
    const int H = cp * cfg.localHeads;
    for (int r = 0; r < cp; r++) {
      const RankTensors got = p.outputs(r);
      const int rows = valid[r];
      for (int row = 0; row <= rows; row++)  // the slice, then the slack row
        for (int h = 0; h < H; h++) {
          const bool mine = row < rows;
          // NaN in the slice, the zeros written before the call elsewhere.
          const float l = got.outLse[row * st.outLseRow + h * st.outLseHead];
          ASSERT_TRUE(mine ? std::isnan(l) : l == 0.f) << "rank " << r << " outLse[" << row << "][" << h << "] = " << l;
          for (int d = 0; d < cfg.headDim; d++) {
            const float v = loadElement(cfg.dtype, got.out.data(), row * st.outRow + h * st.outHead + d);
            ASSERT_TRUE(mine ? std::isnan(v) : v == 0.f)
                << "rank " << r << " out[" << row << "][" << h << "][" << d << "] = " << v;
          }
        }
    }
  }
}

// ---- Batch invariance: one row's merged bits the same in batches 1, 7,
// 97 and 1000 (at any position, chunked by maxBatch 64), under LL, LL128,
// SIMPLE and AUTO, in every mode and TOKEN split, and through the
// fallback's kernels (pack, the exchange as device copies, combine).

class ScatterGpu : public testing::Test {
 protected:
  void SetUp() override { DCP_REQUIRE_GPUS(1); }
};

// Every merged head of row `row` as p's ranks hold it, [H][D] payload
// bytes then [H] outLse bytes, by global head; NONE: rank 0's, after
// checking every rank holds the same bits.
std::vector<uint8_t> mergedRow(const DeviceProblem& p, int row) {
  const Config& cfg = p.config();
  const int cp = (int)p.want().size(), Hl = cfg.localHeads, H = cp * Hl;
  const Strides& s = p.strides();
  const size_t headBytes = (size_t)cfg.headDim * cfg.eltSize;
  std::vector<uint8_t> bytes(H * (headBytes + sizeof(float)));
  auto take = [&](const RankTensors& t, int outRow, int outHead, int h) {
    memcpy(bytes.data() + h * headBytes, t.out.data() + (outRow * s.outRow + outHead * s.outHead) * cfg.eltSize,
           headBytes);
    memcpy(bytes.data() + H * headBytes + h * sizeof(float), &t.outLse[outRow * s.outLseRow + outHead * s.outLseHead],
           sizeof(float));
  };
  switch (cfg.scatter) {
    case Scatter::Head:
      for (int r = 0; r < cp; r++) {
        const RankTensors t = p.outputs(r);
        for (int j = 0; j < Hl; j++) take(t, row, j, r * Hl + j);
      }
      break;
    case Scatter::Token: {
      const int* start = p.shape().split.start;
      int owner = 0;
      while (!(start[owner] <= row && row < start[owner + 1])) owner++;
      const RankTensors t = p.outputs(owner);
      for (int h = 0; h < H; h++) take(t, row - start[owner], h, h);
      break;
    }
    case Scatter::None: {
      std::vector<uint8_t> rank0;
      for (int r = 0; r < cp; r++) {
        const RankTensors t = p.outputs(r);
        for (int h = 0; h < H; h++) take(t, row, h, h);
        if (r == 0) rank0 = bytes;
        else EXPECT_TRUE(bytes == rank0) << "NONE: rank " << r << " holds other bits than rank 0";
      }
      break;
    }
  }
  return bytes;
}

// SIMPLE's large rounds on one GPU, where 10 of a block's 16 warps send
// in HEAD and TOKEN rounds where a block merges 8 chunks or more, from cp 8
// (proto_simple.h's sendWarpsOf): at cp 8 on an H200 (16 blocks a rank) a
// round of 32 rows of 16 heads of 512 is 128 chunks of HEAD's, and TOKEN's
// slices of 4 rows of 128 heads as many; then a round of 5 rows with 8
// sending warps.
TEST_F(ScatterGpu, SimpleLargeRoundsSendWithMoreWarps) {
  for (int scatter : {ncclDcpScatterHead, ncclDcpScatterToken}) {
    const ncclDcpConfig_t c =
        withScatter(makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 32, ncclDcpProtoSimple), scatter);
    auto lb = makeLoopback(c, 8);
    ASSERT_TRUE(lb);
    runAndCheck(*lb, c, 8, 32 + 5, {}, LseMix::Normal);
    if (HasFatalFailure()) return;
  }
}

TEST_F(ScatterGpu, BatchInvariance) {
  const int cp = 4, Hl = 2, D = 128, maxBatch = 64;
  const ncclDcpConfig_t base = makeConfig(D, Hl, ncclBfloat16, ncclDcpLseBase2, maxBatch);
  const uint64_t probeSeed = freshSeed();
  SCOPED_TRACE(testing::Message() << "probe seed " << probeSeed);
  // The probe: one row of every rank's inputs (special LSEs included).
  std::vector<RankTensors> probe;
  {
    std::mt19937_64 rng(probeSeed);
    const Config cfg = resolved(base);
    probe = makeInputs(cfg, cp, 1, packedStrides(cfg, cp), LseMix::Special, rng);
  }
  std::mt19937_64 rng(freshSeed());
  struct Placement {
    int batch, row;
  };
  std::vector<Placement> placements = {{1, 0}, {7, (int)(rng() % 7)}, {97, 64 + (int)(rng() % 33)},
                                       {97, (int)(rng() % 64)}, {1000, (int)(rng() % 1000)}};
  struct Variant {
    int scatter;
    bool uneven;  // TOKEN: random host counts instead of the even split
  };
  const Variant variants[] = {{ncclDcpScatterHead, false},
                              {ncclDcpScatterToken, false},
                              {ncclDcpScatterToken, true},
                              {ncclDcpScatterNone, false}};
  std::vector<uint8_t> first;
  std::string firstWhat;
  auto expectSame = [&](const std::vector<uint8_t>& got, const std::string& what) {
    if (first.empty()) {
      first = got;
      firstWhat = what;
      return;
    }
    ASSERT_EQ(got.size(), first.size());
    EXPECT_EQ(memcmp(got.data(), first.data(), got.size()), 0) << what << " differs bitwise from " << firstWhat;
  };
  for (const Variant& v : variants) {
    // The split of each placement, the same under every protocol.
    std::vector<std::vector<int>> counts;
    for (const Placement& pl : placements) counts.push_back(v.uneven ? randomCounts(pl.batch, cp, rng) : std::vector<int>{});
    for (int proto : {(int)ncclDcpProtoLL, (int)ncclDcpProtoLL128, (int)ncclDcpProtoSimple, (int)ncclDcpProtoAuto,
                      -1 /* the fallback's kernels */}) {
      ncclDcpConfig_t c = withScatter(base, v.scatter);
      if (proto >= 0) c.protocol = proto;
      const Config cfg = resolved(c);
      std::unique_ptr<Loopback> lb;
      if (proto >= 0) {
        lb = makeLoopback(c, cp);
        ASSERT_TRUE(lb);
      }
      for (size_t i = 0; i < placements.size(); i++) {
        const Placement& pl = placements[i];
        std::ostringstream what;
        what << scatterName(v.scatter) << (v.uneven ? " (uneven split)" : "") << " "
             << (proto >= 0 ? protocolName(proto) : "fallback kernels") << " batch " << pl.batch << " row " << pl.row;
        SCOPED_TRACE(what.str());
        CallSpec spec;
        spec.rowCounts = counts[i];
        spec.edit = [&](std::vector<RankTensors>& ranks, const Strides& s) {
          for (int r = 0; r < cp; r++) {
            memcpy(ranks[r].partialOut.data() + pl.row * s.inRow * cfg.eltSize, probe[r].partialOut.data(),
                   s.inRow * cfg.eltSize);
            memcpy(ranks[r].partialLse.data() + pl.row * s.lseRow, probe[r].partialLse.data(), s.lseRow * sizeof(float));
          }
        };
        DeviceProblem p(cfg, cp, pl.batch, LseMix::Normal, freshSeed(), spec);
        if (lb) {
          ASSERT_NO_FATAL_FAILURE(callAndWait(*lb, p));
        } else {
          ASSERT_NO_FATAL_FAILURE(runFallbackRounds(p, p.args(0)));
        }
        const Mismatch m = p.checkAll();
        ASSERT_EQ(m.count, 0u) << m.first;
        expectSame(mergedRow(p, pl.row), what.str());
      }
    }
  }
}

// ---- NONE in two phases into registered outputs (Loopback::registerOutputs,
// ncclDcpOutputRegister's loopback form): SIMPLE's phase 2 stores each
// merged head straight into the peers' outputs, the line protocols' rounds
// stage. SIMPLE forced goes direct in every round; AUTO crosses to SIMPLE
// at 5 rows, so a call of cp + 1 or 37 rows mixes direct and staged rounds;
// LL128 forced stages every round though the outputs are registered. Each
// case asserts which (else it would show nothing), checks the call against
// the reference and the oracle with every output byte poisoned first, and
// compares it bitwise with the staged path's outputs on the same inputs.
class NoneRegisteredOutputs : public testing::TestWithParam<int /*proto*/> {
 protected:
  void SetUp() override { DCP_REQUIRE_GPUS(1); }
  ncclDcpConfig_t config(int cp) const {
    ncclDcpConfig_t c = withScatter(makeConfig(128, cp >= 8 ? 1 : 3, ncclBfloat16,
                                               cp % 2 ? ncclDcpLseBaseE : ncclDcpLseBase2, kCap, GetParam()),
                                    ncclDcpScatterNone);
    c.timeoutMs = 10000;  // a phase 2 that never comes fails in seconds
    return c;
  }
  Env twoPhases() const {
    Env e;
    e.noneAlgo = (int)NoneAlgo::TwoPhase;
    if (GetParam() == ncclDcpProtoAuto) e.simpleMinRows = 5;
    return e;
  }
  // The rounds of a call of `batch` rows that run SIMPLE (the direct ones).
  static int simpleRounds(const Loopback& lb, int batch) {
    int n = 0;
    for (int row0 = 0; row0 < batch; row0 += kCap)
      n += lb.engine().protocolOfRound(std::min(kCap, batch - row0)) == Proto::Simple;
    return n;
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, NoneRegisteredOutputs,
                         testing::Values(ncclDcpProtoLL128, ncclDcpProtoSimple, ncclDcpProtoAuto),
                         [](const testing::TestParamInfo<int>& info) { return std::string(protocolName(info.param)); });

// Every rank's whole out and outLse of p, registered on lb.
void registerOutputs(Loopback& lb, const DeviceProblem& p) {
  const std::vector<CallBuffers> b = p.allBuffers();
  DCP_ASSERT(lb.registerOutputs(b.data(), p.outBytes(0), p.outLseBytes(0)));
}

// Whether lb would take the direct path for p's call.
bool takesDirectPath(const Loopback& lb, const DeviceProblem& p) {
  const std::vector<CallBuffers> b = p.allBuffers();
  DirectCall d;
  return lb.takesDirectPath(b.data(), p.batch(), p.strides(), &d);
}

TEST_P(NoneRegisteredOutputs, MatchTheReferenceAndTheStagedBits) {
  ScopedEnv env(twoPhases());
  for (int cp : {3, 8, 16}) {
    for (int batch : {1, cp + 1, 4 * kCap + 5}) {
      const uint64_t seed = freshSeed();
      SCOPED_TRACE(testing::Message() << protocolName(GetParam()) << " cp " << cp << " batch " << batch << " seed "
                                      << seed);
      // Direct first, on a fresh workspace: a phase 2 that copied its
      // phase-2 half would find nothing of this call there.
      auto lb = makeLoopback(config(cp), cp);
      ASSERT_TRUE(lb);
      DeviceProblem p(resolved(config(cp)), cp, batch, LseMix::Special, seed, CallSpec{});
      ASSERT_NO_FATAL_FAILURE(registerOutputs(*lb, p));
      ASSERT_TRUE(takesDirectPath(*lb, p)) << "registered outputs, yet the call stages";
      const int directRounds = simpleRounds(*lb, batch), rounds = (batch + kCap - 1) / kCap;
      if (GetParam() == ncclDcpProtoSimple) {
        EXPECT_EQ(directRounds, rounds);
      } else if (GetParam() == ncclDcpProtoLL128) {
        EXPECT_EQ(directRounds, 0);
      } else if (batch >= 5) {  // AUTO crosses to SIMPLE at 5 rows
        EXPECT_GT(directRounds, 0) << "AUTO: no round goes direct";
      }
      ASSERT_NO_FATAL_FAILURE(callAndWait(*lb, p));
      Mismatch m = p.checkAll();
      EXPECT_EQ(m.count, 0u) << "direct: " << m.first;
      std::vector<RankTensors> direct;
      for (int r = 0; r < cp; r++) direct.push_back(p.outputs(r));

      lb->deregisterOutputs();
      for (int r = 0; r < cp; r++) p.poison(r, nullptr);
      ASSERT_NO_FATAL_FAILURE(callAndWait(*lb, p));
      m = p.checkAll();
      ASSERT_EQ(m.count, 0u) << "staged: " << m.first;
      for (int r = 0; r < cp; r++) {
        const RankTensors staged = p.outputs(r);
        EXPECT_TRUE(direct[r].out == staged.out) << "rank " << r << ": out differs from the staged path's";
        EXPECT_EQ(memcmp(direct[r].outLse.data(), staged.outLse.data(), staged.outLse.size() * 4), 0)
            << "rank " << r << ": outLse differs from the staged path's";
      }
      if (HasFatalFailure()) return;
    }
  }
}

// Padded strides and empty shards, with and without outLse: the offsets
// the peers write at come from the strides alone. The staged call, checked
// against the reference and the oracle, gives the bits the direct one must.
TEST_P(NoneRegisteredOutputs, PaddedStridesEmptyShardsWithAndWithoutOutLse) {
  ScopedEnv env(twoPhases());
  const int cp = 4, batch = 2 * kCap + 3;
  const Config cfg = resolved(config(cp));
  Strides s = packedStrides(cfg, cp);
  s.outHead += 16;
  s.outRow = s.outHead * cfg.localHeads * cp + 64;
  s.outLseHead = 3;
  s.outLseRow = 3 * cfg.localHeads * cp + 5;
  auto lb = makeLoopback(config(cp), cp);
  ASSERT_TRUE(lb);
  CallSpec shards;
  shards.emptyShards = true;
  DeviceProblem p(cfg, cp, batch, LseMix::Special, freshSeed(), shards, {}, 1, &s);
  const ncclDcpStrides_t api = p.apiStrides();
  const std::vector<CallBuffers> b = p.allBuffers();
  DCP_ASSERT(lb->call(b.data(), batch, &api, nullptr, p.args(0)));
  CUDA_ASSERT(cudaDeviceSynchronize());
  DCP_ASSERT(lb->asyncError());
  std::vector<RankTensors> staged;
  for (int r = 0; r < cp; r++) {
    const Mismatch m = p.check(r);
    ASSERT_EQ(m.count, 0u) << "staged, rank " << r << ": " << m.first;
    staged.push_back(p.outputs(r));
  }
  for (bool withOutLse : {true, false}) {
    SCOPED_TRACE(withOutLse ? "with outLse" : "without outLse");
    std::vector<CallBuffers> d = b;
    if (!withOutLse)
      for (CallBuffers& r : d) r.outLse = nullptr;
    DCP_ASSERT(lb->registerOutputs(d.data(), p.outBytes(0), withOutLse ? p.outLseBytes(0) : 0));
    DirectCall call;
    ASSERT_TRUE(lb->takesDirectPath(d.data(), batch, s, &call)) << "registered outputs, yet the call stages";
    EXPECT_EQ(call.withLse, withOutLse);
    for (int r = 0; r < cp; r++) p.poison(r, nullptr);
    DCP_ASSERT(lb->call(d.data(), batch, &api, nullptr, p.args(0)));
    CUDA_ASSERT(cudaDeviceSynchronize());
    DCP_ASSERT(lb->asyncError());
    for (int r = 0; r < cp; r++) {
      const RankTensors got = p.outputs(r);
      EXPECT_TRUE(got.out == staged[r].out) << "rank " << r << ": out differs from the staged path's";
      if (withOutLse) {
        EXPECT_EQ(memcmp(got.outLse.data(), staged[r].outLse.data(), got.outLse.size() * 4), 0)
            << "rank " << r << ": outLse differs from the staged path's";
        continue;
      }
      size_t written = 0;
      for (float x : got.outLse) written += !std::isnan(x);
      EXPECT_EQ(written, 0u) << "rank " << r << ": outLse written by a call without one";
    }
  }
}

// A call outside the registered range, or at other offsets on one rank,
// stages (loopback sees every rank) and is still right.
TEST_P(NoneRegisteredOutputs, ACallOutsideTheRegistrationStages) {
  ScopedEnv env(twoPhases());
  const int cp = 4, batch = kCap + 3;
  auto lb = makeLoopback(config(cp), cp);
  ASSERT_TRUE(lb);
  DeviceProblem p(resolved(config(cp)), cp, batch, LseMix::Normal, freshSeed(), CallSpec{});
  std::vector<CallBuffers> b = p.allBuffers();
  DCP_ASSERT(lb->registerOutputs(b.data(), p.outBytes(0) / 2, p.outLseBytes(0)));
  EXPECT_FALSE(takesDirectPath(*lb, p)) << "out is only half registered";
  ASSERT_NO_FATAL_FAILURE(registerOutputs(*lb, p));
  EXPECT_TRUE(takesDirectPath(*lb, p));
  std::vector<CallBuffers> shifted = b;
  shifted[1].out = (char*)b[1].out - 16;  // rank 1's call 16 bytes further into its registration
  DCP_ASSERT(lb->registerOutputs(shifted.data(), p.outBytes(0), p.outLseBytes(0)));
  EXPECT_FALSE(takesDirectPath(*lb, p)) << "rank 1's out at another offset";
  for (int r = 0; r < cp; r++) p.poison(r, nullptr);
  ASSERT_NO_FATAL_FAILURE(callAndWait(*lb, p));
  const Mismatch m = p.checkAll();
  EXPECT_EQ(m.count, 0u) << m.first;
  lb->deregisterOutputs();
  EXPECT_FALSE(takesDirectPath(*lb, p));
}

// Captured once (the producer's copies, the outputs poisoned, the call),
// replayed with fresh inputs; an eager staged call between replays.
TEST_P(NoneRegisteredOutputs, GraphReplays) {
  ScopedEnv env(twoPhases());
  const int cp = 8, batch = 2 * kCap + 5;  // chunked: the graph holds three rounds
  auto lb = makeLoopback(config(cp), cp);
  ASSERT_TRUE(lb);
  cudaStream_t stream = nullptr;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<std::remove_pointer_t<cudaStream_t>, cudaError_t (*)(cudaStream_t)> streamOwner(stream, cudaStreamDestroy);
  DeviceProblem p(resolved(config(cp)), cp, batch, LseMix::Normal, freshSeed(), CallSpec{});
  p.refill(LseMix::Normal, freshSeed(), /*toStaging=*/true);
  ASSERT_NO_FATAL_FAILURE(registerOutputs(*lb, p));
  ASSERT_TRUE(takesDirectPath(*lb, p));
  const std::vector<CallBuffers> b = p.allBuffers();
  auto enqueue = [&]() {
    for (int r = 0; r < cp; r++) {
      p.stageInputs(r, stream);
      p.poison(r, stream);
    }
    return lb->call(b.data(), batch, nullptr, stream);
  };
  CapturedGraph g;
  ASSERT_NO_FATAL_FAILURE(capture(stream, enqueue, &g));
  for (int rep = 0; rep < 4; rep++) {
    SCOPED_TRACE(testing::Message() << "replay " << rep);
    p.refill(rep % 2 ? LseMix::Special : LseMix::Normal, freshSeed(), /*toStaging=*/true);
    CUDA_ASSERT(cudaGraphLaunch(g.exec, stream));
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    DCP_ASSERT(lb->asyncError());
    const Mismatch m = p.checkAll();
    ASSERT_EQ(m.count, 0u) << m.first;
    if (rep == 1) {  // an eager call between replays, staged
      lb->deregisterOutputs();
      p.refill(LseMix::Special, freshSeed());
      for (int r = 0; r < cp; r++) p.poison(r, nullptr);
      ASSERT_NO_FATAL_FAILURE(callAndWait(*lb, p));
      const Mismatch e = p.checkAll();
      ASSERT_EQ(e.count, 0u) << "eager, staged: " << e.first;
    }
  }
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
