/*************************************************************************
 * SIMPLE: bulk payload, one flag per (source, chunk).
 *
 * In the destination's workspace, per slot and remote source (layout.h):
 *   data  [capacity * Hl units][headDim elements]   the head as the input holds it
 *   lse   [capacity * Hl units] fp32
 *   flags [chunks] u64                 chunk c = units [c * chunkUnits, ...)
 *
 * A block's writing warps copy a step of chunks together with 16-byte
 * stores, kCopyBatch loads of each lane in flight before their stores, and
 * publish their progress in shared memory; the block's signalling warp
 * waits for every writer's progress, fences at system scope and stores the
 * flags of every step the writers had finished. Writers never fence: a
 * chunk's flag waits for its bytes to cross NVLink, the next chunk's bytes
 * do not (writers run at most kSendBytesInFlight ahead of the flags). A
 * receiving warp acquires the chunk's flag from every source (a lane per
 * source), then reads LSEs and data with coherent loads. One signal per chunk (4 KiB at
 * D 512 bf16) instead of one per 128-byte line, and no payload bytes spent
 * on flags: the protocol of large batches.
 *
 * Wire fp8 (Region::wire): the data arrays hold e4m3 units (D bytes) and
 * the LSE array {lse, scale} pairs; the writers encode (encodeShare)
 * instead of copying, the receivers decode (a2a_lse_reduce_simple.h).
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PROTO_SIMPLE_H_
#define NCCL_DCP_DEVICE_PROTO_SIMPLE_H_

#include <limits.h>

#include "primitives.h"
#include "wire.h"

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

// Copies a step's units, byVectors.d 16-byte vectors each, with `lanes`
// lanes of several warps: this warp's lanes are [warpFirst, warpFirst + 32)
// of them, each taking every lanes-th vector. Lane i of the warp holds unit
// i's source and destination (null: no such unit). kCopyBatch loads per lane
// are in flight before their stores.
__device__ __forceinline__ void copyShare(const char* src, char* dst, int units, Divisor byVectors, int warpFirst,
                                          int lanes, int lane) {
  const int vectors = (int)byVectors.d, total = units * vectors;
  const int unitStep = (int)byVectors.quotient(lanes), colStep = lanes - unitStep * vectors;
  int unit = (int)byVectors.quotient(warpFirst + lane), col = warpFirst + lane - unit * vectors;
  for (int v0 = warpFirst; v0 < total; v0 += lanes * kCopyBatch) {  // warp-uniform: shuffles below
    uint4 x[kCopyBatch];
    int at[kCopyBatch][2];
#pragma unroll
    for (int j = 0; j < kCopyBatch; j++) {
      at[j][0] = min(unit, 31);
      at[j][1] = v0 + j * lanes + lane < total ? col : -1;
      const char* s = (const char*)__shfl_sync(kFullMask, (unsigned long long)src, at[j][0]);
      if (s == nullptr) at[j][1] = -1;
      if (at[j][1] >= 0) x[j] = loadInput16(s + (size_t)col * kLaneBytes);
      unit += unitStep;
      col += colStep;
      if (col >= vectors) {
        col -= vectors;
        unit++;
      }
    }
#pragma unroll
    for (int j = 0; j < kCopyBatch; j++) {
      char* d = (char*)__shfl_sync(kFullMask, (unsigned long long)dst, at[j][0]);
      if (at[j][1] >= 0) store16(d + (size_t)at[j][1] * kLaneBytes, x[j]);
    }
  }
}

// Wire fp8: encodeShare's units in flight per warp (two 16-byte loads of
// each per lane).
constexpr int kEncodeUnits = 4;

// Wire fp8: copyShare's counterpart. Writes a step's `units` units (lane i
// of the warp holds unit i's source, destination, {lse, scale}
// destination and LSE; src null: no such unit) as e4m3 (fp8_wire.h): unit
// writer + m * writers goes to writing warp `writer`, kEncodeUnits at once.
// A lane takes a 16-byte e4m3 vector of the unit (16 elements: two data
// words, 32 bytes of input), the warp the unit's amax
// (WireWords::unitScale); lane 0 stores {lse, scale}.
template <typename T>
__device__ void encodeShare(const char* src, char* dst, char* lseDst, float lse, int units, int headDim, int writer,
                            int writers, int lane) {
  using Words = WireWords<T, Wire::Fp8E4m3>;
  const int vectors = headDim / kLaneBytes;  // e4m3 vectors of a unit
  for (int u0 = writer; u0 < units; u0 += writers * kEncodeUnits) {  // warp-uniform: shuffles below
    const char* from[kEncodeUnits];
    uint4 x[kEncodeUnits][2];
    float amax[kEncodeUnits];
#pragma unroll
    for (int q = 0; q < kEncodeUnits; q++) {
      const int u = min(u0 + q * writers, 31);
      from[q] = (const char*)__shfl_sync(kFullMask, (unsigned long long)src, u);
      if (u0 + q * writers >= units) from[q] = nullptr;
      amax[q] = 0.f;
      if (from[q] != nullptr && lane < vectors) {
        x[q][0] = Words::loadInput(from[q], 2 * lane);
        x[q][1] = Words::loadInput(from[q], 2 * lane + 1);
        amax[q] = fmaxf(Words::amaxOf(x[q][0]), Words::amaxOf(x[q][1]));
      }
    }
#pragma unroll
    for (int q = 0; q < kEncodeUnits; q++) {
      if (from[q] == nullptr) continue;  // warp-uniform
      const int u = u0 + q * writers;
      char* to = (char*)__shfl_sync(kFullMask, (unsigned long long)dst, u);
      char* lseTo = (char*)__shfl_sync(kFullMask, (unsigned long long)lseDst, u);
      const float unitLse = __shfl_sync(kFullMask, lse, u);
      const float scale = Words::unitScale(from[q], 2 * vectors, amax[q], vectors <= 32, lane);
      auto encodeVector = [&](const uint4& a, const uint4& b) {
        const uint64_t lo = Words::encode(a, scale), hi = Words::encode(b, scale);
        return make_uint4((uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32));
      };
      if (lane < vectors) store16(to + (size_t)lane * kLaneBytes, encodeVector(x[q][0], x[q][1]));
      for (int c = lane + 32; c < vectors; c += 32)  // D > 512: loaded again
        store16(to + (size_t)c * kLaneBytes,
                encodeVector(Words::loadInput(from[q], 2 * c), Words::loadInput(from[q], 2 * c + 1)));
      if (lane == 0) storeVolatile8(lseTo, fp8::packLseWord(unitLse, scale));
    }
  }
}

// A writing warp's progress, for the block's signalling warp: release at
// block scope orders the warp's payload stores (after a __syncwarp) before
// it; the signalling warp's acquire, then its system-scope fence and flag
// store, carry them to the peer (cumulativity), without the writer ever
// waiting for NVLink. Both sides are atomics (an exchange, an OR of 0):
// compute-sanitizer's racecheck does not model plain release/acquire
// accesses between warps and reports them as hazards; atomics it accepts.
// Returns the progress it replaced (callers need only the release).
__device__ __forceinline__ int publishProgress(int* progress, int steps) {
  int old;
  asm volatile("atom.release.cta.shared.exch.b32 %0, [%1], %2;"
               : "=r"(old)
               : "r"((unsigned)__cvta_generic_to_shared(progress)), "r"(steps)
               : "memory");
  return old;
}
__device__ __forceinline__ int loadProgress(const int* progress) {
  int v;
  asm volatile("atom.acquire.cta.shared.or.b32 %0, [%1], 0;"
               : "=r"(v)
               : "r"((unsigned)__cvta_generic_to_shared(progress))
               : "memory");
  return v;
}

// Spins until each of the first `writers` progress counters (a lane each)
// reaches `steps`; returns the least of them. Writers never wait on a
// peer, so this ends.
__device__ __forceinline__ int awaitProgress(const int* progress, int writers, int steps, int lane) {
  for (;;) {
    const int least = __reduce_min_sync(kFullMask, lane < writers ? loadProgress(progress + lane) : INT_MAX);
    if (least >= steps) return least;
    __nanosleep(32);
  }
}

// Writers stay at most this many bytes (and kMinStepsAhead steps) of a
// block ahead of its flags: enough in flight to keep NVLink busy, few enough
// that the first steps land, and are merged, while the last are sent. A
// block's share larger than that goes in steps of kSendStepBytes.
// 2 x H200, SIMPLE, 256 / 512 / 1024 rows (docs/perf.md): in flight 16 KiB
// 27.8 / 46.9 / 68.6 us, 32 KiB 26.7 / 43.9 / 68.6, unbounded 27.9 / 49.3 /
// 75.9 (v9); 4 KiB chunks, steps of 16 KiB 23.9 / 37.6 / 62.5, of 32 KiB
// 22.7 / 39.8 / 69.1 (v10).
constexpr int kSendBytesInFlight = 32768;
constexpr int kSendStepBytes = 16384;
constexpr int kMinStepsAhead = 2;

// A writer's wait for the signalling warp: until `steps` steps are flagged
// (published with publishProgress; atomics for the same reason).
__device__ __forceinline__ void awaitFlagged(const int* flagged, int steps) {
  while (loadProgress(flagged) < steps) __nanosleep(32);
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
