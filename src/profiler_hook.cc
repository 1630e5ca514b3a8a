#include "profiler_hook.h"

#include <dlfcn.h>

#include "../plugin/dcp_hook.h"
#include "log.h"

namespace nccl_dcp {

namespace {

// The plugin's hook, looked up once. NCCL dlopens its profiler RTLD_LOCAL,
// so dlsym(RTLD_DEFAULT) cannot see it: the loaded library is found by its
// SONAME instead (RTLD_NOLOAD: never loaded by us). The handle is kept, so
// the plugin stays mapped while its pointer is cached (it also pins itself).
// NCCL loads the plugin when it initialises a communicator, before any
// context can exist, so the first call finds it if it is there at all.
const ncclDcpProfilerHook_v1_t* pluginHook() {
  static const ncclDcpProfilerHook_v1_t* const hook = []() -> const ncclDcpProfilerHook_v1_t* {
    void* plugin = dlopen(NCCL_DCP_PROFILER_HOOK_SONAME, RTLD_NOW | RTLD_NOLOAD);
    if (plugin == nullptr) return nullptr;
    auto* h = (const ncclDcpProfilerHook_v1_t*)dlsym(plugin, NCCL_DCP_PROFILER_HOOK_SYMBOL);
    if (h == nullptr || h->recordCall == nullptr) {
      WARN("%s is loaded but has no %s: calls are not reported to it", NCCL_DCP_PROFILER_HOOK_SONAME,
           NCCL_DCP_PROFILER_HOOK_SYMBOL);
      return nullptr;
    }
    INFO("profiler plugin %s found: calls are recorded in its report", NCCL_DCP_PROFILER_HOOK_SONAME);
    return h;
  }();
  return hook;
}

// Every peer reached over NVLink (or self), per the topology report.
int nvlinkVerdict(const ncclDcpTopology_t& t) {
  if (!t.classified) return ncclDcpHookNvlinkUnknown;
  for (int r = 0; r < t.nRanks && r < NCCL_DCP_MAX_RANKS; r++)
    if (t.link[r] != ncclDcpLinkSelf && t.link[r] != ncclDcpLinkNvlink) return ncclDcpHookNvlinkNo;
  return ncclDcpHookNvlinkYes;
}

}  // namespace

void profilerRecordCall(const CallSite& site, int batch, CallStats* stats) {
  const Config& c = *site.cfg;
  stats->calls++;
  stats->rows += batch;
  stats->rounds += (batch + c.maxBatch - 1) / c.maxBatch;
  const ncclDcpProfilerHook_v1_t* hook = pluginHook();
  if (hook == nullptr) return;
  ncclDcpProfilerCall_v1_t call = {};
  call.size = sizeof(call);
  call.context = site.context;
  call.comm = site.comm;
  call.rank = site.rank;
  call.nRanks = site.nRanks;
  call.cudaDev = site.cudaDev;
  call.headDim = c.headDim;
  call.localHeads = c.localHeads;
  call.eltSize = c.eltSize;
  call.path = site.path;
  call.protocol = site.topology->protocol;
  call.nvlink = nvlinkVerdict(*site.topology);
  call.rows = batch;
  call.bytes = (uint64_t)batch * site.nRanks * c.localHeads * c.headDim * c.eltSize;
  hook->recordCall(&call);
}

}  // namespace nccl_dcp
