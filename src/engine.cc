#include "engine.h"

#include <chrono>
#include <thread>

#include "log.h"

namespace nccl_dcp {

size_t workspaceBound(const Config& c, int nRanks) {
  if (c.protocol != ncclDcpProtoAuto)
    return makeWorkspaceLayout((Proto)c.protocol, false, nRanks, c.localHeads, c.headDim, c.eltSize,
                               c.maxBatch).totalBytes;
  // AUTO settles on LL or LL128 once the topology is known, and may add
  // SIMPLE for large rounds: cover every outcome.
  size_t bound = 0;
  for (Proto small : {Proto::LL, Proto::LL128})
    bound = std::max(bound, makeWorkspaceLayout(small, true, nRanks, c.localHeads, c.headDim,
                                                c.eltSize, c.maxBatch).totalBytes);
  return bound;
}

ncclResult_t Engine::init(const Config& config, int ranks, int myRank, const ProtocolPolicy& p) {
  cfg = config;
  nRanks = ranks;
  rank = myRank;
  policy = p;
  layout = makeWorkspaceLayout(p.small, p.simpleForLarge, nRanks, cfg.localHeads, cfg.headDim, cfg.eltSize,
                               cfg.maxBatch);
  pdl = cfg.pdl;
  simpleSendWarps = env().simpleSendWarps > 0 ? env().simpleSendWarps : 0;
  CUDACHECK(cudaGetDevice(&cudaDev));
  CUDACHECK(cudaHostAlloc((void**)&host, sizeof(HostShared), cudaHostAllocMapped));
  host->error = AsyncErrorRecord{0, -1, -1, 0};
  host->stopCode = ncclRemoteError;  // any non-zero status stops the waits
  CUDACHECK(cudaHostGetDevicePointer((void**)&hostErrorDev, &host->error, 0));
  return ncclSuccess;
}

void Engine::release(FreeMode mode) {
  freeMemory(MemoryKind::PinnedHost, cudaDev, host, mode);
  host = nullptr;
  hostErrorDev = nullptr;
}

ncclResult_t Engine::asyncError() const {
  const volatile AsyncErrorRecord* e = host ? &host->error : nullptr;
  if (e == nullptr || e->code == 0) return ncclSuccess;
  return fail((ncclResult_t)e->code,
              "context is poisoned: rank %d timed out after %d ms waiting for rank %d (round %u); "
              "destroy the context",
              e->rank, cfg.timeoutMs, e->peer, e->round);
}

void Engine::bindStream(cudaStream_t s) {
  streamBound = true;
  stream = s;
}

ncclResult_t Engine::admit(const CallBuffers* buffers, int nBuffers, int batch, const ncclDcpStrides_t* stridesIn,
                           cudaStream_t s, Strides* strides) {
  DCPCHECK(asyncError());
  if (streamBound && s != stream)
    return fail(ncclInvalidUsage,
                "stream %p is not the stream %p the context is bound to (calls on one context must "
                "be ordered; rebind with ncclDcpContextBindStream)",
                (void*)s, (void*)stream);
  DCPCHECK(resolveStrides(stridesIn, cfg, nRanks, strides));
  for (int i = 0; i < nBuffers; i++) DCPCHECK(checkCall(cfg, nRanks, buffers[i], batch, *strides));
  bindStream(s);
  return ncclSuccess;
}

bool Engine::stopAndDrain(uint32_t* statusWord, int drainMs) const {
  cudaStream_t side = nullptr;
  if (cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  // Without the stop the kernels still leave at their own timeout.
  if (statusWord && cudaMemcpyAsync(statusWord, &host->stopCode, sizeof(host->stopCode), cudaMemcpyHostToDevice,
                                    side) != cudaSuccess) {
    cudaGetLastError();
    WARN("abort: the stop signal could not be sent; the kernels stop at their timeout");
  }
  const cudaStream_t busy[2] = {side, stream};
  const bool drained = waitIdle(busy, streamBound ? 2 : 1, drainMs);
  cudaStreamDestroy(side);
  return drained;
}

bool waitIdle(const cudaStream_t* streams, int n, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (int i = 0; i < n; i++) {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(streams[i]);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        cudaGetLastError();
        TRACE("stream %p cannot be queried: %s", (void*)streams[i], cudaGetErrorString(e));
        return false;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  return true;
}

}  // namespace nccl_dcp
