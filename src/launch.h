/*************************************************************************
 * Host interface of the kernels: the launchers, implemented beside this
 * header in launch.cu. Plain C++: the host code sees the
 * parameter structs (device/params.h), never a kernel or a device primitive.
 ************************************************************************/
#ifndef NCCL_DCP_LAUNCH_H_
#define NCCL_DCP_LAUNCH_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "device/params.h"
#include "validate.h"

namespace nccl_dcp {

// How a kernel reaches the workspaces of its peers (DESIGN §3).
struct Addressing {
  bool loopback;
  // NCCL: rank r's workspace as this rank addresses it (nRanks entries,
  // resolveLsaPointers at create); lsa[rank] is its own.
  char* const* lsa;
  // loopback: virtual rank p's workspace at base + p * rankBytes, one GPU.
  char* base;
  size_t rankBytes;
};

// The fused kernel's arguments that every launch of an engine shares, once
// at init (Engine::init): the rest of FusedArgs (region, strides, rows, io,
// silentRank -1) is the call's and the round's to set. simpleSendWarps:
// SIMPLE's writing warps per block (NCCL_DCP_SIMPLE_SEND_WARPS); 0: the
// kernel's default. timeoutNs 0: wait forever.
FusedArgs fusedArgs(int nRanks, LseBase lseBase, uint64_t timeoutNs, AsyncErrorRecord* hostError,
                    int simpleSendWarps);

// One round of the fused collective over `args` (an engine's, with the
// call's strides, shape and silentRank and the round's rows, row0 and
// region set) and the round's tensors io (loopback: nRanks of them; NCCL: 1):
// a cooperative launch (plus PDL when asked) of the kernel of `dtype` and
// args.region.proto, sized to the work and to what the GPU can hold
// co-resident; the launch adds blocksPerRank, the region's divisors and the
// timeline. rank: the NCCL path's (loopback derives it from the block index).
ncclResult_t launchFused(const FusedArgs& args, const RankIo* io, ncclDataType_t dtype, int rank,
                         const Addressing& addr, bool pdl, cudaStream_t stream);

// Baseline / fallback combine (CombineParams in device/params.h).
ncclResult_t launchCombine(const CombineParams& l, cudaStream_t stream);

// Fallback pack (PackParams in device/params.h).
ncclResult_t launchPack(const PackParams& l, cudaStream_t stream);

// NaN into every output element the combine would write (recvData and
// recvLse unused): a poisoned context's call.
ncclResult_t launchPoison(const CombineParams& l, cudaStream_t stream);

// The combine of round [row0, row0 + rows) of a call of `shape` from recv
// buffers laid out as ncclAlltoAll (HEAD) or ncclAllGather (TOKEN, NONE)
// delivers them, into `rank`'s outputs (out, outLse: at the round's first
// row, or TOKEN: at the rank's first) with the call's strides (one copy).
inline CombineParams combineLaunch(const Config& c, int nRanks, const CallShape& shape, int rank, int row0, int rows,
                                   const char* recvData, const float* recvLse, char* out, float* outLse,
                                   const Strides& s, AsyncErrorRecord* hostError) {
  CombineParams l = {};
  l.recvData = recvData;
  l.recvLse = recvLse;
  l.out = out;
  l.outLse = outLse;
  l.outRow = s.outRow;
  l.outHead = s.outHead;
  l.outLseRow = s.outLseRow;
  l.outLseHead = s.outLseHead;
  l.nRanks = nRanks;
  l.rows = rows;
  l.headDim = c.headDim;
  l.rank = rank;
  l.row0 = row0;
  l.shape = shape;
  l.dtype = c.dtype;
  l.lseBase = c.lseBase;
  l.hostError = hostError;
  return l;
}

// The pack of round [row0, row0 + rows) of strided partials (b: at the
// round's first row) into ncclAlltoAll's send layout [cp][rows][Hl] (HEAD)
// or ncclAllGather's [rows][cp * Hl] (TOKEN, NONE) (one copy).
inline PackParams packLaunch(const Config& c, int nRanks, const CallShape& shape, int row0, int rows,
                             const CallBuffers& b, char* sendData, float* sendLse, const Strides& s) {
  PackParams l = {};
  l.partialOut = (const char*)b.partialOut;
  l.partialLse = (const char*)b.partialLse;
  l.sendData = sendData;
  l.sendLse = sendLse;
  l.seqLens = b.seqLens;
  l.queryStartLoc = b.queryStartLoc;
  l.strides = s;
  l.shape = shape;
  l.nRanks = nRanks;
  l.rows = rows;
  l.row0 = row0;
  l.localHeads = c.localHeads;
  l.headDim = c.headDim;
  l.dtype = c.dtype;
  const bool gather = shape.scatter != Scatter::Head;
  l.peerUnits = gather ? c.localHeads : (int64_t)rows * c.localHeads;
  l.rowUnits = gather ? (int64_t)nRanks * c.localHeads : c.localHeads;
  return l;
}

// Opt-in in-kernel timeline (meson -Dtimeline=true; without it both calls
// fail with ncclInvalidUsage): for the fused launches on the current device
// since the last reset, per block (grid index), %globaltimer at each
// TimelineStage (device/types.h), then the block's rank + 1; 0 where a
// block never got there.
constexpr int kTimelineBlocks = 2048;
ncclResult_t timelineReset(cudaStream_t stream);
ncclResult_t timelineRead(uint64_t* stamps /* [kTimelineBlocks][kTimelineSlots], host */);

// The LSA pointers of [offset, ...) of a window, for every rank of its LSA
// team (nRanks of them) into lsa[] (host): what the fused kernels take in
// their parameters instead of the window. Waits for `stream`.
ncclResult_t resolveLsaPointers(ncclWindow_t window, size_t offset, int nRanks, char** lsa, cudaStream_t stream);

// Zeroes [offset, offset + bytes) of this rank's part of a window (the host
// cannot address an application's window: the kernel asks NCCL for it).
ncclResult_t launchZeroWindow(ncclWindow_t window, size_t offset, size_t bytes, cudaStream_t stream);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_LAUNCH_H_
