/*************************************************************************
 * libnccl-profiler-dcp.so: the exported symbols. ncclProfiler_v5 (NCCL
 * 2.28) and ncclProfiler_v6 (2.29+) share one implementation; NCCL takes the
 * newest it knows and refuses the library if it knows neither. Every entry
 * point returns ncclSuccess unless its arguments are unusable (init: always,
 * see notProfiled), and turns the plugin off (one warning) instead of
 * letting a failure reach NCCL.
 * ncclDcpProfilerHook_v1 is the door for libnccl_dcp's own calls.
 ************************************************************************/
#include <dlfcn.h>

#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "registry.h"

using namespace nccl_dcp::plugin;

// The layouts NCCL's own headers give on LP64 (checked against NCCL
// 2.28.9's profiler_v5.h and 2.30.7's profiler_v6.h).
static_assert(sizeof(ncclProfilerEventDescr_v5_t) == 112, "v5 descriptor layout");
static_assert(sizeof(ncclProfilerEventDescr_v6_t) == 112, "v6 descriptor layout");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.count) == 56, "v5 coll.count");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.nChannels) == 80, "v5 coll.nChannels");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.parentGroup) == 104, "v5 coll.parentGroup");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, p2p.peer) == 56, "v5 p2p.peer");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, p2p.parentGroup) == 64, "v5 p2p.parentGroup");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, kernelCh.pTimer) == 32, "v5 kernelCh.pTimer");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, coll.parentGroup) == 104, "v6 coll.parentGroup");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, ceColl.count) == 56, "v6 ceColl.count");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, ceColl.datatype) == 72, "v6 ceColl.datatype");
static_assert(sizeof(ncclProfilerEventStateArgs_v5_t) == 8, "state args layout");

extern "C" {
extern ncclProfiler_v5_t ncclProfiler_v5;
// const: external linkage needs this extern declaration.
__attribute__((visibility("default"))) extern const ncclDcpProfilerHook_v1_t ncclDcpProfilerHook_v1;
}

namespace {

Registry& registry() { return Registry::instance(); }

// Any exception turns the plugin off; NCCL sees success and goes on.
template <typename F>
ncclResult_t guarded(const char* where, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    registry().disable(std::string(where) + ": " + e.what());
  } catch (...) {
    registry().disable(std::string(where) + ": unknown exception");
  }
  return ncclSuccess;
}

// The device current on the thread NCCL initialises the communicator on
// (ncclCommInitRankFunc sets it first), through the driver NCCL already
// loaded; -1 when there is none. The plugin links no CUDA library.
int currentCudaDevice() {
  using CtxGetDevice = int (*)(int*);
  static const CtxGetDevice ctxGetDevice = [] {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return cuda ? (CtxGetDevice)dlsym(cuda, "cuCtxGetDevice") : nullptr;
  }();
  int dev = -1;
  return ctxGetDevice && ctxGetDevice(&dev) == 0 ? dev : -1;
}

// NCCL unloads its profiler when its last communicator is destroyed; the
// registry (finished communicators, nccl-dcp's handle on the hook) must
// outlive that, so the library keeps itself loaded.
void stayLoaded() {
  static std::once_flag once;
  std::call_once(once, [] {
    Dl_info self;
    if (dladdr((void*)&ncclProfiler_v5, &self) && self.dli_fname)
      dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  });
}

// A communicator the plugin does not profile (bad arguments, memory short):
// one WARN, no context, ncclSuccess, and the activation mask -- NCCL's, one
// for the whole process -- left as the other communicators set it. Never an
// error: NCCL 2.30 (src/plugin/profiler.cc, ncclProfilerPluginInit) unloads
// the plugin when init fails and again at that communicator's finalize
// (ncclProfilerPluginFinalize unloads whether or not it had a context), so
// one failed init would drop the plugin's reference count twice and close
// it under the process's other communicators. NCCL calls no finalize for a
// null context and hands a null context to startEvent, which ignores it.
ncclResult_t notProfiled() { return ncclSuccess; }

int activationMask(bool kernelTiming, int abiVersion) {
  int mask = ncclProfileGroup | ncclProfileColl | ncclProfileP2p;
  if (kernelTiming) mask |= ncclProfileKernelCh;
  if (abiVersion >= 6) mask |= ncclProfileCeColl;
  return mask;
}

ncclResult_t initComm(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                      int nranks, int rank, ncclDebugLogger_t logfn, int abiVersion) {
  Registry& reg = registry();
  reg.setLogger(logfn);
  if (context == nullptr || eActivationMask == nullptr) {
    reg.log(NCCL_LOG_WARN, "init: null %s; not profiled", context == nullptr ? "context" : "eActivationMask");
    if (context != nullptr) *context = nullptr;
    return notProfiled();
  }
  *context = nullptr;
  if (!reg.enabled()) {
    *eActivationMask = 0;
    return ncclSuccess;
  }
  if (nranks <= 0 || rank < 0 || rank >= nranks) {
    reg.log(NCCL_LOG_WARN, "init: rank %d of nranks %d is no communicator; not profiled", rank, nranks);
    return notProfiled();
  }
  const Settings settings = reg.settings();
  if (settings.injectFault == "init") throw std::runtime_error("injected init fault");
  stayLoaded();
  CommIdentity id;
  id.commHash = commId;
  id.name = commName ? commName : "";
  id.rank = rank;
  id.nRanks = nranks;
  id.nNodes = nNodes;
  id.cudaDev = currentCudaDevice();
  CommProfile* p = reg.addComm(id, settings.kernelTiming);
  if (p == nullptr) {
    reg.log(NCCL_LOG_WARN, "init: out of memory for communicator %016llx; not profiled", (unsigned long long)commId);
    return notProfiled();
  }
  *eActivationMask = activationMask(settings.kernelTiming, abiVersion);
  *context = p;
  reg.log(NCCL_LOG_INFO, "profiling comm \"%s\" %016llx rank %d/%d nodes %d dev %d (profiler ABI v%d, GPU time %s)",
          id.name.c_str(), (unsigned long long)commId, rank, nranks, nNodes, id.cudaDev, abiVersion,
          settings.kernelTiming ? "on" : "off");
  return ncclSuccess;
}

ncclResult_t initV5(void** context, uint64_t commId, int* mask, const char* name, int nNodes, int nranks, int rank,
                    ncclDebugLogger_t logfn) {
  return guarded("init", [&] { return initComm(context, commId, mask, name, nNodes, nranks, rank, logfn, 5); });
}

ncclResult_t initV6(void** context, uint64_t commId, int* mask, const char* name, int nNodes, int nranks, int rank,
                    ncclDebugLogger_t logfn) {
  return guarded("init", [&] { return initComm(context, commId, mask, name, nNodes, nranks, rank, logfn, 6); });
}

// The events this plugin keeps; any other type gets no handle.
template <typename Descr>
void* startOne(CommProfile* p, const Descr& d) {
  switch (d.type) {
    case ncclProfileGroup:
      return p->startGroup();
    case ncclProfileColl:
      return p->startTask({true, d.coll.func, d.coll.datatype, d.coll.count, -1, d.coll.nChannels, d.coll.parentGroup});
    case ncclProfileP2p:
      return p->startTask({false, d.p2p.func, d.p2p.datatype, d.p2p.count, d.p2p.peer, d.p2p.nChannels,
                           d.p2p.parentGroup});
    case ncclProfileKernelCh:
      return p->startKernel(d.parentObj, d.kernelCh.pTimer);
  }
  if constexpr (std::is_same<Descr, ncclProfilerEventDescr_v6_t>::value) {
    if (d.type == ncclProfileCeColl) p->countCall(d.ceColl.func, d.ceColl.datatype, d.ceColl.count);
  }
  return nullptr;
}

template <typename Descr>
ncclResult_t startEvent(void* context, void** eHandle, Descr* eDescr) {
  if (eHandle == nullptr) return ncclSuccess;  // nowhere to put a handle: nothing to start
  *eHandle = nullptr;
  if (context == nullptr || eDescr == nullptr || !registry().enabled()) return ncclSuccess;
  CommProfile* p = static_cast<CommProfile*>(context);
  if (!p->valid()) return ncclInvalidArgument;
  return guarded("startEvent", [&] {
    *eHandle = startOne(p, *eDescr);
    return ncclSuccess;
  });
}

ncclResult_t stopEvent(void* eHandle) {
  if (eHandle == nullptr) return ncclSuccess;
  return guarded("stopEvent", [&] {
    Handle* h = static_cast<Handle*>(eHandle);
    // Task and kernel stops carry nothing: their content came at start
    // (and, for kernels, in the KernelChStop state).
    if (h->kind == Handle::Group && h->slot != nullptr) h->slot->profile->stopGroup(h);
    return ncclSuccess;
  });
}

ncclResult_t recordEventState(void* eHandle, ncclProfilerEventState_t eState, ncclProfilerEventStateArgs_v5_t* args) {
  if (eHandle == nullptr || eState != ncclProfilerKernelChStop) return ncclSuccess;
  return guarded("recordEventState", [&] {
    Handle* h = static_cast<Handle*>(eHandle);
    if (h->kind != Handle::Kernel || h->slot == nullptr) return ncclSuccess;
    if (args == nullptr) h->slot->profile->noteUnmatched();
    else h->slot->profile->recordKernelStop(h, args->kernelCh.pTimer);
    return ncclSuccess;
  });
}

ncclResult_t finalize(void* context) {
  if (context == nullptr) return ncclSuccess;  // init failed or the plugin was off
  return guarded("finalize", [&] {
    if (registry().finalizeComm(static_cast<CommProfile*>(context))) return ncclSuccess;
    registry().log(NCCL_LOG_WARN, "finalize: %p is no live communicator (finalized twice?); ignored", context);
    return ncclInvalidArgument;
  });
}

ncclResult_t startEventV5(void* c, void** h, ncclProfilerEventDescr_v5_t* d) { return startEvent(c, h, d); }
ncclResult_t startEventV6(void* c, void** h, ncclProfilerEventDescr_v6_t* d) { return startEvent(c, h, d); }

void hookRecordCall(const ncclDcpProfilerCall_v1_t* call) {
  if (call == nullptr || call->size < sizeof(ncclDcpProfilerCall_v1_t) || !registry().enabled()) return;
  guarded("nccl-dcp call", [&] {
    registry().recordDcpCall(*call);
    return ncclSuccess;
  });
}

// A process that exits without destroying its communicators still leaves a
// report (marked not finalized).
__attribute__((destructor)) void writeReportAtExit() {
  guarded("exit", [] {
    registry().writeAtExit();
    return ncclSuccess;
  });
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) ncclProfiler_v5_t ncclProfiler_v5 = {
    "nccl-dcp", initV5, startEventV5, stopEvent, recordEventState, finalize};

__attribute__((visibility("default"))) ncclProfiler_v6_t ncclProfiler_v6 = {
    "nccl-dcp", initV6, startEventV6, stopEvent, recordEventState, finalize};

const ncclDcpProfilerHook_v1_t ncclDcpProfilerHook_v1 = {"nccl-dcp", hookRecordCall};  // visible: declared above

}  // extern "C"
