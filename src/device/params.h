/*************************************************************************
 * Kernel parameter structs: what a host launcher fills and a kernel reads.
 * Plain structs (no device code), so host code includes this header and
 * nothing else of src/device/ but layout.h and merge.h. Nothing in this
 * directory includes a header above it.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PARAMS_H_
#define NCCL_DCP_DEVICE_PARAMS_H_

#include <nccl.h>
#include <stdint.h>

#include "layout.h"
#include "merge.h"
#include "nccl_dcp.h"

namespace nccl_dcp {

// Virtual ranks one loopback launch serves (a RankIo each in the params).
constexpr int kMaxLoopbackRanks = 16;

// Strides in elements, every one resolved (no "packed" zeros left).
struct Strides {
  int64_t inRow, inPeer, inHead;
  int64_t lseRow, lsePeer, lseHead;
  int64_t outRow, outHead;
  int64_t outLseRow, outLseHead;
};

// Record of the first device-side failure, in host-mapped memory so the host
// reads it without synchronising (ncclDcpGetAsyncError).
struct AsyncErrorRecord {
  uint32_t code;   // ncclResult_t, 0 = none
  int32_t rank;    // rank whose wait failed
  int32_t peer;    // rank it waited for
  uint32_t round;  // device round counter at the time
};

// n / d and n % d for 0 <= n < 2^31, d >= 1 fixed at launch, by a
// multiply-high, an add and a shift (round-up method of Granlund and
// Montgomery): a division by a runtime value costs the kernels ~25
// instructions, and the small batches are bound by instruction issue.
struct Divisor {
  uint32_t d, mul, shift;

  NCCL_DCP_HD uint32_t quotient(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    return (__umulhi(n, mul) + n) >> shift;
#else
    return ((uint32_t)(((uint64_t)n * mul) >> 32) + n) >> shift;
#endif
  }
  NCCL_DCP_HD uint32_t remainder(uint32_t n) const { return n - quotient(n) * d; }
};

// d >= 1: shift = ceil(log2 d), mul = floor(2^32 (2^shift - d) / d) + 1.
inline Divisor makeDivisor(uint32_t d) {
  uint32_t shift = 0;
  while (shift < 31 && (1u << shift) < d) shift++;
  const uint64_t mul = ((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1;
  return Divisor{d, (uint32_t)mul, shift};
}

// One rank's tensors for one round, already offset to the round's first row.
struct RankIo {
  const char* partialOut;
  const float* partialLse;
  char* out;
  float* outLse;
};

// Opt-in timeline (meson -Dtimeline=true): per block, %globaltimer at each
// stage of the fused kernel, then the block's rank + 1 (kTimelineSlots per
// block). Stages that keep the block's first stamp hold it complemented.
enum TimelineStage : int {
  kStageLaunch = 0,  // the block runs (before the grid dependency wait)
  kStageEntry,       // the round read (after the grid dependency wait)
  kStageFirstSend,   // first payload store issued (SIMPLE: first flags stored)
  kStageSendsDone,   // every send of the block issued
  kStageLastFlag,    // last peer flag / line seen
  kStageDone,        // merge written
  kTimelineStages
};
constexpr int kTimelineSlots = kTimelineStages + 1;
__host__ __device__ constexpr bool timelineKeepsFirst(int stage) {
  return stage == kStageLaunch || stage == kStageEntry || stage == kStageFirstSend;
}

// The fused kernel, for one round. Peers: how it reaches the workspaces
// (device/peers.h).
template <class Peers>
struct FusedParams {
  Region region;
  Strides strides;
  LseBase lseBase;
  int nRanks, rows, blocksPerRank, silentRank;
  int sendWarps;  // SIMPLE: warps of a block that write (the first ones)
  // Division by the ranks, the peers (cp - 1), the local heads, the groups
  // of a unit (line protocols), the 16-byte vectors of a unit and the units
  // of a chunk (SIMPLE).
  Divisor byRanks, byPeers, byHeads, byGroups, byVectors, byChunkUnits;
  uint64_t timeoutNs;
  AsyncErrorRecord* hostError;
  uint64_t* timeline;  // [grid][kTimelineSlots] or NULL
  RankIo io[kMaxLoopbackRanks];  // loopback: one per virtual rank; NCCL: io[0]
  Peers peers;
};

// Baseline / fallback combine: merges recv [cp][rows][Hl][D] with LSEs
// [cp][rows][Hl] (as ncclAlltoAll delivers them) into strided outputs.
struct CombineParams {
  const char* recvData;
  const float* recvLse;
  char* out;
  float* outLse;
  int64_t outRow, outHead, outLseRow, outLseHead;
  int nRanks, rows, localHeads, headDim;
  ncclDataType_t dtype;
  LseBase lseBase;
};

// Fallback pack: strided partials -> send buffers [cp][rows][Hl][D] and
// [cp][rows][Hl], the layout ncclAlltoAll sends.
struct PackParams {
  const char* partialOut;
  const float* partialLse;
  char* sendData;
  float* sendLse;
  Strides strides;
  int nRanks, rows, localHeads, headDim;
  ncclDataType_t dtype;
  // Units (rows * Hl) between peers' blocks of the send buffers: rows * Hl
  // for ncclAlltoAll.
  int64_t peerUnits;
};

// The one dtype dispatch of every launcher: f(T{}) with the element type of
// `dtype`; ncclInvalidArgument for another (callers have validated it).
template <typename F>
ncclResult_t withElementType(ncclDataType_t dtype, F&& f) {
  switch (dtype) {
    case ncclBfloat16: return f(__nv_bfloat16{});
    case ncclFloat16: return f(__half{});
    case ncclFloat32: return f(float{});
    default: return ncclInvalidArgument;
  }
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PARAMS_H_
