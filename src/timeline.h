/*************************************************************************
 * The opt-in in-kernel timeline (meson -Dtimeline=true; without it the
 * calls below fail with ncclInvalidUsage and the kernels stamp nothing):
 * for the fused launches on the current device since the last reset, per
 * block (grid index), %globaltimer at each TimelineStage (device/types.h),
 * then the block's rank + 1; 0 where a block never got there.
 ************************************************************************/
#ifndef NCCL_DCP_TIMELINE_H_
#define NCCL_DCP_TIMELINE_H_

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdint.h>

#include "device/types.h"

namespace nccl_dcp {

constexpr int kTimelineBlocks = 2048;

// The timeline buffer of the current device ([kTimelineBlocks][stages]),
// allocated on first use; NULL when built without -Dtimeline=true.
ncclResult_t timelineBuffer(uint64_t** buffer);
ncclResult_t timelineReset(cudaStream_t stream);
ncclResult_t timelineRead(uint64_t* stamps /* [kTimelineBlocks][kTimelineSlots], host */);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_TIMELINE_H_
