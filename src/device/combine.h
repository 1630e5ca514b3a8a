/*************************************************************************
 * Unfused kernels: the combine that merges what ncclAlltoAll (HEAD) or
 * ncclAllGather (TOKEN, NONE) delivered (the cross-node fallback, and the
 * baseline of every benchmark), and the pack that lays strided partials
 * out for them. Same merge math, same scatter addressing (scatter.h).
 * The per-unit bodies are device functions so the perf binary's loopback
 * baseline can run them for several virtual ranks in one launch.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_COMBINE_H_
#define NCCL_DCP_DEVICE_COMBINE_H_

#include "merge.h"
#include "params.h"
#include "primitives.h"
#include "scatter.h"

namespace nccl_dcp {

constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;

// One warp merges unit `unit` = row * heads + head of the round (rows of
// `rank`'s share only), 16 bytes per lane per step. `weight`: the warp's
// NCCL_DCP_MAX_RANKS floats of scratch.
template <typename T>
__device__ void combineUnit(const CombineParams& p, const int* start, int unit, float* weight) {
  using W = Word<T>;
  const int lane = threadIdx.x & 31;
  const int heads = p.shape.heads, row = unit / heads, head = unit % heads;
  const int64_t outRow = outRowOf(p, start, p.rank, row);
  const size_t unitsPerSource = (size_t)p.rows * heads;
  if (lane == 0) {
    for (int s = 0; s < p.nRanks; s++) weight[s] = p.recvLse[s * unitsPerSource + unit];
    const float merged = mergeWeights(weight, p.nRanks, p.lseBase, weight);
    if (p.outLse) p.outLse[outRow * p.outLseRow + head * p.outLseHead] = merged;
  }
  __syncwarp();
  const size_t headBytes = (size_t)p.headDim * sizeof(T);
  char* out = p.out + (outRow * p.outRow + head * p.outHead) * (int64_t)sizeof(T);
  for (size_t off = (size_t)lane * 16; off < headBytes; off += 32 * 16) {
    float acc[2][W::kPerWord] = {};
    for (int s = 0; s < p.nRanks; s++) {
      const char* src = p.recvData + (s * unitsPerSource + unit) * headBytes + off;
      const float w = weight[s];
      W::accumulate(acc[0], w, loadInput8(src));
      W::accumulate(acc[1], w, loadInput8(src + 8));
    }
    *(uint64_t*)(out + off) = W::pack(acc[0]);
    *(uint64_t*)(out + off + 8) = W::pack(acc[1]);
  }
}

// One warp copies unit (peer * rows + row) * Hl + head of the strided
// partials into the send layout, its LSE as fp32 (-inf where the row is
// empty).
template <typename T>
__device__ void packUnit(const PackParams& p, size_t unit) {
  const int lane = threadIdx.x & 31;
  const int head = unit % p.localHeads;
  const int row = unit / p.localHeads % p.rows;
  const int peer = unit / p.localHeads / p.rows;
  const size_t dstUnit = peer * p.peerUnits + row * p.rowUnits + head;
  const Strides& s = p.strides;
  const size_t headBytes = (size_t)p.headDim * sizeof(T);
  const char* src = p.partialOut + inOffset(s, row, peer, head) * (int64_t)sizeof(T);
  char* dst = p.sendData + dstUnit * headBytes;
  for (size_t off = (size_t)lane * 16; off < headBytes; off += 32 * 16)
    *(uint4*)(dst + off) = __ldg((const uint4*)(src + off));
  if (lane == 0)
    p.sendLse[dstUnit] = partialLseOf(p.shape, s, p.row0, p.partialLse, p.seqLens, p.queryStartLoc, row, peer, head);
}

// One warp writes NaN over unit row * heads + head of out and outLse.
template <typename T>
__device__ void poisonUnit(const CombineParams& p, const int* start, int unit) {
  const int lane = threadIdx.x & 31;
  const int heads = p.shape.heads, row = unit / heads, head = unit % heads;
  const int64_t outRow = outRowOf(p, start, p.rank, row);
  if (lane == 0 && p.outLse) p.outLse[outRow * p.outLseRow + head * p.outLseHead] = NAN;
  const size_t headBytes = (size_t)p.headDim * sizeof(T);
  char* out = p.out + (outRow * p.outRow + head * p.outHead) * (int64_t)sizeof(T);
  const uint64_t nan = Word<T>::nan();
  for (size_t off = (size_t)lane * 8; off < headBytes; off += 32 * 8) *(uint64_t*)(out + off) = nan;
}

// The units of the round `rank` merges, [first, end) of row * heads + head;
// none (and the error recorded) when device counts make no split.
struct CombineUnits {
  const int* start;
  int first, end;
};
__device__ __forceinline__ CombineUnits combineUnits(const CombineParams& p, int* scratch) {
  const int* start = scatterOf(p) == Scatter::Token ? loadSplit(p, scratch) : nullptr;
  if (scatterOf(p) == Scatter::Token && start == nullptr) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && p.hostError && p.hostError->code == 0) {
      p.hostError->rank = p.rank;
      p.hostError->peer = -1;
      __threadfence_system();
      *(volatile uint32_t*)&p.hostError->code = ncclInvalidArgument;
    }
    return {nullptr, 0, 0};
  }
  const RoundRows rows = roundRowsOf(p, start, p.rank);
  return {start, rows.lo * p.shape.heads, rows.hi * p.shape.heads};
}

// One warp per (row, head) of the round (the launch covers every row).
template <typename T>
__global__ void __launch_bounds__(kCombineThreads) combineKernel(const __grid_constant__ CombineParams p) {
  __shared__ float weights[kCombineWarps][NCCL_DCP_MAX_RANKS];
  __shared__ int splitScratch[kMaxRanks + 1];
  waitForPrerequisiteGrid();
  const CombineUnits units = combineUnits(p, splitScratch);
  const int unit = units.first + blockIdx.x * kCombineWarps + threadIdx.x / 32;
  if (unit < units.end) combineUnit<T>(p, units.start, unit, weights[threadIdx.x / 32]);
}

// One warp per (row, head) of the round.
template <typename T>
__global__ void __launch_bounds__(kCombineThreads) poisonKernel(const __grid_constant__ CombineParams p) {
  __shared__ int splitScratch[kMaxRanks + 1];
  const CombineUnits units = combineUnits(p, splitScratch);
  const int unit = units.first + blockIdx.x * kCombineWarps + threadIdx.x / 32;
  if (unit < units.end) poisonUnit<T>(p, units.start, unit);
}

// One warp per (peer, row, head) unit.
template <typename T>
__global__ void __launch_bounds__(kCombineThreads) packKernel(const __grid_constant__ PackParams p) {
  const size_t unit = (size_t)blockIdx.x * kCombineWarps + threadIdx.x / 32;
  waitForPrerequisiteGrid();
  if (unit < (size_t)p.nRanks * p.rows * p.localHeads) packUnit<T>(p, unit);
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_COMBINE_H_
