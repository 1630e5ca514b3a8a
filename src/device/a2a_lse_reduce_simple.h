/*************************************************************************
 * The fused kernel over SIMPLE (proto_simple.h), for large batches.
 *
 *   send:    warps [0, kSimpleSendWarps) of every block; one warp per
 *            (chunk, destination) copies the chunk's units from partialOut
 *            into the destination's workspace, then signals the chunk's
 *            flag. Senders never wait.
 *   receive: the other warps, at the same time. With few chunks per block
 *            they merge one chunk together (a chunk's latency is the
 *            call's), with many a warp takes a chunk (more in flight). The
 *            first warp of a chunk acquires its flag from every remote
 *            source (a lane each); each warp then takes units of the chunk:
 *            a lane per source loads the unit's LSEs, one lane turns them
 *            into weights (the merge math of merge.h), and the warp merges
 *            the unit's 16-byte vectors in source order s = 0..cp-1, its
 *            own share read straight from partialOut, kSimpleSourceBatch
 *            loads in flight per lane; once every warp is done the first
 *            resets the chunk's flags (it is their only reader).
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
// Up to this many chunks per block, a block's receiving warps merge each
// chunk together; beyond it, a warp per chunk (docs/perf.md, v7).
constexpr int kSimpleTogetherChunksPerBlock = 4;

// The receiving warps of a block wait on each other with this named barrier
// (0 is __syncthreads); sending warps never take part.
constexpr int kSimpleRecvBarrier = 1;
__device__ __forceinline__ void receiversSync() {
  asm volatile("bar.sync %0, %1;" ::"r"(kSimpleRecvBarrier), "r"(kSimpleRecvWarps * 32) : "memory");
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

// Merges unit u of this rank (row u / Hl, head u % Hl) with one warp.
// `weight`: the warp's NCCL_DCP_MAX_RANKS floats of scratch.
template <typename T, class Peers>
__device__ void mergeUnit(const FusedParams<Peers>& p, const RankIo& io, const char* ws, int rank, int slot, int u,
                          float* weight, int lane) {
  const Region& r = p.region;
  const Strides& s = p.strides;
  const int n = p.nRanks, row = u / r.localHeads, head = u % r.localHeads;
  for (int src = lane; src < n; src += 32)  // a lane per source's LSE: one round trip
    weight[src] = src == rank ? io.partialLse[lseOffset(s, row, rank, head)]
                              : __uint_as_float(loadVolatile4(ws + r.lseOffsetOf(slot, src, rank, u)));
  __syncwarp();
  if (lane == 0) {
    const float merged = mergeWeights(weight, n, p.lseBase, weight);
    if (io.outLse) io.outLse[row * s.outLseRow + head * s.outLseHead] = merged;
  }
  __syncwarp();
  const char* own = io.partialOut + inOffset(s, row, rank, head) * (int64_t)sizeof(T);
  char* out = io.out + (row * s.outRow + head * s.outHead) * (int64_t)sizeof(T);
  const char* remote = ws + r.offset + (size_t)slot * r.slotBytes + (size_t)u * r.unitBytes;  // first source's
  const size_t sourceBytes = (size_t)r.capacity * r.localHeads * r.unitBytes;
  const int vectors = (int)(r.unitBytes / simple::kLaneBytes);
  for (int col = lane; col < vectors; col += 32)
    store16(out + (size_t)col * simple::kLaneBytes, mergeVector<T>(p, own, remote, sourceBytes, rank, col, weight));
  __syncwarp();  // weight[] is the warp's next unit's
}

// Chunk c of this rank's units, merged by `warps` receiving warps of the
// block together (`receiver` is this one's index among them; the first
// waits on the flags and resets them, their only reader). `weight`: this
// warp's scratch; `failed`: the group's shared verdict of the flag wait
// (with one warp, its own). False if the wait gave up.
template <typename T, class Peers>
__device__ bool receiveChunk(const FusedParams<Peers>& p, const RankIo& io, char* ws, int rank, int slot,
                             uint32_t flag, int c, int receiver, int warps, float* weight, int* failed,
                             Waiter& waiter, int lane) {
  const Region& r = p.region;
  if (receiver == 0) {  // the one warp whose verdict the group follows
    const bool ok = !waiter.failed && waitChunk(r, ws, p.nRanks, rank, slot, flag, c, lane, waiter);
    if (lane == 0) *failed = !ok;
    stamp(p.timeline, kStageLastFlag);
  }
  if (warps > 1) receiversSync();
  __syncwarp();
  if (*failed) return false;
  const simple::Chunk chunk = simple::chunkOf(r, c, p.rows);
  for (int i = receiver; i < chunk.count; i += warps) mergeUnit<T>(p, io, ws, rank, slot, chunk.first + i, weight, lane);
  if (warps > 1) receiversSync();
  if (receiver == 0)
    for (int src = lane; src < p.nRanks; src += 32)
      if (src != rank) storeVolatile8(ws + r.flagOffsetOf(slot, src, rank, c), 0);
  return true;
}

template <typename T, class Peers>
__global__ void __launch_bounds__(kSimpleThreads, 1)
    simpleA2aLseReduceKernel(const __grid_constant__ FusedParams<Peers> p) {
  // Per receiving warp: the weights of the unit it merges; the flag wait's verdict.
  __shared__ float weights[kSimpleRecvWarps][NCCL_DCP_MAX_RANKS];
  __shared__ int waitFailed[kSimpleRecvWarps];
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
    // Few chunks: a block's receiving warps on one chunk at a time (the
    // latency of a chunk is the call's); many: a warp per chunk (more
    // chunks in flight). The same choice and the first warp's verdicts on
    // every warp of the block, so the barriers match.
    if (chunks <= kSimpleTogetherChunksPerBlock * p.blocksPerRank) {
      for (int c = localBlock; c < chunks; c += p.blocksPerRank)
        if (!receiveChunk<T>(p, io, ws, rank, slot, flag, c, receiver, kSimpleRecvWarps, weights[receiver],
                             &waitFailed[0], waiter, lane))
          break;
    } else {
      for (int c = localBlock * kSimpleRecvWarps + receiver; c < chunks; c += p.blocksPerRank * kSimpleRecvWarps)
        if (!receiveChunk<T>(p, io, ws, rank, slot, flag, c, 0, 1, weights[receiver], &waitFailed[receiver], waiter,
                             lane))
          break;
    }
    stamp(p.timeline, kStageDone);
  }
  endRound(ctrl, round);
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_A2A_LSE_REDUCE_SIMPLE_H_
