/*************************************************************************
 * The fused path: one cooperative kernel per round, each rank storing its
 * partials straight into its peers' workspaces (NCCL: LSA pointers into the
 * context's window; loopback: cp workspaces on one GPU) and merging what
 * its peers stored into its own (DESIGN §3, §4).
 ************************************************************************/
#include "engine.h"

namespace nccl_dcp {

ncclResult_t Engine::enqueueFused(const CallBuffers* buffers, int batch, const Strides& strides,
                                  const Addressing& addr, cudaStream_t s, int silentRank) const {
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
  l.simpleSendWarps = simpleSendWarps;
  l.silentRank = silentRank;
  return forEachRound(batch, cfg.maxBatch, [&](int row0, int rows) {
    l.rows = rows;
    const Proto proto = protocolForRound(policy, rows);
    l.region = proto == Proto::Simple && layout.hasLarge ? layout.large : layout.small;
    for (int i = 0; i < nIo; i++) {
      const CallBuffers b = buffersAtRow(buffers[i], strides, cfg.eltSize, row0);
      l.io[i] = {(const char*)b.partialOut, b.partialLse, (char*)b.out, b.outLse};
    }
    return launchFused(l, s);
  });
}

}  // namespace nccl_dcp
