// The fp64 oracle of test/common/oracle.h on its own: its element decoding
// and e4m3 against CUDA's host conversions (every bf16, fp16 and e4m3 bit
// pattern), its rules (sanitising, weights, even split, empty rows,
// placement, the fp8 scale), and that its comparison REJECTS the outputs
// each planted break would produce -- a wrong base, a wrong NaN rule,
// negative sequence lengths read as live, a wrong even split, a lost or
// halved fp8 scale, ... -- while it accepts the library's CPU reference
// (native and the fp8 model). A tolerance loose enough to pass one of
// those would make every GPU comparison through the oracle blind to it.
//
// The outputs of a "break" are made here, from the oracle's own merge of a
// changed problem (the break's rule), rendered into the output dtype; the
// library is not involved, so these tests hold under any plant. The
// LibraryModel tests run the library's CPU reference (reference.cc, which
// includes merge.h and codec.h) and so fail under the plants in those
// headers (test/plants/plants.py): the CPU half of "caught by the oracle".
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "oracle.h"
#include "reference.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

const double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------
// Element decoding and e4m3 against CUDA's conversions.

TEST(OracleDecode, Bf16EveryBitPatternAsCuda) {
  for (uint32_t bits = 0; bits < 0x10000; bits++) {
    const uint16_t h = (uint16_t)bits;
    __nv_bfloat16_raw raw;
    raw.x = h;
    const float want = __bfloat162float(__nv_bfloat16(raw));
    const double got = oracle::decode(ncclBfloat16, &h, 0);
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
    else ASSERT_EQ(got, (double)want) << std::hex << bits;
  }
}

TEST(OracleDecode, Fp16EveryBitPatternAsCuda) {
  for (uint32_t bits = 0; bits < 0x10000; bits++) {
    const uint16_t h = (uint16_t)bits;
    __half_raw raw;
    raw.x = h;
    const float want = __half2float(__half(raw));
    const double got = oracle::decode(ncclFloat16, &h, 0);
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
    else ASSERT_EQ(got, (double)want) << std::hex << bits;
  }
}

TEST(OracleDecode, Fp32IsItsBits) {
  const float v[] = {0.f, -0.f, 1.5f, -3e38f, 1e-45f, INFINITY, -INFINITY};
  for (int i = 0; i < 7; i++) EXPECT_EQ(oracle::decode(ncclFloat32, v, i), (double)v[i]);
  EXPECT_TRUE(std::isnan(oracle::decode(ncclFloat32, std::vector<float>{NAN}.data(), 0)));
}

float cudaE4m3Value(uint8_t q) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q, __NV_E4M3);
  return __half2float(__half(h));
}

TEST(OracleE4m3, EveryCodeDecodesAsCuda) {
  for (int q = 0; q < 256; q++) {
    const float want = cudaE4m3Value((uint8_t)q);
    const double got = oracle::e4m3::decode((uint8_t)q);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << q;
    else EXPECT_EQ(got, (double)want) << q;
  }
  EXPECT_EQ(oracle::e4m3::decode(0x7e), 448.0);
  EXPECT_EQ(oracle::e4m3::decode(0x01), std::ldexp(1.0, -9));  // the smallest subnormal
  EXPECT_EQ(oracle::e4m3::decode(0x08), std::ldexp(1.0, -6));  // the smallest normal
}

// Round to nearest even, saturating: as CUDA's __NV_SATFINITE conversion,
// for every finite value tried (every code, every midpoint between two
// neighbours and the floats next to it, random floats of every magnitude
// e4m3 covers and beyond). Non-finite: e4m3's NaN (the wire's contract,
// codec.h; SATFINITE would clamp an infinity to 448).
TEST(OracleE4m3, EncodeRoundsToNearestEvenAsCuda) {
  std::vector<float> values;
  for (int q = 0; q < 0x7f; q++) {
    const float v = (float)oracle::e4m3::decode((uint8_t)q), next = (float)oracle::e4m3::decode((uint8_t)(q + 1));
    const float mid = q == 0x7e ? 464.f : (v + next) / 2;  // exact: both have few bits
    for (float x : {v, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1000.f)}) {
      values.push_back(x);
      values.push_back(-x);
    }
  }
  std::mt19937_64 rng(freshSeed());
  std::uniform_real_distribution<float> mantissa(1.f, 2.f);
  std::uniform_int_distribution<int> exponent(-14, 12);
  for (int i = 0; i < 200000; i++) values.push_back(std::ldexp(mantissa(rng), exponent(rng)) * (i % 2 ? -1.f : 1.f));
  for (float x : {500.f, 1e30f, 3.4e38f, 1e-30f, 1e-45f}) {
    values.push_back(x);
    values.push_back(-x);
  }
  size_t ties = 0;
  for (float x : values) {
    const uint8_t want = (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    ASSERT_EQ((int)oracle::e4m3::encode(x), (int)want) << "x = " << x;
    ties += x == (float)(oracle::e4m3::decode(want) + oracle::e4m3::decode(want ^ 1)) / 2;
  }
  EXPECT_GT(ties, 100u) << "the midpoints were tried";
  EXPECT_EQ(oracle::e4m3::encode(NAN), oracle::e4m3::kNaN);
  EXPECT_EQ(oracle::e4m3::encode(INFINITY), oracle::e4m3::kNaN);
  EXPECT_EQ(oracle::e4m3::encode(-INFINITY), oracle::e4m3::kNaN);
  // A tie rounds to the even code: 9.5 lies between 9 (0x51) and 10 (0x52).
  EXPECT_EQ(oracle::e4m3::encode(9.f), 0x51);
  EXPECT_EQ(oracle::e4m3::encode(9.5f), 0x52);
  EXPECT_EQ(oracle::e4m3::encode(10.5f), 0x52);
}

TEST(OracleE4m3, ScaleRule) {
  EXPECT_EQ(oracle::e4m3::scale(448.f), 1.f);
  EXPECT_EQ(oracle::e4m3::scale(896.f), 2.f);
  EXPECT_EQ(oracle::e4m3::scale(1.f), 1.f / 448.f);
  EXPECT_EQ(oracle::e4m3::scale(0.f), 1.f) << "a unit of zeros";
  EXPECT_EQ(oracle::e4m3::scale(1e-45f), 1.f) << "an amax whose inverse would overflow";
  EXPECT_EQ(oracle::e4m3::scale(1e-31f), 1.f) << "below 2^-100";
  EXPECT_EQ(oracle::e4m3::inverse(448.f, 1.f), 1.f);
  EXPECT_EQ(oracle::e4m3::inverse(1.f, 1.f / 448.f), 448.f);
  EXPECT_EQ(oracle::e4m3::inverse(1.f, 0.5f), 2.f) << "a planted rule: 1 / scale";
}

// ---------------------------------------------------------------------------
// The rules.

oracle::Problem tiny(int cp, int batch, oracle::Mode mode) {
  oracle::Problem p;
  p.cp = cp;
  p.batch = batch;
  p.localHeads = 1;
  p.headDim = 1;
  p.mode = mode;
  p.ranks.resize(cp);
  return p;
}

TEST(OracleRules, EvenSplitGivesTheFirstRanksTheRemainder) {
  EXPECT_EQ(oracle::rowStarts(tiny(4, 10, oracle::Mode::Token)), (std::vector<int>{0, 3, 6, 8, 10}));
  EXPECT_EQ(oracle::rowStarts(tiny(4, 2, oracle::Mode::Token)), (std::vector<int>{0, 1, 2, 2, 2}));
  EXPECT_EQ(oracle::rowStarts(tiny(3, 0, oracle::Mode::Token)), (std::vector<int>{0, 0, 0, 0}));
  oracle::Problem p = tiny(4, 7, oracle::Mode::Token);
  p.rowCounts = {0, 5, 0, 2};
  EXPECT_EQ(oracle::rowStarts(p), (std::vector<int>{0, 0, 5, 5, 7}));
}

TEST(OracleRules, EmptyRows) {
  // qsl [1, 3, 3, 6, 8] over 10 rows: rows 0, 8, 9 padding; sequence 1 has no rows.
  const int qsl[] = {1, 3, 3, 6, 8};
  const int lens[] = {-5, 9, 0, 4};  // sequence 0 negative: empty like 0
  oracle::Problem p = tiny(1, 10, oracle::Mode::None);
  p.numSeqs = 4;
  p.ranks[0] = {nullptr, nullptr, lens, qsl};
  const bool want[10] = {true, true, true, true, true, true, false, false, true, true};
  for (int b = 0; b < 10; b++) EXPECT_EQ(oracle::rowIsEmpty(p, 0, b), want[b]) << "row " << b;
  p.numSeqs = 0;
  for (int b = 0; b < 10; b++) EXPECT_FALSE(oracle::rowIsEmpty(p, 0, b)) << "no arrays: no empty row";
}

TEST(OracleRules, Placement) {
  oracle::Problem p = tiny(3, 5, oracle::Mode::Head);
  p.localHeads = 2;
  const std::vector<int> start = {0, 2, 4, 5};
  int row = -1, head = -1;
  EXPECT_TRUE(oracle::place(p, start, 1, 3, 3, &row, &head));
  EXPECT_EQ(row, 3);
  EXPECT_EQ(head, 1);
  EXPECT_FALSE(oracle::place(p, start, 0, 3, 3, &row, &head));
  p.mode = oracle::Mode::Token;
  EXPECT_TRUE(oracle::place(p, start, 1, 3, 5, &row, &head));
  EXPECT_EQ(row, 1);
  EXPECT_EQ(head, 5);
  EXPECT_FALSE(oracle::place(p, start, 2, 3, 5, &row, &head));
  p.mode = oracle::Mode::None;
  for (int r = 0; r < 3; r++) EXPECT_TRUE(oracle::place(p, start, r, 4, 0, &row, &head));
}

// Two live sources (LSEs 1 and 0), one empty by each rule: the weights are
// 2/3 and 1/3 in base 2, e/(1+e) and 1/(1+e) in base e.
TEST(OracleRules, SanitisedWeights) {
  for (oracle::Base base : {oracle::Base::Two, oracle::Base::E}) {
    oracle::Problem p = tiny(5, 1, oracle::Mode::Head);
    p.dtype = ncclFloat32;
    p.lseDtype = ncclFloat32;
    p.base = base;
    p.layout = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const float lse[5][1] = {{1.f}, {NAN}, {0.f}, {INFINITY}, {-INFINITY}};
    const float x[5][1] = {{3.f}, {NAN}, {6.f}, {1e30f}, {NAN}};
    for (int r = 0; r < 5; r++) p.ranks[r] = {x[r], lse[r]};
    const oracle::Merge m = oracle::merge(p, 0, 0);
    const double e = base == oracle::Base::Two ? 2.0 : std::exp(1.0);
    EXPECT_DOUBLE_EQ(m.out[0], (3 * e + 6) / (e + 1));
    EXPECT_DOUBLE_EQ(m.lse, 1 + (base == oracle::Base::Two ? std::log2(1 + 1 / e) : std::log(1 + 1 / e)));
    EXPECT_FALSE(m.empty);
  }
  oracle::Problem p = tiny(2, 1, oracle::Mode::Head);
  p.dtype = p.lseDtype = ncclFloat32;
  p.layout = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const float lse[2] = {NAN, INFINITY}, x[2] = {NAN, NAN};
  p.ranks[0] = {&x[0], &lse[0]};
  p.ranks[1] = {&x[1], &lse[1]};
  const oracle::Merge m = oracle::merge(p, 0, 0);
  EXPECT_TRUE(m.empty);
  EXPECT_EQ(m.lse, -kInf);
  EXPECT_EQ(m.out[0], 0.0);
}

// ---------------------------------------------------------------------------
// Rejections: the outputs of each break, made from the oracle's merge of a
// changed problem, must fail the check against the true one.

// A call's inputs (the test helpers' data: specials, narrowed LSEs, empty
// shards) and the oracle's view of it.
struct Call {
  Config cfg;
  int cp = 0, batch = 0;
  Strides s;
  std::vector<RankTensors> in;
  std::vector<int> counts;
  oracle::Problem problem() const { return oracleProblem(cfg, cp, batch, s, in, counts); }
};

Call makeCall(int scatter, ncclDataType_t dtype, ncclDataType_t lseDtype, int lseBase, int cp, int batch,
              LseMix mix, bool emptyShards, bool padded = false, int wire = ncclDcpWireNative, int D = 64) {
  ncclDcpConfig_t c = withScatter(makeConfig(D, 2, dtype, lseBase), scatter, lseDtype);
  c.wire = wire;
  Call call;
  call.cfg = resolved(c);
  call.cp = cp;
  call.batch = batch;
  call.s = padded ? paddedStrides(call.cfg, cp) : packedStrides(call.cfg, cp);
  std::mt19937_64 rng(freshSeed());
  CallSpec spec;
  spec.emptyShards = emptyShards;
  std::vector<int> rows(cp, batch);
  int numSeqs = 0;
  call.in = makeCallInputs(call.cfg, cp, batch, call.s, mix, rng, spec, rows, 1, &numSeqs);
  return call;
}

// Every rank's outputs of `computed` (which may differ from the checked
// problem in a rule), placed by computed's split, rendered into the dtype;
// everything else 0xff. value(m, d) picks the value of a merge (default:
// the exact one; the fp8 model's for the fp8 wire).
using Pick = std::function<double(const oracle::Merge&, int)>;
std::vector<RankTensors> render(const Call& call, const oracle::Problem& computed, const Pick& value = nullptr,
                                oracle::ScaleRule rule = oracle::e4m3::scale,
                                const std::function<double(const oracle::Merge&)>& lseOf = nullptr) {
  std::vector<RankTensors> out = call.in;  // its out / outLse: poisoned buffers of the right sizes
  const oracle::Layout& s = computed.layout;
  const std::vector<int> start = oracle::rowStarts(computed);
  for (int b = 0; b < computed.batch; b++)
    for (int h = 0; h < computed.cp * computed.localHeads; h++)
      for (int r = 0; r < computed.cp; r++) {
        int row, head;
        if (!oracle::place(computed, start, r, b, h, &row, &head)) continue;
        const oracle::Merge m = oracle::merge(computed, b, h, r, rule);  // as rank r merges it
        for (int d = 0; d < computed.headDim; d++) {
          const double v = value ? value(m, d) : computed.wire == oracle::Wire::Fp8 ? m.fp8[d] : m.out[d];
          storeElement(call.cfg.dtype, out[r].out.data(), row * s.outRow + head * s.outHead + d, (float)v);
        }
        out[r].outLse[row * s.outLseRow + head * s.outLseHead] = (float)(lseOf ? lseOf(m) : m.lse);
      }
  return out;
}

// The check of `got` against the true problem of `call`.
Mismatch checked(const Call& call, const std::vector<RankTensors>& got) {
  return oracleMismatches(call.problem(), got);
}

const int kModes[] = {ncclDcpScatterHead, ncclDcpScatterToken, ncclDcpScatterNone};

// The control: the true problem rendered passes (in every mode, dtype, LSE
// dtype, padded or not, with specials and empty shards), so each rejection
// below is the break's, not the rendering's.
TEST(OracleRejects, NothingWhenNothingIsBroken) {
  for (int m : kModes)
    for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16, ncclFloat32})
      for (ncclDataType_t lseDtype : {ncclFloat32, ncclBfloat16, ncclFloat16})
        for (bool padded : {false, true}) {
          SCOPED_TRACE(testing::Message() << scatterName(m) << " " << dtypeName(dtype) << " lse " << dtypeName(lseDtype)
                                          << (padded ? " padded" : ""));
          const Call call = makeCall(m, dtype, lseDtype, ncclDcpLseBaseE, 4, 9, LseMix::Special, true, padded);
          const Mismatch bad = checked(call, render(call, call.problem()));
          EXPECT_EQ(bad.count, 0u) << bad.first;
        }
}

// A call large enough that the check runs its rows on several threads: the
// verdict is one thread's -- every wrong element counted once, the first
// ones described in row order, the poison outside checked on every rank.
TEST(OracleRejects, RowsCheckedOnThreadsGiveOneVerdict) {
  for (int m : kModes) {
    SCOPED_TRACE(scatterName(m));
    const Call call = makeCall(m, ncclBfloat16, ncclFloat32, ncclDcpLseBase2, 8, 256, LseMix::Normal, false,
                               false, ncclDcpWireNative, 128);
    std::vector<RankTensors> got = render(call, call.problem());
    ASSERT_EQ(checked(call, got).count, 0u);
    // One wrong element in the last row rank 5 holds, one in row 1 of rank 2.
    const int64_t lastRow = m == ncclDcpScatterToken ? 256 / 8 - 1 : 255;
    storeElement(ncclBfloat16, got[5].out.data(), lastRow * call.s.outRow + 5, 7.f);
    storeElement(ncclBfloat16, got[2].out.data(), call.s.outRow + 3, 7.f);
    got[1].outLse.push_back(0.f);  // written past its elements: outside
    const Mismatch bad = checked(call, got);
    EXPECT_EQ(bad.count, 3u) << bad.first;
    EXPECT_LT(bad.first.find("rank 2 (row"), bad.first.find("rank 5 (row")) << bad.first;
  }
}

// lse_base_e_weighed_as_base_2: natural-log LSEs weighed as base 2.
TEST(OracleRejects, BaseEWeighedAsBase2) {
  for (int m : kModes) {
    const Call call = makeCall(m, ncclBfloat16, ncclFloat32, ncclDcpLseBaseE, 4, 6, LseMix::Normal, false);
    oracle::Problem wrong = call.problem();
    wrong.base = oracle::Base::Two;
    const Mismatch bad = checked(call, render(call, wrong));
    EXPECT_GT(bad.count, call.batch * 4u) << scatterName(m);
  }
  // And the other way round.
  const Call call = makeCall(ncclDcpScatterHead, ncclFloat32, ncclFloat32, ncclDcpLseBase2, 2, 3, LseMix::Normal, false);
  oracle::Problem wrong = call.problem();
  wrong.base = oracle::Base::E;
  EXPECT_GT(checked(call, render(call, wrong)).count, 0u);
}

// merged_lse_always_base_2: out right, outLse = m + log2 W of a base-e merge.
TEST(OracleRejects, MergedLseOfTheWrongBase) {
  const Call call = makeCall(ncclDcpScatterHead, ncclBfloat16, ncclFloat32, ncclDcpLseBaseE, 4, 6, LseMix::Normal, false);
  const oracle::Problem p = call.problem();
  // m + log2(W) = m + ln(W) / ln 2, m the largest LSE (recomputed here
  // from the inputs): every source live, ln W > 0 in every merge.
  std::vector<RankTensors> got = render(call, p);
  size_t changed = 0;
  const std::vector<int> start = oracle::rowStarts(p);
  for (int b = 0; b < p.batch; b++)
    for (int h = 0; h < p.cp * p.localHeads; h++) {
      double mx = -kInf;
      for (int src = 0; src < p.cp; src++)
        mx = std::max(mx, oracle::sanitize(oracle::decode(p.lseDtype, p.ranks[src].partialLse,
                                                          b * p.layout.lseRow + (h / p.localHeads) * p.layout.lsePeer +
                                                              (h % p.localHeads) * p.layout.lseHead)));
      const oracle::Merge m = oracle::merge(p, b, h);
      int row, head;
      for (int r = 0; r < p.cp; r++)
        if (oracle::place(p, start, r, b, h, &row, &head)) {
          got[r].outLse[row * p.layout.outLseRow + head * p.layout.outLseHead] =
              (float)(mx + (m.lse - mx) / std::log(2.0));
          changed++;
        }
    }
  ASSERT_GT(changed, 0u);
  EXPECT_GT(checked(call, got).count, changed / 2);
}

// nan_lse_not_sanitized and other NaN rules: a NaN LSE read as 0 (a live
// source of weight 2^-m), or +inf taken as the largest (every weight NaN).
TEST(OracleRejects, WrongNanAndInfinityRules) {
  for (ncclDataType_t lseDtype : {ncclFloat32, ncclBfloat16}) {
    Call call = makeCall(ncclDcpScatterNone, ncclBfloat16, lseDtype, ncclDcpLseBase2, 3, 8, LseMix::Normal, false);
    // NaN LSEs over finite payloads (so a leak shows as a value, not a NaN).
    for (RankTensors& t : call.in)
      for (size_t i = 0; i < t.partialLse.size(); i += 5) {
        t.partialLse[i] = NAN;
        if (!t.narrowLse.empty()) storeElement(lseDtype, t.narrowLse.data(), i, NAN);
      }
    std::vector<RankTensors> zeroed = call.in;
    for (RankTensors& t : zeroed)
      for (size_t i = 0; i < t.partialLse.size(); i += 5) {
        t.partialLse[i] = 0.f;
        if (!t.narrowLse.empty()) storeElement(lseDtype, t.narrowLse.data(), i, 0.f);
      }
    const oracle::Problem wrong = oracleProblem(call.cfg, call.cp, call.batch, call.s, zeroed);
    EXPECT_GT(checked(call, render(call, wrong)).count, 0u) << "NaN read as 0";
    // NaN outputs wherever a source's LSE is NaN (NaN not sanitised, or a
    // NaN payload multiplied by a zero weight).
    const oracle::Problem p = call.problem();
    const Pick nanWhereNan = [&](const oracle::Merge& m, int d) { return m.out[d]; };
    std::vector<RankTensors> leaked = render(call, p, nanWhereNan);
    for (int r = 0; r < call.cp; r++)
      for (size_t i = 0; i < leaked[r].out.size() / call.cfg.eltSize; i += 7)
        storeElement(call.cfg.dtype, leaked[r].out.data(), i, NAN);
    EXPECT_GT(checked(call, leaked).count, 0u) << "NaN leaked";
  }
}

// A wrong rule for the empty rows: negative local lengths read as live
// (merge.h `== 0` instead of `<= 0`), padding rows merged.
TEST(OracleRejects, WrongEmptyRowRules) {
  for (int m : kModes) {
    SCOPED_TRACE(scatterName(m));
    // Every sequence of rank 1 of negative length, sequence lengths 5
    // elsewhere; padding rows at both ends.
    Call call = makeCall(m, ncclBfloat16, ncclFloat32, ncclDcpLseBase2, 3, 10, LseMix::Normal, false);
    for (int r = 0; r < call.cp; r++) {
      call.in[r].queryStartLoc = {1, 4, 4, 8};
      call.in[r].seqLens = r == 1 ? std::vector<int>{-1, -100, -2} : std::vector<int>{5, 5, 5};
    }
    std::vector<RankTensors> live = call.in;
    live[1].seqLens = {1, 1, 1};
    const oracle::Problem negativeLive = oracleProblem(call.cfg, call.cp, call.batch, call.s, live);
    EXPECT_GT(checked(call, render(call, negativeLive)).count, 0u) << "negative lengths read as live";
    std::vector<RankTensors> padded = call.in;
    for (RankTensors& t : padded) {
      t.queryStartLoc = {0, 1, 4, 4, 8, 10};
      t.seqLens.insert(t.seqLens.begin(), 1);
      t.seqLens.push_back(1);
    }
    const oracle::Problem paddingLive = oracleProblem(call.cfg, call.cp, call.batch, call.s, padded);
    EXPECT_GT(checked(call, render(call, paddingLive)).count, 0u) << "padding rows merged";
  }
}

// even_split_remainder_to_the_last_ranks, token_out_row_off_by_one,
// head_sent_to_the_wrong_rank: the right merges in the wrong places.
TEST(OracleRejects, WrongSplitsAndPlacements) {
  const Call call = makeCall(ncclDcpScatterToken, ncclBfloat16, ncclFloat32, ncclDcpLseBase2, 4, 10, LseMix::Normal, false);
  oracle::Problem lastRanks = call.problem();
  lastRanks.rowCounts = {2, 2, 3, 3};  // the remainder to the last ranks: the true split is 3, 3, 2, 2
  EXPECT_GT(checked(call, render(call, lastRanks)).count, 0u) << "the even split's remainder to the last ranks";
  // Each TOKEN slice one out row down: out row = row - start + 1.
  oracle::Problem p = call.problem();
  std::vector<RankTensors> down = call.in;
  const std::vector<int> start = oracle::rowStarts(p);
  for (int b = 0; b < p.batch; b++)
    for (int h = 0; h < p.cp * p.localHeads; h++) {
      const oracle::Merge m = oracle::merge(p, b, h);
      int row, head;
      for (int r = 0; r < p.cp; r++)
        if (oracle::place(p, start, r, b, h, &row, &head))
          for (int d = 0; d < p.headDim; d++)
            storeElement(call.cfg.dtype, down[r].out.data(), (row + 1) * p.layout.outRow + head * p.layout.outHead + d,
                         (float)m.out[d]);
    }
  EXPECT_GT(checked(call, down).count, 0u) << "slices one row down";
  // HEAD: rank r holds rank cp-1-r's heads.
  const Call head = makeCall(ncclDcpScatterHead, ncclBfloat16, ncclFloat32, ncclDcpLseBase2, 4, 3, LseMix::Normal, false);
  std::vector<RankTensors> right = render(head, head.problem()), mirrored = right;
  for (int r = 0; r < head.cp; r++) mirrored[r].out = right[head.cp - 1 - r].out;
  EXPECT_GT(checked(head, mirrored).count, 0u) << "HEAD sent to the mirror rank";
}

// bf16_lse_read_as_fp32 and kin: bf16 LSEs weighed by the unrounded values.
TEST(OracleRejects, NarrowLsesReadUnrounded) {
  const Call call = makeCall(ncclDcpScatterHead, ncclBfloat16, ncclBfloat16, ncclDcpLseBase2, 4, 16, LseMix::Normal, false);
  // The fp32 LSEs the bf16 ones were rounded from are gone (narrowLses
  // keeps the rounded ones): redraw unrounded ones near them.
  std::vector<RankTensors> unrounded = call.in;
  std::mt19937_64 rng(freshSeed());
  std::uniform_real_distribution<float> jitter(-0.03f, 0.03f);
  for (RankTensors& t : unrounded) {
    for (float& l : t.partialLse) l += jitter(rng);
    t.narrowLse.clear();
  }
  Config fp32Lse = call.cfg;
  fp32Lse.lseDtype = ncclFloat32;
  const oracle::Problem wrong = oracleProblem(fp32Lse, call.cp, call.batch, call.s, unrounded);
  EXPECT_GT(checked(call, render(call, wrong)).count, 0u);
}

// The output tolerance is one rounding of the output dtype (plus fp32's
// accumulation), not a percent: two units of rounding off is rejected, the
// correctly rounded value accepted; outLse a few units of fp32 at most.
TEST(OracleRejects, TwoUnitsOfRoundingOff) {
  for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16, ncclFloat32}) {
    SCOPED_TRACE(dtypeName(dtype));
    const Call call = makeCall(ncclDcpScatterHead, dtype, ncclFloat32, ncclDcpLseBase2, 2, 2, LseMix::Normal, false);
    std::vector<RankTensors> got = render(call, call.problem());
    ASSERT_EQ(checked(call, got).count, 0u);
    // Two units (ulps) of bf16 / fp16; fp32: 2e-6 of the terms' magnitude
    // (its bound allows fp32's accumulation over the sources, ~1e-6).
    // Toward zero: below v's binade the grid is finer, so the store keeps
    // both units; away from zero, from the top of a binade, v + 2 ulps is a
    // tie that rounds to one unit off (0.99609375 -> 1.0 in bf16: seed 24307).
    const float v = loadElement(dtype, got[0].out.data(), 0);
    const double mag = oracle::merge(call.problem(), 0, 0).mag[0];  // rank 0's out[0][0][0]: row 0, head 0
    const double off = dtype == ncclFloat32 ? 2e-6 * mag : std::ldexp(4 * oracle::roundoff(dtype), std::ilogb(v));
    storeElement(dtype, got[0].out.data(), 0, v - std::copysign((float)off, v));
    if (dtype != ncclFloat32) {
      ASSERT_EQ(std::fabs(loadElement(dtype, got[0].out.data(), 0) - v), (float)off) << "the store kept both units";
    }
    EXPECT_EQ(checked(call, got).count, 1u) << "out off by " << off << " at " << v;
    got = render(call, call.problem());
    got[1].outLse[0] = std::nextafter(std::nextafter(got[1].outLse[0], INFINITY), INFINITY) + 1e-4f;
    EXPECT_EQ(checked(call, got).count, 1u) << "outLse 1e-4 off";
    got = render(call, call.problem());
    got[1].out[got[1].out.size() - 1] = 0;  // a byte past the rank's elements (the slack row)
    EXPECT_EQ(checked(call, got).count, 1u) << "a byte written outside";
  }
}

// ---------------------------------------------------------------------------
// fp8 on the wire: the bound accepts the fp8 model and rejects a lost,
// halved or unapplied scale.

float halvedScale(float amax) { return oracle::e4m3::scale(amax) / 2; }      // amax / 896: saturates
float unitScale(float) { return 1.f; }                                         // no scale at all
float powerOfTwoScale(float amax) {                                            // a rule to come
  const float s = oracle::e4m3::scale(amax);
  return std::exp2(std::ceil(std::log2(s)));
}

// Attention-like units: per unit a spread in [0.01, 8] (times `gain`), an
// outlier channel 16x larger.
Call fp8Call(ncclDataType_t dtype, int cp, int batch, uint64_t seed, float gain = 1.f,
             int scatter = ncclDcpScatterHead) {
  Call call = makeCall(scatter, dtype, ncclFloat32, ncclDcpLseBase2, cp, batch, LseMix::Normal, false, false,
                       ncclDcpWireFp8E4m3, 128);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.f, 1.f);
  std::uniform_real_distribution<float> spread(0.01f, 8.f);
  for (RankTensors& t : call.in)
    for (size_t u = 0; u < t.partialOut.size() / call.cfg.eltSize / 128; u++) {
      const float sigma = gain * spread(rng);
      for (int d = 0; d < 128; d++)
        storeElement(dtype, t.partialOut.data(), u * 128 + d, sigma * gauss(rng) * (d == 5 ? 16.f : 1.f));
    }
  return call;
}

TEST(OracleFp8, BoundAcceptsTheModelAndRejectsScaleBreaks) {
  for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16}) {
    SCOPED_TRACE(dtypeName(dtype));
    const Call call = fp8Call(dtype, 4, 8, freshSeed());
    const oracle::Problem p = call.problem();
    const Mismatch model = checked(call, render(call, p));
    EXPECT_EQ(model.count, 0u) << "the fp8 model within the bound: " << model.first;
    // The model is not the exact merge: the bound has something to bound.
    oracle::Problem native = p;
    native.wire = oracle::Wire::Native;
    size_t narrowed = 0;
    for (int b = 0; b < p.batch; b++)
      for (int h = 0; h < p.cp * p.localHeads; h++) {
        const oracle::Merge m = oracle::merge(p, b, h);
        for (int d = 0; d < p.headDim; d++)
          narrowed += std::fabs(m.fp8[d] - m.out[d]) > oracle::outTolerance(native, oracle::merge(native, b, h), d);
      }
    EXPECT_GT(narrowed, 100u) << "e4m3 rounding beyond the native bound";
    // fp8_scale_rule_halved (amax / 896: the largest elements saturate).
    EXPECT_GT(checked(call, render(call, p, nullptr, halvedScale)).count, 0u) << "halved scale";
    // fp8_encode_unscaled (no scale): partials x100, past e4m3's 448, saturate.
    const Call big = fp8Call(dtype, 4, 8, freshSeed(), 100.f);
    EXPECT_EQ(checked(big, render(big, big.problem())).count, 0u) << "the model of x100 partials within the bound";
    EXPECT_GT(checked(big, render(big, big.problem(), nullptr, unitScale)).count, 0u) << "no scale";
    // A decode that misses (the scale's error, a unit's neighbour): the
    // wire's rounding error 100 times over.
    std::vector<RankTensors> undecoded = call.in;
    {
      const std::vector<int> start = oracle::rowStarts(p);
      for (int b = 0; b < p.batch; b++)
        for (int h = 0; h < p.cp * p.localHeads; h++) {
          const oracle::Merge m = oracle::merge(p, b, h);
          int row, head;
          for (int r = 0; r < p.cp; r++)
            if (oracle::place(p, start, r, b, h, &row, &head))
              for (int d = 0; d < p.headDim; d++)  // the wire's error 100 times over
                storeElement(dtype, undecoded[r].out.data(), row * p.layout.outRow + head * p.layout.outHead + d,
                             (float)(m.out[d] + (m.fp8[d] - m.out[d]) * 100));
        }
    }
    EXPECT_GT(checked(call, undecoded).count, 0u) << "fp8 errors 100 x the model's";
    // Another rule (a power-of-two scale) is one function: with it as the
    // oracle's rule, its outputs pass.
    oracle::CheckOptions pow2;
    pow2.rule = powerOfTwoScale;
    const std::vector<RankTensors> got = render(call, p, nullptr, powerOfTwoScale);
    std::vector<oracle::Output> outs(call.cp);
    for (int r = 0; r < call.cp; r++)
      outs[r] = {got[r].out.data(), got[r].outLse.data(), got[r].out.size() / call.cfg.eltSize, got[r].outLse.size()};
    const oracle::Report rep = oracle::check(p, outs, pow2);
    EXPECT_EQ(rep.bad, 0u) << rep.first;
  }
}

// ---------------------------------------------------------------------------
// The library's CPU reference (reference.cc: merge.h, codec.h) against
// the oracle: these fail under the plants in those headers.

std::vector<RankTensors> runLibraryReference(const Call& call) {
  std::vector<RankTensors> got = call.in;
  std::vector<CallBuffers> bufs;
  for (RankTensors& t : got) bufs.push_back(t.buffers());
  const CallShape shape = hostShape(call.cfg, call.cp, call.batch, call.counts,
                                    call.in.empty() ? 0 : (int)call.in[0].seqLens.size());
  referenceA2aLseReduce(call.cfg, call.cp, call.batch, call.s, bufs.data(), &shape, call.cfg.wire);
  return got;
}

TEST(LibraryModel, NativeReferenceMatchesTheOracle) {
  for (int m : kModes)
    for (ncclDataType_t lseDtype : {ncclFloat32, ncclBfloat16, ncclFloat16})
      for (int base : {(int)ncclDcpLseBase2, (int)ncclDcpLseBaseE}) {
        SCOPED_TRACE(testing::Message() << scatterName(m) << " lse " << dtypeName(lseDtype) << " base " << base);
        const Call call = makeCall(m, ncclBfloat16, lseDtype, base, 4, 11, LseMix::Special, true, true);
        const Mismatch bad = checked(call, runLibraryReference(call));
        EXPECT_EQ(bad.count, 0u) << bad.first;
      }
}

// The reference's fp8 model within the oracle's bound, and equal to the
// oracle's own model of the wire (its e4m3, its scale rule) within the
// native bound: a change of the library's rule must change e4m3::scale.
// In every scatter mode: the rank that merges keeps its own share exact
// (NONE: every rank, each its own), on both sides.
TEST(LibraryModel, Fp8ReferenceFollowsTheOraclesModel) {
  for (int mode : kModes)
  for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16})
    for (int cp : {2, 4, 8}) {
      SCOPED_TRACE(testing::Message() << scatterName(mode) << " " << dtypeName(dtype) << " cp " << cp);
      Call call = fp8Call(dtype, cp, 6, freshSeed(), 1.f, mode);
      // A NaN and an infinity in some units (finite LSEs): they take no
      // part in their unit's scale, the unit's other elements keep theirs.
      for (RankTensors& t : call.in)
        for (size_t u = 3; u < t.partialOut.size() / call.cfg.eltSize / 128; u += 7) {
          storeElement(dtype, t.partialOut.data(), u * 128 + 17, NAN);
          storeElement(dtype, t.partialOut.data(), u * 128 + 90, u % 2 ? INFINITY : -INFINITY);
        }
      const std::vector<RankTensors> got = runLibraryReference(call);
      const Mismatch bound = checked(call, got);
      EXPECT_EQ(bound.count, 0u) << "outside the fp8 bound: " << bound.first;
      const oracle::Problem p = call.problem();
      std::vector<oracle::Output> outs(cp);
      for (int r = 0; r < cp; r++)
        outs[r] = {got[r].out.data(), got[r].outLse.data(), got[r].out.size() / call.cfg.eltSize, got[r].outLse.size()};
      oracle::CheckOptions model;
      model.fp8Model = true;
      const oracle::Report rep = oracle::check(p, outs, model);
      EXPECT_EQ(rep.bad, 0u) << "not the oracle's fp8 model: " << rep.first;
    }
}

// What the GPU tests feed the kernels (makeCallInputs: special LSEs, huge
// spreads, empty shards with negative lengths, narrow LSEs, padded
// strides, TOKEN counts, both wires), through the library's CPU model,
// passes the oracle: the GPU comparisons with the oracle can pass on a
// correct kernel (which matches the model within a rounding).
TEST(LibraryModel, WhatTheGpuTestsFeedPassesTheOracle) {
  std::mt19937_64 rng(freshSeed());
  size_t calls = 0;
  for (int wire : {(int)ncclDcpWireNative, (int)ncclDcpWireFp8E4m3})
    for (int m : kModes) {
      for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16, ncclFloat32}) {
        if (wire == ncclDcpWireFp8E4m3 && dtype == ncclFloat32) continue;
        for (ncclDataType_t lseDtype : {ncclFloat32, ncclBfloat16, ncclFloat16})
          for (LseMix mix : {LseMix::Normal, LseMix::Special, LseMix::HugeSpread})
            for (bool shards : {false, true})
              for (bool padded : {false, true}) {
                const int cp = 2 + (int)(rng() % 7), batch = 1 + (int)(rng() % 20);
                SCOPED_TRACE(testing::Message() << scatterName(m) << " " << dtypeName(dtype) << " lse "
                                                << dtypeName(lseDtype) << " mix " << (int)mix
                                                << (shards ? " shards" : "") << (padded ? " padded" : "") << " cp "
                                                << cp << " batch " << batch << (wire ? " fp8" : ""));
                ncclDcpConfig_t c = withScatter(makeConfig(dtype == ncclFloat32 ? 64 : 128, 2, dtype,
                                                           (int)(rng() % 2) ? ncclDcpLseBase2 : ncclDcpLseBaseE),
                                                m, lseDtype);
                c.wire = wire;
                Call call;
                call.cfg = resolved(c);
                call.cp = cp;
                call.batch = batch;
                call.s = padded ? paddedStrides(call.cfg, cp) : packedStrides(call.cfg, cp);
                if (m == ncclDcpScatterToken && rng() % 2) {
                  call.counts.assign(cp, 0);
                  for (int b = 0; b < batch; b++) call.counts[rng() % cp]++;
                }
                CallSpec spec;
                spec.emptyShards = shards;
                const CallShape shape = hostShape(call.cfg, cp, batch, call.counts, 0);
                std::vector<int> rows(cp);
                for (int r = 0; r < cp; r++) rows[r] = outCapacityRows(shape, r, false);
                int numSeqs = 0;
                call.in = makeCallInputs(call.cfg, cp, batch, call.s, mix, rng, spec, rows, 1, &numSeqs);
                const Mismatch bad = checked(call, runLibraryReference(call));
                ASSERT_EQ(bad.count, 0u) << bad.first;
                calls++;
              }
      }
    }
  EXPECT_GT(calls, 300u);
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
