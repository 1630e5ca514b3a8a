#include "memory.h"

#include <cuda.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "log.h"

namespace nccl_dcp {

namespace {

struct Deferred {
  MemoryKind kind;
  int dev;
  void* ptr;
};

std::mutex deferredMutex;
std::vector<Deferred> deferred;

// Best effort, as every release path is: a failure is logged, never returned
// (the caller is already unwinding or tearing down).
void freeNow(MemoryKind kind, int dev, void* ptr) {
  int saved = -1;
  if (cudaGetDevice(&saved) != cudaSuccess) saved = -1;
  if (dev >= 0) cudaSetDevice(dev);
  bool ok = true;
  switch (kind) {
    case MemoryKind::Device: ok = cudaFree(ptr) == cudaSuccess; break;
    case MemoryKind::NcclMem: ok = ncclMemFree(ptr) == ncclSuccess; break;
    case MemoryKind::PinnedHost: ok = cudaFreeHost(ptr) == cudaSuccess; break;
    case MemoryKind::IpcImport: ok = cudaIpcCloseMemHandle(ptr) == cudaSuccess; break;
  }
  if (!ok) {
    cudaGetLastError();
    WARN("freeing %p (device %d) failed; it stays allocated", ptr, dev);
  }
  if (saved >= 0) cudaSetDevice(saved);
}

}  // namespace

void freeMemory(MemoryKind kind, int dev, void* ptr, FreeMode mode) {
  if (ptr == nullptr) return;
  if (mode == FreeMode::Now) return freeNow(kind, dev, ptr);
  std::lock_guard<std::mutex> lock(deferredMutex);
  deferred.push_back({kind, dev, ptr});
}

void flushDeferredFrees(int dev) {
  std::vector<Deferred> todo;
  {
    std::lock_guard<std::mutex> lock(deferredMutex);
    auto mine = std::partition(deferred.begin(), deferred.end(), [dev](const Deferred& d) { return d.dev != dev; });
    todo.assign(mine, deferred.end());
    deferred.erase(mine, deferred.end());
  }
  for (const Deferred& d : todo) freeNow(d.kind, d.dev, d.ptr);
}

std::string workspaceShortfall(size_t bytes, int maxBatch) {
  constexpr size_t kMiB = (size_t)1 << 20;
  std::string why = std::to_string((bytes + kMiB - 1) / kMiB) + " MiB for rounds of maxBatch " +
                    std::to_string(maxBatch) + " rows";
  size_t freeBytes = 0, totalBytes = 0;
  if (cudaMemGetInfo(&freeBytes, &totalBytes) == cudaSuccess)
    why += ", " + std::to_string(freeBytes / kMiB) + " of " + std::to_string(totalBytes / kMiB) +
           " MiB free on this GPU";
  return why + "; a smaller config->maxBatch (NCCL_DCP_MAX_BATCH) needs less";
}

bool allocationOffset(const void* p, size_t* offset, std::string* why) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static GetAddressRange getRange = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      fn = nullptr;
    }
    return (GetAddressRange)fn;
  }();
  if (getRange == nullptr) {
    *why = "the driver has no cuMemGetAddressRange";
    return false;
  }
  CUdeviceptr base = 0;
  size_t bytes = 0;
  const CUresult r = getRange(&base, &bytes, (CUdeviceptr)(uintptr_t)p);
  if (r != CUDA_SUCCESS) {
    *why = "cuMemGetAddressRange does not place it (error " + std::to_string((int)r) + "): not device memory?";
    return false;
  }
  *offset = (size_t)((uintptr_t)p - (uintptr_t)base);
  return true;
}

}  // namespace nccl_dcp
