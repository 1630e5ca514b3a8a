/*************************************************************************
 * The context behind an ncclDcpContext_t handle (handles.h): the user's
 * communicator, the
 * workspace of the fused path (nccl-window: a symmetric window; cuda-ipc:
 * cudaMalloc memory the peers map) or the all-to-all buffers (fallback),
 * the engine (config, policy, error record, stream order) and the topology
 * report. Every resource field is null/false until created, so one
 * release undoes exactly what exists (DESIGN §10).
 ************************************************************************/
#ifndef NCCL_DCP_CONTEXT_H_
#define NCCL_DCP_CONTEXT_H_

#include <cuda_runtime_api.h>

#include <vector>

#include "device/nccl_compat.h"

#include "agreement.h"
#include "engine.h"
#include "ipc_lifetime.h"
#include "nccl_dcp.h"
#include "profiler_hook.h"
#include "registered_output.h"

namespace nccl_dcp {

struct Context {
  ncclDcpContext_t handle = nullptr;  // the user's name for it (handles.h)
  ncclComm_t comm = nullptr;
  int rank = 0, nRanks = 0, cudaDev = -1;
  Engine engine;
  ncclDcpPath_t path = ncclDcpPathFused;
  ncclDcpProvider_t provider = ncclDcpProviderFallback;

  // Fused path. nccl-window: the workspace is [windowOffset, + layout.totalBytes)
  // of window; cuda-ipc: ownedMemory, mapped by every peer.
  ncclDevComm devComm = {};
  bool hasDevComm = false;
  void* ownedMemory = nullptr;  // allocated by us (else the workspace is in the app's window)
  MemoryKind ownedKind = MemoryKind::NcclMem;  // cuda-ipc: Device
  ncclWindow_t window = nullptr;
  bool ownsWindow = false;      // window registered by us (on ownedMemory)
  size_t windowOffset = 0;
  char* lsa[NCCL_DCP_MAX_RANKS] = {};  // every rank's workspace, as this rank addresses it
  bool ipcMapped[NCCL_DCP_MAX_RANKS] = {};  // cuda-ipc: lsa[r] opened with cudaIpcOpenMemHandle
  // cuda-ipc: ownedMemory as exported (its lifetime: ipc_lifetime.h), the
  // uses this context holds of its peer threads' workspaces, and every
  // rank's export as create's records gave it (destroy's agreement).
  ExportedWorkspace* exported = nullptr;
  ExportedWorkspace* peerUse[NCCL_DCP_MAX_RANKS] = {};
  IpcExport exports[NCCL_DCP_MAX_RANKS] = {};

  // Fallback path: ncclAlltoAll buffers of maxBatch rows.
  FallbackBuffers fallback;

  ncclDcpTopology_t topology = NCCL_DCP_TOPOLOGY_INITIALIZER;

  // Registered outputs (ncclDcpOutputRegister), oldest first; released
  // with the context. registrations: every attempt so far, the serial of
  // the next (the same on every rank: registering is collective).
  std::vector<RegisteredOutput*> outputs;
  uint32_t registrations = 0;

  CallStats stats;  // the one place calls are recorded (profiler_hook.h)
};

// Records one call of `batch` rows: in ctx->stats and, when it is loaded,
// in the profiler plugin (profiler_hook.h).
inline void profilerRecordCall(Context* ctx, int batch) {
  // The handle is never reused, unlike the context's address (a test may have none).
  const CallSite site = {ctx->handle ? (const void*)ctx->handle : (const void*)ctx,
                         ctx->comm,
                         ctx->rank,
                         ctx->nRanks,
                         ctx->cudaDev,
                         &ctx->engine.cfg,
                         ctx->path,
                         &ctx->topology};
  profilerRecordCall(site, batch, &ctx->stats);
}

// A window region supplied by the application (ncclDcpContextCreateInWindow).
struct AppWindow {
  ncclWindow_t window;
  size_t offset, bytes;
};

// Collective creation for nComms communicators driven by this thread.
// appWindows: NULL, or one per communicator.
ncclResult_t createContexts(int nComms, const ncclComm_t* comms, const ncclDcpConfig_t* cfg,
                            const AppWindow* appWindows, Context** out);
// Blocking. On cuda-ipc with ranks in several processes, collective too:
// each rank closes its mappings of its peers' workspaces, the ranks agree
// on it through the communicator (bounded by the context's timeoutMs),
// then each frees its own (ipc_lifetime.h).
ncclResult_t destroyContexts(int n, Context* const* ctxs);
// Local: stops the context's kernels, frees what it can without waiting
// for a peer (ncclDcpContextAbort).
ncclResult_t abortContext(Context* ctx);
// Abort's first step, while other threads may still use the context: the
// stop signal to its kernels, nothing waited for or freed.
void signalAbort(Context* ctx);

// ncclSuccess, or what poisoned the context (a device-side wait that timed
// out; on the fallback path, NCCL's asynchronous error on the communicator).
// Never synchronizes.
ncclResult_t contextAsyncError(Context* ctx);

// ncclDcpOutputRegister(Group) for n contexts driven by this thread
// (ranges checked, checkOutputRanges): nccl-window on a NONE context in
// two phases registers both as windows (collective, one NCCL group for
// all) and resolves every rank's bases; elsewhere records them, unused.
// All or none: on a failure nothing stays registered.
ncclResult_t registerOutputs(int n, Context* const* ctxs, const OutputRange* outs, const OutputRange* outLses,
                             RegisteredOutput** handles);
// ncclDcpOutputDeregister: reg must be one of ctx->outputs (else
// ncclInvalidArgument); waits for ctx's last call first.
ncclResult_t deregisterOutput(Context* ctx, RegisteredOutput* reg);

// Enqueues one call (arguments already admitted by ctx->engine), on any
// stream, ordered after the context's previous call (CallOrder).
ncclResult_t contextEnqueue(Context* ctx, const CallBuffers& buf, int batch, const CallPlan& plan,
                            cudaStream_t stream);

// A call made between ncclDcpGroupStart and ncclDcpGroupEnd, admitted.
struct GroupedCall {
  Context* ctx;
  CallBuffers buf;
  int batch;
  CallPlan plan;
  cudaStream_t stream;
};
// ncclDcpGroupEnd's work: every call enqueued (one per context), the
// all-to-alls of the fallback ones, round by round, in one
// ncclGroupStart/End, so one thread can drive every GPU of a communicator.
ncclResult_t contextEnqueueGroup(const std::vector<GroupedCall>& calls);

// How long abort waits for the context's kernels to leave once their waits
// were told to stop: far above the microseconds they need, and bounded.
constexpr int kAbortDrainMs = 500;

}  // namespace nccl_dcp

#endif  // NCCL_DCP_CONTEXT_H_
