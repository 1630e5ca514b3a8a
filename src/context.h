/*************************************************************************
 * The context behind ncclDcpContext_t: the user's communicator, the
 * workspace in a symmetric window (fused path) or the all-to-all buffers
 * (fallback), the bound stream and the topology report.
 ************************************************************************/
#ifndef NCCL_DCP_CONTEXT_H_
#define NCCL_DCP_CONTEXT_H_

#include <cuda_runtime_api.h>
#include "nccl_compat.h"

#include "engine.h"
#include "nccl_dcp.h"

struct ncclDcpContext {
  ncclComm_t comm = nullptr;
  int rank = 0, nRanks = 0, cudaDev = -1;
  nccl_dcp::Engine engine;
  ncclDcpPath_t path = ncclDcpPathFused;

  // Fused path: the workspace is [windowOffset, + layout.totalBytes) of window.
  ncclWindow_t window = nullptr;
  size_t windowOffset = 0;
  void* ownedMemory = nullptr;  // ncclMemAlloc'd and registered by us (else the app's window)
  ncclDevComm devComm = {};
  bool hasDevComm = false;

  // Fallback path: ncclAlltoAll buffers of maxBatch rows.
  char* sendData = nullptr;
  char* recvData = nullptr;
  float* sendLse = nullptr;
  float* recvLse = nullptr;

  bool streamBound = false;
  cudaStream_t stream = nullptr;

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

// Enqueues one call (arguments already checked).
ncclResult_t contextEnqueue(ncclDcpContext_t ctx, const CallBuffers& buf, int batch, const Strides& strides,
                            cudaStream_t stream);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_CONTEXT_H_
