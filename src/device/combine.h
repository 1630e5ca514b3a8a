/*************************************************************************
 * Unfused kernels: the combine that merges what ncclAlltoAll (HEAD) or
 * ncclAllGather (TOKEN, NONE) delivered (the cross-node fallback, and the
 * baseline of every benchmark), and the pack that lays strided partials
 * out for them. Same merge math, same scatter addressing (scatter.h).
 * The per-unit bodies are device functions so the perf binary's loopback
 * baseline can run them for several virtual ranks in one launch.
 *
 * Wire fp8 (the fallback path of a context with config->wire fp8, HEAD
 * only): the pack writes each unit bound for another rank as the fused
 * path's sender would encode it (fp8_wire.h), e4m3 bytes then the fp32
 * scale, inside the unit's native-size slot; the combine decodes them
 * before the same accumulation and reads its own source as it is. So the
 * fallback gives the CPU model's bits, as the fused kernels do, while
 * ncclAlltoAll still moves native-size units (the fallback is NCCL's
 * speed either way). A decode into T instead would add a rounding the
 * model does not have.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_COMBINE_H_
#define NCCL_DCP_DEVICE_COMBINE_H_

#include "merge.h"
#include "params.h"
#include "primitives.h"
#include "scatter.h"
#include "wire.h"

namespace nccl_dcp {

constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;

// Wire fp8 in the fallback's buffers: a unit of D elements is D e4m3 bytes,
// then its scale (fp32), at the start of its D * sizeof(T) bytes.
__device__ __forceinline__ float fallbackScaleOf(const char* unit, int headDim) {
  return *(const float*)(unit + headDim);
}

// One warp merges unit `unit` = row * heads + head of the round (rows of
// `rank`'s share only), 16 bytes per lane per step. `weight`: the warp's
// NCCL_DCP_MAX_RANKS floats of scratch. Wire fp8: the sources but
// p.rank's are e4m3 units (see the top).
template <typename T, Wire kWire = Wire::Native>
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
      if constexpr (kWire == Wire::Fp8E4m3) {
        if (s != p.rank) {
          const char* wireUnit = src - off;
          float f[fp8::kPerWord];  // the 16 bytes' 8 elements
          fp8::unpackWord(loadInput8(wireUnit + off / sizeof(T)), fallbackScaleOf(wireUnit, p.headDim), f);
#pragma unroll
          for (int i = 0; i < W::kPerWord; i++) {
            acc[0][i] = mergeAccumulate(acc[0][i], w, f[i]);
            acc[1][i] = mergeAccumulate(acc[1][i], w, f[W::kPerWord + i]);
          }
          continue;
        }
      }
      W::accumulate(acc[0], w, loadInput8(src));
      W::accumulate(acc[1], w, loadInput8(src + 8));
    }
    *(uint64_t*)(out + off) = W::pack(acc[0]);
    *(uint64_t*)(out + off + 8) = W::pack(acc[1]);
  }
}

// Wire fp8: one warp encodes the unit at src (D elements of T) into dst as
// the fused path's sender does (WireWords: the same amax, scale and
// element encoding): D e4m3 bytes, then the scale.
template <typename T>
__device__ void packUnitFp8(const char* src, char* dst, int headDim, int lane) {
  using Words = WireWords<T, Wire::Fp8E4m3>;
  const int words = headDim / fp8::kPerWord;
  const float scale = Words::unitScale(src, words, 0.f, false, lane);
  for (int dw = lane; dw < words; dw += 32)
    *(uint64_t*)(dst + (size_t)dw * kWordBytes) = Words::encode(Words::loadInput(src, dw), scale);
  if (lane == 0) *(float*)(dst + headDim) = scale;
}

// One warp copies unit (peer * rows + row) * Hl + head of the strided
// partials into the send layout, its LSE as fp32 (-inf where the row is
// empty). Wire fp8: a unit bound for another rank is encoded (packUnitFp8).
template <typename T, Wire kWire = Wire::Native>
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
  if constexpr (kWire == Wire::Fp8E4m3) {
    if (peer != p.rank) {
      packUnitFp8<T>(src, dst, p.headDim, lane);
      src = nullptr;
    }
  }
  if (src != nullptr)
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
template <typename T, Wire kWire = Wire::Native>
__global__ void __launch_bounds__(kCombineThreads) combineKernel(const __grid_constant__ CombineParams p) {
  __shared__ float weights[kCombineWarps][NCCL_DCP_MAX_RANKS];
  __shared__ int splitScratch[kMaxRanks + 1];
  waitForPrerequisiteGrid();
  const CombineUnits units = combineUnits(p, splitScratch);
  const int unit = units.first + blockIdx.x * kCombineWarps + threadIdx.x / 32;
  if (unit < units.end) combineUnit<T, kWire>(p, units.start, unit, weights[threadIdx.x / 32]);
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
template <typename T, Wire kWire = Wire::Native>
__global__ void __launch_bounds__(kCombineThreads) packKernel(const __grid_constant__ PackParams p) {
  const size_t unit = (size_t)blockIdx.x * kCombineWarps + threadIdx.x / 32;
  waitForPrerequisiteGrid();
  if (unit < (size_t)p.nRanks * p.rows * p.localHeads) packUnit<T, kWire>(p, unit);
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_COMBINE_H_
