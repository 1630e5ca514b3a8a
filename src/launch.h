/*************************************************************************
 * Host interface of the kernels (implemented in device/kernels.cu). Plain
 * C++: the host code never sees device templates.
 ************************************************************************/
#ifndef NCCL_DCP_LAUNCH_H_
#define NCCL_DCP_LAUNCH_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "device/primitives.h"
#include "layout.h"
#include "validate.h"

namespace nccl_dcp {

constexpr int kMaxLoopbackRanks = 16;

// One rank's tensors for one round, already offset to the round's first row.
struct RankIo {
  const char* partialOut;
  const float* partialLse;
  char* out;
  float* outLse;
};

// How a kernel reaches the workspaces of its peers (DESIGN §3).
struct Addressing {
  bool loopback;
  // NCCL: LSA pointers into the context's window.
  ncclWindow_t window;
  size_t windowOffset;
  // loopback: virtual rank p's workspace at base + p * rankBytes, one GPU.
  char* base;
  size_t rankBytes;
};

struct FusedLaunch {
  Region region;     // the protocol region this round uses
  Strides strides;
  ncclDataType_t dtype;
  LseBase lseBase;
  int nRanks;
  int rank;          // NCCL path; loopback derives it from the block index
  int rows;          // rows of this round
  uint64_t timeoutNs;  // 0: wait forever
  AsyncErrorRecord* hostError;  // device view of the host-mapped record
  RankIo io[kMaxLoopbackRanks];  // loopback: one per virtual rank; NCCL: io[0]
  Addressing addr;
  bool pdl;
  int silentRank;    // loopback test hook: this virtual rank does nothing (-1: none)
};

// One round of the fused collective: a cooperative launch (plus PDL when
// asked) sized to the work and to what the GPU can hold co-resident.
ncclResult_t launchFused(const FusedLaunch& l, cudaStream_t stream);

// Baseline / fallback combine: merges recv [cp][rows][Hl][D] with LSEs
// [cp][rows][Hl] (as ncclAlltoAll delivers them) into strided outputs.
struct CombineLaunch {
  const char* recvData;
  const float* recvLse;
  char* out;
  float* outLse;
  int64_t outRow, outHead, outLseRow, outLseHead;
  int nRanks, rows, localHeads, headDim;
  ncclDataType_t dtype;
  LseBase lseBase;
  // Loopback baseline: `copies` independent combines in one launch, copy c
  // at every pointer + c * its stride (bytes). 1 and 0 otherwise.
  int copies;
  int64_t recvCopyBytes, recvLseCopyBytes, outCopyBytes, outLseCopyBytes;
};
ncclResult_t launchCombine(const CombineLaunch& l, cudaStream_t stream);

// Fallback pack: strided partials -> send buffers [cp][rows][Hl][D] and
// [cp][rows][Hl], the layout ncclAlltoAll sends.
struct PackLaunch {
  const char* partialOut;
  const float* partialLse;
  char* sendData;
  float* sendLse;
  Strides strides;
  int nRanks, rows, localHeads, headDim;
  ncclDataType_t dtype;
  // Units (rows * Hl) between peers' blocks of the send buffers: rows * Hl
  // for ncclAlltoAll. The loopback baseline writes every virtual rank's
  // receive buffer directly (copies > 1): copy c reads its inputs at
  // + c * inCopyBytes and writes at + c * sendCopyBytes.
  int64_t peerUnits;
  int copies;
  int64_t inCopyBytes, lseCopyBytes, sendCopyBytes, sendLseCopyBytes;
};
ncclResult_t launchPack(const PackLaunch& l, cudaStream_t stream);

// The combine of `rows` rows from recv buffers laid out as ncclAlltoAll
// delivers them, into outputs with the call's strides (one copy).
inline CombineLaunch combineLaunch(const Config& c, int nRanks, int rows, const char* recvData, const float* recvLse,
                                   char* out, float* outLse, const Strides& s) {
  CombineLaunch l = {};
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
  l.localHeads = c.localHeads;
  l.headDim = c.headDim;
  l.dtype = c.dtype;
  l.lseBase = c.lseBase;
  l.copies = 1;
  return l;
}

// The pack of `rows` rows of strided partials into ncclAlltoAll's send
// layout [cp][rows][Hl] (one copy).
inline PackLaunch packLaunch(const Config& c, int nRanks, int rows, const char* partialOut, const float* partialLse,
                             char* sendData, float* sendLse, const Strides& s) {
  PackLaunch l = {};
  l.partialOut = partialOut;
  l.partialLse = partialLse;
  l.sendData = sendData;
  l.sendLse = sendLse;
  l.strides = s;
  l.nRanks = nRanks;
  l.rows = rows;
  l.localHeads = c.localHeads;
  l.headDim = c.headDim;
  l.dtype = c.dtype;
  l.peerUnits = (int64_t)rows * c.localHeads;
  l.copies = 1;
  return l;
}

// Zeroes [offset, offset + bytes) of this rank's part of a window (the host
// cannot address an application's window: the kernel asks NCCL for it).
ncclResult_t launchZeroWindow(ncclWindow_t window, size_t offset, size_t bytes, cudaStream_t stream);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_LAUNCH_H_
