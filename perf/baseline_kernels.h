/*************************************************************************
 * The loopback baseline's launches (perf only): the library's pack and
 * combine unit bodies (src/device/combine.h) for `copies` virtual ranks in
 * one launch each, copy c at every pointer + c * its stride (bytes).
 * Implemented in kernels.cu.
 ************************************************************************/
#ifndef NCCL_DCP_PERF_BASELINE_KERNELS_H_
#define NCCL_DCP_PERF_BASELINE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device/params.h"

namespace nccl_dcp {
namespace perf {

struct PackCopies {
  int copies;
  int64_t in, lse, send, sendLse;
};
struct CombineCopies {
  int copies;
  int64_t recv, recvLse, out, outLse;
};

cudaError_t launchPackCopies(const PackParams& p, const PackCopies& c, cudaStream_t stream);
cudaError_t launchCombineCopies(const CombineParams& p, const CombineCopies& c, cudaStream_t stream);

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_BASELINE_KERNELS_H_
