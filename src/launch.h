/*************************************************************************
 * Host interface of the kernels: the launchers, implemented beside the
 * kernels (launch.cu and the files of src/kernels), and the builders of their parameter
 * structs (device/params.h). Plain C++: the host code sees the parameter
 * structs and the dispatch table (kernel_table.h), never a kernel or a
 * device primitive.
 ************************************************************************/
#ifndef NCCL_DCP_LAUNCH_H_
#define NCCL_DCP_LAUNCH_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "device/params.h"
#include "kernel_table.h"
#include "timeline.h"
#include "validate.h"

namespace nccl_dcp {

// SIMPLE's writing warps per block for a requested count
// (NCCL_DCP_SIMPLE_SEND_WARPS), clamped to what the kernel has; 0 (none
// requested): every sending warp but the signalling one, whose count the
// kernel picks per round (proto_simple.h).
int simpleWriters(int requested);

// Baseline / fallback combine (CombineParams in device/params.h).
// `own`: the rank's partials, from which a scaled wire's combine reads the
// rank's own units native, in every mode (OwnPartials).
ncclResult_t launchCombine(const CombineParams& l, cudaStream_t stream, const OwnPartials& own = {});

// Fallback pack (PackParams in device/params.h).
ncclResult_t launchPack(const PackParams& l, cudaStream_t stream);

// NaN into every output element the combine would write (recvData and
// recvLse unused): a poisoned context's call.
ncclResult_t launchPoison(const CombineParams& l, cudaStream_t stream);

// The combine of round [row0, row0 + rows) of a call of `shape` from recv
// buffers laid out as ncclAlltoAll (HEAD) or ncclAllGather (TOKEN, NONE)
// delivers them (units and the LSE words of c.wire), into `rank`'s outputs
// (out, outLse: at the round's first row, or TOKEN: at the rank's first)
// with the call's strides.
inline CombineParams makeCombineParams(const Config& c, int nRanks, const CallShape& shape, int rank, int row0,
                                       int rows, const char* recvData, const void* recvLse, char* out, float* outLse,
                                       const Strides& s, AsyncErrorRecord* hostError) {
  CombineParams l = {};
  l.recvData = recvData;
  l.recvLse = (const char*)recvLse;
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
  l.wire = c.wire;
  return l;
}

// `rank`'s pack of round [row0, row0 + rows) of strided partials (b: at
// the round's first row) into ncclAlltoAll's send layout [cp][rows][Hl]
// (HEAD) or ncclAllGather's [rows][cp * Hl] (TOKEN, NONE), units and the
// LSE words of c.wire.
inline PackParams makePackParams(const Config& c, int nRanks, int rank, const CallShape& shape, int row0, int rows,
                                 const CallBuffers& b, char* sendData, void* sendLse, const Strides& s) {
  PackParams l = {};
  l.partialOut = (const char*)b.partialOut;
  l.partialLse = (const char*)b.partialLse;
  l.sendData = sendData;
  l.sendLse = (char*)sendLse;
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
  l.wire = c.wire;
  l.rank = rank;
  return l;
}

// The LSA pointers of [offset, ...) of a window, for every rank of its LSA
// team (nRanks of them) into lsa[] (host): what the fused kernels take in
// their parameters instead of the window. Waits for `stream`.
ncclResult_t resolveLsaPointers(ncclWindow_t window, size_t offset, int nRanks, char** lsa, cudaStream_t stream);

// Zeroes [offset, offset + bytes) of this rank's part of a window (the host
// cannot address an application's window: the kernel asks NCCL for it).
ncclResult_t launchZeroWindow(ncclWindow_t window, size_t offset, size_t bytes, cudaStream_t stream);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_LAUNCH_H_
