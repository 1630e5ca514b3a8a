#include "timeline.h"

#include <mutex>

#include "error.h"

namespace nccl_dcp {

ncclResult_t timelineBuffer(uint64_t** buffer) {
  *buffer = nullptr;
#if NCCL_DCP_TIMELINE
  constexpr int kMaxDevices = 256;
  static std::mutex lock;
  static uint64_t* buffers[kMaxDevices];
  int dev;
  CUDACHECK(cudaGetDevice(&dev));
  if (dev >= kMaxDevices) return ncclSuccess;
  std::lock_guard<std::mutex> guard(lock);
  if (buffers[dev] == nullptr) {
    const size_t bytes = sizeof(uint64_t) * kTimelineBlocks * kTimelineSlots;
    CUDACHECK(cudaMalloc(&buffers[dev], bytes));
    CUDACHECK(cudaMemset(buffers[dev], 0, bytes));
  }
  *buffer = buffers[dev];
#endif
  return ncclSuccess;
}

ncclResult_t timelineReset(cudaStream_t stream) {
  uint64_t* buffer;
  DCPCHECK(timelineBuffer(&buffer));
  if (buffer == nullptr) return fail(ncclInvalidUsage, "built without the timeline (meson -Dtimeline=true)");
  CUDACHECK(cudaMemsetAsync(buffer, 0, sizeof(uint64_t) * kTimelineBlocks * kTimelineSlots, stream));
  return ncclSuccess;
}

ncclResult_t timelineRead(uint64_t* stamps) {
  uint64_t* buffer;
  DCPCHECK(timelineBuffer(&buffer));
  if (buffer == nullptr) return fail(ncclInvalidUsage, "built without the timeline (meson -Dtimeline=true)");
  CUDACHECK(cudaMemcpy(stamps, buffer, sizeof(uint64_t) * kTimelineBlocks * kTimelineSlots, cudaMemcpyDeviceToHost));
  return ncclSuccess;
}

}  // namespace nccl_dcp
