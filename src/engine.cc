#include "engine.h"

#include <algorithm>

#include "error.h"
#include "log.h"

namespace nccl_dcp {

static WorkspaceLayout layoutFor(const Config& c, int nRanks, const ProtocolPolicy& p) {
  return makeWorkspaceLayout(p.small, p.simpleForLarge, nRanks, c.localHeads, c.headDim, c.eltSize,
                             c.maxBatch);
}

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
  layout = layoutFor(cfg, nRanks, policy);
  const Env& e = env();
  pdl = e.pdl == kEnvUnset ? true : e.pdl == 1;
  CUDACHECK(cudaHostAlloc((void**)&hostError, sizeof(AsyncErrorRecord), cudaHostAllocMapped));
  *hostError = AsyncErrorRecord{0, -1, -1, 0};
  CUDACHECK(cudaHostGetDevicePointer((void**)&hostErrorDev, hostError, 0));
  return ncclSuccess;
}

void Engine::release() {
  if (hostError) cudaFreeHost(hostError);
  hostError = hostErrorDev = nullptr;
}

ncclResult_t Engine::asyncError() const {
  const volatile AsyncErrorRecord* e = hostError;
  if (e == nullptr || e->code == 0) return ncclSuccess;
  return fail((ncclResult_t)e->code,
              "context is poisoned: rank %d timed out after %d ms waiting for rank %d (round %u); "
              "destroy the context",
              e->rank, cfg.timeoutMs, e->peer, e->round);
}

ncclResult_t Engine::enqueue(const CallBuffers* buffers, int batch, const Strides& strides,
                             const Addressing& addr, cudaStream_t stream, int silentRank) const {
  const int nIo = addr.loopback ? nRanks : 1;
  FusedLaunch l = {};
  l.strides = strides;
  l.dtype = cfg.dtype;
  l.lseBase = cfg.lseBase;
  l.nRanks = nRanks;
  l.rank = rank;
  l.timeoutNs = (uint64_t)cfg.timeoutMs * 1000000ull;
  l.hostError = hostErrorDev;
  l.addr = addr;
  l.pdl = pdl;
  l.silentRank = silentRank;
  const int64_t e = cfg.eltSize;
  // Rounds in the same order on every rank: each is one launch, so a slot
  // is reused only after every peer has finished reading it (two rounds on).
  for (int row0 = 0; row0 < batch; row0 += cfg.maxBatch) {
    l.rows = std::min(cfg.maxBatch, batch - row0);
    const Proto proto = protocolForRound(policy, l.rows);
    l.region = proto == Proto::Simple && layout.hasLarge ? layout.large : layout.small;
    for (int i = 0; i < nIo; i++) {
      const CallBuffers& b = buffers[i];
      l.io[i].partialOut = (const char*)b.partialOut + row0 * strides.inRow * e;
      l.io[i].partialLse = b.partialLse + row0 * strides.lseRow;
      l.io[i].out = (char*)b.out + row0 * strides.outRow * e;
      l.io[i].outLse = b.outLse ? b.outLse + row0 * strides.outLseRow : nullptr;
    }
    DCPCHECK(launchFused(l, stream));
  }
  return ncclSuccess;
}

}  // namespace nccl_dcp
