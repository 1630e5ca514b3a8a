/*************************************************************************
 * SIMPLE: bulk payload, one flag per (source, chunk).
 *
 * In the destination's workspace, per slot and remote source (layout.h):
 *   data  [capacity * Hl units][headDim elements]   the head as the input holds it
 *   lse   [capacity * Hl units] fp32
 *   flags [chunks] u64                 chunk c = units [c * chunkUnits, ...)
 *
 * A sending warp copies a whole chunk with 16-byte stores, kCopyBatch loads
 * of each lane in flight before their stores; every lane fences at system
 * scope, then one lane release-stores the chunk's flag. A receiving warp
 * acquires the chunk's flag from every source (a lane per source), then
 * reads LSEs and data with coherent loads. One signal per chunk (8 KiB at
 * D 512 bf16) instead of one per 128-byte line, and no payload bytes spent
 * on flags: the protocol of large batches.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PROTO_SIMPLE_H_
#define NCCL_DCP_DEVICE_PROTO_SIMPLE_H_

#include "primitives.h"

namespace nccl_dcp {
namespace simple {

constexpr int kCopyBatch = 8;  // 16-byte vectors per lane in flight

// Units [first, first + count) of chunk c in a round of `rows` rows.
struct Chunk {
  int first, count;
};
__device__ __forceinline__ Chunk chunkOf(const Region& r, int c, int rows) {
  const int first = c * r.chunkUnits, units = rows * r.localHeads;
  return {first, min(r.chunkUnits, units - first)};
}
__device__ __forceinline__ int chunksIn(const Region& r, int rows) {
  return (rows * r.localHeads + r.chunkUnits - 1) / r.chunkUnits;
}

// The lane's next vector (unit, column) after `step` more vectors; a unit
// has `vectors` 16-byte vectors.
__device__ __forceinline__ void advance(int& unit, int& col, int step, int vectors) {
  col += step;
  while (col >= vectors) {
    col -= vectors;
    unit++;
  }
}

// Copies `count` units of `vectors` 16-byte vectors each; lane i < count
// holds unit i's source and destination. Loads of kCopyBatch vectors per
// lane are in flight before their stores.
__device__ __forceinline__ void copyUnits(const char* src, char* dst, int count, int vectors, int lane) {
  const int total = count * vectors;
  int unit = 0, col = lane;
  advance(unit, col, 0, vectors);
  for (int v0 = 0; v0 < total; v0 += 32 * kCopyBatch) {
    uint4 x[kCopyBatch];
    int at[kCopyBatch][2];
#pragma unroll
    for (int j = 0; j < kCopyBatch; j++) {
      at[j][0] = min(unit, 31);
      at[j][1] = col;
      const char* s = (const char*)__shfl_sync(kFullMask, (unsigned long long)src, at[j][0]);
      if (v0 + 32 * j + lane < total) x[j] = loadInput16(s + (size_t)col * kLaneBytes);
      advance(unit, col, 32, vectors);
    }
#pragma unroll
    for (int j = 0; j < kCopyBatch; j++) {
      char* d = (char*)__shfl_sync(kFullMask, (unsigned long long)dst, at[j][0]);
      if (v0 + 32 * j + lane < total) store16(d + (size_t)at[j][1] * kLaneBytes, x[j]);
    }
  }
}

// After the chunk's data and LSE stores of every lane: the chunk's flag.
__device__ __forceinline__ void signalChunk(char* flagPtr, uint32_t flag, int lane) {
  fenceAcqRelSys();
  __syncwarp();
  if (lane == 0) storeRelease8(flagPtr, flag);
}

// One poll of the flags of up to 32 sources (a lane each; `mine` false for
// lanes with no source). Returns the lanes whose flag is not yet the round's.
__device__ __forceinline__ unsigned pollFlags(const char* flagPtr, bool mine, uint32_t flag) {
  const bool ready = !mine || loadAcquire8(flagPtr) == (uint64_t)flag;
  return __ballot_sync(kFullMask, !ready);
}

}  // namespace simple
}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PROTO_SIMPLE_H_
