/*************************************************************************
 * Unfused kernels: the combine that merges what ncclAlltoAll delivered
 * (the cross-node fallback, and the baseline of every benchmark), and the
 * pack that lays strided partials out for ncclAlltoAll. Same merge math.
 * The per-unit bodies are device functions so the perf binary's loopback
 * baseline can run them for several virtual ranks in one launch.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_COMBINE_H_
#define NCCL_DCP_DEVICE_COMBINE_H_

#include "merge.h"
#include "params.h"
#include "primitives.h"

namespace nccl_dcp {

constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;

// One warp merges unit (row, head) = unit / Hl, unit % Hl, 16 bytes per lane
// per step. `weight`: the warp's NCCL_DCP_MAX_RANKS floats of scratch.
template <typename T>
__device__ void combineUnit(const CombineParams& p, int unit, float* weight) {
  using W = Word<T>;
  const int lane = threadIdx.x & 31;
  const int row = unit / p.localHeads, head = unit % p.localHeads;
  const size_t unitsPerSource = (size_t)p.rows * p.localHeads;
  if (lane == 0) {
    for (int s = 0; s < p.nRanks; s++) weight[s] = p.recvLse[s * unitsPerSource + unit];
    const float merged = mergeWeights(weight, p.nRanks, p.lseBase, weight);
    if (p.outLse) p.outLse[row * p.outLseRow + head * p.outLseHead] = merged;
  }
  __syncwarp();
  const size_t headBytes = (size_t)p.headDim * sizeof(T);
  char* out = p.out + (row * p.outRow + head * p.outHead) * (int64_t)sizeof(T);
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
// partials into the send layout.
template <typename T>
__device__ void packUnit(const PackParams& p, size_t unit) {
  const int lane = threadIdx.x & 31;
  const int head = unit % p.localHeads;
  const int row = unit / p.localHeads % p.rows;
  const int peer = unit / p.localHeads / p.rows;
  const size_t dstUnit = peer * p.peerUnits + (size_t)row * p.localHeads + head;
  const Strides& s = p.strides;
  const size_t headBytes = (size_t)p.headDim * sizeof(T);
  const char* src = p.partialOut + (row * s.inRow + peer * s.inPeer + head * s.inHead) * (int64_t)sizeof(T);
  char* dst = p.sendData + dstUnit * headBytes;
  for (size_t off = (size_t)lane * 16; off < headBytes; off += 32 * 16)
    *(uint4*)(dst + off) = __ldg((const uint4*)(src + off));
  if (lane == 0) p.sendLse[dstUnit] = p.partialLse[row * s.lseRow + peer * s.lsePeer + head * s.lseHead];
}

// One warp writes NaN over unit (row, head) of out and outLse.
template <typename T>
__device__ void poisonUnit(const CombineParams& p, int unit) {
  const int lane = threadIdx.x & 31;
  const int row = unit / p.localHeads, head = unit % p.localHeads;
  if (lane == 0 && p.outLse) p.outLse[row * p.outLseRow + head * p.outLseHead] = NAN;
  const size_t headBytes = (size_t)p.headDim * sizeof(T);
  char* out = p.out + (row * p.outRow + head * p.outHead) * (int64_t)sizeof(T);
  const uint64_t nan = Word<T>::nan();
  for (size_t off = (size_t)lane * 8; off < headBytes; off += 32 * 8) *(uint64_t*)(out + off) = nan;
}

// One warp per (row, head).
template <typename T>
__global__ void __launch_bounds__(kCombineThreads) combineKernel(const __grid_constant__ CombineParams p) {
  __shared__ float weights[kCombineWarps][NCCL_DCP_MAX_RANKS];
  const int warp = threadIdx.x / 32;
  const int unit = blockIdx.x * kCombineWarps + warp;
  waitForPrerequisiteGrid();
  if (unit < p.rows * p.localHeads) combineUnit<T>(p, unit, weights[warp]);
}

// One warp per (row, head).
template <typename T>
__global__ void __launch_bounds__(kCombineThreads) poisonKernel(const __grid_constant__ CombineParams p) {
  const int unit = blockIdx.x * kCombineWarps + threadIdx.x / 32;
  if (unit < p.rows * p.localHeads) poisonUnit<T>(p, unit);
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
