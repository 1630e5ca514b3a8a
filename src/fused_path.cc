/*************************************************************************
 * The fused path: one cooperative kernel per round, each rank storing its
 * partials straight into its peers' workspaces (NCCL: LSA pointers into the
 * context's window; loopback: cp workspaces on one GPU) and merging what
 * its peers stored into its own (DESIGN §3, §4). The kernel is the
 * context's (Engine::kernels, chosen at init); this file fills its
 * arguments, once per round.
 ************************************************************************/
#include "engine.h"

namespace nccl_dcp {

namespace {

// Every field of a round's FusedArgs but the launch's own (blocksPerRank,
// timeline): the engine's, the call's, the round's, and the divisions by
// the region's and the call's sizes.
FusedArgs makeFusedArgs(const Engine& e, const CallPlan& plan, const Region& region, int row0, int rows,
                        int silentRank) {
  FusedArgs a = {};
  a.region = region;
  a.strides = plan.strides;
  a.shape = plan.shape;
  a.lseBase = e.cfg.lseBase;
  a.nRanks = e.nRanks;
  a.rows = rows;
  a.row0 = row0;
  a.silentRank = silentRank;
  a.sendWarps = e.simpleSendWarps;
  a.byRanks = makeDivisor(e.nRanks);
  a.byPeers = makeDivisor(std::max(e.nRanks - 1, 1));
  a.byHeads = makeDivisor(region.localHeads);
  a.byLocalHeads = makeDivisor(plan.shape.localHeads);
  a.byGroups = makeDivisor(region.groups);
  a.byVectors = makeDivisor((uint32_t)std::max<size_t>(region.unitBytes / simple::kLaneBytes, 1));
  a.byChunkUnits = makeDivisor(std::max(region.chunkUnits, 1));
  a.timeoutNs = (uint64_t)e.cfg.timeoutMs * 1000000ull;
  a.hostError = e.hostErrorDev;
  return a;
}

}  // namespace

ncclResult_t Engine::enqueueFused(const CallBuffers* buffers, int batch, const CallPlan& plan,
                                  const Addressing& addr, cudaStream_t s, int silentRank,
                                  const DirectCall* direct) const {
  const int nIo = addr.loopback ? nRanks : 1;
  RankIo io[kMaxLoopbackRanks];
  return forEachRound(batch, cfg.maxBatch, [&](int row0, int rows) {
    const RoundTier tier = tierOfRound(rows);
    const FusedArgs args = makeFusedArgs(*this, plan, regionOf(tier), row0, rows, silentRank);
    Addressing roundAddr = addr;
    roundAddr.direct = directOutputsOfRound(direct, cfg, plan.strides, row0, protocolOfRound(rows));
    for (int i = 0; i < nIo; i++) {
      const CallBuffers b = buffersAtRow(buffers[i], plan.strides, cfg, row0);
      io[i] = {(const char*)b.partialOut, (const char*)b.partialLse, (char*)b.out, b.outLse, b.seqLens,
               b.queryStartLoc};
    }
    return kernels[addr.loopback][tier](args, roundAddr, io, rank, pdl, s);
  });
}

}  // namespace nccl_dcp
