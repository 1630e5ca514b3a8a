/*************************************************************************
 * Kernel parameter structs: what a host launcher fills and a kernel reads.
 * Plain structs (no device code): the launch header (src/launch.h) and
 * the engine hold them; other host code needs only types.h.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PARAMS_H_
#define NCCL_DCP_DEVICE_PARAMS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>
#include <stdint.h>

#include "layout.h"
#include "nccl_dcp.h"
#include "types.h"

namespace nccl_dcp {

// The fused kernel's parameters but the peers and the tensors, filled in
// one place (makeFusedArgs, src/fused_path.cc) per round from the engine, the
// call and the round; the launcher adds only what the launch decides
// (blocksPerRank, the timeline).
static_assert(kMaxRanks == NCCL_DCP_MAX_RANKS, "one bound on the ranks");

struct FusedArgs {
  Region region;   // region.localHeads: heads of a workspace row (shape.heads)
  Strides strides;
  CallShape shape;
  LseBase lseBase;
  int nRanks, rows, blocksPerRank, silentRank;
  int row0;        // the round's first row of the call
  int sendWarps;  // SIMPLE: warps of a block that write (the first ones); 0: all that send but the signaller
  // Division by the ranks, the peers (cp - 1), the local heads, the groups
  // of a unit (line protocols), the 16-byte vectors of a unit and the units
  // of a chunk (SIMPLE).
  // (byHeads: the heads of a workspace row; byLocalHeads: Hl.)
  Divisor byRanks, byPeers, byHeads, byLocalHeads, byGroups, byVectors, byChunkUnits;
  uint64_t timeoutNs;
  AsyncErrorRecord* hostError;
  uint64_t* timeline;  // [grid][kTimelineSlots] or NULL
};

// The fused kernel, for one round: its arguments, how it reaches the
// workspaces (Peers, device/peers.h) and the round's tensors (NCCL: this
// rank's; loopback: one per virtual rank), as one __grid_constant__ struct;
// last, NONE's phase 2 into the peers' registered outputs (tag 0: staged),
// after every field the other kernels read, which keep their offsets.
template <class Peers>
struct FusedParams : FusedArgs {
  Peers peers;
  RankIo io[Peers::kIoSlots];
  DirectOutputs direct;
};

// Baseline / fallback combine: merges recv [cp][rows][heads][D] with LSE
// words [cp][rows][heads] (as ncclAlltoAll (HEAD) or ncclAllGather (TOKEN,
// NONE) delivers them; heads = shape.heads) into strided outputs: every row
// of the round, or (TOKEN) those of `rank`'s slice. Poison: the same rows.
// Wire fp8: the units are the codec's (codec.h), D e4m3 bytes each
// (fallbackUnitBytesOf), the LSE words 8-byte {lse, scale}
// (lseWordBytesOf); `rank`'s own are read from OwnPartials.
struct CombineParams {
  const char* recvData;
  const char* recvLse;
  char* out;    // TOKEN: row 0 of the rank's slice; else the round's first row
  float* outLse;
  int64_t outRow, outHead, outLseRow, outLseHead;
  int nRanks, rows, headDim;
  int rank, row0;  // TOKEN: whose slice, and the round's first row of the call
  CallShape shape;
  ncclDataType_t dtype;
  LseBase lseBase;
  AsyncErrorRecord* hostError;  // where device counts that make no split are recorded (or NULL)
  Wire wire;
};

// The rank's own partials for the fallback's combine: on a scaled wire it
// reads the rank's own units here, native, since every unit in its
// buffers is e4m3. A parameter of its own, not a field of CombineParams,
// so that the native combine (every benchmark's baseline) keeps its code.
struct OwnPartials {
  const char* data;         // at the round's first row; NULL where unused
  int64_t row, peer, head;  // element strides (Strides' in*)
};

// Fallback pack: strided partials -> send buffers of units and LSE words,
// unit (peer p, row, head j) at p * peerUnits + row * rowUnits + j:
// [cp][rows][Hl] for ncclAlltoAll (peerUnits rows * Hl, rowUnits Hl),
// [rows][cp * Hl] for ncclAllGather (peerUnits Hl, rowUnits cp * Hl).
// Empty rows (the shape's seqLens) get LSE -inf. Wire fp8: every unit
// encoded, D e4m3 bytes each (fallbackUnitBytesOf; the combine reads
// `rank`'s own from its partials).
struct PackParams {
  const char* partialOut;
  const char* partialLse;
  char* sendData;
  char* sendLse;
  const int* seqLens;
  const int* queryStartLoc;
  Strides strides;
  CallShape shape;
  int nRanks, rows, row0, localHeads, headDim;
  ncclDataType_t dtype;
  int64_t peerUnits, rowUnits;
  Wire wire;
  int rank;  // the sending rank
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
