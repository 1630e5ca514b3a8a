/*************************************************************************
 * The fused kernel: one round of all-to-all + LSE-weighted reduce.
 *
 *   send:    one warp per (row, head, destination): the unit goes straight
 *            into the destination's workspace (push; receivers read only
 *            local memory). The rank's own share is never sent.
 *   receive: one warp per (row, head): the LSEs of every source first
 *            (group 0 of each unit), the weights, then each warp-wide group
 *            of the head merged over the sources in order s = 0..cp-1, the
 *            rank's own share read straight from partialOut.
 *   round:   the last block to finish advances the round counter, which
 *            picks the slot and the flag value of the next round: CUDA-graph
 *            replays advance it too.
 *
 * Every block sends everything it owns before it receives anything, and
 * the launch is cooperative, so no receive can starve a send.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_A2A_LSE_REDUCE_H_
#define NCCL_DCP_DEVICE_A2A_LSE_REDUCE_H_

#include "merge.h"
#include "peers.h"
#include "primitives.h"

namespace nccl_dcp {

constexpr int kFusedThreads = 512;
constexpr int kFusedWarps = kFusedThreads / 32;

template <class Peers>
struct FusedParams {
  Region region;
  Strides strides;
  LseBase lseBase;
  int nRanks, rows, blocksPerRank, silentRank;
  uint64_t timeoutNs;
  AsyncErrorRecord* hostError;
  RankIo io[kMaxLoopbackRanks];
  Peers peers;
};

// Element offsets of (row, peer, head) in the strided tensors.
__device__ __forceinline__ int64_t inOffset(const Strides& s, int row, int peer, int head) {
  return row * s.inRow + peer * s.inPeer + head * s.inHead;
}
__device__ __forceinline__ int64_t lseOffset(const Strides& s, int row, int peer, int head) {
  return row * s.lseRow + peer * s.lsePeer + head * s.lseHead;
}

// Merges one (row, head) unit on rank `rank`. Returns false if a wait gave up.
template <typename T, class Transport, class Peers>
__device__ bool receiveUnit(const FusedParams<Peers>& p, const RankIo& io, char* ws, int rank, int slot,
                            uint32_t flag, int row, int head, float* weight, Waiter& waiter) {
  using W = Word<T>;
  const Region& r = p.region;
  const Strides& s = p.strides;
  const int lane = threadIdx.x & 31;

  for (int src = 0; src < p.nRanks; src++) {
    float lse;
    if (src == rank) {
      lse = io.partialLse[lseOffset(s, row, rank, head)];
    } else {
      const char* unit = ws + r.unitOffset(slot, src, rank, row, head);
      if (!Transport::waitLse(r, unit, flag, lane, waiter, src, &lse)) return false;
    }
    if (lane == 0) weight[src] = lse;
  }
  __syncwarp();
  float mergedLse = 0.f;
  if (lane == 0) mergedLse = mergeWeights(weight, p.nRanks, p.lseBase, weight);
  __syncwarp();

  const char* self = io.partialOut + inOffset(s, row, rank, head) * (int64_t)sizeof(T);
  char* out = io.out + (row * s.outRow + head * s.outHead) * (int64_t)sizeof(T);
  int dw[2];
  for (int g = 0; g < r.groups; g++) {
    dw[0] = Transport::dataWord(r, g, lane, 0);
    dw[1] = Transport::dataWord(r, g, lane, 1);
    float acc[2][W::kPerWord] = {};
    for (int src = 0; src < p.nRanks; src++) {
      uint64_t word[2] = {0, 0};
      if (src == rank) {
#pragma unroll
        for (int k = 0; k < 2; k++)
          if (dw[k] >= 0) word[k] = loadInput8(self + (size_t)dw[k] * kWordBytes);
      } else {
        char* unit = ws + r.unitOffset(slot, src, rank, row, head);
        if (!Transport::recvGroup(r, unit, g, flag, lane, waiter, src, word)) return false;
      }
      const float w = weight[src];
#pragma unroll
      for (int k = 0; k < 2; k++) W::accumulate(acc[k], w, word[k]);
    }
#pragma unroll
    for (int k = 0; k < 2; k++)
      if (dw[k] >= 0) *(uint64_t*)(out + (size_t)dw[k] * kWordBytes) = W::pack(acc[k]);
  }
  if (lane == 0 && io.outLse) io.outLse[row * s.outLseRow + head * s.outLseHead] = mergedLse;
  __syncwarp();  // weight[] is reused by this warp's next unit
  return true;
}

template <typename T, class Transport, class Peers>
__global__ void __launch_bounds__(kFusedThreads)
    a2aLseReduceKernel(const __grid_constant__ FusedParams<Peers> p) {
  __shared__ float weights[kFusedWarps][NCCL_DCP_MAX_RANKS];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  int localBlock;
  const int rank = p.peers.rankOfBlock(p.blocksPerRank, &localBlock);
  const RankIo& io = p.io[Peers::kLoopback ? rank : 0];
  const Region& r = p.region;
  const Strides& s = p.strides;

  // Inputs and the workspace may belong to the previous kernel until here.
  waitForPrerequisiteGrid();
  if (rank == p.silentRank) return;

  char* ws = p.peers.workspace(rank);
  Control* ctrl = (Control*)ws;
  uint32_t* status = p.peers.status(rank);
  const uint32_t round = loadVolatile4(&ctrl->round);
  const int slot = round & 1;
  const uint32_t flag = flagForRound(round);

  Waiter waiter;
  waiter.deadlineNs = p.timeoutNs ? globalTimerNs() + p.timeoutNs : ~0ull;
  waiter.status = status;
  waiter.hostError = p.hostError;
  waiter.rank = rank;
  waiter.round = round;
  waiter.spins = 0;
  waiter.failed = loadVolatile4(status) != 0;  // poisoned: do nothing

  const int warpInRank = localBlock * kFusedWarps + warp;
  const int warpsPerRank = p.blocksPerRank * kFusedWarps;
  const int nPeers = p.nRanks - 1;
  const int Hl = r.localHeads;

  // Send: destinations rotate with the rank so peers are not all hit at once.
  const int sendItems = p.rows * Hl * nPeers;
  for (int item = warpInRank; !waiter.failed && item < sendItems; item += warpsPerRank) {
    const int d = item % nPeers, rowHead = item / nPeers;
    const int head = rowHead % Hl, row = rowHead / Hl;
    const int dst = (rank + 1 + d) % p.nRanks;
    const char* src = io.partialOut + inOffset(s, row, dst, head) * (int64_t)sizeof(T);
    const float lse = io.partialLse[lseOffset(s, row, dst, head)];
    char* unit = p.peers.peerWorkspace(dst) + r.unitOffset(slot, rank, dst, row, head);
    Transport::send(r, src, lse, unit, flag, lane);
  }
  allowDependentGrid();

  const int recvItems = p.rows * Hl;
  for (int item = warpInRank; !waiter.failed && item < recvItems; item += warpsPerRank) {
    if (!receiveUnit<T, Transport>(p, io, ws, rank, slot, flag, item / Hl, item % Hl, weights[warp], waiter))
      break;
  }

  // The last block of this rank to finish advances the round.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&ctrl->arrivals, 1u) == (uint32_t)p.blocksPerRank - 1) {
      ctrl->arrivals = 0;
      ctrl->round = round + 1;
      __threadfence();
    }
  }
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_A2A_LSE_REDUCE_H_
