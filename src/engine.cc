#include "engine.h"

#include <chrono>
#include <thread>

#include "log.h"

namespace nccl_dcp {

size_t workspaceBound(const Config& c, int nRanks) {
  auto bytes = [&](Proto small, bool withSimple) {
    return makeWorkspaceLayout(small, withSimple, nRanks, workspaceHeadsPerRow(c, nRanks), c.headDim, c.eltSize,
                               c.maxBatch, c.wire, noneRelays(c, nRanks))
        .totalBytes;
  };
  // LL128 forced over PCIe runs as LL (protocol.cc): cover both.
  if (c.protocol != ncclDcpProtoAuto && c.protocol != ncclDcpProtoLL128) return bytes((Proto)c.protocol, false);
  if (c.protocol == ncclDcpProtoLL128) return std::max(bytes(Proto::LL128, false), bytes(Proto::LL, false));
  // AUTO settles on LL or LL128 once the topology is known, and may add
  // SIMPLE for large rounds: cover every outcome.
  return std::max(bytes(Proto::LL, true), bytes(Proto::LL128, true));
}

ncclResult_t Engine::init(const Config& config, int ranks, int myRank, const ProtocolPolicy& p) {
  cfg = config;
  nRanks = ranks;
  rank = myRank;
  policy = p;
  layout = makeWorkspaceLayout(p.small, p.simpleForLarge, nRanks, workspaceHeadsPerRow(cfg, nRanks), cfg.headDim,
                               cfg.eltSize, cfg.maxBatch, cfg.wire, noneRelays(cfg, nRanks),
                               std::min(p.llMaxRows, cfg.maxBatch));
  pdl = cfg.pdl;
  CUDACHECK(cudaGetDevice(&cudaDev));
  CUDACHECK(cudaHostAlloc((void**)&host, sizeof(HostShared), cudaHostAllocMapped));
  host->error = AsyncErrorRecord{0, -1, -1, 0};
  host->stopCode = ncclRemoteError;  // any non-zero status stops the waits
  CUDACHECK(cudaHostGetDevicePointer((void**)&hostErrorDev, &host->error, 0));
  CUDACHECK(cudaMalloc(&lastSplit, sizeof(int) * (kMaxRanks + 1)));
  CUDACHECK(cudaMemset(lastSplit, 0, sizeof(int) * (kMaxRanks + 1)));  // no valid split yet: every slice empty
  simpleSendWarps = simpleWriters(env().simpleSendWarps > 0 ? env().simpleSendWarps : 0);
  const FusedMode mode = fusedModeOf(cfg, nRanks);
  const Proto protos[kRoundTiers] = {p.small, Proto::Simple, Proto::LL};
  const bool used[kRoundTiers] = {true, layout.hasLarge, layout.hasTiny};
  for (int loopback = 0; loopback < 2; loopback++)
    for (int tier = 0; tier < kRoundTiers; tier++) {
      const FusedKey key{cfg.dtype, cfg.wire, mode, protos[tier], loopback == 1};
      kernels[loopback][tier] = fusedLauncher(key);
      if (kernels[loopback][tier] == nullptr && used[tier])
        return fail(ncclInternalError, "no fused kernel for dtype %d, wire %d, mode %d, protocol %d", (int)cfg.dtype,
                    (int)cfg.wire, (int)mode, (int)protos[tier]);
    }
  CUDACHECK(cudaEventCreateWithFlags(&order.done, cudaEventDisableTiming));
  CUDACHECK(cudaEventCreateWithFlags(&order.captureJoin, cudaEventDisableTiming));
  return ncclSuccess;
}

RoundTier Engine::tierOfRound(int rows) const {
  switch (protocolForRound(policy, rows)) {
    case Proto::Simple: return layout.hasLarge ? kTierLarge : kTierSmall;
    case Proto::LL: return layout.hasTiny && rows <= layout.tiny.capacity ? kTierTiny : kTierSmall;
    default: return kTierSmall;
  }
}

Proto Engine::protocolOfRound(int rows) const {
  switch (tierOfRound(rows)) {
    case kTierLarge: return Proto::Simple;
    case kTierTiny: return Proto::LL;
    default: return policy.small;
  }
}

void Engine::release(FreeMode mode) {
  freeMemory(MemoryKind::PinnedHost, cudaDev, host, mode);
  freeMemory(MemoryKind::Device, cudaDev, lastSplit, mode);
  host = nullptr;
  lastSplit = nullptr;
  hostErrorDev = nullptr;
  // Destroying an event never waits for the work it marks.
  for (cudaEvent_t e : {order.done, order.captureJoin})
    if (e != nullptr && cudaEventDestroy(e) != cudaSuccess) cudaGetLastError();
  order = CallOrder();
}

ncclResult_t Engine::asyncError() const {
  const volatile AsyncErrorRecord* e = host ? &host->error : nullptr;
  if (e == nullptr || e->code == 0) return ncclSuccess;
  // The WARN once per context: a watchdog polls ncclDcpGetAsyncError, and
  // every later call finds the same error; each still gets the message.
  const ncclResult_t code = (ncclResult_t)e->code;
  const ncclResult_t reported = describeAsyncError(e);
  if (!asyncErrorWarned.exchange(true)) WARN("%s [%s]", lastError(), resultName(code));
  return reported;
}

ncclResult_t Engine::describeAsyncError(const volatile AsyncErrorRecord* e) const {
  if (e->code == ncclInvalidArgument)
    return record(ncclInvalidArgument,
                "context is poisoned: a call's args->rowCountsDevice on rank %d were negative or did not sum to its "
                "batch (checked by the kernels when they ran; NaN written over the rows of the last split they "
                "accepted): every later call writes NaN over the rows its counts give this rank (the last accepted "
                "split's while they stay invalid); abort the context (ncclDcpContextAbort)",
                e->rank);
  if (e->peer < 0)
    return record((ncclResult_t)e->code,
                "context is poisoned: NCCL reported an asynchronous error on the communicator (%s); abort the "
                "context, then the communicator",
                ncclGetErrorString((ncclResult_t)e->code));
  return record((ncclResult_t)e->code,
              "context is poisoned: rank %d timed out after %d ms waiting for rank %d (round %u): every later "
              "call writes NaN into its outputs; abort the context (ncclDcpContextAbort)",
              e->rank, cfg.timeoutMs, e->peer, e->round);
}

void Engine::poison(ncclResult_t code, int peer) {
  volatile AsyncErrorRecord* e = &host->error;
  if (e->code != 0) return;
  e->rank = rank;
  e->peer = peer;
  e->round = 0;
  e->code = code;
}

ncclResult_t Engine::admit(const CallBuffers* buffers, int nBuffers, int batch, const ncclDcpStrides_t* stridesIn,
                           const ncclDcpCallArgs_t* args, CallPlan* plan) const {
  DCPCHECK(resolveStrides(stridesIn, cfg, nRanks, &plan->strides));
  DCPCHECK(resolveCallArgs(args, cfg, nRanks, batch, &plan->shape));
  plan->shape.split.lastValid = lastSplit;
  for (int i = 0; i < nBuffers; i++)
    DCPCHECK(checkCall(cfg, nRanks, buffers[i], batch, plan->strides, plan->shape,
                       outRowsOf(plan->shape, nBuffers == 1 ? rank : i)));
  return ncclSuccess;
}

ncclResult_t CallOrder::before(cudaStream_t s, Call* call) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  call->captureId = 0;
  CUDACHECK(cudaStreamGetCaptureInfo(s, &status, &call->captureId));
  if (status == cudaStreamCaptureStatusInvalidated)
    return fail(ncclInvalidUsage, "stream %p is in a stream capture that was invalidated", (void*)s);
  call->capturing = status == cudaStreamCaptureStatusActive;
  if (!hasLast) return ncclSuccess;
  if (call->capturing && lastCaptured && call->captureId == captureId) {
    // The same capture on another stream: joined to where the last call's
    // stream stands now (recorded only when the stream changes).
    if (s != lastStream) {
      CUDACHECK(cudaEventRecord(captureJoin, lastStream));
      CUDACHECK(cudaStreamWaitEvent(s, captureJoin, 0));
    }
  } else if (call->capturing) {
    CUDACHECK(cudaStreamWaitEvent(s, done, cudaEventWaitExternal));
  } else if (s != lastStream || lastCaptured) {
    CUDACHECK(cudaStreamWaitEvent(s, done, 0));
  }
  return ncclSuccess;
}

// Records e at the end of what `s` has captured so far as a leaf of the
// graph: nothing in the graph waits for it, so it stands on no path between
// this call and the next, and each replay still records e once this call's
// work is done (an external event-record node).
static ncclResult_t recordAsLeaf(cudaStream_t s, cudaEvent_t e) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  size_t n = 0;
#if CUDART_VERSION >= 13000
  const cudaGraphEdgeData* edges = nullptr;
  CUDACHECK(cudaStreamGetCaptureInfo(s, &status, &id, &graph, &deps, &edges, &n));
#else
  CUDACHECK(cudaStreamGetCaptureInfo_v2(s, &status, &id, &graph, &deps, &n));
#endif
  cudaGraphNode_t node;
  CUDACHECK(cudaGraphAddEventRecordNode(&node, graph, deps, n, e));
  return ncclSuccess;
}

ncclResult_t CallOrder::after(cudaStream_t s, const Call& call) {
  if (call.capturing) {
    DCPCHECK(recordAsLeaf(s, done));
  } else {
    CUDACHECK(cudaEventRecord(done, s));
  }
  hasLast = true;
  lastStream = s;
  lastCaptured = call.capturing;
  captureId = call.captureId;
  return ncclSuccess;
}

ncclResult_t Engine::enqueuePoison(const CallBuffers* buffers, int nBuffers, int batch, const CallPlan& plan,
                                   cudaStream_t stream) const {
  for (int i = 0; i < nBuffers; i++)
    DCPCHECK(launchPoison(makeCombineParams(cfg, nRanks, plan.shape, nBuffers == 1 ? rank : i, 0, batch, nullptr,
                                            nullptr, (char*)buffers[i].out, buffers[i].outLse, plan.strides, nullptr),
                          stream));
  return ncclSuccess;
}

// The stop code into the status word, on `side` (no other stream: the
// context's own may be full of stuck kernels). Without it the kernels still
// leave at their own timeout.
static void sendStop(const HostShared* host, uint32_t* statusWord, cudaStream_t side) {
  if (statusWord && cudaMemcpyAsync(statusWord, &host->stopCode, sizeof(host->stopCode), cudaMemcpyHostToDevice,
                                    side) != cudaSuccess) {
    cudaGetLastError();
    WARN("abort: the stop signal could not be sent; the kernels stop at their timeout");
  }
}

void Engine::stop(uint32_t* statusWord) const {
  cudaStream_t side = nullptr;
  if (cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  sendStop(host, statusWord, side);
  cudaStreamDestroy(side);  // returns at once; the copy still runs
}

bool Engine::stopAndDrain(uint32_t* statusWord, int drainMs) const {
  cudaStream_t side = nullptr;
  if (cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  sendStop(host, statusWord, side);
  const bool drained = waitIdle(side, order.hasLast ? order.done : nullptr, drainMs);
  cudaStreamDestroy(side);
  return drained;
}

ncclResult_t waitForComm(ncclComm_t comm, const char* what, int timeoutMs, CommStateQuery query) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = query(comm, &state);
    if (r != ncclSuccess) return fail(r, "%s: ncclCommGetAsyncError failed: %s", what, ncclGetErrorString(r));
    if (state == ncclSuccess) return ncclSuccess;
    if (state != ncclInProgress)
      return fail(state, "%s failed on the communicator: %s (%s)", what, ncclGetErrorString(state),
                  ncclGetLastError(comm));
    if (timeoutMs > 0 && std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(timeoutMs))
      return fail(ncclRemoteError,
                  "%s: the communicator is still in progress after %d ms (timeoutMs; a peer that never joined?): "
                  "abort it (ncclCommAbort)",
                  what, timeoutMs);
    std::this_thread::yield();
  }
}

ncclResult_t settle(ncclComm_t comm, ncclResult_t r, const char* what, int timeoutMs) {
  if (r == ncclInProgress) return waitForComm(comm, what, timeoutMs);
  if (r != ncclSuccess) return fail(r, "%s failed: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(comm));
  return ncclSuccess;
}

bool waitIdle(cudaStream_t stream, cudaEvent_t event, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (int i = 0; i < 2; i++) {
    if (i == 1 && event == nullptr) break;
    for (;;) {
      const cudaError_t e = i == 0 ? cudaStreamQuery(stream) : cudaEventQuery(event);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        cudaGetLastError();
        TRACE("%s cannot be queried: %s", i == 0 ? "the stop's stream" : "the last call's event", cudaGetErrorString(e));
        return false;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  return true;
}

}  // namespace nccl_dcp
