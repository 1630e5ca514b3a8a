/*************************************************************************
 * Unfused kernels: the combine that merges what ncclAlltoAll (HEAD) or
 * ncclAllGather (TOKEN, NONE) delivered (the cross-node fallback, and the
 * baseline of every benchmark), and the pack that lays strided partials
 * out for them. Same merge math (merge.h), same scatter addressing
 * (scatter.h), same codec (codec.h): a wire-fp8 context's fallback packs
 * every unit as the fused path's sender encodes it, D e4m3 bytes apart,
 * so NCCL moves half the bytes (the LSE words are the codec's 8-byte
 * ones), and the combine decodes it with the fused path's merge step, the
 * rank's own unit read native from its partials: the fallback gives the
 * CPU model's bits. The per-unit bodies are device functions so the perf
 * binary's loopback baseline can run them for several virtual ranks in one
 * launch.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_COMBINE_H_
#define NCCL_DCP_DEVICE_COMBINE_H_

#include "codec.h"
#include "merge.h"
#include "params.h"
#include "primitives.h"
#include "scatter.h"

namespace nccl_dcp {

constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;

// LSE word i of an LSE buffer of `wire`: its LSE, and (fp8) its scale.
__device__ __forceinline__ float lseWordLse(const char* base, size_t i, Wire wire) {
  return __uint_as_float(*(const uint32_t*)(base + i * lseWordBytesOf(wire)));
}
__device__ __forceinline__ float lseWordScale(const char* base, size_t i) {
  return __uint_as_float(*(const uint32_t*)(base + i * 8 + 4));
}

// The rank's own unit (row, head) of the round, native, on a scaled wire:
// its partials hold it (the wire's units are all e4m3). HEAD merges the
// rank's own heads (peer = rank, head local); TOKEN and NONE every head.
template <typename T>
__device__ __forceinline__ const char* ownUnitOf(const CombineParams& p, const OwnPartials& own, int row, int head) {
  const bool headMode = p.shape.scatter == Scatter::Head;
  const int localHeads = headMode ? p.shape.heads : p.shape.heads / p.nRanks;
  const int peer = headMode ? p.rank : head / localHeads;
  return own.data + (row * own.row + peer * own.peer + (head % localHeads) * own.head) * (int64_t)sizeof(T);
}

// One warp merges unit `unit` = row * heads + head of the round (rows of
// `rank`'s share only), 16 bytes of out per lane per step. `scratch`: the
// warp's 2 * NCCL_DCP_MAX_RANKS floats (weights, then scales). `own`: the
// rank's partials (a scaled wire's own units).
template <typename T, Wire kWire = Wire::Native>
__device__ void combineUnit(const CombineParams& p, const int* start, int unit, float* scratch,
                            const OwnPartials& own = {}) {
  using W = Word<T>;
  using C = Codec<T, kWire>;
  float* weight = scratch;
  float* scale = scratch + NCCL_DCP_MAX_RANKS;
  const int lane = threadIdx.x & 31;
  const int heads = p.shape.heads, row = unit / heads, head = unit % heads;
  const int64_t outRow = outRowOf(p.shape.scatter, p, start, p.rank, row);
  const size_t unitsPerSource = (size_t)p.rows * heads;
  for (int s = lane; s < p.nRanks; s += 32) {
    weight[s] = lseWordLse(p.recvLse, s * unitsPerSource + unit, kWire);
    if constexpr (C::kScaled) scale[s] = lseWordScale(p.recvLse, s * unitsPerSource + unit);
  }
  __syncwarp();
  const float merged = mergeWeightsWarp(weight, p.nRanks, p.lseBase, lane);
  if (lane == 0 && p.outLse) p.outLse[outRow * p.outLseRow + head * p.outLseHead] = merged;
  const size_t headBytes = (size_t)p.headDim * sizeof(T);
  const size_t unitBytes = C::kScaled ? (size_t)p.headDim : headBytes;  // in recvData (fallbackUnitBytesOf)
  char* out = p.out + (outRow * p.outRow + head * p.outHead) * (int64_t)sizeof(T);
  for (size_t off = (size_t)lane * 16; off < headBytes; off += 32 * 16) {
    float acc[2][W::kPerWord] = {};
    for (int s = 0; s < p.nRanks; s++) {
      const char* src = p.recvData + (s * unitsPerSource + unit) * unitBytes;
      const float w = weight[s];
      if constexpr (C::kScaled) {
        if (s != p.rank) {  // 16 bytes of out: one e4m3 word of the unit
          C::accumulate(&acc[0][0], w, typename C::Scale{scale[s], 1.f, false}, loadInput8(src + off / sizeof(T)));
          continue;
        }
        src = ownUnitOf<T>(p, own, row, head);
      }
      W::accumulate(acc[0], w, loadInput8(src + off));
      W::accumulate(acc[1], w, loadInput8(src + off + 8));
    }
    *(uint64_t*)(out + off) = W::pack(acc[0]);
    *(uint64_t*)(out + off + 8) = W::pack(acc[1]);
  }
}

// A scaled codec: one warp encodes the unit at src (D elements of T) into
// dst as the fused path's sender does (the same amax, scale and element
// encoding): D e4m3 bytes. Returns the scale (every lane).
template <class C>
__device__ typename C::Scale encodeUnit(const char* src, char* dst, int headDim, int lane) {
  const int words = headDim / C::kPerWord;
  const typename C::Scale scale = C::unitScale(src, words, 0, false, lane);
  for (int dw = lane; dw < words; dw += 32)
    *(uint64_t*)(dst + (size_t)dw * kWordBytes) = C::encode(C::loadInput(src, dw), scale);
  return scale;
}

// One warp copies unit (peer * rows + row) * Hl + head of the strided
// partials into the send layout, its LSE word beside (-inf where the row
// is empty). Wire fp8: every unit encoded, D bytes apart (the combine reads
// the rank's own from its partials).
template <typename T, Wire kWire = Wire::Native>
__device__ void packUnit(const PackParams& p, size_t unit) {
  using C = Codec<T, kWire>;
  const int lane = threadIdx.x & 31;
  const int head = unit % p.localHeads;
  const int row = unit / p.localHeads % p.rows;
  const int peer = unit / p.localHeads / p.rows;
  const size_t dstUnit = peer * p.peerUnits + row * p.rowUnits + head;
  const Strides& s = p.strides;
  const size_t headBytes = (size_t)p.headDim * sizeof(T);
  const char* src = p.partialOut + inOffset(s, row, peer, head) * (int64_t)sizeof(T);
  float scale = 1.f;
  if constexpr (C::kScaled) {
    scale = encodeUnit<C>(src, p.sendData + dstUnit * p.headDim, p.headDim, lane).value;
  } else {
    char* dst = p.sendData + dstUnit * headBytes;
    for (size_t off = (size_t)lane * 16; off < headBytes; off += 32 * 16)
      *(uint4*)(dst + off) = __ldg((const uint4*)(src + off));
  }
  if (lane == 0) {
    const float lse = partialLseOf(p.shape, s, p.row0, p.partialLse, p.seqLens, p.queryStartLoc, row, peer, head);
    if constexpr (C::kScaled) *(uint64_t*)(p.sendLse + dstUnit * 8) = fp8::packLseWord(lse, scale);
    else *(float*)(p.sendLse + dstUnit * 4) = lse;
  }
}

// One warp writes NaN over unit row * heads + head of out and outLse.
template <typename T>
__device__ void poisonUnit(const CombineParams& p, const int* start, int unit) {
  const int lane = threadIdx.x & 31;
  const int heads = p.shape.heads, row = unit / heads, head = unit % heads;
  const int64_t outRow = outRowOf(p.shape.scatter, p, start, p.rank, row);
  if (lane == 0 && p.outLse) p.outLse[outRow * p.outLseRow + head * p.outLseHead] = NAN;
  const size_t headBytes = (size_t)p.headDim * sizeof(T);
  char* out = p.out + (outRow * p.outRow + head * p.outHead) * (int64_t)sizeof(T);
  const uint64_t nan = Word<T>::nan();
  for (size_t off = (size_t)lane * 8; off < headBytes; off += 32 * 8) *(uint64_t*)(out + off) = nan;
}

// The units of the round `rank` merges, [first, end) of row * heads + head.
// Device counts that make no split: `refused`, the error recorded, and the
// units those of the last valid split (loadSplit), which the call poisons.
struct CombineUnits {
  const int* start;
  int first, end;
  bool refused;
};
__device__ __forceinline__ CombineUnits combineUnits(const CombineParams& p, int* scratch) {
  const bool token = p.shape.scatter == Scatter::Token;
  bool valid = true;
  const int* start = token ? loadSplit(p, scratch, &valid) : nullptr;
  if (!valid && blockIdx.x == 0 && threadIdx.x == 0 && p.hostError && p.hostError->code == 0) {
    p.hostError->rank = p.rank;
    p.hostError->peer = -1;
    __threadfence_system();
    *(volatile uint32_t*)&p.hostError->code = ncclInvalidArgument;
  }
  const RoundRows rows = roundRowsOf(p.shape.scatter, p, start, p.rank);
  return {start, rows.lo * p.shape.heads, rows.hi * p.shape.heads, !valid};
}

// One warp per (row, head) of the round (the launch covers every row).
template <typename T, Wire kWire = Wire::Native>
__global__ void __launch_bounds__(kCombineThreads)
    combineKernel(const __grid_constant__ CombineParams p, const __grid_constant__ OwnPartials own) {
  __shared__ float weights[kCombineWarps][2 * NCCL_DCP_MAX_RANKS];
  __shared__ int splitScratch[kMaxRanks + 1];
  waitForPrerequisiteGrid();
  const CombineUnits units = combineUnits(p, splitScratch);
  const int unit = units.first + blockIdx.x * kCombineWarps + threadIdx.x / 32;
  if (unit >= units.end) return;
  if (units.refused) poisonUnit<T>(p, units.start, unit);
  else combineUnit<T, kWire>(p, units.start, unit, weights[threadIdx.x / 32], own);
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
