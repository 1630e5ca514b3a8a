/*************************************************************************
 * The fused kernel over SIMPLE (proto_simple.h), for large batches.
 *
 *   send:    warps [0, kSimpleSendWarps) of every block; one warp per
 *            (chunk, destination) copies the chunk's units from partialOut
 *            into the destination's workspace, then signals the chunk's
 *            flag. Senders never wait.
 *   receive: the other warps, at the same time; one warp per chunk of this
 *            rank's units acquires the chunk's flag from every remote
 *            source, computes each unit's weights (a lane per unit, the
 *            merge math of merge.h, in place over its LSEs), then merges
 *            the chunk's 16-byte vectors in source order s = 0..cp-1, its
 *            own share read straight from partialOut, kSourceBatch loads in
 *            flight per lane.
 *   round:   fused_common.h.
 *
 * Chunks are sent and merged in index order, so NVLink writes and the local
 * merge overlap. Receivers wait only on senders, which never wait, and the
 * launch is cooperative (every block co-resident): no wait starves a send.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_A2A_LSE_REDUCE_SIMPLE_H_
#define NCCL_DCP_DEVICE_A2A_LSE_REDUCE_SIMPLE_H_

#include "fused_common.h"
#include "merge.h"
#include "peers.h"
#include "proto_simple.h"

namespace nccl_dcp {

constexpr int kSimpleThreads = 512;
constexpr int kSimpleSendWarps = 8;
constexpr int kSimpleRecvWarps = kSimpleThreads / 32 - kSimpleSendWarps;
constexpr int kSimpleSourceBatch = 8;  // sources' loads a merging lane keeps in flight

// Dynamic shared memory: each receiving warp's [chunkUnits][cp] LSEs, which
// become the weights.
inline size_t simpleScratchBytes(const Region& r) {
  return (size_t)kSimpleRecvWarps * r.chunkUnits * r.nRanks * sizeof(float);
}

template <typename T, class Peers>
__device__ void sendChunk(const FusedParams<Peers>& p, const RankIo& io, int rank, int dst, int slot, uint32_t flag,
                          int c, int lane) {
  const Region& r = p.region;
  const simple::Chunk chunk = simple::chunkOf(r, c, p.rows);
  char* peer = p.peers.peerWorkspace(dst);
  const char* src = nullptr;
  char* to = nullptr;
  if (lane < chunk.count) {
    const int u = chunk.first + lane, row = u / r.localHeads, head = u % r.localHeads;
    src = io.partialOut + inOffset(p.strides, row, dst, head) * (int64_t)sizeof(T);
    to = peer + r.unitOffset(slot, rank, dst, row, head);
    const float lse = io.partialLse[lseOffset(p.strides, row, dst, head)];
    storeVolatile4(peer + r.lseOffsetOf(slot, rank, dst, u), __float_as_uint(lse));
  }
  simple::copyUnits(src, to, chunk.count, (int)(r.unitBytes / simple::kLaneBytes), lane);
  simple::signalChunk(peer + r.flagOffsetOf(slot, rank, dst, c), flag, lane);
}

// Waits until every remote source has signalled chunk c. False if a wait gave up.
__device__ __forceinline__ bool waitChunk(const Region& r, const char* ws, int nRanks, int rank, int slot,
                                          uint32_t flag, int c, int lane, Waiter& waiter) {
  for (int s0 = 0; s0 < nRanks; s0 += 32) {
    const int src = s0 + lane;
    const bool mine = src < nRanks && src != rank;
    const char* f = mine ? ws + r.flagOffsetOf(slot, src, rank, c) : nullptr;
    for (unsigned late; (late = simple::pollFlags(f, mine, flag)) != 0;)
      if (!waiter.keepWaiting(s0 + __ffs(late) - 1)) return false;
  }
  return true;
}

// Merges one 16-byte vector (column col of unit u) over every source.
template <typename T, class Peers>
__device__ __forceinline__ uint4 mergeVector(const FusedParams<Peers>& p, const char* ownUnit,
                                             const char* remoteUnit, size_t sourceBytes, int rank, int col,
                                             const float* weight) {
  using W = Word<T>;
  float acc[2][W::kPerWord] = {};
  for (int s0 = 0; s0 < p.nRanks; s0 += kSimpleSourceBatch) {
    uint4 x[kSimpleSourceBatch];
#pragma unroll
    for (int b = 0; b < kSimpleSourceBatch; b++) {
      const int src = s0 + b;
      if (src >= p.nRanks) break;
      x[b] = src == rank ? loadInput16(ownUnit + (size_t)col * simple::kLaneBytes)
                         : loadVolatile16(remoteUnit + (size_t)(src < rank ? src : src - 1) * sourceBytes +
                                          (size_t)col * simple::kLaneBytes);
    }
#pragma unroll
    for (int b = 0; b < kSimpleSourceBatch; b++) {
      const int src = s0 + b;
      if (src >= p.nRanks) break;
      W::accumulate(acc[0], weight[src], (uint64_t)x[b].x | (uint64_t)x[b].y << 32);
      W::accumulate(acc[1], weight[src], (uint64_t)x[b].z | (uint64_t)x[b].w << 32);
    }
  }
  const uint64_t lo = W::pack(acc[0]), hi = W::pack(acc[1]);
  return make_uint4((uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32));
}

// Merges chunk c of this rank's units. `weight`: this warp's scratch.
// False if a wait gave up.
template <typename T, class Peers>
__device__ bool receiveChunk(const FusedParams<Peers>& p, const RankIo& io, char* ws, int rank, int slot,
                             uint32_t flag, int c, float* weight, Waiter& waiter, int lane) {
  const Region& r = p.region;
  const Strides& s = p.strides;
  const int n = p.nRanks;
  const simple::Chunk chunk = simple::chunkOf(r, c, p.rows);
  if (!waitChunk(r, ws, n, rank, slot, flag, c, lane, waiter)) return false;
  stamp(p.timeline, kStageLastFlag);

  // A lane per unit: its LSEs, then its weights in place; its addresses.
  const char* own = nullptr;
  char* out = nullptr;
  if (lane < chunk.count) {
    const int u = chunk.first + lane, row = u / r.localHeads, head = u % r.localHeads;
    float* w = weight + lane * n;
    for (int src = 0; src < n; src++)
      w[src] = src == rank ? io.partialLse[lseOffset(s, row, rank, head)]
                           : __uint_as_float(loadVolatile4(ws + r.lseOffsetOf(slot, src, rank, u)));
    const float merged = mergeWeights(w, n, p.lseBase, w);
    if (io.outLse) io.outLse[row * s.outLseRow + head * s.outLseHead] = merged;
    own = io.partialOut + inOffset(s, row, rank, head) * (int64_t)sizeof(T);
    out = io.out + (row * s.outRow + head * s.outHead) * (int64_t)sizeof(T);
  }
  __syncwarp();

  // Every vector of the chunk: lane-strided over (unit, column).
  const int vectors = (int)(r.unitBytes / simple::kLaneBytes), total = chunk.count * vectors;
  const size_t sourceBytes = (size_t)r.capacity * r.localHeads * r.unitBytes;
  const char* slotData = ws + r.offset + (size_t)slot * r.slotBytes;  // first source's unit 0
  int unit = 0, col = lane;
  simple::advance(unit, col, 0, vectors);
  for (int v0 = 0; v0 < total; v0 += 32) {
    const int holder = min(unit, 31);
    const char* ownUnit = (const char*)__shfl_sync(kFullMask, (unsigned long long)own, holder);
    char* outUnit = (char*)__shfl_sync(kFullMask, (unsigned long long)out, holder);
    if (v0 + lane < total) {
      const char* remoteUnit = slotData + (size_t)(chunk.first + unit) * r.unitBytes;
      store16(outUnit + (size_t)col * simple::kLaneBytes,
              mergeVector<T>(p, ownUnit, remoteUnit, sourceBytes, rank, col, weight + unit * n));
    }
    simple::advance(unit, col, 32, vectors);
  }
  __syncwarp();

  // The flags go back to zero: this warp is their only reader.
  for (int src = lane; src < n; src += 32)
    if (src != rank) storeVolatile8(ws + r.flagOffsetOf(slot, src, rank, c), 0);
  return true;
}

template <typename T, class Peers>
__global__ void __launch_bounds__(kSimpleThreads, 1)
    simpleA2aLseReduceKernel(const __grid_constant__ FusedParams<Peers> p) {
  extern __shared__ float scratch[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  int localBlock;
  const int rank = p.peers.rankOfBlock(p.blocksPerRank, &localBlock);
  const RankIo& io = p.io[Peers::kLoopback ? rank : 0];

  // Inputs and the workspace may belong to the previous kernel until here.
  waitForPrerequisiteGrid();
  if (rank == p.silentRank) return;

  char* ws = p.peers.workspace(rank);
  Control* ctrl = (Control*)ws;
  const RoundInfo round = beginRound(ctrl, p.blocksPerRank);
  stamp(p.timeline, kStageEntry, rank);
  const int slot = round.round & 1;
  const uint32_t flag = flagForRound(round.round);
  Waiter waiter = makeWaiter(p, rank, round.round);
  const int chunks = simple::chunksIn(p.region, p.rows);

  if (warp < kSimpleSendWarps) {
    // Destinations rotate with the rank so peers are not all hit at once.
    const int nPeers = p.nRanks - 1, items = chunks * nPeers;
    for (int item = localBlock * kSimpleSendWarps + warp; !waiter.failed && item < items;
         item += p.blocksPerRank * kSimpleSendWarps) {
      sendChunk<T>(p, io, rank, (rank + 1 + item % nPeers) % p.nRanks, slot, flag, item / nPeers, lane);
      stamp(p.timeline, kStageFirstSend);
    }
    stamp(p.timeline, kStageSendsDone);
    allowDependentGrid();
  } else {
    allowDependentGrid();
    const int receiver = warp - kSimpleSendWarps;
    float* weight = scratch + receiver * p.region.chunkUnits * p.nRanks;
    for (int c = localBlock * kSimpleRecvWarps + receiver; !waiter.failed && c < chunks;
         c += p.blocksPerRank * kSimpleRecvWarps)
      if (!receiveChunk<T>(p, io, ws, rank, slot, flag, c, weight, waiter, lane)) break;
    stamp(p.timeline, kStageDone);
  }
  endRound(ctrl, round);
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_A2A_LSE_REDUCE_SIMPLE_H_
