/*************************************************************************
 * The context behind ncclDcpContext_t: the user's communicator, the
 * workspace in a symmetric window (fused path) or the all-to-all buffers
 * (fallback), the engine (config, policy, error record, bound stream) and
 * the topology report. Every resource field is null/false until created,
 * so one release undoes exactly what exists (DESIGN §10).
 ************************************************************************/
#ifndef NCCL_DCP_CONTEXT_H_
#define NCCL_DCP_CONTEXT_H_

#include <cuda_runtime_api.h>
#include "device/nccl_compat.h"

#include "engine.h"
#include "nccl_dcp.h"

struct ncclDcpContext {
  ncclComm_t comm = nullptr;
  int rank = 0, nRanks = 0, cudaDev = -1;
  nccl_dcp::Engine engine;
  ncclDcpPath_t path = ncclDcpPathFused;

  // Fused path: the workspace is [windowOffset, + layout.totalBytes) of window.
  ncclDevComm devComm = {};
  bool hasDevComm = false;
  void* ownedMemory = nullptr;  // ncclMemAlloc'd by us (else the workspace is in the app's window)
  ncclWindow_t window = nullptr;
  bool ownsWindow = false;      // window registered by us (on ownedMemory)
  size_t windowOffset = 0;
  char* lsa[NCCL_DCP_MAX_RANKS] = {};  // every rank's workspace, as this rank addresses it

  // Fallback path: ncclAlltoAll buffers of maxBatch rows.
  nccl_dcp::FallbackBuffers fallback;

  ncclDcpTopology_t topology = NCCL_DCP_TOPOLOGY_INITIALIZER;

  // The one place calls are recorded (the profiler plugin reads this, DESIGN §6).
  struct CallStats {
    uint64_t calls = 0, rows = 0, rounds = 0;
  } stats;
};

namespace nccl_dcp {

// A window region supplied by the application (ncclDcpContextCreateInWindow).
struct AppWindow {
  ncclWindow_t window;
  size_t offset, bytes;
};

// Collective creation for nComms communicators driven by this thread.
// appWindows: NULL, or one per communicator.
ncclResult_t createContexts(int nComms, const ncclComm_t* comms, const ncclDcpConfig_t* cfg,
                            const AppWindow* appWindows, ncclDcpContext_t* out);
ncclResult_t destroyContexts(int n, ncclDcpContext_t* ctxs);
// Local: stops the context's kernels, frees what it can without waiting
// for a peer (ncclDcpContextAbort).
ncclResult_t abortContext(ncclDcpContext_t ctx);

// Enqueues one call (arguments already admitted by ctx->engine).
ncclResult_t contextEnqueue(ncclDcpContext_t ctx, const CallBuffers& buf, int batch, const Strides& strides,
                            cudaStream_t stream);

// How long abort waits for the context's kernels to leave once their waits
// were told to stop: far above the microseconds they need, and bounded.
constexpr int kAbortDrainMs = 500;

}  // namespace nccl_dcp

#endif  // NCCL_DCP_CONTEXT_H_
