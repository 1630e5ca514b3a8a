// The CPU reference of the collective (referenceA2aLseReduce) against the
// independent fp64 oracle of test/common/oracle.h, written from the formula
// of DESIGN §1: it shares no code with merge.h or reference.cc (it decodes
// bf16 / fp16 bits itself, computes in double, splits, places and empties
// rows by its own rules). The GPU tests compare the kernels with it too.
// Every test draws fresh random data; a failing test prints its seed,
// replayed with --gtest_random_seed=N.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "device/merge.h"
#include "error.h"
#include "engine.h"
#include "reference.h"
#include "test_util.h"
#include "validate.h"

namespace nccl_dcp {
namespace {

const char* mixName(test::LseMix mix) {
  switch (mix) {
    case test::LseMix::Normal: return "Normal";
    case test::LseMix::Special: return "Special";
    default: return "HugeSpread";
  }
}

}  // namespace

namespace test {

// Names the LSE mix in gtest's parameter printouts.
void PrintTo(LseMix mix, std::ostream* os) { *os << mixName(mix); }

}  // namespace test

namespace {

using test::LseMix;
using test::RankTensors;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------
// The oracle (test/common/oracle.h) over RankTensors.

using oracle::decode;

// Checks every rank's outputs (and that nothing outside them was written)
// against the oracle's merge of `in`; reports the first mismatches.
::testing::AssertionResult MatchesOracle(const Config& cfg, int cp, int batch, const Strides& s,
                                         const std::vector<RankTensors>& in, const std::vector<RankTensors>& got) {
  const oracle::Problem p = test::oracleProblem(cfg, cp, batch, s, in);
  const test::Mismatch m = test::oracleMismatches(p, got);
  if (m.count) return ::testing::AssertionFailure() << m.count << " output(s) differ from the fp64 oracle: " << m.first;
  return ::testing::AssertionSuccess();
}

void runReference(const Config& cfg, int cp, int batch, const Strides& s, std::vector<RankTensors>& ranks) {
  std::vector<CallBuffers> buffers;
  for (RankTensors& t : ranks) buffers.push_back(t.buffers());
  referenceA2aLseReduce(cfg, cp, batch, s, buffers.data());
}

Config makeResolvedConfig(int headDim, int localHeads, ncclDataType_t dtype, int lseBase) {
  const ncclDcpConfig_t in = test::makeConfig(headDim, localHeads, dtype, lseBase);
  Config c{};
  EXPECT_EQ(resolveConfig(&in, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  return c;
}

std::string dtypeParamName(ncclDataType_t dtype) { return dtypeName(dtype); }

// ---------------------------------------------------------------------------
// The sweep: every shape of cp x Hl x D for one (dtype, base, LSE mix).

using SweepParam = std::tuple<ncclDataType_t, int /*lseBase*/, LseMix>;

class ReferenceSweep : public ::testing::TestWithParam<SweepParam> {};

// Checks the reference against the oracle on fresh data for every shape
// of cps x heads x dims, alternating packed and strided layouts.
void sweep(const SweepParam& param, std::initializer_list<int> cps, std::initializer_list<int> heads,
           const std::vector<int>& dims) {
  const auto [dtype, lseBase, mix] = param;
  std::mt19937_64 rng(test::freshSeed());
  std::uniform_int_distribution<int> batchDist(1, 4);
  int shape = 0;
  for (int cp : cps) {
    for (int Hl : heads) {
      for (int D : dims) {
        const Config cfg = makeResolvedConfig(D, Hl, dtype, lseBase);
        // Alternate packed and strided layouts: the oracle reads both.
        const bool strided = shape++ % 2 == 1;
        const Strides s = strided ? test::paddedStrides(cfg, cp) : packedStrides(cfg, cp);
        const int batch = batchDist(rng);
        SCOPED_TRACE(::testing::Message() << "cp " << cp << " Hl " << Hl << " D " << D << " batch " << batch
                                          << (strided ? " strided" : " packed"));
        std::vector<RankTensors> ranks = test::makeInputs(cfg, cp, batch, s, mix, rng);
        const std::vector<RankTensors> inputs = ranks;
        runReference(cfg, cp, batch, s, ranks);
        ASSERT_TRUE(MatchesOracle(cfg, cp, batch, s, inputs, ranks));
      }
    }
  }
}

TEST_P(ReferenceSweep, MatchesFp64Oracle) {
  const bool fp32 = std::get<0>(GetParam()) == ncclFloat32;
  sweep(GetParam(), {1, 2, 3, 4, 8}, {1, 3, 16}, fp32 ? std::vector<int>{4, 64, 516} : std::vector<int>{8, 128, 520});
}

// Groups beyond what loopback runs on one GPU (16 virtual ranks), up to
// NCCL_DCP_MAX_RANKS, odd sizes included.
TEST_P(ReferenceSweep, LargeGroupsMatchFp64Oracle) {
  const bool fp32 = std::get<0>(GetParam()) == ncclFloat32;
  sweep(GetParam(), {17, 31, 48, NCCL_DCP_MAX_RANKS}, {1, 3}, fp32 ? std::vector<int>{4, 36} : std::vector<int>{8, 72});
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, ReferenceSweep,
    ::testing::Combine(::testing::Values(ncclBfloat16, ncclFloat16, ncclFloat32),
                       ::testing::Values((int)ncclDcpLseBase2, (int)ncclDcpLseBaseE),
                       ::testing::Values(LseMix::Normal, LseMix::Special, LseMix::HugeSpread)),
    [](const ::testing::TestParamInfo<SweepParam>& info) {
      return dtypeParamName(std::get<0>(info.param)) + (std::get<1>(info.param) == ncclDcpLseBase2 ? "_base2_" : "_baseE_") +
             mixName(std::get<2>(info.param));
    });

// ---------------------------------------------------------------------------
// Hand-built columns: exact answers.

class ReferenceExact : public ::testing::TestWithParam<ncclDataType_t> {
 protected:
  static constexpr int kRanks = 4, kHeads = 2, kBatch = 3;

  void SetUp() override {
    const int D = GetParam() == ncclFloat32 ? 4 : 8;
    cfg = makeResolvedConfig(D, kHeads, GetParam(), ncclDcpLseBase2);
    s = packedStrides(cfg, kRanks);
    seed = test::freshSeed();
    std::mt19937_64 rng(seed);
    ranks = test::makeInputs(cfg, kRanks, kBatch, s, LseMix::Normal, rng);
  }

  float& lse(int src, int b, int dst, int j) { return ranks[src].partialLse[b * s.lseRow + dst * s.lsePeer + j * s.lseHead]; }
  int64_t payloadIndex(int b, int dst, int j) const { return b * s.inRow + dst * s.inPeer + j * s.inHead; }
  int64_t outIndex(int b, int j) const { return b * s.outRow + j * s.outHead; }

  // 0xff bytes: NaN in every dtype.
  void poisonPayload(int src, int b, int dst, int j) {
    memset(ranks[src].partialOut.data() + payloadIndex(b, dst, j) * cfg.eltSize, 0xff, (size_t)cfg.headDim * cfg.eltSize);
  }

  // Bytes of dst's out[b][j] equal those of src's payload for (b, dst, j).
  bool outIsPayloadOf(int src, int b, int dst, int j) const {
    return memcmp(ranks[dst].out.data() + outIndex(b, j) * cfg.eltSize,
                  ranks[src].partialOut.data() + payloadIndex(b, dst, j) * cfg.eltSize,
                  (size_t)cfg.headDim * cfg.eltSize) == 0;
  }

  Config cfg{};
  Strides s{};
  uint64_t seed = 0;
  std::vector<RankTensors> ranks;
};

TEST_P(ReferenceExact, NanPayloadsBehindEmptySourcesDoNotLeak) {
  const float nan = std::nanf("");
  for (int b = 0; b < kBatch; b++) {
    for (int dst = 0; dst < kRanks; dst++) {
      for (int j = 0; j < kHeads; j++) {
        // One live source; the others are empty in each way an LSE can say so.
        const int live = (b + dst + j) % kRanks;
        const float empties[3] = {-INFINITY, nan, INFINITY};
        for (int src = 0, k = 0; src < kRanks; src++) {
          if (src == live) continue;
          lse(src, b, dst, j) = empties[k++];
          poisonPayload(src, b, dst, j);
        }
        lse(live, b, dst, j) = 0.5f;
      }
    }
  }
  runReference(cfg, kRanks, kBatch, s, ranks);
  for (int b = 0; b < kBatch; b++) {
    for (int dst = 0; dst < kRanks; dst++) {
      for (int j = 0; j < kHeads; j++) {
        const int live = (b + dst + j) % kRanks;
        EXPECT_TRUE(outIsPayloadOf(live, b, dst, j)) << "rank " << dst << " out[" << b << "][" << j << "]";
        EXPECT_EQ(ranks[dst].outLse[b * s.outLseRow + j * s.outLseHead], 0.5f);
      }
    }
  }
}

// A poisoned context's fallback call still sends (its peers wait in NCCL
// for ever otherwise), its partials replaced by engine.h's poisoned pattern.
// Every unit it feeds must merge to NaN on every receiver: a pattern the
// merge reads as an empty shard would leave the units out silently.
TEST_P(ReferenceExact, APoisonedSendersUnitsMergeToNaN) {
  const int sick = 1;
  std::vector<uint8_t>& payload = ranks[sick].partialOut;
  memset(payload.data(), kPoisonedPayloadByte, payload.size());
  memset(ranks[sick].partialLse.data(), kPoisonedLseByte, ranks[sick].partialLse.size() * sizeof(float));
  // Row 0's healthy LSEs large (2^-199 of their weight would be a small
  // poisoned LSE's): the poisoned units must still dominate, not vanish.
  for (int src = 0; src < kRanks; src++)
    for (int dst = 0; dst < kRanks; dst++)
      for (int j = 0; j < kHeads; j++)
        if (src != sick) lse(src, 0, dst, j) = 200.f;
  runReference(cfg, kRanks, kBatch, s, ranks);
  for (int dst = 0; dst < kRanks; dst++) {
    size_t finite = 0;
    for (int b = 0; b < kBatch; b++)
      for (int j = 0; j < kHeads; j++)
        for (int e = 0; e < cfg.headDim; e++)
          finite += !std::isnan(loadElement(cfg.dtype, ranks[dst].out.data(), outIndex(b, j) + e));
    EXPECT_EQ(finite, 0u) << "rank " << dst << ": elements merged without the poisoned sender's NaN";
  }
}

TEST_P(ReferenceExact, AllEmptyRowsGiveZeroAndMinusInf) {
  const float empties[3] = {-INFINITY, std::nanf(""), INFINITY};
  for (int b = 0; b < kBatch; b++)
    for (int dst = 0; dst < kRanks; dst++)
      for (int j = 0; j < kHeads; j++)
        for (int src = 0; src < kRanks; src++) {
          lse(src, b, dst, j) = empties[(src + b) % 3];
          poisonPayload(src, b, dst, j);
        }
  runReference(cfg, kRanks, kBatch, s, ranks);
  for (int dst = 0; dst < kRanks; dst++) {
    for (int b = 0; b < kBatch; b++) {
      for (int j = 0; j < kHeads; j++) {
        for (int d = 0; d < cfg.headDim; d++)
          EXPECT_EQ(decode(cfg.dtype, ranks[dst].out.data(), outIndex(b, j) + d), 0.0)
              << "rank " << dst << " out[" << b << "][" << j << "][" << d << "]";
        EXPECT_EQ(ranks[dst].outLse[b * s.outLseRow + j * s.outLseHead], -INFINITY)
            << "rank " << dst << " outLse[" << b << "][" << j << "]";
      }
    }
  }
}

TEST_P(ReferenceExact, DominantSourceGivesItsPayload) {
  for (int b = 0; b < kBatch; b++)
    for (int dst = 0; dst < kRanks; dst++)
      for (int j = 0; j < kHeads; j++)
        for (int src = 0; src < kRanks; src++) lse(src, b, dst, j) = src == (b * 3 + j + dst) % kRanks ? 1e30f : -1e30f;
  runReference(cfg, kRanks, kBatch, s, ranks);
  for (int b = 0; b < kBatch; b++) {
    for (int dst = 0; dst < kRanks; dst++) {
      for (int j = 0; j < kHeads; j++) {
        const int dominant = (b * 3 + j + dst) % kRanks;
        EXPECT_TRUE(outIsPayloadOf(dominant, b, dst, j)) << "rank " << dst << " out[" << b << "][" << j << "]";
        EXPECT_EQ(ranks[dst].outLse[b * s.outLseRow + j * s.outLseHead], 1e30f);
      }
    }
  }
}

TEST_P(ReferenceExact, OneRankReturnsItsOwnPartial) {
  const Strides one = packedStrides(cfg, 1);
  std::mt19937_64 rng(seed);
  std::vector<RankTensors> single = test::makeInputs(cfg, 1, kBatch, one, LseMix::Normal, rng);
  runReference(cfg, 1, kBatch, one, single);
  EXPECT_EQ(memcmp(single[0].out.data(), single[0].partialOut.data(), single[0].out.size()), 0);
  for (size_t i = 0; i < single[0].outLse.size(); i++) EXPECT_EQ(single[0].outLse[i], single[0].partialLse[i]);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ReferenceExact, ::testing::Values(ncclBfloat16, ncclFloat16, ncclFloat32),
                         [](const ::testing::TestParamInfo<ncclDataType_t>& info) { return dtypeParamName(info.param); });

// ---------------------------------------------------------------------------
// Layouts and determinism.

// Copies every rank's logical data from the `from` layout into `to`.
std::vector<RankTensors> relayout(const Config& cfg, int cp, int batch, const std::vector<RankTensors>& src,
                                  const Strides& from, const Strides& to) {
  const int Hl = cfg.localHeads, D = cfg.headDim, e = cfg.eltSize;
  std::vector<RankTensors> dst(cp);
  for (int r = 0; r < cp; r++) {
    RankTensors& t = dst[r];
    // Gaps of the inputs hold NaN: a read outside the view would show.
    t.partialOut.assign(test::viewElements(to, batch, cp, Hl, D, true) * e, 0xff);
    t.partialLse.assign(test::lseViewElements(to, batch, cp, Hl, true), std::nanf(""));
    t.out.assign(test::viewElements(to, batch, cp, Hl, D, false) * e, 0xff);
    std::vector<float> poisonedLse(test::lseViewElements(to, batch, cp, Hl, false));
    memset(poisonedLse.data(), 0xff, poisonedLse.size() * sizeof(float));
    t.outLse = poisonedLse;
    for (int b = 0; b < batch; b++)
      for (int p = 0; p < cp; p++)
        for (int j = 0; j < Hl; j++) {
          memcpy(t.partialOut.data() + (b * to.inRow + p * to.inPeer + j * to.inHead) * e,
                 src[r].partialOut.data() + (b * from.inRow + p * from.inPeer + j * from.inHead) * e, (size_t)D * e);
          t.partialLse[b * to.lseRow + p * to.lsePeer + j * to.lseHead] =
              src[r].partialLse[b * from.lseRow + p * from.lsePeer + j * from.lseHead];
        }
  }
  return dst;
}

class ReferenceLayout : public ::testing::TestWithParam<ncclDataType_t> {};

TEST_P(ReferenceLayout, StridedAndPackedAreBitwiseEqual) {
  const uint64_t seed = test::freshSeed();
  std::mt19937_64 rng(seed);
  for (int lseBase : {(int)ncclDcpLseBase2, (int)ncclDcpLseBaseE}) {
    for (int cp : {2, 3}) {
      const int Hl = 3, batch = 4, D = GetParam() == ncclFloat32 ? 12 : 24;
      SCOPED_TRACE(::testing::Message() << "lseBase " << lseBase << " cp " << cp);
      const Config cfg = makeResolvedConfig(D, Hl, GetParam(), lseBase);
      const Strides packed = packedStrides(cfg, cp), strided = test::paddedStrides(cfg, cp);
      // The strided layout is one the entry point accepts.
      const ncclDcpStrides_t given = test::apiStrides(strided);
      Strides resolved{};
      ASSERT_EQ(resolveStrides(&given, cfg, cp, &resolved), ncclSuccess) << ncclDcpGetLastError();
      std::vector<RankTensors> a = test::makeInputs(cfg, cp, batch, packed, LseMix::Special, rng);
      std::vector<RankTensors> b = relayout(cfg, cp, batch, a, packed, strided);
      ASSERT_EQ(checkCall(cfg, cp, b[0].buffers(), batch, resolved), ncclSuccess) << ncclDcpGetLastError();
      runReference(cfg, cp, batch, packed, a);
      runReference(cfg, cp, batch, strided, b);

      const int e = cfg.eltSize;
      for (int r = 0; r < cp; r++) {
        for (int row = 0; row < batch; row++) {
          for (int j = 0; j < Hl; j++) {
            const int64_t pi = row * packed.outRow + j * packed.outHead, si = row * strided.outRow + j * strided.outHead;
            EXPECT_EQ(memcmp(a[r].out.data() + pi * e, b[r].out.data() + si * e, (size_t)D * e), 0)
                << "rank " << r << " out[" << row << "][" << j << "]";
            const int64_t pl = row * packed.outLseRow + j * packed.outLseHead;
            const int64_t sl = row * strided.outLseRow + j * strided.outLseHead;
            EXPECT_EQ(memcmp(&a[r].outLse[pl], &b[r].outLse[sl], sizeof(float)), 0)
                << "rank " << r << " outLse[" << row << "][" << j << "]";
          }
        }
        // The padding of the strided outputs is left alone.
        std::string first;
        EXPECT_EQ(test::touchedPadding(cfg, batch, strided, b[r], &first), 0u) << "rank " << r << ": " << first;
      }
    }
  }
}

TEST_P(ReferenceLayout, RunsAreBitwiseDeterministic) {
  const uint64_t seed = test::freshSeed();
  std::mt19937_64 rng(seed);
  const int cp = 8, Hl = 3, batch = 5, D = GetParam() == ncclFloat32 ? 64 : 128;
  const Config cfg = makeResolvedConfig(D, Hl, GetParam(), ncclDcpLseBaseE);
  const Strides s = packedStrides(cfg, cp);
  std::vector<RankTensors> first = test::makeInputs(cfg, cp, batch, s, LseMix::Special, rng);
  std::vector<RankTensors> second = first;
  runReference(cfg, cp, batch, s, first);
  runReference(cfg, cp, batch, s, second);
  for (int r = 0; r < cp; r++) {
    EXPECT_EQ(first[r].out, second[r].out) << "rank " << r;
    EXPECT_EQ(memcmp(first[r].outLse.data(), second[r].outLse.data(), first[r].outLse.size() * sizeof(float)), 0)
        << "rank " << r;
  }
}

TEST_P(ReferenceLayout, NullOutLseLeavesOutUnchanged) {
  const uint64_t seed = test::freshSeed();
  std::mt19937_64 rng(seed);
  const int cp = 3, Hl = 2, batch = 3, D = GetParam() == ncclFloat32 ? 8 : 16;
  const Config cfg = makeResolvedConfig(D, Hl, GetParam(), ncclDcpLseBase2);
  const Strides s = packedStrides(cfg, cp);
  std::vector<RankTensors> with = test::makeInputs(cfg, cp, batch, s, LseMix::Special, rng);
  std::vector<RankTensors> without = with;
  for (RankTensors& t : without) t.outLse.clear();  // buffers() passes NULL
  runReference(cfg, cp, batch, s, with);
  runReference(cfg, cp, batch, s, without);
  for (int r = 0; r < cp; r++) EXPECT_EQ(with[r].out, without[r].out) << "rank " << r;
}

// A rank of null out is skipped (the perf binary computes NONE's shared
// reference for rank 0 alone), and a call large enough to run its ranks on
// threads gives each rank the outputs it computes alone.
TEST_P(ReferenceLayout, RanksComputedOneAtATimeEqualTheWholeCall) {
  const uint64_t seed = test::freshSeed();
  std::mt19937_64 rng(seed);
  const int cp = 8, Hl = 4, batch = 64, D = 128;  // 2^18 elements x ranks: threads
  const Config cfg = makeResolvedConfig(D, Hl, GetParam(), ncclDcpLseBaseE);
  const Strides s = packedStrides(cfg, cp);
  std::vector<RankTensors> whole = test::makeInputs(cfg, cp, batch, s, LseMix::Special, rng);
  std::vector<RankTensors> alone = whole;
  runReference(cfg, cp, batch, s, whole);
  for (int r = 0; r < cp; r++) {
    std::vector<CallBuffers> buffers;
    for (RankTensors& t : alone) buffers.push_back(t.buffers());
    for (int other = 0; other < cp; other++)
      if (other != r) buffers[other].out = nullptr, buffers[other].outLse = nullptr;
    const std::vector<uint8_t> untouched = alone[(r + 1) % cp].out;
    referenceA2aLseReduce(cfg, cp, batch, s, buffers.data());
    EXPECT_EQ(alone[(r + 1) % cp].out, untouched) << "rank " << (r + 1) % cp << " written while skipped";
    EXPECT_EQ(alone[r].out, whole[r].out) << "rank " << r;
    EXPECT_EQ(memcmp(alone[r].outLse.data(), whole[r].outLse.data(), whole[r].outLse.size() * sizeof(float)), 0)
        << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ReferenceLayout, ::testing::Values(ncclBfloat16, ncclFloat16, ncclFloat32),
                         [](const ::testing::TestParamInfo<ncclDataType_t>& info) { return dtypeParamName(info.param); });

// ---------------------------------------------------------------------------
// countMismatches: the comparison behind every GPU test and the perf
// binary's #wrong must see every kind of wrong output.

class CountMismatches : public ::testing::TestWithParam<ncclDataType_t> {
 protected:
  static constexpr int kRanks = 3, kHeads = 2, kBatch = 2;

  void SetUp() override {
    const int D = GetParam() == ncclFloat32 ? 4 : 8;
    cfg = makeResolvedConfig(D, kHeads, GetParam(), ncclDcpLseBase2);
    s = packedStrides(cfg, kRanks);
    std::mt19937_64 rng(test::freshSeed());
    want = test::makeInputs(cfg, kRanks, kBatch, s, LseMix::Normal, rng);
    runReference(cfg, kRanks, kBatch, s, want);
    got = want;
  }

  size_t count(std::string* first = nullptr) {
    std::vector<CallBuffers> g, w;
    for (int r = 0; r < kRanks; r++) {
      g.push_back(got[r].buffers());
      w.push_back(want[r].buffers());
    }
    return countMismatches(cfg, kRanks, kBatch, s, g.data(), w.data(), first);
  }

  int64_t outIndex(int b, int j, int d) const { return b * s.outRow + j * s.outHead + d; }
  float& outLse(std::vector<RankTensors>& t, int r, int b, int j) { return t[r].outLse[b * s.outLseRow + j * s.outLseHead]; }
  float wantOut(int r, int b, int j, int d) const { return loadElement(cfg.dtype, want[r].out.data(), outIndex(b, j, d)); }
  void setOut(int r, int b, int j, int d, float v) { storeElement(cfg.dtype, got[r].out.data(), outIndex(b, j, d), v); }

  Config cfg{};
  Strides s{};
  std::vector<RankTensors> want, got;
};

TEST_P(CountMismatches, EqualOutputsMatch) {
  std::string first = "untouched";
  EXPECT_EQ(count(&first), 0u);
  EXPECT_EQ(first, "untouched");
}

TEST_P(CountMismatches, OneWrongElementIsCountedAndNamed) {
  // 1.5 in a [-1, 1] output is wrong in every dtype, far beyond rounding.
  setOut(2, 1, 1, 3, wantOut(2, 1, 1, 3) + 1.5f);
  std::string first;
  EXPECT_EQ(count(&first), 1u);
  EXPECT_NE(first.find("rank 2 out[1][1][3]"), std::string::npos) << first;
}

TEST_P(CountMismatches, ToleranceIsOneUnitOfRounding) {
  // At 1.0 one unit of rounding is exactly representable in every dtype:
  // one unit away is accepted, three are not (fp32 allows 1e-5 + 1e-5).
  const float unit = cfg.dtype == ncclBfloat16 ? 1.f / 128 : cfg.dtype == ncclFloat16 ? 1.f / 1024 : 1e-5f;
  for (int d = 0; d < cfg.headDim; d++) {
    storeElement(cfg.dtype, want[0].out.data(), outIndex(0, 0, d), 1.f);
    setOut(0, 0, 0, d, 1.f);
  }
  setOut(0, 0, 0, 0, 1.f + unit);
  setOut(0, 0, 0, 1, 1.f - unit);
  EXPECT_EQ(count(), 0u) << "one unit of rounding";
  setOut(0, 0, 0, 2, 1.f + 3 * unit);
  EXPECT_EQ(count(), 1u) << "three units of rounding";
}

TEST_P(CountMismatches, NanAndInfinityAreWrong) {
  setOut(0, 0, 0, 0, std::nanf(""));
  setOut(1, 1, 0, 1, INFINITY);
  setOut(1, 1, 1, 2, -INFINITY);
  EXPECT_EQ(count(), 3u);
}

// Where the model itself is NaN or infinite (a non-finite element of a
// source of weight), the kernel must give the same: any NaN for a NaN, the
// infinity itself for an infinity; a finite value is wrong either way.
TEST_P(CountMismatches, NonFiniteWantsNeedTheSame) {
  storeElement(cfg.dtype, want[0].out.data(), outIndex(0, 0, 0), std::nanf(""));
  storeElement(cfg.dtype, want[1].out.data(), outIndex(1, 0, 1), INFINITY);
  storeElement(cfg.dtype, want[2].out.data(), outIndex(0, 1, 2), -INFINITY);
  setOut(0, 0, 0, 0, -std::nanf(""));  // another NaN: accepted
  setOut(1, 1, 0, 1, INFINITY);
  setOut(2, 0, 1, 2, -INFINITY);
  EXPECT_EQ(count(), 0u);
  setOut(0, 0, 0, 0, 0.5f);
  setOut(1, 1, 0, 1, -INFINITY);
  setOut(2, 0, 1, 2, std::nanf(""));
  std::string first;
  EXPECT_EQ(count(&first), 3u);
  EXPECT_NE(first.find("rank 0 out[0][0][0] = 0.5, want nan"), std::string::npos) << first;
}

TEST_P(CountMismatches, PoisonedOutputsAreAllWrong) {
  // What a call that never wrote its output leaves behind: 0xff bytes.
  memset(got[1].out.data(), 0xff, got[1].out.size());
  memset(got[1].outLse.data(), 0xff, got[1].outLse.size() * sizeof(float));
  const size_t elements = (size_t)kBatch * kHeads * cfg.headDim, lses = (size_t)kBatch * kHeads;
  EXPECT_EQ(count(), elements + lses);
  // Zeroed outputs are wrong too (the inputs are never all zero).
  got = want;
  memset(got[0].out.data(), 0, got[0].out.size());
  EXPECT_EQ(count(), elements);
}

TEST_P(CountMismatches, WrongOutLseIsCounted) {
  outLse(got, 0, 0, 0) += 0.01f;
  outLse(got, 1, 1, 1) = std::nanf("");
  outLse(got, 2, 0, 1) = INFINITY;
  std::string first;
  EXPECT_EQ(count(&first), 3u);
  EXPECT_NE(first.find("rank 0 outLse[0][0]"), std::string::npos) << first;
}

TEST_P(CountMismatches, EmptyRowsNeedMinusInfinityExactly) {
  outLse(want, 1, 0, 0) = -INFINITY;
  outLse(got, 1, 0, 0) = -INFINITY;
  EXPECT_EQ(count(), 0u);
  for (float g : {-1e30f, 0.f, INFINITY, std::nanf("")}) {
    outLse(got, 1, 0, 0) = g;
    EXPECT_EQ(count(), 1u) << "outLse " << g << " for an empty row";
  }
}

TEST_P(CountMismatches, OutLseIgnoredWhenNotWanted) {
  for (RankTensors& t : want) t.outLse.clear();  // buffers() gives NULL
  for (RankTensors& t : got) std::fill(t.outLse.begin(), t.outLse.end(), std::nanf(""));
  EXPECT_EQ(count(), 0u);
}

TEST_P(CountMismatches, EveryRankIsCompared) {
  for (int r = 0; r < kRanks; r++) setOut(r, kBatch - 1, kHeads - 1, cfg.headDim - 1, 2.f);
  std::string first;
  EXPECT_EQ(count(&first), (size_t)kRanks);
  EXPECT_NE(first.find("rank 0 "), std::string::npos) << first;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CountMismatches, ::testing::Values(ncclBfloat16, ncclFloat16, ncclFloat32),
                         [](const ::testing::TestParamInfo<ncclDataType_t>& info) { return dtypeParamName(info.param); });

// ---------------------------------------------------------------------------
// mergeWeights on its own.

TEST(MergeWeights, WeightsSumToOneAndLseMatchesOracle) {
  const uint64_t seed = test::freshSeed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-20.f, 20.f);
  for (int trial = 0; trial < 200; trial++) {
    const int n = 1 + trial % 64;
    for (LseBase base : {LseBase::Two, LseBase::E}) {
      std::vector<float> lse(n), weight(n, -1.f);
      for (float& l : lse) l = value(rng);
      const float merged = mergeWeights(lse.data(), n, base, weight.data());
      double sum = 0, m = -kInf, ref = 0;
      for (int s = 0; s < n; s++) {
        EXPECT_GE(weight[s], 0.f);
        sum += weight[s];
        m = std::max(m, (double)lse[s]);
      }
      for (int s = 0; s < n; s++) ref += base == LseBase::Two ? std::exp2(lse[s] - m) : std::exp(lse[s] - m);
      ref = m + (base == LseBase::Two ? std::log2(ref) : std::log(ref));
      EXPECT_NEAR(sum, 1.0, 1e-6 * n) << "n " << n;
      EXPECT_NEAR(merged, ref, 1e-5 * (1 + std::fabs(ref))) << "n " << n;
    }
  }
}

TEST(MergeWeights, BaseEOfScaledLsesEqualsBase2) {
  // lse_e = lse_2 * ln 2 describes the same distribution: same weights,
  // and the merged LSE scales the same way.
  const uint64_t seed = test::freshSeed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-16.f, 16.f);
  const double ln2 = std::log(2.0);
  for (int trial = 0; trial < 100; trial++) {
    const int n = 2 + trial % 16;
    std::vector<float> lse2(n), lseE(n), w2(n), wE(n);
    for (int s = 0; s < n; s++) {
      lse2[s] = value(rng);
      lseE[s] = (float)(lse2[s] * ln2);
    }
    const float m2 = mergeWeights(lse2.data(), n, LseBase::Two, w2.data());
    const float mE = mergeWeights(lseE.data(), n, LseBase::E, wE.data());
    for (int s = 0; s < n; s++) EXPECT_NEAR(wE[s], w2[s], 1e-5 * std::max(w2[s], 1e-3f)) << "source " << s;
    EXPECT_NEAR(mE, m2 * ln2, 1e-5 * (1 + std::fabs(m2)));
  }
}

TEST(MergeWeights, AllEmptyGivesMinusInfAndZeroWeights) {
  const float nan = std::nanf("");
  for (LseBase base : {LseBase::Two, LseBase::E}) {
    const float lse[5] = {-INFINITY, nan, INFINITY, -INFINITY, nan};
    float weight[5] = {1, 1, 1, 1, 1};
    EXPECT_EQ(mergeWeights(lse, 5, base, weight), -INFINITY);
    for (float w : weight) EXPECT_EQ(w, 0.f);
  }
}

TEST(MergeWeights, EmptySourcesGetExactlyZeroWeight) {
  const float lse[4] = {INFINITY, 3.f, std::nanf(""), -INFINITY};
  float weight[4];
  EXPECT_EQ(mergeWeights(lse, 4, LseBase::Two, weight), 3.f);
  EXPECT_EQ(weight[0], 0.f);
  EXPECT_EQ(weight[1], 1.f);
  EXPECT_EQ(weight[2], 0.f);
  EXPECT_EQ(weight[3], 0.f);
}

TEST(MergeWeights, AccumulateSkipsZeroWeightNan) {
  EXPECT_EQ(mergeAccumulate(1.5f, 0.f, std::nanf("")), 1.5f);
  EXPECT_EQ(mergeAccumulate(1.5f, 0.f, INFINITY), 1.5f);
  EXPECT_EQ(mergeAccumulate(1.f, 0.5f, 2.f), 2.f);
}


// ---------------------------------------------------------------------------
// The scatter modes, partial LSEs of bf16 / fp16, the empty shards of
// seqLens / queryStartLoc, against an fp64 oracle written here: its own
// split, its own row -> sequence search, its own placement of each merge in
// each rank's out (not forEachOutput), its own decoding of the rounded LSEs.

const int kAllModes[] = {ncclDcpScatterHead, ncclDcpScatterToken, ncclDcpScatterNone};

std::string modeName(int m) { return m == ncclDcpScatterHead ? "HEAD" : m == ncclDcpScatterToken ? "TOKEN" : "NONE"; }

Config modeResolvedConfig(int headDim, int localHeads, ncclDataType_t dtype, int scatter, ncclDataType_t lseDtype,
                          int lseBase = ncclDcpLseBase2) {
  ncclDcpConfig_t in = test::makeConfig(headDim, localHeads, dtype, lseBase);
  in.scatter = scatter;
  in.lseDtype = lseDtype;
  Config c{};
  EXPECT_EQ(resolveConfig(&in, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  return c;
}

// One call's inputs on every rank, packed, plus the call's additions.
struct ModeProblem {
  Config cfg;
  int cp = 0, batch = 0;
  std::vector<int> counts;  // TOKEN host counts; empty: the even split
  int numSeqs = 0;          // 0: no empty-shard arrays
  std::vector<int> qsl;     // numSeqs + 1, the same on every rank
  std::vector<std::vector<int>> seqLens;         // per rank, numSeqs each
  std::vector<std::vector<uint8_t>> in, lse;     // per rank: [B][cp][Hl][D] of dtype, [B][cp][Hl] of lseDtype

  int heads() const { return cfg.scatter == Scatter::Head ? cfg.localHeads : cp * cfg.localHeads; }
  int64_t lseIndex(int b, int h) const { return (int64_t)b * cp * cfg.localHeads + h; }
  int64_t inIndex(int b, int h) const { return lseIndex(b, h) * cfg.headDim; }
};

// The problem as the oracle reads it (test/common/oracle.h), inputs packed
// [B][cp][Hl][D] (p's indexing), outputs in `out` strides (default packed).
oracle::Problem toOracle(const ModeProblem& p, const Strides* out = nullptr) {
  const Strides s = out ? *out : packedStrides(p.cfg, p.cp);
  const int Hl = p.cfg.localHeads, D = p.cfg.headDim;
  oracle::Problem o;
  o.cp = p.cp;
  o.batch = p.batch;
  o.localHeads = Hl;
  o.headDim = D;
  o.dtype = p.cfg.dtype;
  o.lseDtype = p.cfg.lseDtype;
  o.base = p.cfg.lseBase == LseBase::Two ? oracle::Base::Two : oracle::Base::E;
  o.mode = p.cfg.scatter == Scatter::Head ? oracle::Mode::Head
           : p.cfg.scatter == Scatter::Token ? oracle::Mode::Token
                                             : oracle::Mode::None;
  o.layout = {(int64_t)p.cp * Hl * D, (int64_t)Hl * D, D, (int64_t)p.cp * Hl, Hl, 1, s.outRow, s.outHead, s.outLseRow,
              s.outLseHead};
  o.rowCounts = p.counts;
  o.numSeqs = p.numSeqs;
  for (int r = 0; r < p.cp; r++) {
    oracle::Rank rank;
    rank.partialOut = p.in.empty() ? nullptr : p.in[r].data();
    rank.partialLse = p.lse.empty() ? nullptr : p.lse[r].data();
    if (p.numSeqs > 0) {
      rank.seqLens = p.seqLens[r].data();
      rank.queryStartLoc = p.qsl.data();
    }
    o.ranks.push_back(rank);
  }
  return o;
}

// The oracle's split, empty rows and placement, for the tests below.
std::vector<int> oracleStarts(const ModeProblem& p) { return oracle::rowStarts(toOracle(p)); }
bool oracleEmpty(const ModeProblem& p, int src, int b) { return oracle::rowIsEmpty(toOracle(p), src, b); }
bool oraclePlace(const ModeProblem& p, const std::vector<int>& start, int r, int b, int h, int* row, int* head) {
  return oracle::place(toOracle(p), start, r, b, h, row, head);
}

// Every rank's outputs of one run, poisoned (0xff) before it.
struct ModeOutputs {
  Strides s;
  std::vector<std::vector<uint8_t>> out;
  std::vector<std::vector<float>> outLse;
};

// Out strides: packed, or padded rows and heads.
Strides modeStrides(const ModeProblem& p, bool padded) {
  Strides s = packedStrides(p.cfg, p.cp);
  if (padded) {
    const int pad = 16 / p.cfg.eltSize;
    s.outHead = p.cfg.headDim + pad;
    s.outRow = p.heads() * s.outHead + 2 * pad;
    s.outLseHead = 2;
    s.outLseRow = p.heads() * 2 + 3;
  }
  return s;
}

CallShape modeShape(const ModeProblem& p) {
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  if (!p.counts.empty()) args.rowCounts = p.counts.data();
  if (p.numSeqs > 0) {
    args.seqLens = p.seqLens[0].data();
    args.queryStartLoc = p.qsl.data();
    args.numSeqs = p.numSeqs;
  }
  CallShape shape{};
  clearLastError();
  EXPECT_EQ(resolveCallArgs(&args, p.cfg, p.cp, p.batch, &shape), ncclSuccess) << ncclDcpGetLastError();
  return shape;
}

// Runs the reference on p: outputs sized for a whole batch of the mode's
// heads (one row more), so that a write outside the rank's rows shows.
ModeOutputs runModeReference(const ModeProblem& p, bool padded, bool withOutLse = true) {
  ModeOutputs o;
  o.s = modeStrides(p, padded);
  const CallShape shape = modeShape(p);
  std::vector<CallBuffers> bufs(p.cp);
  o.out.resize(p.cp);
  o.outLse.resize(p.cp);
  for (int r = 0; r < p.cp; r++) {
    o.out[r].assign((size_t)(p.batch + 1) * o.s.outRow * p.cfg.eltSize, 0xff);
    std::vector<float>& lse = o.outLse[r];
    lse.resize((size_t)(p.batch + 1) * o.s.outLseRow);
    memset(lse.data(), 0xff, lse.size() * sizeof(float));
    bufs[r] = {p.in[r].data(), p.lse[r].data(), o.out[r].data(), withOutLse ? lse.data() : nullptr};
    if (p.numSeqs > 0) {
      bufs[r].seqLens = p.seqLens[r].data();
      bufs[r].queryStartLoc = p.qsl.data();
    }
  }
  referenceA2aLseReduce(p.cfg, p.cp, p.batch, o.s, bufs.data(), &shape);
  return o;
}

// Every element each rank must hold matches the oracle (rows empty on every
// rank: exactly 0 and -inf); every other byte of out and outLse is still
// poisoned.
::testing::AssertionResult MatchesModeOracle(const ModeProblem& p, const ModeOutputs& o) {
  const oracle::Problem op = toOracle(p, &o.s);
  std::vector<oracle::Output> outs(p.cp);
  for (int r = 0; r < p.cp; r++) {
    outs[r].out = o.out[r].data();
    outs[r].outElements = o.out[r].size() / p.cfg.eltSize;
    outs[r].outLse = o.outLse[r].data();
    outs[r].outLseElements = o.outLse[r].size();
  }
  const oracle::Report rep = oracle::check(op, outs);
  if (rep.bad) return ::testing::AssertionFailure() << rep.bad << " output(s) differ from the fp64 oracle:\n  " << rep.first;
  return ::testing::AssertionSuccess();
}

// Fresh inputs: payloads in [-1, 1], LSEs in [-8, 8] stored in lseDtype
// (rounded: the oracle reads what is stored); with `special`, some -inf,
// NaN and +inf LSEs, a NaN payload behind each.
void fillModeProblem(ModeProblem* p, std::mt19937_64& rng, bool special = true) {
  const Config& cfg = p->cfg;
  const int64_t lseCount = (int64_t)p->batch * p->cp * cfg.localHeads, inCount = lseCount * cfg.headDim;
  std::uniform_real_distribution<float> payload(-1.f, 1.f), lse(-8.f, 8.f);
  std::uniform_int_distribution<int> pick(0, 19);
  p->in.assign(p->cp, {});
  p->lse.assign(p->cp, {});
  for (int r = 0; r < p->cp; r++) {
    p->in[r].resize(inCount * cfg.eltSize + 16);
    p->lse[r].resize(lseCount * cfg.lseEltSize + 16);
    for (int64_t i = 0; i < inCount; i++) storeElement(cfg.dtype, p->in[r].data(), i, payload(rng));
    for (int64_t i = 0; i < lseCount; i++) {
      float v = lse(rng);
      const int k = special ? pick(rng) : 19;
      if (k == 0) v = -INFINITY;
      if (k == 1) v = std::nanf("");
      if (k == 2) v = INFINITY;
      storeElement(cfg.lseDtype, p->lse[r].data(), i, v);
      if (k <= 2) memset(p->in[r].data() + i * cfg.headDim * cfg.eltSize, 0xff, (size_t)cfg.headDim * cfg.eltSize);
    }
  }
}

// On every rank and row empty there: an LSE that would dominate or poison
// (NaN, +inf, huge) and a NaN or huge payload, all to be ignored.
void spoilEmptyRows(ModeProblem* p) {
  const Config& cfg = p->cfg;
  const float huge = cfg.lseDtype == ncclFloat16 ? 60000.f : 1e30f;
  const float hugePayload = cfg.dtype == ncclFloat16 ? 60000.f : 1e30f;
  int k = 0;
  for (int r = 0; r < p->cp; r++)
    for (int b = 0; b < p->batch; b++) {
      if (!oracleEmpty(*p, r, b)) continue;
      for (int h = 0; h < p->cp * cfg.localHeads; h++, k++) {
        const float lses[3] = {std::nanf(""), huge, INFINITY};
        storeElement(cfg.lseDtype, p->lse[r].data(), p->lseIndex(b, h), lses[k % 3]);
        uint8_t* row = p->in[r].data() + p->inIndex(b, h) * cfg.eltSize;
        if (k % 2 == 0) {
          memset(row, 0xff, (size_t)cfg.headDim * cfg.eltSize);
        } else {
          for (int d = 0; d < cfg.headDim; d++) storeElement(cfg.dtype, row, d, hugePayload);
        }
      }
    }
}

using ModeParam = std::tuple<ncclDataType_t /*dtype*/, ncclDataType_t /*lseDtype*/>;

class ModeReference : public ::testing::TestWithParam<ModeParam> {
 protected:
  ModeProblem problem(int scatter, int cp, int batch, int Hl = 3, int lseBase = ncclDcpLseBase2) {
    const auto [dtype, lseDtype] = GetParam();
    ModeProblem p;
    p.cfg = modeResolvedConfig(dtype == ncclFloat32 ? 12 : 24, Hl, dtype, scatter, lseDtype, lseBase);
    p.cp = cp;
    p.batch = batch;
    return p;
  }
  // Fills p, runs the reference packed and padded, checks both.
  void check(ModeProblem p, bool special = true) {
    fillModeProblem(&p, rng, special);
    if (p.numSeqs > 0) spoilEmptyRows(&p);
    for (bool padded : {false, true}) {
      SCOPED_TRACE(::testing::Message() << modeName((int)p.cfg.scatter) << " cp " << p.cp << " batch " << p.batch
                                        << (padded ? " padded out" : " packed out"));
      EXPECT_TRUE(MatchesModeOracle(p, runModeReference(p, padded)));
    }
  }
  void SetUp() override { rng.seed(test::freshSeed()); }
  std::mt19937_64 rng;
};

TEST_P(ModeReference, HeadMatchesOracle) {
  for (int cp : {1, 2, 4})
    for (int lseBase : {(int)ncclDcpLseBase2, (int)ncclDcpLseBaseE}) check(problem(ncclDcpScatterHead, cp, 5, 3, lseBase));
}

TEST_P(ModeReference, TokenEvenSplitMatchesOracle) {
  for (int cp : {1, 2, 3, 4})
    for (int batch : {4, 9, 10}) check(problem(ncclDcpScatterToken, cp, batch));
  check(problem(ncclDcpScatterToken, 4, 10, 2, ncclDcpLseBaseE));
}

TEST_P(ModeReference, TokenUnevenWithZeroRowRanksMatchesOracle) {
  const std::vector<std::vector<int>> splits = {{0, 5, 0, 2}, {7, 0, 0, 0}, {0, 0, 0, 7}, {1, 0, 6, 0}};
  for (const std::vector<int>& counts : splits) {
    ModeProblem p = problem(ncclDcpScatterToken, 4, 7);
    p.counts = counts;
    check(p);
  }
}

TEST_P(ModeReference, NoneMatchesOracle) {
  for (int cp : {1, 2, 4}) check(problem(ncclDcpScatterNone, cp, 6));
  check(problem(ncclDcpScatterNone, 3, 4, 2, ncclDcpLseBaseE));
}

TEST_P(ModeReference, BatchBelowRanksMatchesOracle) {
  for (int m : kAllModes) {
    check(problem(m, 4, 2));
    check(problem(m, 8, 3, 1));
  }
}

TEST_P(ModeReference, BatchOfOneMatchesOracle) {
  for (int m : kAllModes)
    for (int cp : {1, 2, 4}) check(problem(m, cp, 1));
  // And a batch of 0 writes nothing.
  for (int m : kAllModes) check(problem(m, 4, 0));
}

// Sequences over the rows (qsl [1, 3, 3, 6, 8], batch 10): row 0 and rows
// 8, 9 are padding, sequence 1 has no rows; local lengths 0 or negative
// (empty as 0) on some ranks, and sequence 3 (rows 6, 7) empty on every
// rank (0 on some, -1 on others).
void addSequences(ModeProblem* p) {
  p->numSeqs = 4;
  p->qsl = {1, 3, 3, 6, 8};
  p->seqLens.assign(p->cp, {});
  for (int r = 0; r < p->cp; r++)
    p->seqLens[r] = {(r % 2) ? (r % 4 == 1 ? -3 : 0) : 17, r, (r % 3 == 1) ? -7 : 5, (r % 2) ? -1 : 0};
}

TEST_P(ModeReference, EmptyShardsAreMinusInfinityWhateverTheyHold) {
  for (int m : kAllModes) {
    ModeProblem p = problem(m, 4, 10);
    addSequences(&p);
    check(p, false);
  }
  ModeProblem p = problem(ncclDcpScatterToken, 4, 10);
  addSequences(&p);
  p.counts = {0, 6, 4, 0};
  check(p, false);
}

// The rows empty on every rank (a sequence of local length 0 everywhere,
// and the padding) give exactly 0 and -inf however their inputs are spoilt;
// the others are finite.
TEST_P(ModeReference, RowsEmptyOnEveryRankGiveZeroAndMinusInf) {
  for (int m : kAllModes) {
    SCOPED_TRACE(modeName(m));
    ModeProblem p = problem(m, 4, 10);
    addSequences(&p);
    fillModeProblem(&p, rng, false);
    spoilEmptyRows(&p);
    const ModeOutputs o = runModeReference(p, false);
    ASSERT_TRUE(MatchesModeOracle(p, o));
    const std::vector<int> start = oracleStarts(p);
    for (int b : {0, 6, 7, 8, 9})
      for (int h = 0; h < p.cp * p.cfg.localHeads; h++)
        for (int r = 0; r < p.cp; r++) {
          int row, head;
          if (!oraclePlace(p, start, r, b, h, &row, &head)) continue;
          for (int d = 0; d < p.cfg.headDim; d++) {
            const float g = loadElement(p.cfg.dtype, o.out[r].data(), row * o.s.outRow + head * o.s.outHead + d);
            ASSERT_TRUE(g == 0.f) << "rank " << r << " row " << b << " head " << h << ": " << g;
          }
          ASSERT_EQ(o.outLse[r][row * o.s.outLseRow + head * o.s.outLseHead], -INFINITY) << "row " << b;
        }
    // No merge is +inf.
    for (int r = 0; r < p.cp; r++)
      for (size_t i = 0; i < o.outLse[r].size(); i++) EXPECT_FALSE(o.outLse[r][i] == INFINITY);
  }
}

// Padding past queryStartLoc[numSeqs] with LSEs that would dominate: empty.
TEST_P(ModeReference, PaddingRowsPastTheLastSequenceAreEmpty) {
  for (int m : kAllModes) {
    ModeProblem p = problem(m, 2, 7);
    p.numSeqs = 2;
    p.qsl = {0, 2, 4};  // rows 4, 5, 6: padding
    p.seqLens = {{3, 4}, {1, 9}};
    check(p, false);
  }
}

// Equal consecutive queryStartLoc: sequences with no rows; a row belongs to
// the last sequence starting at or before it.
TEST_P(ModeReference, SequencesWithoutRowsAreSkipped) {
  for (int m : kAllModes) {
    // Rows 2..4 are sequence 3's (length 7 on rank 0): live, though
    // sequences 1, 2 (no rows, start 2 too) have length 0.
    ModeProblem p = problem(m, 2, 5);
    p.numSeqs = 4;
    p.qsl = {0, 2, 2, 2, 5};
    p.seqLens = {{5, 0, 0, 7}, {0, 0, 0, 3}};
    check(p, false);
    // Reversed: the empty sequences have lengths, the one with rows not.
    ModeProblem q = problem(m, 2, 5);
    q.numSeqs = 4;
    q.qsl = {0, 2, 2, 2, 5};
    q.seqLens = {{5, 9, 9, 0}, {2, 9, 9, 0}};
    check(q, false);
    // Empty sequences at both ends.
    ModeProblem e = problem(m, 3, 4);
    e.numSeqs = 4;
    e.qsl = {0, 0, 3, 4, 4};
    e.seqLens = {{0, 3, 0, 0}, {0, 0, 1, 0}, {6, 2, 2, 6}};
    check(e, false);
  }
}

// The merged bits of (row, head) depend on that row's inputs alone: the
// same row placed in batches of 1, 7 and 97 (among other random rows, at
// different positions, so on different ranks under TOKEN) gives identical
// bits in every mode, and the modes agree with each other.
TEST_P(ModeReference, BatchInvariantBitwise) {
  const auto [dtype, lseDtype] = GetParam();
  const int cp = 4, Hl = 2, D = dtype == ncclFloat32 ? 12 : 24, H = cp * Hl;
  const int eltSize = dtypeSize(dtype), lseSize = dtypeSize(lseDtype);
  // The row: every source's payload and LSEs for it.
  ModeProblem one;
  one.cfg = modeResolvedConfig(D, Hl, dtype, ncclDcpScatterHead, lseDtype);
  one.cp = cp;
  one.batch = 1;
  fillModeProblem(&one, rng);
  std::vector<uint8_t> rowBits;  // [H][D] of out, then [H] of outLse
  for (int m : kAllModes) {
    for (const auto& [batch, at, counts] : std::vector<std::tuple<int, int, std::vector<int>>>{
             {1, 0, {}}, {7, 3, {}}, {7, 6, {}}, {97, 60, {}}, {97, 96, {}}, {97, 5, {0, 90, 0, 7}}, {7, 0, {0, 0, 7, 0}}}) {
      if (!counts.empty() && m != ncclDcpScatterToken) continue;
      SCOPED_TRACE(::testing::Message() << modeName(m) << " batch " << batch << " row at " << at);
      ModeProblem p;
      p.cfg = modeResolvedConfig(D, Hl, dtype, m, lseDtype);
      p.cp = cp;
      p.batch = batch;
      p.counts = counts;
      fillModeProblem(&p, rng);
      for (int r = 0; r < cp; r++) {
        memcpy(p.in[r].data() + p.inIndex(at, 0) * eltSize, one.in[r].data(), (size_t)H * D * eltSize);
        memcpy(p.lse[r].data() + p.lseIndex(at, 0) * lseSize, one.lse[r].data(), (size_t)H * lseSize);
      }
      const ModeOutputs o = runModeReference(p, false);
      const std::vector<int> start = oracleStarts(p);
      std::vector<uint8_t> bits((size_t)H * D * eltSize + H * 4);
      std::vector<bool> seen(H, false);
      for (int r = 0; r < cp; r++)
        for (int h = 0; h < H; h++) {
          int row, head;
          if (!oraclePlace(p, start, r, at, h, &row, &head)) continue;
          uint8_t* outBits = bits.data() + (size_t)h * D * eltSize;
          uint8_t* lseBits = bits.data() + (size_t)H * D * eltSize + h * 4;
          const uint8_t* got = o.out[r].data() + (row * o.s.outRow + head * o.s.outHead) * eltSize;
          const float* gotLse = &o.outLse[r][row * o.s.outLseRow + head * o.s.outLseHead];
          if (seen[h]) {  // NONE: every rank holds the same bits
            EXPECT_EQ(memcmp(outBits, got, (size_t)D * eltSize), 0) << "rank " << r << " head " << h;
            EXPECT_EQ(memcmp(lseBits, gotLse, 4), 0) << "rank " << r << " head " << h;
          }
          memcpy(outBits, got, (size_t)D * eltSize);
          memcpy(lseBits, gotLse, 4);
          seen[h] = true;
        }
      for (int h = 0; h < H; h++) ASSERT_TRUE(seen[h]) << "head " << h << " of the row is on no rank";
      if (rowBits.empty()) rowBits = bits;
      EXPECT_EQ(bits, rowBits) << "the row's bits differ from its first placement (HEAD, batch 1)";
    }
  }
}

// A bf16 / fp16 partial LSE is read as stored (rounded), not as anything
// wider: with two live sources whose LSEs round apart, the merge follows
// the rounded values. LSEs 100.3 and 100.0: bf16 stores 100.5 and 100.
TEST(ModeReferenceLse, RoundedLseValuesAreTheWeights) {
  for (ncclDataType_t lseDtype : {ncclBfloat16, ncclFloat16, ncclFloat32}) {
    SCOPED_TRACE(dtypeName(lseDtype));
    ModeProblem p;
    p.cfg = modeResolvedConfig(4, 1, ncclFloat32, ncclDcpScatterNone, lseDtype);
    p.cp = 2;
    p.batch = 1;
    std::mt19937_64 rng(test::freshSeed());
    fillModeProblem(&p, rng, false);
    storeElement(lseDtype, p.lse[0].data(), 0, 100.3f);
    storeElement(lseDtype, p.lse[1].data(), 0, 100.0f);
    storeElement(lseDtype, p.lse[0].data(), 1, 100.0f);
    storeElement(lseDtype, p.lse[1].data(), 1, 100.3f);
    for (int d = 0; d < 4; d++) {
      storeElement(ncclFloat32, p.in[0].data(), d, 1.f);   // (row 0, head 0) from rank 0
      storeElement(ncclFloat32, p.in[1].data(), d, 0.f);   // (row 0, head 0) from rank 1
    }
    const ModeOutputs o = runModeReference(p, false);
    ASSERT_TRUE(MatchesModeOracle(p, o));
    // out = w0 / (w0 + w1) with w0 / w1 = 2^(stored(100.3) - 100).
    const double stored = decode(lseDtype, p.lse[0].data(), 0);
    if (lseDtype == ncclBfloat16) {
      EXPECT_EQ(stored, 100.5);
    }
    const double want = 1.0 / (1.0 + std::exp2(100.0 - stored));
    EXPECT_NEAR(((const float*)o.out[0].data())[0], want, 1e-6);
    EXPECT_NEAR(o.outLse[1][0], 100.0 + std::log2(1.0 + std::exp2(stored - 100.0)), 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, ModeReference,
    ::testing::Combine(::testing::Values(ncclBfloat16, ncclFloat16, ncclFloat32),
                       ::testing::Values(ncclFloat32, ncclBfloat16, ncclFloat16)),
    [](const ::testing::TestParamInfo<ModeParam>& info) {
      return dtypeParamName(std::get<0>(info.param)) + "_lse_" + dtypeParamName(std::get<1>(info.param));
    });

}  // namespace
}  // namespace nccl_dcp
