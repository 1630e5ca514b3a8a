/*************************************************************************
 * The fused path: one cooperative kernel per round, each rank storing its
 * partials straight into its peers' workspaces (NCCL: LSA pointers into the
 * context's window; loopback: cp workspaces on one GPU) and merging what
 * its peers stored into its own (DESIGN §3, §4).
 ************************************************************************/
#include "engine.h"

namespace nccl_dcp {

ncclResult_t Engine::enqueueFused(const CallBuffers* buffers, int batch, const CallPlan& plan,
                                  const Addressing& addr, cudaStream_t s, int silentRank) const {
  const int nIo = addr.loopback ? nRanks : 1;
  FusedArgs args = fused;  // the engine's, from init
  args.strides = plan.strides;
  args.shape = plan.shape;
  args.silentRank = silentRank;
  RankIo io[kMaxLoopbackRanks];
  return forEachRound(batch, cfg.maxBatch, [&](int row0, int rows) {
    args.rows = rows;
    args.row0 = row0;
    const Proto proto = protocolForRound(policy, rows);
    args.region = proto == Proto::Simple && layout.hasLarge ? layout.large : layout.small;
    for (int i = 0; i < nIo; i++) {
      const CallBuffers b = buffersAtRow(buffers[i], plan.strides, cfg, row0);
      io[i] = {(const char*)b.partialOut, (const char*)b.partialLse, (char*)b.out, b.outLse, b.seqLens,
               b.queryStartLoc};
    }
    return launchFused(args, io, cfg.dtype, rank, addr, pdl, s);
  });
}

}  // namespace nccl_dcp
