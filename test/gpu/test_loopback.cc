/*************************************************************************
 * The fused kernel on one GPU through loopback: cp virtual ranks, one
 * cooperative launch. Every result is compared with the CPU reference on
 * fresh random data, outputs poisoned first, and with the fp64 oracle
 * (test/common/oracle.h: its own formula, base, NaN rule and decoding,
 * none of them merge.h's, which the reference shares with the kernels).
 ************************************************************************/
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "loopback.h"
#include "reference.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

// One rank's tensors on the device.
struct DeviceRank {
  DeviceBuffer partialOut, partialLse, out, outLse;
};

// Inputs for cp virtual ranks, on host and device, and the reference.
class Problem {
 public:
  // lateRank: that rank's partial outputs in host memory (hostResidentBuffer).
  Problem(const Config& cfg, int nRanks, int batch, const Strides& strides, LseMix mix, uint64_t seed,
          bool withOutLse = true, int lateRank = -1)
      : cfg_(cfg), nRanks_(nRanks), batch_(batch), strides_(strides) {
    std::mt19937_64 rng(seed);
    std::vector<RankTensors> inputs = makeInputs(cfg, nRanks, batch, strides, mix, rng);
    if (!withOutLse)
      for (RankTensors& t : inputs) t.outLse.clear();
    for (RankTensors& t : inputs) {
      DeviceRank d;
      const bool late = (int)dev_.size() == lateRank;
      d.partialOut = late ? hostResidentBuffer(t.partialOut.size()) : DeviceBuffer(t.partialOut.size());
      d.partialLse = DeviceBuffer(t.partialLse.size() * sizeof(float));
      d.out = DeviceBuffer(t.out.size());
      d.outLse = DeviceBuffer(t.outLse.size() * sizeof(float));
      dev_.push_back(std::move(d));
    }
    replaceInputs(std::move(inputs));
  }

  // New inputs (same shapes): uploaded, reference recomputed, outputs poisoned.
  void replaceInputs(std::vector<RankTensors> inputs) {
    host_ = std::move(inputs);
    want_ = host_;
    std::vector<CallBuffers> ref;
    for (RankTensors& t : want_) ref.push_back(t.buffers());
    referenceA2aLseReduce(cfg_, nRanks_, batch_, strides_, ref.data());
    for (int r = 0; r < nRanks_; r++) {
      const RankTensors& t = host_[r];
      if (!t.partialOut.empty())
        cudaMemcpy(dev_[r].partialOut.ptr, t.partialOut.data(), t.partialOut.size(), cudaMemcpyHostToDevice);
      if (!t.partialLse.empty())
        cudaMemcpy(dev_[r].partialLse.ptr, t.partialLse.data(), t.partialLse.size() * sizeof(float),
                   cudaMemcpyHostToDevice);
    }
    poison(nullptr);
  }

  // Every output byte 0xff (NaN in every dtype) before a call.
  void poison(cudaStream_t stream) {
    for (DeviceRank& d : dev_) {
      if (d.out.bytes) cudaMemsetAsync(d.out.ptr, 0xff, d.out.bytes, stream);
      if (d.outLse.bytes) cudaMemsetAsync(d.outLse.ptr, 0xff, d.outLse.bytes, stream);
    }
  }

  std::vector<CallBuffers> buffers() const {
    std::vector<CallBuffers> b;
    for (const DeviceRank& d : dev_)
      b.push_back({d.partialOut.ptr, d.partialLse.as<float>(), d.out.ptr, d.outLse.bytes ? d.outLse.as<float>() : nullptr});
    return b;
  }

  std::vector<RankTensors> download() const {
    std::vector<RankTensors> got = host_;
    for (int r = 0; r < nRanks_; r++) {
      if (!got[r].out.empty()) cudaMemcpy(got[r].out.data(), dev_[r].out.ptr, got[r].out.size(), cudaMemcpyDeviceToHost);
      if (!got[r].outLse.empty())
        cudaMemcpy(got[r].outLse.data(), dev_[r].outLse.ptr, got[r].outLse.size() * sizeof(float), cudaMemcpyDeviceToHost);
    }
    return got;
  }

  // Against the CPU reference and the fp64 oracle (which shares no code
  // with the library: a break in merge.h, which the reference includes
  // too, shows there).
  Mismatch check() const {
    const std::vector<RankTensors> got = download();
    return withOracle(compareOutputs(cfg_, nRanks_, batch_, strides_, got, want_),
                      oracleMismatches(oracleProblem(cfg_, nRanks_, batch_, strides_, host_), got));
  }

  // Raw output bytes of every rank (bitwise comparisons).
  std::vector<std::vector<uint8_t>> outputBytes() const {
    std::vector<std::vector<uint8_t>> bytes;
    for (const RankTensors& t : download()) {
      bytes.push_back(t.out);
      const uint8_t* l = (const uint8_t*)t.outLse.data();
      bytes.back().insert(bytes.back().end(), l, l + t.outLse.size() * sizeof(float));
    }
    return bytes;
  }

  const std::vector<RankTensors>& host() const { return host_; }
  const std::vector<RankTensors>& want() const { return want_; }

 private:
  Config cfg_;
  int nRanks_, batch_;
  Strides strides_;
  std::vector<RankTensors> host_, want_;
  std::vector<DeviceRank> dev_;
};

// Runs one call on fresh data and compares with the reference.
void runAndCheck(const ncclDcpConfig_t& c, int nRanks, int batch, LseMix mix = LseMix::Normal,
                 bool withOutLse = true) {
  const uint64_t seed = freshSeed();
  SCOPED_TRACE(testing::Message() << "cp " << nRanks << " Hl " << c.localHeads << " D " << c.headDim << " dtype "
                                  << c.dtype << " base " << c.lseBase << " proto " << c.protocol << " batch "
                                  << batch << " maxBatch " << c.maxBatch << " seed " << seed);
  const Config cfg = resolved(c);
  const Strides strides = packedStrides(cfg, nRanks);
  auto lb = makeLoopback(c, nRanks);
  ASSERT_TRUE(lb);
  Problem p(cfg, nRanks, batch, strides, mix, seed, withOutLse);
  CUDA_ASSERT(cudaDeviceSynchronize());
  DCP_ASSERT(lb->call(p.buffers().data(), batch, nullptr, nullptr));
  CUDA_ASSERT(cudaGetLastError());
  CUDA_ASSERT(cudaDeviceSynchronize());
  DCP_ASSERT(lb->asyncError());
  Mismatch m = p.check();
  EXPECT_EQ(m.count, 0u) << m.first;
}

class LoopbackGpu : public testing::Test {
 protected:
  void SetUp() override { DCP_REQUIRE_GPUS(1); }
};

// ---- the correctness matrix: every transport x dtype x base over shapes
// that cover cp, Hl, D and batch (including ones that fill no whole line).
using MatrixParam = std::tuple<int /*proto*/, ncclDataType_t, int /*base*/>;

class LoopbackMatrix : public testing::TestWithParam<MatrixParam> {
 protected:
  void SetUp() override { DCP_REQUIRE_GPUS(1); }
};

struct Shape {
  int cp, Hl, D, batch;
};

constexpr int kCap = 8;  // maxBatch of the matrix: batch cap+1 and 5*cap chunk

const Shape kShapes[] = {
    {1, 16, 512, 3},    {2, 1, 64, 1},       {2, 64, 128, kCap},  {3, 2, 256, kCap + 1},
    {4, 4, 512, 5 * kCap}, {8, 16, 512, kCap}, {16, 4, 128, 3},    {16, 2, 64, 0},
    {8, 64, 256, 1},    {4, 16, 64, kCap},   {3, 1, 8, 3},        {2, 2, 72, 5},
    {16, 1, 512, 1},    {4, 2, 256, 0},
    // Groups past 16 and 32 ranks (issue 26): receivers fetch their sources
    // in several batches of kSourceBatch, SIMPLE polls flags past one warp
    // of sources.
    {17, 2, 64, 3},     {33, 1, 64, kCap + 1}, {64, 1, 128, 2},
};

TEST_P(LoopbackMatrix, MatchesReference) {
  const auto [proto, dtype, base] = GetParam();
  for (const Shape& s : kShapes) {
    if (dtype == ncclFloat32 && s.D * 4 % 16 != 0) continue;
    runAndCheck(makeConfig(s.D, s.Hl, dtype, base, kCap, proto), s.cp, s.batch);
    if (HasFatalFailure()) return;
  }
}

TEST_P(LoopbackMatrix, SpecialLseValues) {
  const auto [proto, dtype, base] = GetParam();
  runAndCheck(makeConfig(128, 4, dtype, base, kCap, proto), 4, 2 * kCap + 3, LseMix::Special);
  runAndCheck(makeConfig(64, 16, dtype, base, kCap, proto), 8, kCap, LseMix::HugeSpread);
}

std::string matrixName(const testing::TestParamInfo<MatrixParam>& info) {
  const auto [proto, dtype, base] = info.param;
  std::ostringstream o;
  o << protocolName(proto) << "_" << dtypeName(dtype) << "_" << (base == ncclDcpLseBase2 ? "base2" : "baseE");
  return o.str();
}

INSTANTIATE_TEST_SUITE_P(Transports, LoopbackMatrix,
                         testing::Combine(testing::Values(ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple),
                                          testing::Values(ncclBfloat16, ncclFloat16, ncclFloat32),
                                          testing::Values(ncclDcpLseBase2, ncclDcpLseBaseE)),
                         matrixName);

// ---- single behaviours

class LoopbackProto : public testing::TestWithParam<int> {
 protected:
  void SetUp() override { DCP_REQUIRE_GPUS(1); }
};

INSTANTIATE_TEST_SUITE_P(Transports, LoopbackProto,
                         testing::Values(ncclDcpProtoAuto, ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple),
                         [](const testing::TestParamInfo<int>& i) { return std::string(protocolName(i.param)); });

TEST_P(LoopbackProto, LargeHeadCounts) {
  runAndCheck(makeConfig(512, 64, ncclBfloat16, ncclDcpLseBase2, 16, GetParam()), 8, 16);
  runAndCheck(makeConfig(256, 16, ncclFloat16, ncclDcpLseBaseE, 32, GetParam()), 16, 40);
}

TEST_P(LoopbackProto, WithoutOutLse) {
  runAndCheck(makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, kCap, GetParam()), 4, 5, LseMix::Special, false);
}

// Batch 0 enqueues nothing: the poisoned outputs stay poisoned.
TEST_P(LoopbackProto, BatchZeroIsNoOp) {
  const ncclDcpConfig_t c = makeConfig(64, 2, ncclBfloat16, ncclDcpLseBase2, kCap, GetParam());
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, 2);
  ASSERT_TRUE(lb);
  Problem p(cfg, 2, 3, packedStrides(cfg, 2), LseMix::Normal, freshSeed());
  DCP_ASSERT(lb->call(p.buffers().data(), 0, nullptr, nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  uint32_t round = 1;
  DCP_ASSERT(lb->getRound(0, &round));
  EXPECT_EQ(round, 0u);
  for (const auto& bytes : p.outputBytes())
    for (uint8_t b : bytes) ASSERT_EQ(b, 0xff);
}

// Strided views (the transposed [B][Hl][cp][D] input, padded outputs) give
// bitwise the packed results for the same logical data, in every dtype and
// base, over a chunked batch; the padding of the strided outputs stays
// poisoned.
TEST_P(LoopbackProto, StridedEqualsPackedBitwise) {
  const int cp = 4, B = kCap + 3, Hl = 4, D = 128;
  for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16, ncclFloat32}) {
    for (int base : {ncclDcpLseBase2, ncclDcpLseBaseE}) {
      SCOPED_TRACE(testing::Message() << dtypeName(dtype) << " base " << (base == ncclDcpLseBase2 ? "2" : "e"));
      const ncclDcpConfig_t c = makeConfig(D, Hl, dtype, base, kCap, GetParam());
      const Config cfg = resolved(c);
      const int e = cfg.eltSize;
      const Strides packed = packedStrides(cfg, cp), strided = paddedStrides(cfg, cp);
      const ncclDcpStrides_t api = apiStrides(strided);
      Problem a(cfg, cp, B, packed, LseMix::Special, freshSeed());
      // The strided problem carries the same logical values.
      Problem b(cfg, cp, B, strided, LseMix::Normal, freshSeed());
      std::vector<RankTensors> same = b.host();
      for (int r = 0; r < cp; r++)
        for (int row = 0; row < B; row++)
          for (int p = 0; p < cp; p++)
            for (int j = 0; j < Hl; j++) {
              same[r].partialLse[row * strided.lseRow + p * strided.lsePeer + j * strided.lseHead] =
                  a.host()[r].partialLse[row * packed.lseRow + p * packed.lsePeer + j * packed.lseHead];
              memcpy(&same[r].partialOut[(row * strided.inRow + p * strided.inPeer + j * strided.inHead) * e],
                     &a.host()[r].partialOut[(row * packed.inRow + p * packed.inPeer + j * packed.inHead) * e],
                     (size_t)D * e);
            }
      b.replaceInputs(std::move(same));
      auto lb = makeLoopback(c, cp);
      ASSERT_TRUE(lb);
      DCP_ASSERT(lb->call(a.buffers().data(), B, nullptr, nullptr));
      DCP_ASSERT(lb->call(b.buffers().data(), B, &api, nullptr));
      CUDA_ASSERT(cudaDeviceSynchronize());
      Mismatch m = a.check();
      EXPECT_EQ(m.count, 0u) << m.first;
      m = b.check();
      EXPECT_EQ(m.count, 0u) << m.first;
      const auto ga = a.download(), gb = b.download();
      size_t differ = 0;
      for (int r = 0; r < cp; r++) {
        for (int row = 0; row < B; row++)
          for (int j = 0; j < Hl; j++) {
            differ += memcmp(&ga[r].out[(row * packed.outRow + j * packed.outHead) * e],
                             &gb[r].out[(row * strided.outRow + j * strided.outHead) * e], (size_t)D * e) != 0;
            differ += memcmp(&ga[r].outLse[row * packed.outLseRow + j * packed.outLseHead],
                             &gb[r].outLse[row * strided.outLseRow + j * strided.outLseHead], 4) != 0;
          }
        std::string first;
        EXPECT_EQ(touchedPadding(cfg, B, strided, gb[r], &first), 0u) << "rank " << r << ": " << first;
      }
      EXPECT_EQ(differ, 0u);
    }
  }
}

// Same inputs, same bits: run after run on one loopback (13 rows at
// capacity 5: rounds of 5, 5 and 3), and across chunkings: loopbacks of
// capacity 13 (the batch in one round) and 4 (four rounds) give the same
// bits, since every row is merged alone, its sources in a fixed order.
TEST_P(LoopbackProto, BitwiseDeterministic) {
  const int cp = 8, B = 13;
  const ncclDcpConfig_t c = makeConfig(512, 8, ncclBfloat16, ncclDcpLseBase2, 5, GetParam());
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  Problem p(cfg, cp, B, packedStrides(cfg, cp), LseMix::Special, freshSeed());
  DCP_ASSERT(lb->call(p.buffers().data(), B, nullptr, nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  const auto first = p.outputBytes();
  EXPECT_EQ(p.check().count, 0u);
  for (int i = 0; i < 3; i++) {
    p.poison(nullptr);
    DCP_ASSERT(lb->call(p.buffers().data(), B, nullptr, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_EQ(p.outputBytes(), first) << "run " << i;
  }
  DCP_ASSERT(lb->asyncError());
  for (int capacity : {B, 4}) {
    SCOPED_TRACE(testing::Message() << "maxBatch " << capacity << " against maxBatch 5");
    auto other = makeLoopback(makeConfig(512, 8, ncclBfloat16, ncclDcpLseBase2, capacity, GetParam()), cp);
    ASSERT_TRUE(other);
    p.poison(nullptr);
    DCP_ASSERT(other->call(p.buffers().data(), B, nullptr, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    DCP_ASSERT(other->asyncError());
    EXPECT_EQ(p.outputBytes(), first);
  }
}

// What differs between a call's outputs and the validated full-batch
// outputs `golden` (packed): rows below the call's batch must be bitwise
// equal (rows are independent), rows past it still poisoned. "" if nothing.
std::string rowsDiffer(const Config& cfg, int batch, const std::vector<RankTensors>& golden,
                       const std::vector<RankTensors>& got) {
  const size_t rowBytes = (size_t)cfg.localHeads * cfg.headDim * cfg.eltSize;
  const Strides packed = packedStrides(cfg, (int)got.size());
  for (size_t r = 0; r < got.size(); r++) {
    if (memcmp(got[r].out.data(), golden[r].out.data(), batch * rowBytes) != 0)
      return "rank " + std::to_string(r) + ": out differs below the batch";
    if (memcmp(got[r].outLse.data(), golden[r].outLse.data(), (size_t)batch * cfg.localHeads * sizeof(float)) != 0)
      return "rank " + std::to_string(r) + ": outLse differs below the batch";
    std::string first;
    if (touchedPadding(cfg, batch, packed, got[r], &first) != 0) return "rank " + std::to_string(r) + ": " + first;
  }
  return "";
}

// Many consecutive calls with random batches (chunked ones too), 8 of them
// at a time with no host sync between them: slots, flags and the round
// counter stay consistent. Each of the 8 sets has inputs of its own (its
// own seed) and its own golden result, so consecutive calls carry
// different data: a receiver that read a slot before its sender wrote it
// would find another call's data there, not the right answer. Every call
// is checked whole (rowsDiffer), out and outLse.
TEST_P(LoopbackProto, TenThousandRandomBatches) {
  const int cp = 4, maxRows = 20, calls = 10000, inFlight = 8;
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, kCap, GetParam());
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  // inFlight sets, each with its inputs and its full-batch result checked
  // against the reference.
  std::vector<std::unique_ptr<Problem>> sets;
  std::vector<std::vector<RankTensors>> golden;
  for (int k = 0; k < inFlight; k++) {
    sets.emplace_back(new Problem(cfg, cp, maxRows, packedStrides(cfg, cp), LseMix::Special, freshSeed()));
    DCP_ASSERT(lb->call(sets[k]->buffers().data(), maxRows, nullptr, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    const Mismatch m = sets[k]->check();
    ASSERT_EQ(m.count, 0u) << "set " << k << ": " << m.first;
    golden.push_back(sets[k]->download());
  }
  std::mt19937 rng(freshSeed());
  uint64_t rounds = inFlight * ((maxRows + kCap - 1) / kCap);
  for (int i = 0; i < calls; i += inFlight) {
    int batch[inFlight];
    for (int k = 0; k < inFlight; k++) {
      batch[k] = rng() % (maxRows + 1);
      sets[k]->poison(nullptr);
      DCP_ASSERT(lb->call(sets[k]->buffers().data(), batch[k], nullptr, nullptr));
      rounds += (batch[k] + kCap - 1) / kCap;
    }
    CUDA_ASSERT(cudaDeviceSynchronize());
    for (int k = 0; k < inFlight; k++) {
      const std::string d = rowsDiffer(cfg, batch[k], golden[k], sets[k]->download());
      ASSERT_EQ(d, "") << "call " << i + k << " (set " << k << ") batch " << batch[k];
    }
  }
  DCP_ASSERT(lb->asyncError());
  uint32_t round = 0;
  DCP_ASSERT(lb->getRound(cp - 1, &round));
  EXPECT_EQ(round, (uint32_t)rounds);
}

// A late peer on one GPU: the last rank's partials live in host memory, so
// its sends trail every other rank's and the receivers find its lines and
// chunks not yet flagged: what a skipped flag wait (flag_wait_skipped_*)
// gets wrong. Bursts of calls over two sets, back to back; each set's last
// outputs against its golden call, and the round counter against the
// rounds launched.
TEST_P(LoopbackProto, LateRankFromHostMemory) {
  const int cp = 8, batch = 2 * kCap + 3, bursts = 20, callsPerBurst = 16;
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, kCap, GetParam());
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  Problem sets[2] = {
      Problem(cfg, cp, batch, packedStrides(cfg, cp), LseMix::Normal, freshSeed(), true, cp - 1),
      Problem(cfg, cp, batch, packedStrides(cfg, cp), LseMix::Normal, freshSeed(), true, cp - 1)};
  std::vector<std::vector<RankTensors>> golden;
  uint64_t rounds = 0;
  for (Problem& p : sets) {
    ASSERT_NE(p.buffers()[cp - 1].partialOut, nullptr) << "host-resident managed memory";
    DCP_ASSERT(lb->call(p.buffers().data(), batch, nullptr, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    const Mismatch m = p.check();
    ASSERT_EQ(m.count, 0u) << m.first;
    golden.push_back(p.download());
    rounds += (batch + kCap - 1) / kCap;
  }
  for (int b = 0; b < bursts; b++) {
    for (Problem& p : sets) p.poison(nullptr);
    for (int i = 0; i < callsPerBurst; i++) {
      DCP_ASSERT(lb->call(sets[i % 2].buffers().data(), batch, nullptr, nullptr));
      rounds += (batch + kCap - 1) / kCap;
    }
    CUDA_ASSERT(cudaDeviceSynchronize());
    DCP_ASSERT(lb->asyncError());
    for (int k = 0; k < 2; k++)
      ASSERT_EQ(rowsDiffer(cfg, batch, golden[k], sets[k].download()), "") << "burst " << b << ", set " << k;
  }
  uint32_t round = 0;
  DCP_ASSERT(lb->getRound(cp - 1, &round));
  EXPECT_EQ(round, (uint32_t)rounds);
}

// The 32-bit round counter wraps: start at 2^32 - 3, then 6 calls.
TEST_P(LoopbackProto, RoundCounterWraps) {
  const int cp = 3;
  const ncclDcpConfig_t c = makeConfig(256, 2, ncclFloat16, ncclDcpLseBaseE, kCap, GetParam());
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  DCP_ASSERT(lb->setRound(0xfffffffdu));
  for (int i = 0; i < 6; i++) {
    Problem p(cfg, cp, 1 + i, packedStrides(cfg, cp), LseMix::Normal, freshSeed());
    DCP_ASSERT(lb->call(p.buffers().data(), 1 + i, nullptr, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    Mismatch m = p.check();
    EXPECT_EQ(m.count, 0u) << "call " << i << ": " << m.first;
  }
  uint32_t round = 0;
  DCP_ASSERT(lb->getRound(0, &round));
  EXPECT_EQ(round, 3u);
}

// 16 calls captured in a graph, replayed 50 times, eager calls between the
// replays: replays advance the device-side round like eager calls do.
TEST_P(LoopbackProto, GraphReplaysInterleavedWithEagerCalls) {
  const int cp = 4, nCaptured = 16, replays = 50;
  const ncclDcpConfig_t c = makeConfig(512, 2, ncclBfloat16, ncclDcpLseBase2, kCap, GetParam());
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  std::vector<std::unique_ptr<Problem>> captured;
  for (int i = 0; i < nCaptured; i++)
    captured.emplace_back(new Problem(cfg, cp, 1 + i % 11, packedStrides(cfg, cp), LseMix::Special, freshSeed()));
  Problem eager(cfg, cp, 9, packedStrides(cfg, cp), LseMix::Normal, freshSeed());

  cudaStream_t stream;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < nCaptured; i++) {
    ncclResult_t r = lb->call(captured[i]->buffers().data(), 1 + i % 11, nullptr, stream);
    if (r != ncclSuccess) {
      cudaStreamEndCapture(stream, &graph);
      FAIL() << ncclDcpGetLastError();
    }
  }
  CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < replays; rep++) {
    for (auto& p : captured) p->poison(stream);
    CUDA_ASSERT(cudaGraphLaunch(exec, stream));
    eager.poison(stream);
    DCP_ASSERT(lb->call(eager.buffers().data(), 9, nullptr, stream));
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    for (int i = 0; i < nCaptured; i++) {
      Mismatch m = captured[i]->check();
      ASSERT_EQ(m.count, 0u) << "replay " << rep << " call " << i << ": " << m.first;
    }
    Mismatch m = eager.check();
    ASSERT_EQ(m.count, 0u) << "eager after replay " << rep << ": " << m.first;
  }
  DCP_ASSERT(lb->asyncError());
  uint32_t round = 0;
  DCP_ASSERT(lb->getRound(0, &round));
  uint32_t roundsPerReplay = (9 + kCap - 1) / kCap;
  for (int i = 0; i < nCaptured; i++) roundsPerReplay += (1 + i % 11 + kCap - 1) / kCap;
  EXPECT_EQ(round, replays * roundsPerReplay);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// cp 4 virtual ranks (Hl 4, D 128, bf16) of `proto` with a 200 ms bound on
// every wait, virtual rank 2 silent (it never takes part); NULL when the
// loopback cannot be made (the test has failed).
constexpr int kSilentCp = 4;
std::unique_ptr<Loopback> loopbackWithASilentRank(int proto, Config* cfg) {
  ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, kCap, proto);
  c.timeoutMs = 200;
  *cfg = resolved(c);
  auto lb = makeLoopback(c, kSilentCp);
  if (lb) lb->setSilentRank(2);
  return lb;
}

// A virtual rank that never takes part: the others give up after the
// timeout, record the error, and the process lives on.
TEST_P(LoopbackProto, SilentRankTimesOut) {
  Config cfg;
  auto lb = loopbackWithASilentRank(GetParam(), &cfg);
  ASSERT_TRUE(lb);
  Problem p(cfg, kSilentCp, 5, packedStrides(cfg, kSilentCp), LseMix::Normal, freshSeed());
  const auto t0 = std::chrono::steady_clock::now();
  DCP_ASSERT(lb->call(p.buffers().data(), 5, nullptr, nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(lb->asyncError(), ncclRemoteError);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("timed out"), std::string::npos) << ncclDcpGetLastError();
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("waiting for rank 2"), std::string::npos) << ncclDcpGetLastError();
  // Poisoned: later calls are refused before anything is enqueued.
  EXPECT_EQ(lb->call(p.buffers().data(), 5, nullptr, nullptr), ncclRemoteError);
  CUDA_ASSERT(cudaGetLastError());
}

// A poisoned context WARNs once: a watchdog polling the async error and
// every later call get the message, not another line in the log.
TEST(LoopbackPoison, WarnsOnce) {
  DCP_REQUIRE_GPUS(1);
  Config cfg;
  auto lb = loopbackWithASilentRank(ncclDcpProtoLL, &cfg);
  ASSERT_TRUE(lb);
  Problem p(cfg, kSilentCp, 5, packedStrides(cfg, kSilentCp), LseMix::Normal, freshSeed());
  DCP_ASSERT(lb->call(p.buffers().data(), 5, nullptr, nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  // The log goes to stdout at the default level (WARN): catch it in a file.
  FILE* caught = tmpfile();
  ASSERT_NE(caught, nullptr);
  fflush(stdout);
  const int saved = dup(STDOUT_FILENO);
  ASSERT_GE(dup2(fileno(caught), STDOUT_FILENO), 0);
  for (int i = 0; i < 5; i++) EXPECT_EQ(lb->asyncError(), ncclRemoteError);
  for (int i = 0; i < 2; i++) EXPECT_EQ(lb->call(p.buffers().data(), 5, nullptr, nullptr), ncclRemoteError);
  CUDA_ASSERT(cudaDeviceSynchronize());
  const std::string message = ncclDcpGetLastError();
  fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  rewind(caught);
  int warned = 0;
  for (char line[2048]; fgets(line, sizeof(line), caught);)
    warned += strstr(line, "context is poisoned") != nullptr && strstr(line, " WARN ") != nullptr;
  fclose(caught);
  EXPECT_EQ(warned, 1) << "WARN lines about the poisoned context while it was polled 5 times and called twice";
  EXPECT_NE(message.find("timed out"), std::string::npos) << message;
}

// Programmatic dependent launch off gives the same bits as on, over calls
// of several rounds each enqueued back to back (with PDL a round's launch
// overlaps the tail of the one before it), every one matching the reference.
TEST_P(LoopbackProto, PdlOnOffBitwiseEqual) {
  const int cp = 8;
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, kCap, GetParam());
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  const int batches[] = {4 * kCap + 1, kCap, 2 * kCap + 3};  // 5, 1 and 3 rounds
  std::vector<std::unique_ptr<Problem>> problems;
  for (int batch : batches)
    problems.emplace_back(new Problem(cfg, cp, batch, packedStrides(cfg, cp), LseMix::Special, freshSeed()));
  auto runAll = [&](bool pdl) {
    lb->engine().pdl = pdl;
    for (auto& p : problems) p->poison(nullptr);
    for (size_t i = 0; i < problems.size(); i++)
      EXPECT_EQ(lb->call(problems[i]->buffers().data(), batches[i], nullptr, nullptr), ncclSuccess)
          << ncclDcpGetLastError();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<std::vector<std::vector<uint8_t>>> bytes;
    for (size_t i = 0; i < problems.size(); i++) {
      const Mismatch m = problems[i]->check();
      EXPECT_EQ(m.count, 0u) << "PDL " << (pdl ? "on" : "off") << ", call " << i << ": " << m.first;
      bytes.push_back(problems[i]->outputBytes());
    }
    return bytes;
  };
  const auto on = runAll(true);
  const auto off = runAll(false);
  EXPECT_EQ(on, off);
  DCP_ASSERT(lb->asyncError());
}

// timeoutMs = 0 waits as long as it takes, whatever the default bound.
// With the default made short (NCCL_DCP_TIMEOUT_MS = 500 through the
// environment override): receivers whose peer (a silent virtual rank)
// never comes are still waiting, no error recorded, after 4 times that
// bound; abort then stops them. The control: timeoutMs unset under the same
// environment gives up within it. So a build that reads 0 as "the default"
// (the environment's, or a built-in one shorter than the wait) fails. And
// calls whose peers do come complete, correct, with no error.
TEST_P(LoopbackProto, TimeoutZeroWaitsForever) {
  constexpr int kEnvTimeoutMs = 500, kWaitMs = 4 * kEnvTimeoutMs, kDrainMs = 10000, cp = 4;
  Env e;
  e.timeoutMs = kEnvTimeoutMs;
  ScopedEnv scoped(e);
  cudaStream_t stream;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (bool forever : {false, true}) {
    SCOPED_TRACE(forever ? "timeoutMs 0" : "timeoutMs unset: NCCL_DCP_TIMEOUT_MS applies");
    ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, kCap, GetParam());
    if (forever) c.timeoutMs = 0;  // else unset (NCCL_DCP_CONFIG_INITIALIZER)
    auto lb = makeLoopback(c, cp);
    ASSERT_TRUE(lb);
    EXPECT_EQ(lb->config().timeoutMs, forever ? 0 : kEnvTimeoutMs);
    Problem p(lb->config(), cp, 5, packedStrides(lb->config(), cp), LseMix::Normal, freshSeed());
    CUDA_ASSERT(cudaDeviceSynchronize());  // the inputs are in place
    lb->setSilentRank(2);
    DCP_ASSERT(lb->call(p.buffers().data(), 5, nullptr, stream));
    const auto t0 = std::chrono::steady_clock::now();
    while (cudaStreamQuery(stream) == cudaErrorNotReady && secondsSince(t0) * 1000 < kWaitMs)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const double waited = secondsSince(t0);
    const bool stillWaiting = cudaStreamQuery(stream) == cudaErrorNotReady;
    const ncclResult_t error = lb->asyncError();
    // Whatever happened, the waits end here: a kernel left waiting forever
    // would hang the process.
    EXPECT_EQ(lb->abort(kDrainMs), ncclSuccess) << ncclDcpGetLastError();
    if (forever) {
      EXPECT_TRUE(stillWaiting) << "timeoutMs = 0 gave up after " << waited << " s";
      EXPECT_EQ(error, ncclSuccess) << "timeoutMs = 0 recorded an error";
    } else {
      EXPECT_FALSE(stillWaiting) << "NCCL_DCP_TIMEOUT_MS = " << kEnvTimeoutMs << " did not bound the wait: the "
                                 << "test shows nothing";
      EXPECT_EQ(error, ncclRemoteError);
    }
    CUDA_ASSERT(cudaGetLastError());
  }
  cudaStreamDestroy(stream);
  ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 64, GetParam());
  c.timeoutMs = 0;
  runAndCheck(c, 8, 64);
  runAndCheck(c, 16, 3, LseMix::Special);
}

// Heads longer than 512 elements and more than 64 local heads, up to
// NCCL_DCP_MAX_HEAD_DIM and NCCL_DCP_MAX_LOCAL_HEADS.
TEST_P(LoopbackProto, HeadDimsAbove512AndHeadCountsAbove64) {
  const int P = GetParam();
  runAndCheck(makeConfig(1024, 4, ncclBfloat16, ncclDcpLseBase2, kCap, P), 4, kCap + 3);
  runAndCheck(makeConfig(NCCL_DCP_MAX_HEAD_DIM, 1, ncclBfloat16, ncclDcpLseBaseE, kCap, P), 3, 5);
  runAndCheck(makeConfig(1028, 2, ncclFloat32, ncclDcpLseBase2, kCap, P), 2, 3, LseMix::Special);
  runAndCheck(makeConfig(64, 128, ncclFloat16, ncclDcpLseBase2, kCap, P), 4, kCap + 1);
  runAndCheck(makeConfig(8, NCCL_DCP_MAX_LOCAL_HEADS, ncclBfloat16, ncclDcpLseBaseE, 4, P), 2, 5);
}

// Calls of these batches, one after another at capacity kCap, each
// checked against the reference; the round counter counts every round.
void runMixedBatches(Loopback& lb, const Config& cfg, int cp, std::initializer_list<int> batches) {
  uint32_t rounds = 0;
  for (int batch : batches) {
    SCOPED_TRACE(testing::Message() << "batch " << batch);
    Problem p(cfg, cp, batch, packedStrides(cfg, cp), LseMix::Special, freshSeed());
    DCP_ASSERT(lb.call(p.buffers().data(), batch, nullptr, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    const Mismatch m = p.check();
    EXPECT_EQ(m.count, 0u) << m.first;
    rounds += (batch + kCap - 1) / kCap;
  }
  DCP_ASSERT(lb.asyncError());
  uint32_t round = 0;
  DCP_ASSERT(lb.getRound(0, &round));
  EXPECT_EQ(round, rounds);
}

// AUTO at the reference shape (Hl 16, D 512, bf16, cp 8): the workspace
// carries LL's and SIMPLE's regions beside LL128's, and each round picks
// its tier by its rows (protocol.h: LL up to 2 rows, SIMPLE from 8; a call
// of 19 rows at capacity 8 runs SIMPLE, SIMPLE, LL128, one of 17 SIMPLE,
// SIMPLE, LL). Calls mixing the three, in every order, match the reference.
TEST_F(LoopbackGpu, AutoRunsEachRoundInItsTier) {
  const int cp = 8;
  const ncclDcpConfig_t c = makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, kCap, ncclDcpProtoAuto);
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  const Engine& e = lb->engine();
  EXPECT_EQ(e.policy.llMaxRows, 2);
  EXPECT_EQ(e.policy.simpleMinRows, kOneGpuSimpleMinRows);
  ASSERT_TRUE(e.layout.hasTiny && e.layout.hasLarge);
  EXPECT_EQ(e.layout.tiny.proto, Proto::LL);
  EXPECT_EQ(e.layout.tiny.capacity, 2);
  const RoundTier tiers[] = {kTierTiny, kTierTiny, kTierTiny, kTierSmall, kTierSmall, kTierSmall,
                             kTierSmall, kTierSmall, kTierLarge};  // rows 0..8
  const Proto protos[] = {Proto::LL, Proto::LL, Proto::LL, e.policy.small, e.policy.small, e.policy.small,
                          e.policy.small, e.policy.small, Proto::Simple};
  for (int rows = 1; rows <= kCap; rows++) {
    EXPECT_EQ(e.tierOfRound(rows), tiers[rows]) << rows << " rows";
    EXPECT_EQ(e.protocolOfRound(rows), protos[rows]) << rows << " rows";
  }
  EXPECT_NE(e.policy.small, Proto::LL);  // else the LL rows above would not tell the tiers apart
  runMixedBatches(*lb, cfg, cp, {19, 1, 3, 8, 17, 2, 5, 40, 9, 7});
}

// AUTO with NCCL_DCP_SIMPLE_MIN_ROWS: the workspace carries a SIMPLE region
// beside the LL128 one and each round picks its protocol by its rows (a
// call of 19 rows at capacity 8 runs SIMPLE, SIMPLE, LL: one GPU's LL tier
// stays below the variable's rows). Calls mixing them, in every order,
// match the reference.
TEST_F(LoopbackGpu, AutoSwitchesLargeRoundsToSimple) {
  Env e;
  e.simpleMinRows = 5;
  ScopedEnv scoped(e);
  const int cp = 4;
  const ncclDcpConfig_t c = makeConfig(256, 4, ncclBfloat16, ncclDcpLseBase2, kCap, ncclDcpProtoAuto);
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, cp);
  ASSERT_TRUE(lb);
  ASSERT_TRUE(lb->engine().policy.simpleForLarge);
  EXPECT_EQ(lb->engine().policy.simpleMinRows, 5);
  EXPECT_EQ(lb->engine().policy.small, Proto::LL128);
  EXPECT_EQ(lb->engine().policy.llMaxRows, 4) << "LL's 32 rows at this shape, below SIMPLE's 5";
  EXPECT_TRUE(lb->engine().layout.hasLarge);
  runMixedBatches(*lb, cfg, cp, {19, 3, 8, 4, 5, 13, 1, 40, 2, 12});
}

TEST_F(LoopbackGpu, BadArgumentsLaunchNothing) {
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, kCap);
  const Config cfg = resolved(c);
  auto lb = makeLoopback(c, 2);
  ASSERT_TRUE(lb);
  Problem p(cfg, 2, 3, packedStrides(cfg, 2), LseMix::Normal, freshSeed());
  auto bufs = p.buffers();
  bufs[1].out = const_cast<void*>(bufs[1].partialOut);  // rank 1's output overlaps its input
  EXPECT_EQ(lb->call(bufs.data(), 3, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("out overlaps partialOut"), std::string::npos);
  CUDA_ASSERT(cudaDeviceSynchronize());
  uint32_t round = 7;
  DCP_ASSERT(lb->getRound(0, &round));
  EXPECT_EQ(round, 0u);  // rank 0 was fine, but nothing ran for it either
}

// ---- issue 26, coverage: views over 2 GiB, NCCL_DCP_SIMPLE_SEND_WARPS.

// A view over 2 GiB: rows of partialOut and of out 2^30 elements (2 GiB of
// bf16) apart, so row 1 starts 2 GiB and row 2 4 GiB into each view: an
// offset computed in 32 bits anywhere (the host's per-round pointers --
// maxBatch 2: the second round starts at row 2 --, the kernels' row *
// stride) lands elsewhere. Every protocol, compared with the reference
// computed on packed copies of the same values. 16 GiB of device memory.
TEST_F(LoopbackGpu, ViewsOver2GiB) {
  const int cp = 2, Hl = 2, D = 128, B = 3, cap = 2;
  const int64_t rowStride = int64_t(1) << 30;  // elements
  const ncclDcpConfig_t probe = makeConfig(D, Hl, ncclBfloat16, ncclDcpLseBase2, cap);
  const Config probeCfg = resolved(probe);
  const Strides packed = packedStrides(probeCfg, cp);
  const int e = probeCfg.eltSize;
  const size_t inBytes = (size_t)((B - 1) * rowStride + packed.inRow) * e;
  const size_t outBytes = (size_t)((B - 1) * rowStride + packed.outRow) * e;
  ASSERT_GT(inBytes, size_t(1) << 32);  // the view spans more than 2^31 (and 2^32) bytes
  size_t freeBytes = 0, totalBytes = 0;
  CUDA_ASSERT(cudaMemGetInfo(&freeBytes, &totalBytes));
  if (freeBytes < cp * (inBytes + outBytes) + (size_t(1) << 30))
    GTEST_SKIP() << "needs " << (cp * (inBytes + outBytes) >> 30) << " GiB of free device memory, "
                 << (freeBytes >> 30) << " GiB free";
  std::vector<DeviceBuffer> in, out, lse, outLse;
  for (int r = 0; r < cp; r++) {
    in.emplace_back(inBytes);
    out.emplace_back(outBytes);
    lse.emplace_back((size_t)B * packed.lseRow * sizeof(float));
    outLse.emplace_back((size_t)B * packed.outLseRow * sizeof(float));
    ASSERT_TRUE(in.back().ptr && out.back().ptr && lse.back().ptr && outLse.back().ptr) << "cudaMalloc";
  }
  Strides big = packed;
  big.inRow = rowStride;
  big.outRow = rowStride;
  const ncclDcpStrides_t api = apiStrides(big);
  for (int proto : {ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple}) {
    SCOPED_TRACE(protocolName(proto));
    const ncclDcpConfig_t c = makeConfig(D, Hl, ncclBfloat16, ncclDcpLseBase2, cap, proto);
    const Config cfg = resolved(c);
    std::mt19937_64 rng(freshSeed());
    std::vector<RankTensors> host = makeInputs(cfg, cp, B, packed, LseMix::Special, rng), want = host;
    std::vector<CallBuffers> ref;
    for (RankTensors& t : want) ref.push_back(t.buffers());
    referenceA2aLseReduce(cfg, cp, B, packed, ref.data());
    std::vector<CallBuffers> bufs;
    for (int r = 0; r < cp; r++) {
      for (int b = 0; b < B; b++) {
        CUDA_ASSERT(cudaMemcpy((char*)in[r].ptr + b * rowStride * e, host[r].partialOut.data() + b * packed.inRow * e,
                               (size_t)packed.inRow * e, cudaMemcpyHostToDevice));
        CUDA_ASSERT(cudaMemset((char*)out[r].ptr + b * rowStride * e, 0xff, (size_t)packed.outRow * e));
      }
      CUDA_ASSERT(cudaMemcpy(lse[r].ptr, host[r].partialLse.data(), lse[r].bytes, cudaMemcpyHostToDevice));
      CUDA_ASSERT(cudaMemset(outLse[r].ptr, 0xff, outLse[r].bytes));
      bufs.push_back({in[r].ptr, lse[r].as<float>(), out[r].ptr, outLse[r].as<float>()});
    }
    auto lb = makeLoopback(c, cp);
    ASSERT_TRUE(lb);
    DCP_ASSERT(lb->call(bufs.data(), B, &api, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    DCP_ASSERT(lb->asyncError());
    std::vector<RankTensors> got = host;
    for (int r = 0; r < cp; r++) {
      for (int b = 0; b < B; b++)
        CUDA_ASSERT(cudaMemcpy(got[r].out.data() + b * packed.outRow * e, (const char*)out[r].ptr + b * rowStride * e,
                               (size_t)packed.outRow * e, cudaMemcpyDeviceToHost));
      CUDA_ASSERT(cudaMemcpy(got[r].outLse.data(), outLse[r].ptr, outLse[r].bytes, cudaMemcpyDeviceToHost));
    }
    const Mismatch m = withOracle(compareOutputs(cfg, cp, B, packed, got, want),
                                  oracleMismatches(oracleProblem(cfg, cp, B, packed, host), got));
    EXPECT_EQ(m.count, 0u) << m.first;
  }
}

// NCCL_DCP_SIMPLE_SEND_WARPS reaches the engine at create (unset: 0,
// every sending warp but the signalling one), and every writer count gives
// the reference's result, the same bits each time (the writers split the
// sends, never the merge). That the launch takes the engine's count
// (makeFusedArgs, fused_path.cc) is not observable in the outputs, which
// are the point: this test does not show it.
TEST_F(LoopbackGpu, SimpleSendWarpsFromTheEnvironmentReachTheEngine) {
  const int cp = 4, B = 2 * kCap + 3;
  const ncclDcpConfig_t c = makeConfig(256, 4, ncclBfloat16, ncclDcpLseBase2, kCap, ncclDcpProtoSimple);
  const Config cfg = resolved(c);
  Problem p(cfg, cp, B, packedStrides(cfg, cp), LseMix::Special, freshSeed());
  std::vector<std::vector<uint8_t>> first;
  for (int warps : {0 /* unset */, 1, 4, 7}) {
    SCOPED_TRACE(testing::Message() << "NCCL_DCP_SIMPLE_SEND_WARPS " << (warps ? std::to_string(warps) : "unset"));
    Env e;
    if (warps) e.simpleSendWarps = warps;
    std::unique_ptr<Loopback> lb;
    {
      ScopedEnv scoped(e);
      lb = makeLoopback(c, cp);
    }
    ASSERT_TRUE(lb);
    EXPECT_EQ(lb->engine().simpleSendWarps, warps);
    p.poison(nullptr);
    DCP_ASSERT(lb->call(p.buffers().data(), B, nullptr, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    DCP_ASSERT(lb->asyncError());
    const Mismatch m = p.check();
    EXPECT_EQ(m.count, 0u) << m.first;
    const std::vector<std::vector<uint8_t>> bytes = p.outputBytes();
    if (first.empty()) first = bytes;
    EXPECT_TRUE(bytes == first) << "the outputs' bits depend on the writer count";
  }
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
