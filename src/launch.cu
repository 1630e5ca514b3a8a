/*************************************************************************
 * The launchers that are not a kernel family's (launch.h): the dispatch
 * table's lookup (kernel_table.h; the families instantiate the fused
 * kernels in kernels/fused_*.cu), and the window kernels of create. The
 * only files that see both sides are these and the kernel families:
 * nothing in device/ includes a host header.
 ************************************************************************/
#include "launch.h"

#include <algorithm>

#include "device/nccl_compat.h"
#include "device/proto_simple.h"
#include "error.h"
#include "kernels/launch_kernel.cuh"

namespace nccl_dcp {

namespace {

__global__ void zeroWindowKernel(ncclWindow_t window, size_t offset, size_t bytes) {
  uint4* p = (uint4*)ncclGetLocalPointer(window, offset);
  const size_t n = bytes / sizeof(uint4);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = make_uint4(0, 0, 0, 0);
}

__global__ void resolveLsaKernel(ncclWindow_t window, size_t offset, int nRanks, char** lsa) {
  for (int i = threadIdx.x; i < nRanks; i += blockDim.x) lsa[i] = (char*)ncclGetLsaPointer(window, offset, i);
}

// One family's launcher of (dtype, mode).
template <Proto kProto, Wire kWire>
FusedLauncher familyOf(const FusedKey& k) {
  return k.loopback ? familyLauncher<kProto, kWire, true>(k.dtype, k.mode)
                    : familyLauncher<kProto, kWire, false>(k.dtype, k.mode);
}

}  // namespace

FusedLauncher fusedLauncher(const FusedKey& k) {
  if (!isLegalFused(k)) return nullptr;
  const bool fp8 = k.wire == Wire::Fp8E4m3;
  switch (k.proto) {
    case Proto::LL: return fp8 ? familyOf<Proto::LL, Wire::Fp8E4m3>(k) : familyOf<Proto::LL, Wire::Native>(k);
    case Proto::LL128:
      return fp8 ? familyOf<Proto::LL128, Wire::Fp8E4m3>(k) : familyOf<Proto::LL128, Wire::Native>(k);
    case Proto::Simple:
      return fp8 ? familyOf<Proto::Simple, Wire::Fp8E4m3>(k) : familyOf<Proto::Simple, Wire::Native>(k);
  }
  return nullptr;
}

int simpleWriters(int requested) { return requested > 0 ? std::min(requested, kSimpleSignalWarp) : 0; }

ncclResult_t resolveLsaPointers(ncclWindow_t window, size_t offset, int nRanks, char** lsa, cudaStream_t stream) {
  // Stream-ordered allocation: a cudaFree would wait for every kernel on
  // the device, stuck ones of an aborted context included.
  char** dev = nullptr;
  CUDACHECK(cudaMallocAsync(&dev, sizeof(char*) * nRanks, stream));
  cudaError_t e = launchKernel(resolveLsaKernel, dim3(1), dim3(64), stream, window, offset, nRanks, dev);
  if (e == cudaSuccess) e = cudaMemcpyAsync(lsa, dev, sizeof(char*) * nRanks, cudaMemcpyDeviceToHost, stream);
  const cudaError_t freed = cudaFreeAsync(dev, stream);
  if (e == cudaSuccess) e = freed;
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return fail(ncclUnhandledCudaError, "resolving the window's LSA pointers failed: %s",
                                    cudaGetErrorString(e));
  return ncclSuccess;
}

ncclResult_t launchZeroWindow(ncclWindow_t window, size_t offset, size_t bytes, cudaStream_t stream) {
  if (bytes % sizeof(uint4) != 0) return fail(ncclInternalError, "window region of %zu bytes is not 16-byte sized", bytes);
  CUDACHECK(launchKernel(zeroWindowKernel, dim3(1024), dim3(256), stream, window, offset, bytes));
  return ncclSuccess;
}

}  // namespace nccl_dcp
