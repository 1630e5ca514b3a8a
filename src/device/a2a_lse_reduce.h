/*************************************************************************
 * The fused kernel over the line protocols (LL, LL128): one round of
 * all-to-all + LSE-weighted reduce, for small batches.
 *
 *   send:    one warp per (row, head, destination) writes the unit straight
 *            into the destination's workspace (push: receivers read only
 *            local memory), kSendBatch groups' loads in flight before their
 *            stores; the first batch is loaded before the round is read.
 *            The rank's own share is never sent. HEAD and NONE send every
 *            unit of a workspace row (Hl or H heads) to every peer; TOKEN
 *            sends each row once, to the rank whose slice holds it
 *            (scatter.h).
 *   receive: one warp per (row, head, group) of the rows this rank merges
 *            (TOKEN: its slice's). Every group carries the LSE,
 *            so the warp needs no other: it loads its group from every
 *            source at once (kSourceBatch loads in flight, not one round
 *            trip per source), polls until all flags are the round's,
 *            computes the weights, and merges in source order s = 0..cp-1,
 *            its own share read straight from partialOut.
 *   gather:  NONE in two phases (Peers::kGather, DESIGN §14): the send
 *            and the merge are HEAD's (the rank's heads of every row, into
 *            out heads rank * Hl + j); a warp that merged a group stores
 *            it, merged LSE in its LSE word, into every peer's phase-2 half
 *            (layout.h) and goes on; once its merges are done, a warp per
 *            (row, head, group) copies every peer's merged group from its
 *            own phase-2 half into out, as receive polls: one hop more,
 *            2 (cp - 1) Hl units a row received instead of (cp - 1) cp Hl.
 *   round:   picks the slot and the flag value (fused_common.h).
 *
 * Every block sends everything it owns before it receives anything, and
 * the launch is cooperative, so no receive can starve a send.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_A2A_LSE_REDUCE_H_
#define NCCL_DCP_DEVICE_A2A_LSE_REDUCE_H_

#include "fused_common.h"
#include "merge.h"
#include "peers.h"
#include "primitives.h"
#include "wire.h"

namespace nccl_dcp {

constexpr int kFusedThreads = 512;
constexpr int kFusedWarps = kFusedThreads / 32;

// Sources whose loads a receiving warp keeps in flight at once.
constexpr int kSourceBatch = 8;

// Where the remote sources' units of one (row, head) lie in this rank's
// workspace: source index i (self skipped) at first + i * stride.
struct SourceUnits {
  char* first;
  size_t stride;
  __device__ char* of(int src, int rank) const { return first + (size_t)(src < rank ? src : src - 1) * stride; }
};

// Group g of one (row, head) from the remote sources in [s0, s0 +
// kSourceBatch): loads all in flight, polled until every flag is the
// round's, then the data fetched (again, where the protocol wants it). Lane
// 0 leaves each remote source's LSE in weight[]. The loops stop at cp: the
// kernels are bound by instruction issue at small batches. Returns false if
// a wait gave up.
template <class Transport, class Peers>
__device__ bool fetchSources(const FusedParams<Peers>& p, const SourceUnits& units, int rank, uint32_t flag, int g,
                             int s0, typename Transport::Line (&line)[kSourceBatch], float* weight, Waiter& waiter) {
  const Region& r = p.region;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int b = 0; b < kSourceBatch; b++) {
    if (s0 + b >= p.nRanks) break;
    if (s0 + b != rank) Transport::pollLoad(r, units.of(s0 + b, rank), g, lane, line[b]);
  }
  while (true) {
    int waitingFor = -1;
#pragma unroll
    for (int b = 0; b < kSourceBatch; b++) {
      if (s0 + b >= p.nRanks) break;
      if (s0 + b != rank && !__all_sync(kFullMask, Transport::pollReady(r, g, lane, line[b], flag))) {
        if (waitingFor < 0) waitingFor = s0 + b;
        Transport::pollLoad(r, units.of(s0 + b, rank), g, lane, line[b]);
      }
    }
    if (waitingFor < 0) break;
    if (!waiter.keepWaiting(waitingFor)) return false;
  }
#pragma unroll
  for (int b = 0; b < kSourceBatch; b++) {
    if (s0 + b >= p.nRanks) break;
    if (s0 + b == rank) continue;
    Transport::fetch(r, units.of(s0 + b, rank), g, lane, line[b]);
    if (lane == 0) weight[s0 + b] = Transport::lseOf(line[b]);
  }
  return true;
}

// NONE in two phases: group g of this rank's merged (row, head), the
// lane's words of it and (lane 0) the merged LSE, into every peer's phase-2
// half as source `rank` (destinations rotating with the rank).
template <class Transport, class Peers>
__device__ void forwardMerged(const FusedParams<Peers>& p, int rank, int slot, uint32_t flag, int row, int head,
                              int g, const uint64_t (&merged)[2], float lse) {
  const Region half = p.region.gatherHalf();
  for (int turn = 1; turn < p.nRanks; turn++) {
    const int dst = rank + turn < p.nRanks ? rank + turn : rank + turn - p.nRanks;
    char* unit = p.peers.peerWorkspace(dst) + half.unitOffset(slot, rank, dst, row, head);
    Transport::storeGroup(p.region, merged[0], merged[1], g, (uint64_t)__float_as_uint(lse), unit, flag,
                          threadIdx.x & 31);
  }
}

// Merges group g of one (row, head) on rank `rank`. `weight` is the warp's
// scratch: NCCL_DCP_MAX_RANKS weights, then as many LSEs fetched again.
// Returns false if a wait gave up.
template <typename T, class Transport, class Peers>
__device__ bool receiveGroup(const FusedParams<Peers>& p, const RankIo& io, const int* start, char* ws, int rank,
                             int slot, uint32_t flag, int row, int head, int g, float* weight, Waiter& waiter) {
  using Words = WireWords<T, Transport::kWire>;  // what a data word stands for (wire.h)
  const Region& r = p.region;
  const int lane = threadIdx.x & 31;
  typename Transport::Line line[kSourceBatch];
  // The rank's own share and LSE are local: their loads go out before the polls.
  const int dw[2] = {Transport::dataWord(r, g, lane, 0), Transport::dataWord(r, g, lane, 1)};
  const PartialAt at = partialAt(p, head, rank);
  const char* self = io.partialOut + inOffset(p.strides, row, at.peer, at.head) * (int64_t)sizeof(T);
  typename Words::Input own[2];
#pragma unroll
  for (int k = 0; k < 2; k++) own[k] = dw[k] >= 0 ? Words::loadInput(self, dw[k]) : typename Words::Input{};
  const float ownLse = lane == 0 ? partialLse(p, io, row, at.peer, at.head) : 0.f;
  const SourceUnits units{ws + r.firstUnitOffset(slot, row, head), r.sourceBytes()};

  // Every remote source's LSE (each group carries it), then the weights.
  for (int s0 = 0; s0 < p.nRanks; s0 += kSourceBatch)
    if (!fetchSources<Transport>(p, units, rank, flag, g, s0, line, weight, waiter)) return false;
  stamp(p.timeline, kStageLastFlag);
  if (lane == 0) weight[rank] = ownLse;
  __syncwarp();
  float mergedLse = 0.f;
  if (lane == 0) mergedLse = mergeWeights(weight, p.nRanks, p.lseBase, weight);
  __syncwarp();

  // Merge in source order. Up to kSourceBatch sources are still in
  // registers; more are fetched again (their flags are still set).
  float acc[2][Words::kPerWord] = {};
  for (int s0 = 0; s0 < p.nRanks; s0 += kSourceBatch) {
    if (p.nRanks > kSourceBatch)
      if (!fetchSources<Transport>(p, units, rank, flag, g, s0, line, weight + NCCL_DCP_MAX_RANKS, waiter))
        return false;
#pragma unroll
    for (int b = 0; b < kSourceBatch; b++) {
      const int src = s0 + b;
      if (src >= p.nRanks) break;
      const float w = weight[src];
      if constexpr (Transport::kWire == Wire::Native) {
#pragma unroll
        for (int k = 0; k < 2; k++)
          Word<T>::accumulate(acc[k], w, src == rank ? own[k] : Transport::word(line[b], k));
      } else {  // the scale of the source's unit rides in its LSE word (wire.h)
        const typename Words::Scale scale =
            src == rank ? typename Words::Scale{} : Words::template scaleOf<Transport>(line[b]);
#pragma unroll
        for (int k = 0; k < 2; k++)
          Words::accumulate(acc[k], w, src == rank, own[k], Transport::word(line[b], k), scale);
      }
      if (src != rank) Transport::release(r, units.of(src, rank), g, lane);
    }
  }
  const int64_t outRow = outRowOf(p, start, rank, row);
  const int outHead = mergedOutHead(p, rank, head);
  char* out = io.out + (outRow * p.strides.outRow + outHead * p.strides.outHead) * (int64_t)sizeof(T);
#pragma unroll
  for (int k = 0; k < 2; k++)
    if (dw[k] >= 0) Words::store(out, dw[k], acc[k]);
  if (g == 0 && lane == 0 && io.outLse)
    io.outLse[outRow * p.strides.outLseRow + outHead * p.strides.outLseHead] = mergedLse;
  if constexpr (Peers::kGather) {
    static_assert(Transport::kWire == Wire::Native, "NONE's two phases run on the native wire (fp8 is HEAD's)");
    const uint64_t merged[2] = {Word<T>::pack(acc[0]), Word<T>::pack(acc[1])};
    forwardMerged<Transport>(p, rank, slot, flag, row, head, g, merged, mergedLse);
  }
  __syncwarp();  // weight[] is reused by this warp's next group
  return true;
}

// NONE's phase 2: group g of every peer's merged (row, head) -- out head
// src * Hl + head -- from this rank's phase-2 half into out, the merged LSE
// into outLse; the flags reset as receiveGroup's are. `lse`: the warp's
// NCCL_DCP_MAX_RANKS floats. Returns false if a wait gave up.
template <typename T, class Transport, class Peers>
__device__ bool gatherGroup(const FusedParams<Peers>& p, const RankIo& io, char* ws, int rank, int slot,
                            uint32_t flag, int row, int head, int g, float* lse, Waiter& waiter) {
  const Region& r = p.region;
  const int lane = threadIdx.x & 31;
  const int dw[2] = {Transport::dataWord(r, g, lane, 0), Transport::dataWord(r, g, lane, 1)};
  const SourceUnits units{ws + r.gatherHalf().firstUnitOffset(slot, row, head), r.sourceBytes()};
  typename Transport::Line line[kSourceBatch];
  for (int s0 = 0; s0 < p.nRanks; s0 += kSourceBatch) {
    if (!fetchSources<Transport>(p, units, rank, flag, g, s0, line, lse, waiter)) return false;
#pragma unroll
    for (int b = 0; b < kSourceBatch; b++) {
      const int src = s0 + b;
      if (src >= p.nRanks) break;
      if (src == rank) continue;
      const int outHead = src * p.shape.localHeads + head;
      char* out = io.out + (row * p.strides.outRow + outHead * p.strides.outHead) * (int64_t)sizeof(T);
#pragma unroll
      for (int k = 0; k < 2; k++)
        if (dw[k] >= 0) *(uint64_t*)(out + (size_t)dw[k] * kWordBytes) = Transport::word(line[b], k);
      if (g == 0 && lane == 0 && io.outLse)
        io.outLse[row * p.strides.outLseRow + outHead * p.strides.outLseHead] = lse[src];
      Transport::release(r, units.of(src, rank), g, lane);
    }
  }
  return true;
}

// A poisoned context (a wait gave up, in this call or an earlier one):
// NaN where group g of an out (row, head) would have been written, so no
// output is left stale.
template <typename T, class Transport, class Peers>
__device__ void poisonOutGroup(const FusedParams<Peers>& p, const RankIo& io, int64_t outRow, int outHead, int g) {
  const int lane = threadIdx.x & 31;
  char* out = io.out + (outRow * p.strides.outRow + outHead * p.strides.outHead) * (int64_t)sizeof(T);
  const uint64_t nan = Word<T>::nan();
#pragma unroll
  for (int k = 0; k < 2; k++) {
    const int dw = Transport::dataWord(p.region, g, lane, k);
    if (dw >= 0) WireWords<T, Transport::kWire>::storeNaN(out, dw, nan);
  }
  if (g == 0 && lane == 0 && io.outLse) io.outLse[outRow * p.strides.outLseRow + outHead * p.strides.outLseHead] = NAN;
}
// ... of this rank's merge of (row, head),
template <typename T, class Transport, class Peers>
__device__ void poisonGroup(const FusedParams<Peers>& p, const RankIo& io, const int* start, int rank, int row,
                            int head, int g) {
  poisonOutGroup<T, Transport>(p, io, outRowOf(p, start, rank, row), mergedOutHead(p, rank, head), g);
}
// ... and of what NONE's phase 2 gathers for it: every peer's head.
template <typename T, class Transport, class Peers>
__device__ void poisonGathered(const FusedParams<Peers>& p, const RankIo& io, int rank, int row, int head, int g) {
  for (int src = 0; src < p.nRanks; src++)
    if (src != rank) poisonOutGroup<T, Transport>(p, io, row, src * p.shape.localHeads + head, g);
}

// TOKEN keeps the ranks in step: a rank whose slice has no row in the
// round receives no unit, so it would wait on nobody and could run two
// rounds ahead, into a peer's slot that peer is still reading. Every rank
// therefore sends such a rank a presence mark -- group 0 of unit (0, 0) of
// its slot, flagged, no payload -- and the rank waits for every peer's
// (then resets it, as any receiver does): each round waits on every peer.
template <class Transport, class Peers>
__device__ void sendPresence(const FusedParams<Peers>& p, const int* start, int rank, int slot, uint32_t flag) {
  for (int dst = 0; dst < p.nRanks; dst++) {
    const RoundRows rows = roundRowsOf(p, start, dst);
    if (dst == rank || rows.lo < rows.hi) continue;
    char* unit = p.peers.peerWorkspace(dst) + p.region.unitOffset(slot, rank, dst, 0, 0);
    Transport::storeGroup(p.region, 0, 0, 0, 0, unit, flag, threadIdx.x & 31);
  }
}

template <class Transport, class Peers>
__device__ bool awaitPresence(const FusedParams<Peers>& p, char* ws, int rank, int slot, uint32_t flag, float* scratch,
                              Waiter& waiter) {
  const SourceUnits units{ws + p.region.firstUnitOffset(slot, 0, 0), p.region.sourceBytes()};
  typename Transport::Line line[kSourceBatch];
  for (int s0 = 0; s0 < p.nRanks; s0 += kSourceBatch)
    if (!fetchSources<Transport>(p, units, rank, flag, 0, s0, line, scratch, waiter)) return false;
  for (int src = 0; src < p.nRanks; src++)
    if (src != rank) Transport::release(p.region, units.of(src, rank), 0, threadIdx.x & 31);
  return true;
}

template <typename T, class Transport, class Peers>
__global__ void __launch_bounds__(kFusedThreads, 1)
    a2aLseReduceKernel(const __grid_constant__ FusedParams<Peers> p) {
  // Per warp: the weights, and room for LSEs fetched again (cp > kSourceBatch).
  __shared__ float weights[kFusedWarps][2 * NCCL_DCP_MAX_RANKS];
  __shared__ int splitScratch[kMaxRanks + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  int localBlock;
  const int rank = p.peers.rankOfBlock(p.blocksPerRank, &localBlock);
  const RankIo& io = p.io[Peers::kLoopback ? rank : 0];
  const Region& r = p.region;
  const Strides& s = p.strides;

  stamp(p.timeline, kStageLaunch, rank);
  // Inputs and the workspace may belong to the previous kernel until here.
  waitForPrerequisiteGrid();
  if (rank == p.silentRank) return;

  const int warpInRank = localBlock * kFusedWarps + warp;
  const int warpsPerRank = p.blocksPerRank * kFusedWarps;
  const int nPeers = p.nRanks - 1;
  const int heads = r.localHeads;  // of a workspace row
  constexpr bool token = Peers::kScatter == Scatter::Token;
  const int* start = token ? loadSplit(p, splitScratch) : nullptr;
  const bool refused = token && start == nullptr;  // device counts that make no split
  const RoundRows mine = refused ? RoundRows{0, 0} : roundRowsOf(p, start, rank);

  // Send item -> (row, head, destination). HEAD, NONE: every unit to every
  // peer, destinations rotating with the rank so peers are not all hit at
  // once. TOKEN: each row not in this rank's slice, to its owner.
  const int sendItems = refused ? 0 : token ? (p.rows - (mine.hi - mine.lo)) * heads : p.rows * heads * nPeers;
  struct SendItem {
    int row, head, dst;
    const char* src;
    float lse;
  };
  auto sendItem = [&](int item) {
    SendItem it;
    const int rowHead = token ? item : p.byPeers.quotient(item);
    it.row = p.byHeads.quotient(rowHead);
    it.head = rowHead - it.row * heads;
    if (token) {
      if (it.row >= mine.lo) it.row += mine.hi - mine.lo;
      it.dst = ownerOf(start, p.nRanks, p.row0 + it.row);
    } else {
      const int turn = item - rowHead * nPeers;
      it.dst = rank + 1 + turn < p.nRanks ? rank + 1 + turn : rank + 1 + turn - p.nRanks;
    }
    const PartialAt at = partialAt(p, it.head, it.dst);
    it.src = io.partialOut + inOffset(s, it.row, at.peer, at.head) * (int64_t)sizeof(T);
    it.lse = partialLse(p, io, it.row, at.peer, at.head);
    return it;
  };
  // The first item's loads go out before the round is known: they do not
  // depend on it, and the round costs a round trip of its own.
  typename Transport::Batch batch;
  SendItem it = {};
  char* peer = nullptr;
  if (warpInRank < sendItems) {
    it = sendItem(warpInRank);
    Transport::loadBatch(r, it.src, 0, lane, batch);
    peer = p.peers.peerWorkspace(it.dst);
  }

  char* ws = p.peers.workspace(rank);
  RoundStart round = startRound(p, rank);
  stamp(p.timeline, kStageEntry);
  const int slot = round.slot;
  const uint32_t flag = round.flag;
  Waiter& waiter = round.waiter;
  if (refused && threadIdx.x == 0) waiter.fail(-1, ncclInvalidArgument);

  for (int item = warpInRank; !waiter.failed && item < sendItems; item += warpsPerRank) {
    if (item != warpInRank) {
      it = sendItem(item);
      Transport::loadBatch(r, it.src, 0, lane, batch);
      peer = p.peers.peerWorkspace(it.dst);
    }
    char* unit = peer + r.unitOffset(slot, rank, it.dst, it.row, it.head);
    Transport::storeBatch(r, batch, 0, it.lse, unit, flag, lane);
    for (int g0 = kSendBatch; g0 < r.groups; g0 += kSendBatch) {
      Transport::loadBatch(r, it.src, g0, lane, batch);
      Transport::storeBatch(r, batch, g0, it.lse, unit, flag, lane);
    }
    stamp(p.timeline, kStageFirstSend);
  }
  if (token && !refused && warpInRank == 0 && !waiter.failed) sendPresence<Transport>(p, start, rank, slot, flag);
  stamp(p.timeline, kStageSendsDone);
  allowDependentGrid();
  if (token && !refused && mine.lo == mine.hi && warpInRank == 0 && !waiter.failed)
    awaitPresence<Transport>(p, ws, rank, slot, flag, weights[warp], waiter);

  const int groups = r.groups;
  const int recvItems = (mine.hi - mine.lo) * heads * groups;
  for (int item = warpInRank; item < recvItems; item += warpsPerRank) {
    const int rowHead = p.byGroups.quotient(item), g = item - rowHead * groups;
    const int rowInMine = p.byHeads.quotient(rowHead), head = rowHead - rowInMine * heads;
    const int row = mine.lo + rowInMine;
    if (waiter.failed ||
        !receiveGroup<T, Transport>(p, io, start, ws, rank, slot, flag, row, head, g, weights[warp], waiter))
      poisonGroup<T, Transport>(p, io, start, rank, row, head, g);
  }
  // NONE's phase 2, once this warp's merges are forwarded: they wait only on
  // sends, which never wait, so no rank's phase 2 can starve a phase 1.
  if constexpr (Peers::kGather) {
    for (int item = warpInRank; item < recvItems; item += warpsPerRank) {
      const int rowHead = p.byGroups.quotient(item), g = item - rowHead * groups;
      const int row = p.byHeads.quotient(rowHead), head = rowHead - row * heads;
      if (waiter.failed || !gatherGroup<T, Transport>(p, io, ws, rank, slot, flag, row, head, g, weights[warp], waiter))
        poisonGathered<T, Transport>(p, io, rank, row, head, g);
    }
  }

  stamp(p.timeline, kStageDone);
  endRound(p, rank, round);
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_A2A_LSE_REDUCE_H_
