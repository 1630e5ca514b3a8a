/*************************************************************************
 * The loopback baseline's launches (perf only): the library's pack and
 * combine unit bodies (src/device/combine.h) for `copies` virtual ranks in
 * one launch each, copy c at every pointer + c * its stride (bytes); and
 * -c's sign flip of the inputs. Implemented in kernels.cu.
 ************************************************************************/
#ifndef NCCL_DCP_PERF_BASELINE_KERNELS_H_
#define NCCL_DCP_PERF_BASELINE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device/params.h"
#include "types.h"

namespace nccl_dcp {
namespace perf {

// The baselines run the native wire, whatever the fused call's (--wire).
inline Config baselineConfig(Config c) {
  c.wire = Wire::Native;
  return c;
}

struct PackCopies {
  int copies;
  int64_t in, lse, send, sendLse;
};
// TOKEN (p.shape.scatter): copy k merges rank k's rows, p.row0 its first
// (p.shape.split.start[k], the host form), from receive buffers of p.rows
// rows per source (the padded all-to-all blocks).
struct CombineCopies {
  int copies;
  int64_t recv, recvLse, out, outLse;
};

cudaError_t launchPackCopies(const PackParams& p, const PackCopies& c, cudaStream_t stream);
cudaError_t launchCombineCopies(const CombineParams& p, const CombineCopies& c, cudaStream_t stream);

// The loopback baseline's NCCL exchanges as copies, one launch: for every
// (source s, destination d) pair of `ranks` virtual ranks and each plane
// (the data, then the LSEs), bytes[d] from src + s * srcRank + srcOff[d]
// to dst + d * dstRank + s * dstSlot. An all-to-all sends each destination
// its part (srcOff, bytes per d); an all-gather sends everyone the same.
struct ExchangePlane {
  const char* src;
  char* dst;
  int64_t srcRank, dstRank, dstSlot;
  int64_t srcOff[kMaxLoopbackRanks], bytes[kMaxLoopbackRanks];
};
struct Exchange {
  int ranks, planes;
  ExchangePlane plane[2];
};
cudaError_t launchExchange(const Exchange& x, cudaStream_t stream);

// The sign bit of every element (eltSize 2 or 4) of `bytes` bytes flipped:
// flipSignBits (inputs.h) on the device.
cudaError_t launchFlipSignBits(void* data, size_t bytes, size_t eltSize, cudaStream_t stream);

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_BASELINE_KERNELS_H_
