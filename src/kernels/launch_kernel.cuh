/*************************************************************************
 * One kernel launch whose error is its own. <<<>>> and then
 * cudaGetLastError would also take an error the application left pending:
 * our call would fail for it (a fallback call between its pack and the
 * exchange its peers wait in; a create), and the application's error would
 * be consumed. cudaLaunchKernelEx returns this launch's result alone.
 ************************************************************************/
#ifndef NCCL_DCP_KERNELS_LAUNCH_KERNEL_CUH_
#define NCCL_DCP_KERNELS_LAUNCH_KERNEL_CUH_

#include <cuda_runtime.h>

#include <utility>

namespace nccl_dcp {

template <typename... Params, typename... Args>
cudaError_t launchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_KERNELS_LAUNCH_KERNEL_CUH_
