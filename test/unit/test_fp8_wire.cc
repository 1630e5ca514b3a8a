// fp8 (e4m3) on the wire (issue 28, DESIGN §15): the unit format of
// src/device/codec.h (round trips, zeros, NaN / inf, saturation, the
// per-element error bound, the word packing) and the CPU model of the
// collective with fp8 partials (referenceA2aLseReduce(..., Wire::Fp8E4m3))
// on attention-like partials: its error against the bf16 result and fp64,
// the bound DESIGN §15 documents, outLse untouched, the own share exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device/codec.h"
#include "device/merge.h"
#include "enums.h"
#include "env.h"
#include "error.h"
#include "reference.h"
#include "test_util.h"
#include "validate.h"

namespace nccl_dcp {
namespace {

using test::RankTensors;

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The e4m3 value of a code, decoded here from its bits (S.EEEE.MMM, bias 7,
// no inf, S.1111.111 NaN) rather than by the CUDA header codec.h uses.
double e4m3Value(uint8_t c) {
  const int sign = c >> 7, e = (c >> 3) & 0xf, m = c & 7;
  if (e == 0xf && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double v = e == 0 ? std::ldexp((double)m, -9) : std::ldexp((double)(8 + m), e - 10);
  return sign ? -v : v;
}

bool isNaNCode(uint8_t c) { return (c & 0x7f) == 0x7f; }

// Worst error of one element through the wire: half an ulp of e4m3 (3
// mantissa bits: 2^-4 relative) for normals, half the subnormal step
// (2^-9 * scale / 2) below; a little slack for the fp32 scale and inverse.
double elementBound(double x, double scale) {
  return std::max(std::fabs(x) * 0x1p-4, scale * 0x1p-10) * (1 + 0x1p-16);
}

// One element through the wire with the model's functions, at `scale`.
float roundTrip(float x, float scale) { return fp8::decode(fp8::encode(x, 1.f / scale), scale); }
// A unit decoded: q times its scale.
void decodeUnit(const uint8_t* q, int n, float scale, float* x) {
  for (int i = 0; i < n; i++) x[i] = fp8::decode(q[i], scale);
}

// ---------------------------------------------------------------------------
// The format.

TEST(Fp8Wire, DecodeMatchesTheBitLayoutOfEveryCode) {
  for (int c = 0; c < 256; c++) {
    const float got = fp8::decode((uint8_t)c, 1.f);
    if (isNaNCode((uint8_t)c)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ((double)got, e4m3Value((uint8_t)c)) << "code " << c;
    }
  }
  EXPECT_EQ(e4m3Value(0x7e), 448.0);
  EXPECT_EQ((double)fp8::kE4m3Max, 448.0);
}

// Values representable as e4m3 times the scale come back bit for bit, for
// every finite code and scales of every kind (powers of two, not, tiny,
// large); the code too, -0 included.
TEST(Fp8Wire, RepresentableValuesRoundTripExactly) {
  const float scales[] = {1.f, 0x1p-7f, 0.0371f, 3.5e3f, 1.2345e-20f, 7.77e20f, 1.f / 448.f};
  for (float scale : scales) {
    for (int c = 0; c < 256; c++) {
      if (isNaNCode((uint8_t)c)) continue;
      const float x = (float)e4m3Value((uint8_t)c) * scale;
      const uint8_t q = fp8::encode(x, 1.f / scale);
      EXPECT_EQ(q, (uint8_t)c) << "scale " << scale << " code " << c;
      EXPECT_EQ(bitsOf(fp8::decode(q, scale)), bitsOf(x)) << "scale " << scale << " code " << c;
    }
  }
}

// A whole unit of representable values whose largest is 448 * scale: the
// scale the encoder computes is that scale again, and the unit comes back
// exactly, from every element type.
template <typename T>
void unitRoundTrip(float scale) {
  std::mt19937_64 rng(test::freshSeed());
  const int D = 512;
  std::vector<T> x(D);
  std::vector<float> want(D);
  for (int d = 0; d < D; d++) {
    uint8_t c = (uint8_t)(rng() & 0xff);
    if (isNaNCode(c)) c = 0;
    if (d == 37) c = 0xfe;  // -448: the amax
    want[d] = (float)e4m3Value(c) * scale;
    x[d] = Element<T>::fromFloat(want[d]);
    ASSERT_EQ(Element<T>::toFloat(x[d]), want[d]) << "the test's value is not representable in T";
  }
  std::vector<uint8_t> q(D);
  const float s = fp8::encodeUnit(x.data(), D, q.data());
  EXPECT_EQ(s, scale);
  std::vector<float> back(D);
  decodeUnit(q.data(), D, s, back.data());
  for (int d = 0; d < D; d++) EXPECT_EQ(bitsOf(back[d]), bitsOf(want[d])) << "d " << d;
}

TEST(Fp8Wire, UnitRoundTripsExactlyFromEveryElementType) {
  unitRoundTrip<float>(0x1p-6f);
  unitRoundTrip<float>(1.f);
  unitRoundTrip<__nv_bfloat16>(0x1p-10f);
  unitRoundTrip<__nv_bfloat16>(0x1p+3f);
  unitRoundTrip<__half>(0x1p-7f);  // 448 * 2^-7 = 3.5; smallest 2^-16: fp16 normal range
}

// The documented choice: a unit of zeros has scale 1 and travels as zeros
// (no 0 / 0); so does a unit whose amax is below 2^-100.
TEST(Fp8Wire, ZeroUnitHasScaleOne) {
  std::vector<float> x(64, 0.f);
  x[5] = -0.f;
  std::vector<uint8_t> q(64, 0xaa);
  EXPECT_EQ(fp8::encodeUnit(x.data(), 64, q.data()), 1.f);
  for (int d = 0; d < 64; d++) EXPECT_EQ(q[d], d == 5 ? 0x80 : 0x00) << d;
  EXPECT_EQ(fp8::scaleFromAmax(0.f), 1.f);
  EXPECT_EQ(fp8::scaleFromAmax(1e-44f), 1.f);  // below 2^-100: unscaled (448 / amax would overflow)
  EXPECT_EQ(fp8::inverseFromAmax(1e-44f), 1.f);
  EXPECT_EQ(fp8::inverseFromAmax(448.f), 1.f);
  EXPECT_EQ(fp8::inverseFromAmax(0x1p-100f), 448.f * 0x1p100f);
  EXPECT_EQ(fp8::scaleFromAmax(1e-40f), 1.f);
  EXPECT_EQ(fp8::scaleFromAmax(1e-20f), 1e-20f / 448.f);
  EXPECT_EQ(fp8::scaleFromAmax(448.f), 1.f);
}

// NaN and +-inf travel as the e4m3 NaN, element by element, and take no
// part in the scale: the unit's finite elements are encoded as if they
// were absent.
TEST(Fp8Wire, NonFiniteElementsBecomeNaNAndLeaveTheScaleAlone) {
  const int D = 32;
  std::vector<float> x(D), finiteOnly(D);
  for (int d = 0; d < D; d++) x[d] = finiteOnly[d] = std::sin(0.7f * d) * 3.f;
  x[3] = NAN;
  x[10] = INFINITY;
  x[11] = -INFINITY;
  finiteOnly[3] = finiteOnly[10] = finiteOnly[11] = 0.f;
  std::vector<uint8_t> q(D), qf(D);
  const float s = fp8::encodeUnit(x.data(), D, q.data());
  const float sf = fp8::encodeUnit(finiteOnly.data(), D, qf.data());
  EXPECT_EQ(s, sf);
  std::vector<float> back(D);
  decodeUnit(q.data(), D, s, back.data());
  for (int d = 0; d < D; d++) {
    if (d == 3 || d == 10 || d == 11) {
      EXPECT_EQ(q[d], fp8::kNaN) << d;
      EXPECT_TRUE(std::isnan(back[d])) << d;
    } else {
      EXPECT_EQ(q[d], qf[d]) << d;
    }
  }
  // A unit of nothing but non-finite values: scale 1, every element NaN.
  std::vector<float> bad = {NAN, INFINITY, -INFINITY};
  std::vector<uint8_t> qb(3);
  EXPECT_EQ(fp8::encodeUnit(bad.data(), 3, qb.data()), 1.f);
  for (uint8_t c : qb) EXPECT_EQ(c, fp8::kNaN);
}

TEST(Fp8Wire, OutOfRangeSaturates) {
  EXPECT_EQ(fp8::encode(1000.f, 1.f), 0x7e);   // +448
  EXPECT_EQ(fp8::encode(-1e30f, 1.f), 0xfe);   // -448
  EXPECT_EQ(fp8::encode(449.f, 1.f), 0x7e);
  EXPECT_EQ(fp8::encode(1e-30f, 1.f), 0x00);   // below half the smallest subnormal
}

// Random units, as partials come (N(0, 1) times a magnitude, some with one
// huge outlier channel): every element within the per-element bound of
// its unit's scale. The outlier units fail this if the scale is anything
// but the unit's amax / 448 (a fixed or mean-based scale saturates the
// outlier; a larger one loses the small channels).
TEST(Fp8Wire, EveryElementWithinHalfAnUlpOfItsUnitScale) {
  std::mt19937_64 rng(test::freshSeed());
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(-30.f, 10.f);
  const int D = 512;
  std::vector<float> x(D), back(D);
  std::vector<uint8_t> q(D);
  for (int unit = 0; unit < 400; unit++) {
    const float magnitude = std::exp2(uniform(rng));
    for (int d = 0; d < D; d++) x[d] = normal(rng) * magnitude;
    if (unit % 2) x[rng() % D] = magnitude * (unit % 4 == 1 ? 1e4f : -3e3f);
    float amax = 0.f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float s = fp8::encodeUnit(x.data(), D, q.data());
    ASSERT_EQ(s, amax / 448.f) << "unit " << unit;
    decodeUnit(q.data(), D, s, back.data());
    for (int d = 0; d < D; d++)
      ASSERT_LE(std::fabs((double)back[d] - x[d]), elementBound(x[d], s))
          << "unit " << unit << " d " << d << " x " << x[d] << " scale " << s;
  }
}

TEST(Fp8Wire, UnitWithOneHugeOutlierKeepsTheOutlier) {
  const int D = 512;
  std::vector<float> x(D), back(D);
  std::vector<uint8_t> q(D);
  for (int d = 0; d < D; d++) x[d] = 0.01f * std::cos(0.3f * d);
  x[100] = 1e4f;
  const float s = fp8::encodeUnit(x.data(), D, q.data());
  EXPECT_EQ(s, 1e4f / 448.f);
  decodeUnit(q.data(), D, s, back.data());
  EXPECT_NEAR(back[100], 1e4f, 1e4f * 0x1p-4);  // scale 1 would give 448
  // The small channels fall below the smallest subnormal (2^-9 * scale =
  // 0.044): they decode to 0, within the bound of their unit.
  for (int d = 0; d < D; d++) EXPECT_LE(std::fabs((double)back[d] - x[d]), elementBound(x[d], s)) << d;
}

// The merge step of a wire element folds the scale into the weight (the
// kernels' one fma per element): fma(w * scale, q, acc), and a source
// whose weight is 0 skipped, NaN payload and all.
TEST(Fp8Wire, MergeStepFoldsTheScaleIntoTheWeight) {
  for (uint8_t q : {0x00, 0x38, 0xb8, 0x7e, 0x01, 0x40, 0xc8})
    for (float scale : {1.f, 0.0371f, 3.5e3f})
      for (float w : {0.f, 0.25f, 0.7f}) {
        const float want = w == 0.f ? 1.5f : std::fma(w * scale, fp8::decode(q, 1.f), 1.5f);
        EXPECT_EQ(bitsOf(mergeWireElement(1.5f, w, scale, q)), bitsOf(want)) << (int)q << " " << scale << " " << w;
      }
  EXPECT_EQ(mergeWireElement(1.5f, 0.f, 1.f, fp8::kNaN), 1.5f);
  EXPECT_TRUE(std::isnan(mergeWireElement(1.5f, 0.5f, 1.f, fp8::kNaN)));
}

TEST(Fp8Wire, TheLseWord) {
  // {lse, scale}: the LSE in the low half, where the native LSE word has
  // it ((uint64_t)__float_as_uint(lse)); -inf and NaN LSEs pass unchanged.
  const float lses[] = {3.25f, -INFINITY, NAN, -1e30f};
  for (float lse : lses) {
    const uint64_t word = fp8::packLseWord(lse, 0.125f);
    EXPECT_EQ((uint32_t)word, bitsOf(lse));
    EXPECT_EQ(bitsOf(fp8::lseOfWord(word)), bitsOf(lse));
    EXPECT_EQ(fp8::scaleOfWord(word), 0.125f);
  }
}

// ---------------------------------------------------------------------------
// The model of the collective.

Config resolved(int headDim, int localHeads, ncclDataType_t dtype, int lseBase, int scatter = 0) {
  const ncclDcpConfig_t in = test::withScatter(test::makeConfig(headDim, localHeads, dtype, lseBase), scatter);
  Config c{};
  EXPECT_EQ(resolveConfig(&in, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  return c;
}

std::vector<RankTensors> runModel(const Config& cfg, int cp, int batch, const Strides& s,
                                  const std::vector<RankTensors>& inputs, Wire wire,
                                  const CallShape* shape = nullptr) {
  std::vector<RankTensors> ranks = inputs;
  std::vector<CallBuffers> buffers;
  for (RankTensors& t : ranks) buffers.push_back(t.buffers());
  referenceA2aLseReduce(cfg, cp, batch, s, buffers.data(), shape, wire);
  return ranks;
}

// Same inputs, both wires: outLse bit for bit the same (the LSEs never
// narrow), out finite exactly where Native's is (NaN payloads behind a -inf
// LSE, empty shards' garbage, are skipped by the merge whatever the wire
// made of them), in every scatter mode and for every element type.
TEST(Fp8WireModel, OutLseUnchangedAndNaNPayloadsStaySkipped) {
  std::mt19937_64 rng(test::freshSeed());
  for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16, ncclFloat32}) {
    for (int scatter = 0; scatter < 3; scatter++) {
      for (int cp : {2, 3, 8}) {
        const Config cfg = resolved(64, 2, dtype, ncclDcpLseBase2, scatter);
        const int batch = 2 * cp + 3;
        const Strides s = packedStrides(cfg, cp);
        test::CallSpec spec;
        spec.emptyShards = true;
        int numSeqs = 0;
        const std::vector<RankTensors> in = test::makeCallInputs(cfg, cp, batch, s, test::LseMix::Special, rng, spec,
                                                                 std::vector<int>(cp, batch), 0, &numSeqs);
        const CallShape shape = test::hostShape(cfg, cp, batch, {}, numSeqs);
        const std::vector<RankTensors> n = runModel(cfg, cp, batch, s, in, Wire::Native, &shape);
        const std::vector<RankTensors> f = runModel(cfg, cp, batch, s, in, Wire::Fp8E4m3, &shape);
        for (int r = 0; r < cp; r++) {
          ASSERT_EQ(n[r].outLse.size(), f[r].outLse.size());
          for (size_t i = 0; i < n[r].outLse.size(); i++)
            ASSERT_EQ(bitsOf(n[r].outLse[i]), bitsOf(f[r].outLse[i])) << "rank " << r << " outLse " << i;
          const size_t elems = n[r].out.size() / cfg.eltSize;
          size_t written = 0;
          for (size_t i = 0; i < elems; i++) {
            const float a = loadElement(dtype, n[r].out.data(), i), b = loadElement(dtype, f[r].out.data(), i);
            ASSERT_EQ(std::isfinite(a), std::isfinite(b))
                << dtypeName(dtype) << " scatter " << scatter << " cp " << cp << " rank " << r << " out " << i;
            written += std::isfinite(a);
          }
          EXPECT_GT(written, 0u);
        }
      }
    }
  }
}

// Where only the owner's own partial carries weight, nothing crosses the
// link that matters: fp8 equals Native bit for bit. So does cp 1.
TEST(Fp8WireModel, OwnShareStaysExact) {
  std::mt19937_64 rng(test::freshSeed());
  const int cp = 4, batch = 5;
  const Config cfg = resolved(128, 3, ncclBfloat16, ncclDcpLseBaseE);
  const Strides s = packedStrides(cfg, cp);
  std::vector<RankTensors> in = test::makeInputs(cfg, cp, batch, s, test::LseMix::Normal, rng);
  for (int src = 0; src < cp; src++)
    for (int b = 0; b < batch; b++)
      for (int peer = 0; peer < cp; peer++)
        for (int j = 0; j < cfg.localHeads; j++)
          if (peer != src) in[src].partialLse[b * s.lseRow + peer * s.lsePeer + j * s.lseHead] = -INFINITY;
  const std::vector<RankTensors> n = runModel(cfg, cp, batch, s, in, Wire::Native);
  const std::vector<RankTensors> f = runModel(cfg, cp, batch, s, in, Wire::Fp8E4m3);
  for (int r = 0; r < cp; r++) EXPECT_EQ(n[r].out, f[r].out) << "rank " << r;

  const Strides one = packedStrides(cfg, 1);
  const std::vector<RankTensors> single = test::makeInputs(cfg, 1, batch, one, test::LseMix::Normal, rng);
  EXPECT_EQ(runModel(cfg, 1, batch, one, single, Wire::Native)[0].out,
            runModel(cfg, 1, batch, one, single, Wire::Fp8E4m3)[0].out);
}

// ---------------------------------------------------------------------------
// Attention-like partials (DESIGN §15): for each (row, head) and source, a
// KV shard of 128..512 tokens, scores s_t = sigma * z_t (z ~ N(0, 1), sigma
// ~ U[0.5, 3] per (row, head): diffuse to peaked heads), half the heads with
// an attention sink (the sequence's first token, in source 0's shard, +
// U[3, 8]); values ~ N(0, 1) per channel, or with 4 outlier channels of 16x
// (real models' V has a few); o_s = softmax-weighted sum of the shard's
// values, lse_s = ln sum_t e^{s_t}, computed in fp64. The fp64 merge of the
// fp64 partials is the true attention output over the whole KV.

enum class Values { Gaussian, Outliers };

struct Problem {
  Config cfg;
  int cp, batch;
  Strides s;
  std::vector<RankTensors> in;       // bf16 partials, fp32 LSEs (base e)
  std::vector<double> truthOut;      // [rank][row][Hl][D], HEAD mode
  std::vector<double> truthLse;      // [rank][row][Hl]
};

Problem attentionProblem(int cp, Values values, uint64_t seed) {
  const int D = 512, Hl = 4, batch = 8, poolTokens = 1024;
  Problem p;
  p.cfg = resolved(D, Hl, ncclBfloat16, ncclDcpLseBaseE);
  p.cp = cp;
  p.batch = batch;
  p.s = packedStrides(p.cfg, cp);
  std::mt19937_64 rng(seed);
  p.in = test::makeInputs(p.cfg, cp, batch, p.s, test::LseMix::Normal, rng);  // shapes; every value replaced
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> unit01;
  // Each source's value vectors: a pool its shards are cut from.
  std::vector<std::vector<double>> pool(cp, std::vector<double>((size_t)poolTokens * D));
  const int outlierChannels[] = {17, 123, 301, 450};
  for (int src = 0; src < cp; src++) {
    for (double& v : pool[src]) v = normal(rng);
    if (values == Values::Outliers)
      for (int t = 0; t < poolTokens; t++)
        for (int c : outlierChannels) pool[src][(size_t)t * D + c] *= 16.0;
  }
  const int H = cp * Hl;
  p.truthOut.assign((size_t)cp * batch * Hl * D, 0.0);
  p.truthLse.assign((size_t)cp * batch * Hl, 0.0);
  std::vector<double> o((size_t)cp * D), lse(cp), score;
  for (int b = 0; b < batch; b++) {
    for (int h = 0; h < H; h++) {
      const double sigma = 0.5 + 2.5 * unit01(rng);
      const bool sink = unit01(rng) < 0.5;
      const double sinkBoost = 3 + 5 * unit01(rng);
      for (int src = 0; src < cp; src++) {
        const int n = 128 + (int)(rng() % 385), start = (int)(rng() % (poolTokens - n + 1));
        score.resize(n);
        double m = -INFINITY;
        for (int t = 0; t < n; t++) {
          score[t] = sigma * normal(rng) + (sink && src == 0 && t == 0 ? sinkBoost : 0.0);
          m = std::max(m, score[t]);
        }
        double sum = 0;
        double* os = &o[(size_t)src * D];
        std::fill(os, os + D, 0.0);
        for (int t = 0; t < n; t++) {
          const double w = std::exp(score[t] - m);
          sum += w;
          const double* v = &pool[src][(size_t)(start + t) * D];
          for (int d = 0; d < D; d++) os[d] += w * v[d];
        }
        for (int d = 0; d < D; d++) os[d] /= sum;
        lse[src] = m + std::log(sum);
        // Rank src's partial of (row b, global head h).
        const int peer = h / Hl, j = h % Hl;
        p.in[src].partialLse[b * p.s.lseRow + peer * p.s.lsePeer + j * p.s.lseHead] = (float)lse[src];
        for (int d = 0; d < D; d++)
          storeElement(ncclBfloat16, p.in[src].partialOut.data(), b * p.s.inRow + peer * p.s.inPeer + j * p.s.inHead + d,
                       (float)os[d]);
      }
      double m = -INFINITY;
      for (int src = 0; src < cp; src++) m = std::max(m, lse[src]);
      double W = 0;
      for (int src = 0; src < cp; src++) W += std::exp(lse[src] - m);
      const size_t unitIdx = ((size_t)(h / Hl) * batch + b) * Hl + h % Hl;
      p.truthLse[unitIdx] = m + std::log(W);
      for (int d = 0; d < D; d++) {
        double acc = 0;
        for (int src = 0; src < cp; src++) acc += std::exp(lse[src] - m) / W * o[(size_t)src * D + d];
        p.truthOut[unitIdx * D + d] = acc;
      }
    }
  }
  return p;
}

struct ErrorStats {
  double maxAbs = 0, sumSq = 0, refSq = 0;
  void add(double got, double want) {
    maxAbs = std::max(maxAbs, std::fabs(got - want));
    sumSq += (got - want) * (got - want);
    refSq += want * want;
  }
  double relRms() const { return std::sqrt(sumSq / refSq); }
};

struct Measured {
  ErrorStats bf16VsTruth, fp8VsTruth, fp8VsBf16, lseFp8VsBf16, lseVsTruth;
  double outRms = 0, outMaxAbs = 0;
  size_t overAnalyticBound = 0;
  std::string firstOver;
};

// The analytic bound of one output element (rank r, row b, head j, d):
// the weighted per-element wire error of every remote source, plus a bf16
// rounding of each of the two outputs and fp32 accumulation slack.
Measured measure(const Problem& p) {
  const Config& cfg = p.cfg;
  const int cp = p.cp, D = cfg.headDim, Hl = cfg.localHeads;
  const std::vector<RankTensors> n = runModel(cfg, cp, p.batch, p.s, p.in, Wire::Native);
  const std::vector<RankTensors> f = runModel(cfg, cp, p.batch, p.s, p.in, Wire::Fp8E4m3);
  const double u = dtypeRoundingUnit(ncclBfloat16);
  Measured m;
  double outSq = 0;
  size_t count = 0;
  std::vector<double> w(cp), scale(cp);
  for (int r = 0; r < cp; r++) {
    for (int b = 0; b < p.batch; b++) {
      for (int j = 0; j < Hl; j++) {
        const size_t unitIdx = ((size_t)r * p.batch + b) * Hl + j;
        const int64_t lseAt = b * p.s.outLseRow + j * p.s.outLseHead;
        m.lseFp8VsBf16.add(f[r].outLse[lseAt], n[r].outLse[lseAt]);
        m.lseVsTruth.add(n[r].outLse[lseAt], p.truthLse[unitIdx]);
        // Normalised weights and the wire scales of the unit's sources.
        double mx = -INFINITY, W = 0;
        auto inAt = [&](int d) { return b * p.s.inRow + r * p.s.inPeer + j * p.s.inHead + d; };
        auto lseOf = [&](int src) { return (double)p.in[src].partialLse[b * p.s.lseRow + r * p.s.lsePeer + j * p.s.lseHead]; };
        for (int src = 0; src < cp; src++) mx = std::max(mx, lseOf(src));
        for (int src = 0; src < cp; src++) W += std::exp(lseOf(src) - mx);
        for (int src = 0; src < cp; src++) {
          w[src] = std::exp(lseOf(src) - mx) / W;
          double amax = 0;
          for (int d = 0; d < D; d++)
            amax = std::max(amax, std::fabs((double)loadElement(ncclBfloat16, p.in[src].partialOut.data(), inAt(d))));
          scale[src] = amax / 448;
        }
        for (int d = 0; d < D; d++) {
          const int64_t i = b * p.s.outRow + j * p.s.outHead + d;
          const double a = loadElement(ncclBfloat16, n[r].out.data(), i);
          const double g = loadElement(ncclBfloat16, f[r].out.data(), i);
          const double t = p.truthOut[unitIdx * D + d];
          m.bf16VsTruth.add(a, t);
          m.fp8VsTruth.add(g, t);
          m.fp8VsBf16.add(g, a);
          outSq += t * t;
          count++;
          m.outMaxAbs = std::max(m.outMaxAbs, std::fabs(t));
          double wire = 0, mag = 0;
          for (int src = 0; src < cp; src++) {
            const double x = loadElement(ncclBfloat16, p.in[src].partialOut.data(), inAt(d));
            mag += w[src] * std::fabs(x);
            if (src != r) wire += w[src] * elementBound(x, scale[src]);
          }
          const double bound = wire * (1 + 1e-3) + u * (std::fabs(a) + std::fabs(g)) + 1e-6 * mag + 1e-30;
          if (std::fabs(g - a) > bound && m.overAnalyticBound++ == 0) {
            char buf[200];
            std::snprintf(buf, sizeof buf, "rank %d row %d head %d d %d: fp8 %.9g bf16 %.9g bound %.3g", r, b, j, d,
                          g, a, bound);
            m.firstOver = buf;
          }
        }
      }
    }
  }
  m.outRms = std::sqrt(outSq / count);
  return m;
}

// The bounds asserted on the measured errors of fp8 against the bf16
// result (DESIGN §15 gives the measurements; these are about 2x the worst
// of them): relative RMS over all of out, and the largest error over the
// largest |out| of the problem (absolute errors scale with the values).
constexpr double kMaxRelRmsFp8VsBf16 = 0.05;   // measured <= 0.026
constexpr double kMaxAbsOverMaxOut = 0.075;     // measured <= 0.037

class Fp8WireError : public ::testing::TestWithParam<std::tuple<int, Values>> {};

TEST_P(Fp8WireError, AttentionPartialsWithinTheDocumentedBound) {
  const int cp = std::get<0>(GetParam());
  const Values values = std::get<1>(GetParam());
  // A fixed seed: DESIGN §15's table is this test's output.
  const Problem p = attentionProblem(cp, values, 28 * 1000 + cp * 10 + (int)values);
  const Measured m = measure(p);
  std::printf(
      "fp8-wire cp %d %-8s |out| rms %.4f max %.3f | out max abs / rel rms: bf16-fp64 %.2e / %.2e  "
      "fp8-fp64 %.2e / %.2e  fp8-bf16 %.2e / %.2e (max/max|out| %.4f) | outLse max abs: fp8-bf16 %.1e  "
      "bf16-fp64 %.1e\n",
      cp, values == Values::Gaussian ? "Gaussian" : "Outliers", m.outRms, m.outMaxAbs, m.bf16VsTruth.maxAbs,
      m.bf16VsTruth.relRms(), m.fp8VsTruth.maxAbs, m.fp8VsTruth.relRms(), m.fp8VsBf16.maxAbs, m.fp8VsBf16.relRms(),
      m.fp8VsBf16.maxAbs / m.outMaxAbs, m.lseFp8VsBf16.maxAbs, m.lseVsTruth.maxAbs);
  EXPECT_EQ(m.overAnalyticBound, 0u) << m.firstOver;
  EXPECT_EQ(m.lseFp8VsBf16.maxAbs, 0.0);
  EXPECT_LE(m.fp8VsBf16.relRms(), kMaxRelRmsFp8VsBf16);
  EXPECT_LE(m.fp8VsBf16.maxAbs, kMaxAbsOverMaxOut * m.outMaxAbs);
  // The wire costs more than bf16 rounding, but stays of its order: an
  // e4m3 element is good to 2^-4, bf16's to 2^-8 (with the merge's
  // averaging, a remote share of the weight and the own share exact).
  EXPECT_GT(m.fp8VsTruth.relRms(), m.bf16VsTruth.relRms());
  EXPECT_LE(m.fp8VsTruth.relRms(), kMaxRelRmsFp8VsBf16 + m.bf16VsTruth.relRms());
}

INSTANTIATE_TEST_SUITE_P(Fp8Wire, Fp8WireError,
                         ::testing::Combine(::testing::Values(2, 4, 8),
                                            ::testing::Values(Values::Gaussian, Values::Outliers)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Values>>& info) {
                           return std::string("cp") + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) == Values::Gaussian ? "Gaussian" : "Outliers");
                         });

// The per-element bound has teeth: on a unit with one huge outlier channel
// every wrong scale breaks it -- none (1: the outlier saturates at 448),
// one too small (the outlier saturates), one too large (the small
// channels round to 0) -- and the encoder's own scale keeps it.
TEST(Fp8WireModel, AWrongScaleBreaksTheElementBound) {
  const int D = 512;
  std::vector<float> x(D), back(D);
  for (int d = 0; d < D; d++) x[d] = 0.05f * std::sin(0.11f * d);
  x[7] = 1e4f;  // one huge outlier channel
  const float right = fp8::encodeUnit(x.data(), D, std::vector<uint8_t>(D).data());
  for (float scale : {1.f, right / 16.f, right * 64.f}) {
    size_t over = 0;
    for (int d = 0; d < D; d++) {
      back[d] = roundTrip(x[d], scale);
      over += std::fabs((double)back[d] - x[d]) > elementBound(x[d], right);
    }
    EXPECT_GT(over, 0u) << "scale " << scale;
  }
  size_t over = 0;
  for (int d = 0; d < D; d++)
    over += std::fabs((double)roundTrip(x[d], right) - x[d]) > elementBound(x[d], right);
  EXPECT_EQ(over, 0u);
}

}  // namespace
}  // namespace nccl_dcp
