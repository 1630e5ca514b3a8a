/*************************************************************************
 * Host-side argument checks, complete before anything is enqueued. Every
 * failure names the argument and the rule it broke (ncclDcpGetLastError).
 * Pure functions: unit-tested without a GPU.
 ************************************************************************/
#ifndef NCCL_DCP_VALIDATE_H_
#define NCCL_DCP_VALIDATE_H_

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "enums.h"
#include "env.h"
#include "types.h"

namespace nccl_dcp {

// Applies the defaults (config field, else its NCCL_DCP_* variable, else
// ours) and checks every field, naming the first bad one.
ncclResult_t resolveConfig(const ncclDcpConfig_t* cfg, const Env& env, Config* out);
ncclResult_t checkRanks(int nRanks);

// Strides: device/types.h (the kernels read them). Packed out and outLse
// are the mode's [rows][headsPerRow].
Strides packedStrides(const Config& cfg, int nRanks);
ncclResult_t resolveStrides(const ncclDcpStrides_t* in, const Config& cfg, int nRanks, Strides* out);

// The call's additions (ncclDcpCallArgs_t; NULL: none) for batch rows
// (batch >= 0 checked): the mode's shape and TOKEN's split (even, or the host counts, checked here:
// each >= 0, sum = batch); counts only in TOKEN, seqLens and queryStartLoc
// both or neither.
ncclResult_t resolveCallArgs(const ncclDcpCallArgs_t* args, const Config& cfg, int nRanks, int batch,
                             CallShape* shape);
// The even split of batch rows over nRanks: the first batch % nRanks ranks
// take one row more.
void evenSplit(int batch, int nRanks, RowSplit* split);
// Rows of out on `rank`: the batch (HEAD, NONE), its share (TOKEN), or -1
// when the kernels read the counts (the host cannot know).
int outRowsOf(const CallShape& shape, int rank);

// What the CUDA runtime says a pointer is: cudaPointerGetAttributes'
// error and, when it succeeded, the memory type.
struct PointerAnswer {
  cudaError_t error;
  cudaMemoryType type;
  int device = -1;  // device memory: the GPU that holds it
};
using PointerQuery = PointerAnswer (*)(const void* p);
// The production query: cudaPointerGetAttributes (a query of the driver's
// address map: no stream operation, no synchronization, legal under stream
// capture), its error cleared.
PointerAnswer cudaPointerAnswer(const void* p);
// The arrays of args the kernels read on the GPU (rowCountsDevice, seqLens,
// queryStartLoc; NULL ones skipped) are managed memory or device memory of
// the context's GPU `cudaDev`, as `query` answers for each: host memory
// (registered or not), another GPU's memory and a pointer the runtime
// cannot place are refused with ncclInvalidArgument naming the argument (a
// host pointer would fault the kernel: a sticky illegal address that ends
// the CUDA context). args already admitted (resolveCallArgs). Tests pass a
// query of their own.
ncclResult_t checkDeviceArrays(const ncclDcpCallArgs_t* args, int cudaDev, PointerQuery query);
// The array of args the host reads at the call (rowCounts) is not device
// memory (the host would fault reading it: rowCountsDevice is that form);
// a pointer the runtime cannot place passes (it is read as host memory,
// as without this check). Before resolveCallArgs reads it.
ncclResult_t checkHostArrays(const ncclDcpCallArgs_t* args, PointerQuery query);

// Pointers, alignment, output self-overlap and output/input overlap, for
// batch rows of input and outRows rows of output (-1: unknown, only the
// first row is checked) (batch >= 0 checked too; null buffers are allowed
// at batch 0), and the empty-shard arrays when shape has them.
ncclResult_t checkCall(const Config& cfg, int nRanks, const CallBuffers& buf, int batch, const Strides& strides,
                       const CallShape& shape, int outRows);
// The same for a call without additions, as rank 0 sees it.
ncclResult_t checkCall(const Config& cfg, int nRanks, const CallBuffers& buf, int batch, const Strides& strides);

// The runtime NCCL must have the major.minor of the headers we were built
// with: the device API is not binary-compatible across minor versions.
// and a patch level that can serve them (ncclPatchMismatch, device/nccl_compat.h).
ncclResult_t checkNcclVersion(int runtimeCode, int buildCode);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_VALIDATE_H_
