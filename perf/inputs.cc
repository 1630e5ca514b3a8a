#include "inputs.h"

#include <algorithm>
#include <cstring>
#include <random>

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

void Inputs::computeReference(int64_t rows) {
  const size_t units = (size_t)rows * cfg_.localHeads;
  refOut_.assign(nRanks_, std::vector<uint8_t>(units * cfg_.headDim * cfg_.eltSize));
  refLse_.assign(nRanks_, std::vector<float>(units));
  std::vector<CallBuffers> bufs(nRanks_);
  for (int r = 0; r < nRanks_; r++) bufs[r] = {out_[r].data(), lse_[r].data(), refOut_[r].data(), refLse_[r].data()};
  referenceA2aLseReduce(cfg_, nRanks_, (int)rows, packedStrides(cfg_, nRanks_), bufs.data());
  refRows_ = rows;
}

int64_t Inputs::countWrong(int rank, int64_t rows, const uint8_t* out, const float* outLse) {
  std::lock_guard<std::mutex> l(mutex_);
  if (refRows_ != rows) computeReference(rows);
  // Output strides do not depend on cp: one rank compared on its own.
  const CallBuffers got = {nullptr, nullptr, const_cast<uint8_t*>(out), const_cast<float*>(outLse)};
  const CallBuffers want = {nullptr, nullptr, refOut_[rank].data(), refLse_[rank].data()};
  return (int64_t)countMismatches(cfg_, 1, (int)rows, packedStrides(cfg_, nRanks_), &got, &want, nullptr);
}

}  // namespace perf
}  // namespace nccl_dcp
