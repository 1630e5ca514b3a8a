/*************************************************************************
 * The library's side of the profiler plugin seam (DESIGN §6): every
 * enqueued call is counted in its context's stats and, when NCCL loaded
 * libnccl-profiler-dcp.so into this process (NCCL_PROFILER_PLUGIN=dcp),
 * handed to the plugin's registry so one report shows NCCL's all-to-alls
 * and the fused calls side by side. The library never links the plugin.
 * Below the context: it knows a call's site, not the Context (context.h).
 ************************************************************************/
#ifndef NCCL_DCP_PROFILER_HOOK_H_
#define NCCL_DCP_PROFILER_HOOK_H_

#include <nccl.h>
#include <stdint.h>

#include "nccl_dcp.h"
#include "types.h"

namespace nccl_dcp {

// A context's calls, as counted: the one place calls are recorded (the
// profiler plugin reads this, DESIGN §6).
struct CallStats {
  uint64_t calls = 0, rows = 0, rounds = 0;
  uint64_t directCalls = 0;  // NONE's phase 2 into registered outputs (context.cc)
};

// Who made a call, as the plugin's record names it (a context's fields;
// context.h fills it).
struct CallSite {
  const void* context;  // never reused: the context's handle, else its address
  ncclComm_t comm;
  int rank, nRanks, cudaDev;
  const Config* cfg;
  ncclDcpPath_t path;
  const ncclDcpTopology_t* topology;
};

// Records one call of `batch` rows in `stats` and hands it to the plugin.
// Lock-free; never fails the call.
void profilerRecordCall(const CallSite& site, int batch, CallStats* stats);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_PROFILER_HOOK_H_
