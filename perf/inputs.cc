#include "inputs.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "checks.h"
#include "reference.h"

namespace nccl_dcp {
namespace perf {

namespace {

constexpr size_t kBlockElems = size_t(1) << 22;

// One random block of values in [-1, 1] (never all zero), in dtype.
std::vector<uint8_t> randomBlock(const Config& cfg) {
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> v(-1.f, 1.f);
  std::vector<uint8_t> block(kBlockElems * cfg.eltSize);
  for (size_t i = 0; i < kBlockElems; i++) storeElement(cfg.dtype, block.data(), i, v(rng));
  return block;
}

// The block tiled over `out`, starting at a rank-dependent offset so that
// no two ranks send the same data.
void tile(const std::vector<uint8_t>& block, int rank, size_t eltSize, std::vector<uint8_t>* out) {
  const size_t blockBytes = block.size(), shift = (size_t)rank * 4096 * eltSize % blockBytes;
  for (size_t off = 0; off < out->size(); off += blockBytes) {
    const size_t n = std::min(blockBytes, out->size() - off);
    for (size_t k = 0; k < n; k += blockBytes - shift) {
      const size_t take = std::min(n - k, blockBytes - ((shift + k) % blockBytes));
      memcpy(out->data() + off + k, &block[(shift + k) % blockBytes], take);
    }
  }
}

}  // namespace

void flipSignBits(uint8_t* data, size_t bytes, size_t eltSize) {
  for (size_t i = eltSize - 1; i < bytes; i += eltSize) data[i] ^= 0x80;  // little-endian: the sign is in the last byte
}

Inputs::Inputs(const Config& cfg, int nRanks, int64_t maxRows) : cfg_(cfg), nRanks_(nRanks) {
  const std::vector<uint8_t> block = randomBlock(cfg);
  const size_t units = (size_t)maxRows * nRanks * cfg.localHeads;
  out_.resize(nRanks);
  lse_.resize(nRanks);
  for (int r = 0; r < nRanks; r++) {
    out_[r].resize(units * cfg.headDim * cfg.eltSize);
    tile(block, r, cfg.eltSize, &out_[r]);
    std::mt19937 rng(777 + r);
    std::uniform_real_distribution<float> l(-8.f, 8.f);
    lse_[r].resize(units);
    for (float& x : lse_[r]) x = l(rng);
  }
}

// The reference of every rank for `rows` rows in the config's mode (even
// split), rank r's output rows x the mode's heads each. NONE's outputs on
// the native wire are the same on every rank: rank 0's alone (on fp8 each
// rank's own share stays exact, so each rank has its own).
void Inputs::computeReference(int64_t rows, Wire wire) {
  CallShape& shape = shape_[(int)wire];
  NCCL_OR_DIE(resolveCallArgs(nullptr, cfg_, nRanks_, (int)rows, &shape));
  std::vector<std::vector<uint8_t>>& outs = refOut_[(int)wire];
  std::vector<std::vector<float>>& lses = refLse_[(int)wire];
  const int computed = sharedReference(wire) ? 1 : nRanks_;
  outs.assign(computed, std::vector<uint8_t>());
  lses.assign(computed, std::vector<float>());
  std::vector<CallBuffers> bufs(nRanks_);
  for (int r = 0; r < nRanks_; r++) {
    bufs[r] = {out_[r].data(), lse_[r].data(), nullptr, nullptr};  // null out: not computed
    if (r >= computed) continue;
    const size_t units = (size_t)outRowsOf(shape, r) * shape.heads;
    outs[r].resize(units * cfg_.headDim * cfg_.eltSize);
    lses[r].resize(units);
    bufs[r].out = outs[r].data();
    bufs[r].outLse = lses[r].data();
  }
  referenceA2aLseReduce(cfg_, nRanks_, (int)rows, packedStrides(cfg_, nRanks_), bufs.data(), &shape, wire);
  refRows_[(int)wire] = rows;
}

std::shared_lock<std::shared_mutex> Inputs::referenceOf(int64_t rows, Wire wire) {
  for (;;) {
    std::shared_lock<std::shared_mutex> held(mutex_);
    if (refRows_[(int)wire] == rows) return held;
    held.unlock();
    std::unique_lock<std::shared_mutex> writing(mutex_);
    if (refRows_[(int)wire] != rows) computeReference(rows, wire);
  }
}

// Every entry's outputs against the reference (countMismatches compares the
// ranks on threads of their own; a rank without an entry is skipped).
int64_t Inputs::countWrong(int64_t rows, const std::vector<RankOutputs>& outs, Wire wire) {
  const std::shared_lock<std::shared_mutex> held = referenceOf(rows, wire);
  std::vector<CallBuffers> got(nRanks_, CallBuffers{nullptr, nullptr, nullptr, nullptr}), want = got;
  for (const RankOutputs& o : outs) {
    const int k = sharedReference(wire) ? 0 : o.rank;
    got[o.rank].out = const_cast<uint8_t*>(o.out.data());
    got[o.rank].outLse = const_cast<float*>(o.outLse.data());
    want[o.rank].out = refOut_[(int)wire][k].data();
    want[o.rank].outLse = refLse_[(int)wire][k].data();
  }
  return (int64_t)countMismatches(cfg_, nRanks_, (int)rows, packedStrides(cfg_, nRanks_), got.data(), want.data(),
                                  nullptr, &shape_[(int)wire]);
}

void Inputs::ungather(int64_t rows, const RankOutputs& gathered, RankOutputs* out) const {
  const int Hl = cfg_.localHeads, H = nRanks_ * Hl;
  const size_t headBytes = (size_t)cfg_.headDim * cfg_.eltSize;
  out->rank = gathered.rank;
  out->out.resize((size_t)rows * H * headBytes);
  out->outLse.resize((size_t)rows * H);
  for (int s = 0; s < nRanks_; s++)
    for (int64_t b = 0; b < rows; b++)
      for (int j = 0; j < Hl; j++) {
        const size_t from = ((size_t)s * rows + b) * Hl + j, to = (size_t)b * H + s * Hl + j;
        memcpy(&out->out[to * headBytes], &gathered.out[from * headBytes], headBytes);
        out->outLse[to] = gathered.outLse[from];
      }
}

int64_t Inputs::countWrongGathered(int64_t rows, const std::vector<RankOutputs>& gathered) {
  std::vector<RankOutputs> outs(gathered.size());
  for (size_t i = 0; i < gathered.size(); i++) ungather(rows, gathered[i], &outs[i]);
  return countWrong(rows, outs, Wire::Native);
}

}  // namespace perf
}  // namespace nccl_dcp
