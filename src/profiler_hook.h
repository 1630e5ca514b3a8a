/*************************************************************************
 * The library's side of the profiler plugin seam (DESIGN §6): every
 * enqueued call is counted in its context's stats and, when NCCL loaded
 * libnccl-profiler-dcp.so into this process (NCCL_PROFILER_PLUGIN=dcp),
 * handed to the plugin's registry so one report shows NCCL's all-to-alls
 * and the fused calls side by side. The library never links the plugin.
 ************************************************************************/
#ifndef NCCL_DCP_PROFILER_HOOK_H_
#define NCCL_DCP_PROFILER_HOOK_H_

#include "nccl_dcp.h"

namespace nccl_dcp {

struct Context;

// Records one call of `batch` rows. Lock-free; never fails the call.
void profilerRecordCall(Context* ctx, int batch);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_PROFILER_HOOK_H_
