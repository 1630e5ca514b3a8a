/*************************************************************************
 * The unfused kernels' launchers (launch.h), beside their kernels
 * (device/combine.h): the fallback's pack and combine, and the poison of a
 * poisoned context's calls. One dtype dispatch per wire.
 ************************************************************************/
#include "device/combine.h"
#include "error.h"
#include "kernels/launch_kernel.cuh"
#include "launch.h"

namespace nccl_dcp {

namespace {

unsigned blocksFor(size_t units) { return (unsigned)((units + kCombineWarps - 1) / kCombineWarps); }

template <typename... Params, typename... Args>
ncclResult_t launchUnfused(void (*kernel)(Params...), unsigned grid, cudaStream_t stream, const Args&... args) {
  CUDACHECK(launchKernel(kernel, dim3(grid), dim3(kCombineThreads), stream, args...));
  return ncclSuccess;
}

// f(T{}, wire tag) for the element type of `dtype` and the wire: every
// native dtype, fp8 with bf16 and fp16 (the config check refuses the rest).
template <typename F>
ncclResult_t withKernelTypes(ncclDataType_t dtype, Wire wire, F&& f) {
  if (wire == Wire::Native) return withElementType(dtype, [&](auto elt) { return f(elt, WireTag<Wire::Native>{}); });
  switch (dtype) {
    case ncclBfloat16: return f(__nv_bfloat16{}, WireTag<Wire::Fp8E4m3>{});
    case ncclFloat16: return f(__half{}, WireTag<Wire::Fp8E4m3>{});
    default: return fail(ncclInternalError, "wire fp8 with dtype %d: validate.cc allows bf16 and fp16", (int)dtype);
  }
}

}  // namespace

ncclResult_t launchCombine(const CombineParams& l, cudaStream_t stream, const OwnPartials& own) {
  const unsigned grid = blocksFor((size_t)l.rows * l.shape.heads);
  if (grid == 0) return ncclSuccess;
  return withKernelTypes(l.dtype, l.wire, [&](auto elt, auto wire) {
    return launchUnfused(combineKernel<decltype(elt), decltype(wire)::kWire>, grid, stream, l, own);
  });
}

ncclResult_t launchPack(const PackParams& l, cudaStream_t stream) {
  const unsigned grid = blocksFor((size_t)l.nRanks * l.rows * l.localHeads);
  if (grid == 0) return ncclSuccess;
  return withKernelTypes(l.dtype, l.wire, [&](auto elt, auto wire) {
    return launchUnfused(packKernel<decltype(elt), decltype(wire)::kWire>, grid, stream, l);
  });
}

ncclResult_t launchPoison(const CombineParams& l, cudaStream_t stream) {
  const unsigned grid = blocksFor((size_t)l.rows * l.shape.heads);
  if (grid == 0) return ncclSuccess;
  return withElementType(l.dtype, [&](auto elt) {
    return launchUnfused(poisonKernel<decltype(elt)>, grid, stream, l);
  });
}

}  // namespace nccl_dcp
