/*************************************************************************
 * Unfused kernels: the combine that merges what ncclAlltoAll delivered
 * (baseline of every benchmark, and the cross-node fallback), and the pack
 * that lays strided partials out for ncclAlltoAll. Same merge math.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_COMBINE_H_
#define NCCL_DCP_DEVICE_COMBINE_H_

#include "layout.h"
#include "params.h"
#include "merge.h"
#include "primitives.h"

namespace nccl_dcp {

constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;

// One warp per (row, head); 16 bytes per lane per step.
template <typename T>
__global__ void __launch_bounds__(kCombineThreads) combineKernel(const __grid_constant__ CombineParams p) {
  using W = Word<T>;
  __shared__ float weights[kCombineWarps][NCCL_DCP_MAX_RANKS];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int unit = blockIdx.x * kCombineWarps + warp;
  if (unit >= p.rows * p.localHeads) return;
  const int row = unit / p.localHeads, head = unit % p.localHeads;
  float* weight = weights[warp];
  const size_t unitsPerSource = (size_t)p.rows * p.localHeads;
  const int c = blockIdx.y;
  const char* recvData = p.recvData + c * p.recvCopyBytes;
  const float* recvLse = (const float*)((const char*)p.recvLse + c * p.recvLseCopyBytes);
  waitForPrerequisiteGrid();

  if (lane == 0) {
    for (int s = 0; s < p.nRanks; s++) weight[s] = recvLse[s * unitsPerSource + unit];
    float merged = mergeWeights(weight, p.nRanks, p.lseBase, weight);
    float* outLse = p.outLse ? (float*)((char*)p.outLse + c * p.outLseCopyBytes) : nullptr;
    if (outLse) outLse[row * p.outLseRow + head * p.outLseHead] = merged;
  }
  __syncwarp();

  const size_t headBytes = (size_t)p.headDim * sizeof(T);
  char* out = p.out + c * p.outCopyBytes + (row * p.outRow + head * p.outHead) * (int64_t)sizeof(T);
  for (size_t off = (size_t)lane * 16; off < headBytes; off += 32 * 16) {
    float acc[2][W::kPerWord] = {};
    for (int s = 0; s < p.nRanks; s++) {
      const char* src = recvData + (s * unitsPerSource + unit) * headBytes + off;
      const float w = weight[s];
      W::accumulate(acc[0], w, loadInput8(src));
      W::accumulate(acc[1], w, loadInput8(src + 8));
    }
    *(uint64_t*)(out + off) = W::pack(acc[0]);
    *(uint64_t*)(out + off + 8) = W::pack(acc[1]);
  }
}

// One warp per (peer, row, head) unit.
template <typename T>
__global__ void __launch_bounds__(kCombineThreads) packKernel(const __grid_constant__ PackParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const size_t unit = (size_t)blockIdx.x * kCombineWarps + warp;  // (peer * rows + row) * Hl + head
  if (unit >= (size_t)p.nRanks * p.rows * p.localHeads) return;
  const int head = unit % p.localHeads;
  const int row = unit / p.localHeads % p.rows;
  const int peer = unit / p.localHeads / p.rows;
  const size_t dstUnit = peer * p.peerUnits + (size_t)row * p.localHeads + head;
  const Strides& s = p.strides;
  const int c = blockIdx.y;
  waitForPrerequisiteGrid();
  const size_t headBytes = (size_t)p.headDim * sizeof(T);
  const char* src = p.partialOut + c * p.inCopyBytes +
                    (row * s.inRow + peer * s.inPeer + head * s.inHead) * (int64_t)sizeof(T);
  char* dst = p.sendData + c * p.sendCopyBytes + dstUnit * headBytes;
  for (size_t off = (size_t)lane * 16; off < headBytes; off += 32 * 16)
    *(uint4*)(dst + off) = __ldg((const uint4*)(src + off));
  if (lane == 0) {
    const float* lse = (const float*)((const char*)p.partialLse + c * p.lseCopyBytes);
    float* sendLse = (float*)((char*)p.sendLse + c * p.sendLseCopyBytes);
    sendLse[dstUnit] = lse[row * s.lseRow + peer * s.lsePeer + head * s.lseHead];
  }
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_COMBINE_H_
