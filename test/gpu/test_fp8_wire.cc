/*************************************************************************
 * fp8 (e4m3) on the wire (issue 28, DESIGN §15) on one GPU through loopback
 * (cp virtual ranks): the fused kernels of LL, LL128, SIMPLE and AUTO, and
 * the fallback's pack and combine kernels, against the CPU model
 * (referenceA2aLseReduce(..., Wire::Fp8E4m3)), bf16 and fp16, cp 2..16,
 * batches 1, 7, 97 and 1000 (chunked by maxBatch 64); HEAD, and TOKEN and
 * NONE (EveryScatterMode).
 *
 * Every call runs on fresh attention-like partials (per unit a Gaussian of
 * random spread, some units with outlier channels, a few NaN / inf
 * elements, never all zero) into poisoned outputs. Outputs must equal the
 * model's BIT FOR BIT (NaN where the model has NaN): LSEs are integers in
 * base 2 (or -inf), so every merge weight is exact on both sides and the
 * only arithmetic left is the wire's and merge.h's, which the kernels share
 * with the model. outLse must equal the native wire's kernels' bit for bit
 * (the LSEs never narrow). A lost scale, a stale unit or a decode off by
 * one rounding fails here (test/plants/plants.py: fp8-encode-unscaled).
 * The model shares codec.h with the kernels, so a wrong scale rule or
 * e4m3 rounding there is the model's too: every call is also checked by
 * the fp64 oracle (test/common/oracle.h), which has its own e4m3 and
 * scale rule and bounds each element by the format (2^-4 of each remote
 * element, plus half a subnormal step of its unit's scale).
 ************************************************************************/
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "device_problem.h"
#include "fallback_rounds.h"
#include "enums.h"
#include "launch.h"
#include "loopback.h"
#include "reference.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

constexpr int kCap = 64;  // maxBatch: batches 97 and 1000 run in chunks

// Attention-like partials: per (row, peer, head) unit a Gaussian of spread
// U[0.05, 4]; one unit in 8 with 4 channels 16x larger; LSEs integers in
// [-6, 6] (one in 16 -inf: an empty source; whole rows -inf at times);
// with `nonFinite`, a NaN and a +-inf in some units whose LSE is finite.
CallSpec attentionLike(const Config& cfg, int nRanks, int batch, uint64_t seed, bool nonFinite) {
  CallSpec spec;
  spec.edit = [=](std::vector<RankTensors>& ranks, const Strides& s) {
    std::mt19937_64 rng(seed ^ 0x5eedf8u);
    std::normal_distribution<float> gauss(0.f, 1.f);
    std::uniform_real_distribution<float> spread(0.05f, 4.f);
    std::uniform_int_distribution<int> lse(-6, 6), pick(0, 15);
    const int Hl = cfg.localHeads, D = cfg.headDim;
    for (int b = 0; b < batch; b++) {
      const bool emptyRow = pick(rng) == 0;
      for (RankTensors& t : ranks)
        for (int p = 0; p < nRanks; p++)
          for (int j = 0; j < Hl; j++) {
            const float sigma = spread(rng);
            const bool outliers = pick(rng) < 2;
            const int64_t at = b * s.inRow + p * s.inPeer + j * s.inHead;
            for (int d = 0; d < D; d++) {
              float v = sigma * gauss(rng);
              if (outliers && d % (D / 4) == 3) v *= 16.f;
              storeElement(cfg.dtype, t.partialOut.data(), at + d, v);
            }
            if (nonFinite && pick(rng) == 0) {
              storeElement(cfg.dtype, t.partialOut.data(), at + pick(rng) % D, NAN);
              const float inf = pick(rng) < 8 ? INFINITY : -INFINITY;
              storeElement(cfg.dtype, t.partialOut.data(), at + D - 1 - pick(rng) % D, inf);
            }
            const int64_t l = b * s.lseRow + p * s.lsePeer + j * s.lseHead;
            t.partialLse[l] = emptyRow || pick(rng) == 0 ? -INFINITY : (float)lse(rng);
          }
    }
  };
  return spec;
}

// Bytes a and b of n elements of dtype equal, or both NaN (NaN payloads
// are the hardware's, not the format's). Returns the first differing
// element or -1.
int64_t firstDifference(ncclDataType_t dtype, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  const int e = dtypeSize(dtype);
  for (size_t i = 0; i * e < a.size(); i++) {
    if (memcmp(&a[i * e], &b[i * e], e) == 0) continue;
    if (std::isnan(loadElement(dtype, a.data(), i)) && std::isnan(loadElement(dtype, b.data(), i))) continue;
    return (int64_t)i;
  }
  return -1;
}

std::vector<uint8_t> bytesOf(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  memcpy(b.data(), v.data(), b.size());
  return b;
}

// Every rank's out (whole buffers: the poisoned slack too) against the
// model's, bitwise.
void expectModelBits(const DeviceProblem& p, const std::vector<RankTensors>& got) {
  const Config& cfg = p.config();
  for (size_t r = 0; r < got.size(); r++) {
    const int64_t i = firstDifference(cfg.dtype, got[r].out, p.want()[r].out);
    EXPECT_LT(i, 0) << "rank " << r << " out element " << i << " = "
                    << loadElement(cfg.dtype, got[r].out.data(), i < 0 ? 0 : i) << ", the model's "
                    << loadElement(cfg.dtype, p.want()[r].out.data(), i < 0 ? 0 : i);
  }
}

ncclDcpConfig_t fp8Config(int D, int Hl, ncclDataType_t dtype, int protocol, int wire = ncclDcpWireFp8E4m3,
                          int cap = kCap) {
  ncclDcpConfig_t c = makeConfig(D, Hl, dtype, ncclDcpLseBase2, cap, protocol);
  c.wire = wire;
  return c;
}

std::vector<RankTensors> outputsOf(const DeviceProblem& p) {
  std::vector<RankTensors> got;
  for (int r = 0; r < (int)p.want().size(); r++) got.push_back(p.outputs(r));
  return got;
}

void call(Loopback& lb, const DeviceProblem& p) {
  const std::vector<CallBuffers> b = p.allBuffers();
  DCP_ASSERT(lb.call(b.data(), p.batch(), nullptr, nullptr, p.args(0)));
  CUDA_ASSERT(cudaDeviceSynchronize());
  DCP_ASSERT(lb.asyncError());
}

// (protocol or -1 for the emulated fallback, dtype)
using ProtoDtype = std::tuple<int, ncclDataType_t>;

class Fp8Wire : public testing::TestWithParam<ProtoDtype> {
 protected:
  void SetUp() override { DCP_REQUIRE_GPUS(1); }

  // One call of `batch` rows (rounds of `cap`) on fresh data through the
  // fp8 wire and the native wire, in a scatter mode; out bitwise the fp8
  // model's, outLse bitwise the native kernels'.
  void check(int cp, int batch, int D, int Hl, bool nonFinite, int cap = kCap, int scatter = ncclDcpScatterHead) {
    const int protocol = std::get<0>(GetParam());
    const ncclDataType_t dtype = std::get<1>(GetParam());
    const bool fallback = protocol < 0;
    const uint64_t seed = freshSeed();
    SCOPED_TRACE(testing::Message() << (fallback ? "fallback" : protocolName(protocol)) << " "
                                    << scatterName(scatter) << " cp " << cp << " batch " << batch << " D " << D
                                    << " Hl " << Hl << " " << dtypeName(dtype) << (nonFinite ? " NaN/inf elements" : "")
                                    << " rounds of " << cap << " seed " << seed);
    const int proto = fallback ? ncclDcpProtoAuto : protocol;
    const ncclDcpConfig_t c8 = withScatter(fp8Config(D, Hl, dtype, proto, ncclDcpWireFp8E4m3, cap), scatter);
    const ncclDcpConfig_t cn = withScatter(fp8Config(D, Hl, dtype, proto, ncclDcpWireNative, cap), scatter);
    const Config cfg8 = resolved(c8), cfgn = resolved(cn);
    DeviceProblem p8(cfg8, cp, batch, LseMix::Normal, seed, attentionLike(cfg8, cp, batch, seed, nonFinite));
    DeviceProblem pn(cfgn, cp, batch, LseMix::Normal, seed, attentionLike(cfgn, cp, batch, seed, nonFinite));
    if (fallback) {
      ASSERT_NO_FATAL_FAILURE(runFallbackRounds(p8, p8.args(0)));
      ASSERT_NO_FATAL_FAILURE(runFallbackRounds(pn, pn.args(0)));
    } else {
      std::unique_ptr<Loopback> lb8 = makeLoopback(c8, cp), lbn = makeLoopback(cn, cp);
      ASSERT_TRUE(lb8 && lbn);
      ASSERT_NO_FATAL_FAILURE(call(*lb8, p8));
      ASSERT_NO_FATAL_FAILURE(call(*lbn, pn));
    }
    const std::vector<RankTensors> got8 = outputsOf(p8), gotn = outputsOf(pn);
    expectModelBits(p8, got8);
    // The fp64 oracle's verdict beside the model's bits: the fp8 wire within
    // e4m3's bound of the exact merge (its own e4m3 and scale rule, none of
    // codec.h's, which the model shares with the kernels), the native
    // wire within the native bound.
    const Mismatch oracle8 = p8.checkAll(), oraclen = pn.checkAll();
    EXPECT_EQ(oracle8.count, 0u) << "fp8 wire: " << oracle8.first;
    EXPECT_EQ(oraclen.count, 0u) << "native wire: " << oraclen.first;
    size_t differs = 0;  // the fp8 wire did narrow something
    for (int r = 0; r < cp; r++) {
      EXPECT_EQ(bytesOf(got8[r].outLse), bytesOf(gotn[r].outLse)) << "rank " << r << ": outLse not the native wire's";
      differs += firstDifference(dtype, got8[r].out, gotn[r].out) >= 0;
    }
    if (batch >= 7) {  // a row of one call may be empty everywhere
      EXPECT_GT(differs, 0u) << "fp8 out equals the native wire's everywhere: nothing was narrowed";
    }
  }
};

// Batch 1000 (16 chunks) at cp 2 and 8 only: the CPU model and the fp64
// oracle grow as cp^2 x batch, and all of it cost 25 s a case (one H200,
// 2026-12-03), most of the 1-GPU suite's time.
TEST_P(Fp8Wire, MatchesModelBitwise) {
  for (int cp : {2, 3, 4, 8, 16})
    for (int batch : {1, 7, 97, 1000})
      if (batch < 1000 || cp == 2 || cp == 8) check(cp, batch, 128, 2, false);
}

TEST_P(Fp8Wire, WideHeads) {
  check(2, 7, 512, 4, false);     // LL128 2 groups, LL 3, SIMPLE one lane per vector
  check(4, 97, 512, 4, false);
  check(3, 5, 1024, 2, false);    // the amax of more groups than a send batch
  check(2, 3, 16, 3, false);      // one data word pair
}

TEST_P(Fp8Wire, NonFiniteElementsAndEmptyRows) {
  for (int cp : {2, 5, 8}) check(cp, 97, 128, 2, true);
}

// One chunked call on each wire, small enough for the sanitizers
// (scripts/gpu-check.sh sanitize).
TEST_P(Fp8Wire, SmallCall) { check(3, kCap + 6, 128, 2, false); }

// TOKEN and NONE (its direct algorithm: auto never relays fp8) narrow the
// same units through the same codec: the merging rank keeps its own share
// exact -- in NONE every rank, so the ranks' fp8 outputs of one merge
// differ, each the model's. TOKEN with fewer rows than ranks (ranks of no
// rows), chunked calls, NaN / inf elements.
TEST_P(Fp8Wire, EveryScatterMode) {
  for (int scatter : {(int)ncclDcpScatterToken, (int)ncclDcpScatterNone}) {
    for (int cp : {2, 5, 8}) check(cp, 97, 128, 2, false, kCap, scatter);
    check(8, 5, 128, 2, false, kCap, scatter);
    check(4, 33, 512, 4, true, kCap, scatter);
  }
}

// TOKEN and NONE where a wrong peer / head split of the merging rank's own
// units would show (packed strides hide it: there peer * inPeer +
// head * inHead is the head's offset either way): padded strides, empty
// shards, and TOKEN's uneven split with a rank of no rows, from the host
// and from the device. Each against the fp8 model (within a rounding) and
// the fp64 oracle's bound.
TEST_P(Fp8Wire, TokenAndNoneStridedUnevenEmptyShards) {
  const int protocol = std::get<0>(GetParam());
  const bool fallback = protocol < 0;
  const int cp = 5, batch = 11;
  for (int scatter : {(int)ncclDcpScatterToken, (int)ncclDcpScatterNone})
    for (int variant = 0; variant < (scatter == ncclDcpScatterToken ? 3 : 1); variant++) {
      const ncclDcpConfig_t c = withScatter(
          fp8Config(128, 3, std::get<1>(GetParam()), fallback ? ncclDcpProtoAuto : protocol, ncclDcpWireFp8E4m3, 4),
          scatter);
      const Config cfg = resolved(c);
      const Strides strided = paddedStrides(cfg, cp);
      CallSpec spec;
      spec.emptyShards = true;
      if (variant > 0) spec.rowCounts = {3, 0, 5, 1, 2};  // sum = batch; rank 1 merges nothing
      spec.deviceCounts = variant == 2;
      const uint64_t seed = freshSeed();
      SCOPED_TRACE(testing::Message() << (fallback ? "fallback" : protocolName(protocol)) << " "
                                      << scatterName(scatter) << (variant == 0 ? " even" : " uneven")
                                      << (spec.deviceCounts ? " device counts" : "") << " seed " << seed);
      DeviceProblem p(cfg, cp, batch, LseMix::Special, seed, spec, {}, 1, &strided);
      if (fallback) {
        ASSERT_NO_FATAL_FAILURE(runFallbackRounds(p, p.args(0)));
      } else {
        std::unique_ptr<Loopback> lb = makeLoopback(c, cp);
        ASSERT_TRUE(lb);
        const std::vector<CallBuffers> b = p.allBuffers();
        const ncclDcpStrides_t api = p.apiStrides();
        DCP_ASSERT(lb->call(b.data(), batch, &api, nullptr, p.args(0)));
        CUDA_ASSERT(cudaDeviceSynchronize());
        DCP_ASSERT(lb->asyncError());
      }
      const Mismatch m = p.checkAll();
      EXPECT_EQ(m.count, 0u) << m.first;
      if (HasFatalFailure()) return;
    }
}

// SIMPLE's large rounds on one GPU, where more of a block's 16 warps send
// once a round has 8 chunks a block (proto_simple.h's sendWarpsOf: 10, and
// 11 for fp8's HEAD and TOKEN from cp 8): at cp 8 on an H200 (16 blocks a rank) a
// round of 64 rows of 16 heads of 512 is 128 fp8 chunks (11 senders) and
// 256 native ones (10), then a round of 5 rows with 8 sending warps, on
// both wires.
class Fp8WireSimple : public Fp8Wire {};
TEST_P(Fp8WireSimple, LargeRoundsSendWithMoreWarps) { check(8, 64 + 5, 512, 16, false, 64); }

std::string protoDtypeName(const testing::TestParamInfo<ProtoDtype>& info) {
  const int proto = std::get<0>(info.param);
  return std::string(proto < 0 ? "FALLBACK" : protocolName(proto)) + "_" + dtypeName(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Protocols, Fp8Wire,
                         testing::Combine(testing::Values((int)ncclDcpProtoLL, (int)ncclDcpProtoLL128,
                                                          (int)ncclDcpProtoSimple, (int)ncclDcpProtoAuto, -1),
                                          testing::Values(ncclBfloat16, ncclFloat16)),
                         protoDtypeName);
INSTANTIATE_TEST_SUITE_P(Simple, Fp8WireSimple,
                         testing::Values(ProtoDtype{(int)ncclDcpProtoSimple, ncclBfloat16}), protoDtypeName);

// ---- fp8 on the wire over every protocol and the fallback's kernels, both
// dtypes and every LSE dtype: packed and padded strides, special LSEs (NaN
// payloads behind -inf, NaN and +inf) and huge spreads, empty shards; each
// call against the fp8 CPU model (within a rounding: countMismatches) and
// the fp64 oracle's bound (DeviceProblem::checkAll), and the context
// asserted to run the fp8 wire (its workspace layout).
using Fp8Param = std::tuple<int /*proto, -1: fallback*/, ncclDataType_t /*dtype*/, ncclDataType_t /*lseDtype*/>;

class Fp8WireMatrix : public testing::TestWithParam<Fp8Param> {
 protected:
  void SetUp() override { DCP_REQUIRE_GPUS(1); }
};

std::string fp8MatrixName(const testing::TestParamInfo<Fp8Param>& info) {
  const int proto = std::get<0>(info.param);
  return std::string(proto < 0 ? "FALLBACK" : protocolName(proto)) + "_" + dtypeName(std::get<1>(info.param)) +
         "_lse_" + dtypeName(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Types, Fp8WireMatrix,
                         testing::Combine(testing::Values((int)ncclDcpProtoLL, (int)ncclDcpProtoLL128,
                                                          (int)ncclDcpProtoSimple, (int)ncclDcpProtoAuto, -1),
                                          testing::Values(ncclBfloat16, ncclFloat16),
                                          testing::Values(ncclFloat32, ncclBfloat16, ncclFloat16)),
                         fp8MatrixName);

TEST_P(Fp8WireMatrix, MatchesModelAndOracle) {
  const auto [proto, dtype, lseDtype] = GetParam();
  const bool fallback = proto < 0;
  for (int cp : {2, 5}) {
    ncclDcpConfig_t c = withScatter(fp8Config(128, 2, dtype, fallback ? ncclDcpProtoAuto : proto), ncclDcpScatterHead,
                                    lseDtype);
    c.lseBase = cp == 5 ? ncclDcpLseBaseE : ncclDcpLseBase2;
    const Config cfg = resolved(c);
    std::unique_ptr<Loopback> lb;
    if (!fallback) {
      lb = makeLoopback(c, cp);
      ASSERT_TRUE(lb);
      ASSERT_EQ(lb->engine().layout.small.wire, Wire::Fp8E4m3) << "config->wire fp8: the workspace is native";
    }
    const Strides strided = paddedStrides(cfg, cp);
    for (bool padded : {false, true})
      for (LseMix mix : {LseMix::Special, LseMix::HugeSpread})
        for (bool shards : {false, true}) {
          const uint64_t seed = freshSeed();
          SCOPED_TRACE(testing::Message() << (fallback ? "fallback" : protocolName(proto)) << " cp " << cp
                                          << (padded ? " padded" : " packed") << (mix == LseMix::Special ? " special" : " huge spread")
                                          << (shards ? " empty shards" : "") << " seed " << seed);
          CallSpec spec;
          spec.emptyShards = shards;
          const int batch = padded ? kCap + 9 : 7;
          DeviceProblem p(cfg, cp, batch, mix, seed, spec, {}, 1, padded ? &strided : nullptr);
          if (fallback) {
            ASSERT_NO_FATAL_FAILURE(runFallbackRounds(p, p.args(0)));
          } else {
            const std::vector<CallBuffers> b = p.allBuffers();
            const ncclDcpStrides_t api = p.apiStrides();
            DCP_ASSERT(lb->call(b.data(), batch, padded ? &api : nullptr, nullptr, p.args(0)));
            CUDA_ASSERT(cudaDeviceSynchronize());
            DCP_ASSERT(lb->asyncError());
          }
          const Mismatch m = p.checkAll();
          EXPECT_EQ(m.count, 0u) << m.first;
          if (HasFatalFailure()) return;
        }
  }
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
