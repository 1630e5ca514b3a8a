/*************************************************************************
 * Host-side argument checks, complete before anything is enqueued. Every
 * failure names the argument and the rule it broke (ncclDcpGetLastError).
 * Pure functions: unit-tested without a GPU.
 ************************************************************************/
#ifndef NCCL_DCP_VALIDATE_H_
#define NCCL_DCP_VALIDATE_H_

#include <stddef.h>
#include <stdint.h>

#include "device/merge.h"
#include "env.h"
#include "nccl_dcp.h"

namespace nccl_dcp {

// A config with every default applied and every field checked.
struct Config {
  int headDim;
  int localHeads;
  ncclDataType_t dtype;
  int eltSize;
  LseBase lseBase;
  int maxBatch;
  ncclDcpProtocol_t protocol;
  int timeoutMs;
};

constexpr int kDefaultMaxBatch = 256;
constexpr int kDefaultTimeoutMs = 5000;

// Bytes of one element of a supported dtype, 0 otherwise.
int dtypeSize(ncclDataType_t dtype);
const char* dtypeName(ncclDataType_t dtype);
const char* protocolName(int protocol);

ncclResult_t resolveConfig(const ncclDcpConfig_t* cfg, const Env& env, Config* out);
ncclResult_t checkRanks(int nRanks);

// Strides in elements, every one resolved (no "packed" zeros left).
struct Strides {
  int64_t inRow, inPeer, inHead;
  int64_t lseRow, lsePeer, lseHead;
  int64_t outRow, outHead;
  int64_t outLseRow, outLseHead;
};

Strides packedStrides(const Config& cfg, int nRanks);
ncclResult_t resolveStrides(const ncclDcpStrides_t* in, const Config& cfg, int nRanks, Strides* out);

// One rank's buffers for a call.
struct CallBuffers {
  const void* partialOut;
  const float* partialLse;
  void* out;
  float* outLse;
};

// Pointers, alignment, output self-overlap and output/input overlap, for
// batch rows (batch >= 0 checked too; null buffers are allowed at batch 0).
ncclResult_t checkCall(const Config& cfg, int nRanks, const CallBuffers& buf, int batch,
                       const Strides& strides);

// The runtime NCCL must have the major.minor of the headers we were built
// with: the device API is not binary-compatible across minor versions.
// and a patch level that can serve them (ncclPatchMismatch, nccl_compat.h).
ncclResult_t checkNcclVersion(int runtimeCode, int buildCode);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_VALIDATE_H_
