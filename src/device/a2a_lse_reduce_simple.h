/*************************************************************************
 * The fused kernel over SIMPLE (proto_simple.h), for large batches.
 *
 *   send:    warps [0, kSimpleSendWarps) of every block. The block's items
 *            (chunk, destination) go in steps: all in one when they fit
 *            in kSendBytesInFlight, else kSendStepBytes each (every step
 *            costs a fence that waits for the link); the writing warps
 *            copy a step's units together from partialOut into the
 *            destinations' workspaces (proto_simple.h: 16-byte stores, no
 *            fence) and publish their progress in shared memory; the last
 *            send warp waits for it, fences once for every step published
 *            and stores their flags.
 *            Items go round the blocks first, so step s of every block is
 *            wave s of the grid: it lands and is merged while the next
 *            crosses NVLink. Senders never wait on a peer; writers stay at
 *            most kSendBytesInFlight ahead of the flags.
 *            TOKEN: chunks count from each destination's first unit (its
 *            slice, scatter.h), items chunk-major as HEAD's; an item past
 *            a destination's last chunk (uneven splits) is empty, skipped.
 *   receive: the other warps, at the same time, in groups: a block takes
 *            all of its chunks at once, as many warps on each as that
 *            leaves (8 on one chunk at small batches, a warp per chunk at
 *            large ones). The first warp of a group acquires the chunk's
 *            flag from every remote source (a lane each); each warp then
 *            merges its units of the chunk: a lane per (unit, source) loads
 *            the LSEs in one round trip, a lane per unit turns them into
 *            weights (the merge math of merge.h), and every lane merges
 *            16-byte vectors in source order s = 0..cp-1, its own share
 *            read straight from partialOut, kMergeVectors x kMergeSources
 *            loads in flight; once the group is done its first warp resets
 *            the chunk's flags (it is their only reader).
 *   gather:  NONE in two phases (Peers::kGather, DESIGN §14): send and
 *            merge are HEAD's (out heads rank * Hl + j); a merging lane
 *            also stores its merged vector and LSE into every peer's
 *            phase-2 half (layout.h), and once the group has merged the
 *            chunk its first warp fences and flags it there, as the
 *            signalling warp flags a send step. After their merges the
 *            receiving warps take the same chunks of phase 2: wait for
 *            every peer's flag, copy its merged units into out heads
 *            src * Hl + j, reset the flags.
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
constexpr int kSimpleSendWarps = 8;  // the writing warps, then the signalling one
constexpr int kSimpleRecvWarps = kSimpleThreads / 32 - kSimpleSendWarps;
constexpr int kSimpleSignalWarp = kSimpleSendWarps - 1;
// Of the writing warps, how many write (NCCL_DCP_SIMPLE_SEND_WARPS).
constexpr int kSimpleDefaultWriters = kSimpleSignalWarp;
// Named barriers of the receiving groups: kSimpleRecvBarrier + group (0 is
// __syncthreads); sending warps never take part.
constexpr int kSimpleRecvBarrier = 1;

// Units [first, end) of the round that rank q merges: every unit, or
// (TOKEN) those of its slice's rows.
struct UnitRange {
  int first, end;
};
template <class Peers>
__device__ __forceinline__ UnitRange unitsOf(const FusedParams<Peers>& p, const int* start, int q) {
  const RoundRows rows = roundRowsOf(p, start, q);
  return {rows.lo * p.region.localHeads, rows.hi * p.region.localHeads};
}

// Chunks and slot positions count a destination's units from its first
// (unitsOf(q).first: 0 but for TOKEN), so TOKEN's chunk c of every
// destination is sent in the same wave and merged in index order, as
// HEAD's are, and its units sit at the start of each source's block.

// The units of chunk c of rank q (none past its last).
template <class Peers>
__device__ __forceinline__ simple::Chunk chunkFor(const FusedParams<Peers>& p, const int* start, int c, int q) {
  const UnitRange units = unitsOf(p, start, q);
  const int first = units.first + c * p.region.chunkUnits;
  return {first, max(min(p.region.chunkUnits, units.end - first), 0)};
}

// Chunks of rank q's units.
template <class Peers>
__device__ __forceinline__ int chunksOf(const FusedParams<Peers>& p, const int* start, int q) {
  const UnitRange units = unitsOf(p, start, q);
  return (units.end - units.first + p.region.chunkUnits - 1) / p.region.chunkUnits;
}

// TOKEN's chunks per destination turn t (dst = rank + 1 + t mod cp), and
// the most of any. Filled by one thread per block before the round's
// first barrier.
struct TokenItems {
  int chunks[kMaxRanks - 1];
  int most;
};
template <class Peers>
__device__ void planTokenItems(const FusedParams<Peers>& p, const int* start, int rank, TokenItems* t) {
  t->most = 0;
  for (int turn = 0; turn < p.nRanks - 1; turn++) {
    const int dst = rank + 1 + turn < p.nRanks ? rank + 1 + turn : rank + 1 + turn - p.nRanks;
    t->chunks[turn] = chunksOf(p, start, dst);
    t->most = max(t->most, t->chunks[turn]);
  }
}

// A block's sends: items localBlock + m * blocksPerRank (m = 0, 1, ...),
// item = chunk * (cp - 1) + the destination's turn, perStep of them a step
// (TOKEN: an item past its destination's chunks is empty -- uneven splits
// only -- and skipped).
struct SendPlan {
  int items;    // of the block
  int perStep;  // items per step: a lane of the step's warp per (item, unit)
  int steps;
  int ahead;    // steps written and not yet flagged, at most
  const TokenItems* token;  // TOKEN's chunks per turn, or NULL
};

template <class Peers>
__device__ __forceinline__ SendPlan sendPlan(const FusedParams<Peers>& p, int chunks, int localBlock,
                                            const TokenItems* token) {
  const int all = (token ? token->most : chunks) * (p.nRanks - 1);
  const int perBlock = (all + p.blocksPerRank - 1) / p.blocksPerRank;
  SendPlan s;
  s.items = all > localBlock ? (all - localBlock + p.blocksPerRank - 1) / p.blocksPerRank : 0;
  // One GPU has no link to overlap: the fewest steps (each costs a load
  // round trip). Over NVLink a block whose share fits in what may be in
  // flight sends it in one step (one fence); a larger share goes in steps of
  // kSendStepBytes, flagged while the next ones cross.
  const int most = 32 / p.region.chunkUnits, itemBytes = p.region.chunkUnits * (int)p.region.unitBytes;
  const int fewest =
      (int64_t)perBlock * itemBytes <= simple::kSendBytesInFlight ? perBlock : simple::kSendStepBytes / itemBytes;
  s.perStep = Peers::kLoopback ? most : max(1, min(fewest, most));
  s.steps = (s.items + s.perStep - 1) / s.perStep;
  const int stepBytes = s.perStep * itemBytes;
  s.ahead = max(simple::kMinStepsAhead, (simple::kSendBytesInFlight + stepBytes - 1) / stepBytes);
  s.token = token;
  return s;
}

// Item k of step `step`, or false past the block's last item.
struct SendItem {
  int chunk, dst;
};
template <class Peers>
__device__ __forceinline__ bool sendItem(const FusedParams<Peers>& p, const SendPlan& plan, int rank, int localBlock,
                                         int step, int k, SendItem* item) {
  const int m = step * plan.perStep + k;
  if (k >= plan.perStep || m >= plan.items) return false;
  const int nPeers = p.nRanks - 1, i = localBlock + m * p.blocksPerRank;
  const int chunk = p.byPeers.quotient(i), turn = i - chunk * nPeers, to = rank + 1 + turn;
  if (plan.token && chunk >= plan.token->chunks[turn]) return false;  // an empty item
  // Destinations rotate with the rank so peers are not all hit at once.
  *item = {chunk, to < p.nRanks ? to : to - p.nRanks};
  return true;
}

// One writing warp's share of step `step`: lane k * chunkUnits + i holds
// unit i of the step's item k (the first writer also stores its LSE), then
// the writers copy every unit of the step together. Wire fp8: every writer
// holds the LSEs, and the warp that encodes a unit stores its {lse, scale}.
template <typename T, Wire kWire, class Peers>
__device__ void writeStep(const FusedParams<Peers>& p, const RankIo& io, const int* start, const SendPlan& plan,
                          int rank, int localBlock, int slot, int step, int writer, int writers, int lane) {
  constexpr bool fp8 = kWire == Wire::Fp8E4m3;
  const Region& r = p.region;
  const char* src = nullptr;
  char* to = nullptr;
  char* lseTo = nullptr;  // fp8
  float lse = 0.f;        // fp8
  SendItem item;
  const int k = p.byChunkUnits.quotient(lane), i = lane - k * r.chunkUnits;
  if (sendItem(p, plan, rank, localBlock, step, k, &item)) {
    const simple::Chunk chunk = chunkFor(p, start, item.chunk, item.dst);
    if (i < chunk.count) {
      const int u = chunk.first + i, row = p.byHeads.quotient(u), head = u - row * r.localHeads;
      const PartialAt at = partialAt(p, head, item.dst);
      char* peer = p.peers.peerWorkspace(item.dst);
      src = io.partialOut + inOffset(p.strides, row, at.peer, at.head) * (int64_t)sizeof(T);
      const int pos = u - unitsOf(p, start, item.dst).first;  // its slot position
      to = peer + r.unitOffsetAt(slot, rank, item.dst, pos);
      if constexpr (fp8) {
        lse = partialLse(p, io, row, at.peer, at.head);
        lseTo = peer + r.lseWordOffsetOf(slot, rank, item.dst, pos);
      } else if (writer == 0) {
        storeVolatile4(peer + r.lseOffsetOf(slot, rank, item.dst, pos),
                       __float_as_uint(partialLse(p, io, row, at.peer, at.head)));
      }
    }
  }
  if constexpr (fp8)
    simple::encodeShare<T>(src, to, lseTo, lse, plan.perStep * r.chunkUnits, r.headDim, writer, writers, lane);
  else
    simple::copyShare(src, to, plan.perStep * r.chunkUnits, p.byVectors, writer * 32, writers * 32, lane);
}

// The signalling warp: waits for every writer to finish the next step,
// fences (system scope: every writer's stores of the steps they published
// are then visible at their destinations), and stores the flags of all
// those steps, a lane per item; publishes how many steps are flagged.
template <class Peers>
__device__ void signalSteps(const FusedParams<Peers>& p, const int* start, const SendPlan& plan, const int* progress,
                            int* flagged, int rank, int localBlock, int slot, uint32_t flag, int writers,
                            int lane) {
  for (int done = 0; done < plan.steps;) {
    const int written = simple::awaitProgress(progress, writers, done + 1, lane);
    fenceAcqRelSys();
    for (int i = lane; i < (written - done) * plan.perStep; i += 32) {
      SendItem item;
      if (sendItem(p, plan, rank, localBlock, done + i / plan.perStep, i % plan.perStep, &item) &&
          chunkFor(p, start, item.chunk, item.dst).count > 0)
        storeRelaxedSys8(p.peers.peerWorkspace(item.dst) + p.region.flagOffsetOf(slot, rank, item.dst, item.chunk),
                         flag);
    }
    done = written;
    __syncwarp();
    if (lane == 0) simple::publishProgress(flagged, done);
    stamp(p.timeline, kStageFirstSend);
  }
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

// TOKEN keeps the ranks in step (see a2a_lse_reduce.h's sendPresence): a
// rank whose slice has no row in the round gets chunk 0's flag from every
// peer, with no payload, and waits for all of them (then resets them).
template <class Peers>
__device__ void sendPresence(const FusedParams<Peers>& p, const int* start, int rank, int slot, uint32_t flag,
                             int lane) {
  for (int dst = lane; dst < p.nRanks; dst += 32) {
    const RoundRows rows = roundRowsOf(p, start, dst);
    if (dst != rank && rows.lo == rows.hi)
      storeRelaxedSys8(p.peers.peerWorkspace(dst) + p.region.flagOffsetOf(slot, rank, dst, 0), flag);
  }
}

__device__ __forceinline__ void awaitPresence(const Region& r, char* ws, int nRanks, int rank, int slot,
                                              uint32_t flag, int lane, Waiter& waiter) {
  if (!waitChunk(r, ws, nRanks, rank, slot, flag, 0, lane, waiter)) return;
  for (int src = lane; src < nRanks; src += 32)
    if (src != rank) storeVolatile8(ws + r.flagOffsetOf(slot, src, rank, 0), 0);
}

// Per lane, 16-byte vectors merged at once and sources loaded per step:
// kMergeVectors * kMergeSources loads in flight (registers bound both).
constexpr int kMergeVectors = 4;
constexpr int kMergeSources = 2;

// Where one 16-byte vector (column col of unit u) of this rank lives: its
// own share in partialOut, the remote sources' in the workspace (one
// source's block of units after another), the merged one in out.
struct VectorAt {
  const char* own;
  const char* remote;  // the first remote source's
  char* out;
  size_t inBlock;      // offset in a source's block of the slot (NONE's phase 2 forwards there)
  int unit;            // index of u among the warp's units (its weights)
};

// NONE in two phases: what this rank merged at `inBlock` of its block of a
// slot, into the same place of every peer's phase-2 half (source `rank`).
template <class Peers>
__device__ __forceinline__ void forwardVector(const FusedParams<Peers>& p, int rank, int slot, size_t inBlock,
                                              uint4 v) {
  const Region half = p.region.gatherHalf();
  for (int turn = 1; turn < p.nRanks; turn++) {
    const int dst = rank + turn < p.nRanks ? rank + turn : rank + turn - p.nRanks;
    store16(p.peers.peerWorkspace(dst) + half.unitOffsetAt(slot, rank, dst, 0) + inBlock, v);
  }
}
template <class Peers>
__device__ __forceinline__ void forwardLse(const FusedParams<Peers>& p, int rank, int slot, int pos, float lse) {
  const Region half = p.region.gatherHalf();
  for (int dst = 0; dst < p.nRanks; dst++)
    if (dst != rank) storeVolatile4(p.peers.peerWorkspace(dst) + half.lseOffsetOf(slot, rank, dst, pos), __float_as_uint(lse));
}

// The weights of units first + k * step (k < count) of this rank: a lane
// per (unit, source) loads the LSEs (one round trip; fp8's are the low
// halves of {lse, scale} pairs), a lane per unit turns them into weights
// (merge.h) and writes the merged LSE (NONE in two phases: into every
// peer's phase-2 half too). `weight`: the warp's scratch, as mergeUnits'.
template <Wire kWire, class Peers>
__device__ void unitWeights(const FusedParams<Peers>& p, const RankIo& io, const int* start, const char* ws, int rank,
                            int slot, int first, int count, int step, float (*weight)[NCCL_DCP_MAX_RANKS], int lane) {
  const Region& r = p.region;
  const Strides& s = p.strides;
  const int n = p.nRanks, Hl = r.localHeads;
  const int base = unitsOf(p, start, rank).first;  // slot position of this rank's first unit: 0 but for TOKEN
  for (int i = lane; i < count * n; i += 32) {
    const int k = p.byRanks.quotient(i), src = i - k * n, u = first + k * step;
    const int row = p.byHeads.quotient(u), head = u - row * Hl;
    const PartialAt at = partialAt(p, head, rank);
    const size_t lseAt = kWire == Wire::Fp8E4m3 ? r.lseWordOffsetOf(slot, src, rank, u - base)
                                                : r.lseOffsetOf(slot, src, rank, u - base);
    weight[k][src] =
        src == rank ? partialLse(p, io, row, at.peer, at.head) : __uint_as_float(loadVolatile4(ws + lseAt));
  }
  __syncwarp();
  if (lane < count) {
    const int u = first + lane * step, row = p.byHeads.quotient(u), head = u - row * Hl;
    const float merged = mergeWeights(weight[lane], n, p.lseBase, weight[lane]);
    if (io.outLse)
      io.outLse[outRowOf(p, start, rank, row) * s.outLseRow + mergedOutHead(p, rank, head) * s.outLseHead] = merged;
    if constexpr (Peers::kGather) forwardLse(p, rank, slot, u - base, merged);
  }
  __syncwarp();
}

// Merges units first + k * step (k < count <= kMaxChunkUnits) of this rank
// with one warp: a lane per (unit, source) loads the LSEs (one round trip),
// a lane per unit turns them into weights (merge.h), then every lane merges
// 16-byte vectors of the units in source order s = 0..cp-1, kMergeVectors
// vectors x kMergeSources sources of loads in flight. `weight`: the warp's
// [kMaxChunkUnits][NCCL_DCP_MAX_RANKS] scratch.
template <typename T, class Peers>
__device__ void mergeUnits(const FusedParams<Peers>& p, const RankIo& io, const int* start, const char* ws, int rank,
                           int slot, int first, int count, int step, float (*weight)[NCCL_DCP_MAX_RANKS], int lane) {
  using W = Word<T>;
  const Region& r = p.region;
  const Strides& s = p.strides;
  const int n = p.nRanks, Hl = r.localHeads;
  const int base = unitsOf(p, start, rank).first;  // slot position of this rank's first unit: 0 but for TOKEN
  unitWeights<Wire::Native>(p, io, start, ws, rank, slot, first, count, step, weight, lane);

  const int vectors = (int)p.byVectors.d, total = count * vectors;
  const size_t sourceBytes = r.sourceBytes();
  const char* slotData = ws + r.offset + (size_t)slot * r.slotBytes;
  auto vectorAt = [&](int v) {
    const int k = p.byVectors.quotient(v), col = v - k * vectors, u = first + k * step;
    const int row = p.byHeads.quotient(u), head = u - row * Hl;
    const size_t at = (size_t)col * simple::kLaneBytes, inBlock = (size_t)(u - base) * r.unitBytes + at;
    const PartialAt own = partialAt(p, head, rank);
    const int64_t outAt = outRowOf(p, start, rank, row) * s.outRow + mergedOutHead(p, rank, head) * s.outHead;
    return VectorAt{io.partialOut + inOffset(s, row, own.peer, own.head) * (int64_t)sizeof(T) + at,
                    slotData + inBlock, io.out + outAt * (int64_t)sizeof(T) + at, inBlock, k};
  };
  for (int v0 = 0; v0 < total; v0 += 32 * kMergeVectors) {
    VectorAt at[kMergeVectors];
    float acc[kMergeVectors][2][W::kPerWord] = {};
#pragma unroll
    for (int j = 0; j < kMergeVectors; j++)
      if (v0 + 32 * j + lane < total) at[j] = vectorAt(v0 + 32 * j + lane);
    for (int s0 = 0; s0 < n; s0 += kMergeSources) {
      uint4 x[kMergeVectors][kMergeSources];
#pragma unroll
      for (int j = 0; j < kMergeVectors; j++)
#pragma unroll
        for (int b = 0; b < kMergeSources; b++) {
          const int src = s0 + b;
          if (src >= n || v0 + 32 * j + lane >= total) continue;
          x[j][b] = src == rank ? loadInput16(at[j].own)
                                : loadVolatile16(at[j].remote + (size_t)(src < rank ? src : src - 1) * sourceBytes);
        }
#pragma unroll
      for (int j = 0; j < kMergeVectors; j++)
#pragma unroll
        for (int b = 0; b < kMergeSources; b++) {
          const int src = s0 + b;
          if (src >= n || v0 + 32 * j + lane >= total) continue;
          const float w = weight[at[j].unit][src];
          W::accumulate(acc[j][0], w, (uint64_t)x[j][b].x | (uint64_t)x[j][b].y << 32);
          W::accumulate(acc[j][1], w, (uint64_t)x[j][b].z | (uint64_t)x[j][b].w << 32);
        }
    }
#pragma unroll
    for (int j = 0; j < kMergeVectors; j++) {
      if (v0 + 32 * j + lane >= total) continue;
      const uint64_t lo = W::pack(acc[j][0]), hi = W::pack(acc[j][1]);
      const uint4 merged = make_uint4((uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32));
      store16(at[j].out, merged);
      if constexpr (Peers::kGather) forwardVector(p, rank, slot, at[j].inBlock, merged);
    }
  }
  __syncwarp();  // weight[] is the warp's next chunk's
}

// Wire fp8 (Region::wire): mergeUnits over e4m3 units. A lane per 16-byte
// vector of the wire (16 elements: two data words; 32 bytes of the own
// share and of out), kMergeVectorsFp8 of them at once; the scale of (unit,
// source) is the high half of its {lse, scale} word, loaded beside the
// data. The weights and the accumulation are mergeUnits' (merge.h), the
// decode fp8_wire.h's: the CPU model's bits.
constexpr int kMergeVectorsFp8 = 2;
template <typename T, class Peers>
__device__ void mergeUnitsFp8(const FusedParams<Peers>& p, const RankIo& io, const int* start, const char* ws,
                              int rank, int slot, int first, int count, int step,
                              float (*weight)[NCCL_DCP_MAX_RANKS], int lane) {
  using Words = WireWords<T, Wire::Fp8E4m3>;
  const Region& r = p.region;
  const Strides& s = p.strides;
  const int n = p.nRanks, Hl = r.localHeads;
  const int base = unitsOf(p, start, rank).first;
  unitWeights<Wire::Fp8E4m3>(p, io, start, ws, rank, slot, first, count, step, weight, lane);

  const int vectors = (int)p.byVectors.d, total = count * vectors;
  const size_t sourceBytes = r.sourceBytes();
  const char* slotData = ws + r.offset + (size_t)slot * r.slotBytes;
  constexpr size_t kOutBytes = 2 * Words::kInputBytes;  // of the own share and of out, per wire vector
  for (int v0 = 0; v0 < total; v0 += 32 * kMergeVectorsFp8) {
    VectorAt at[kMergeVectorsFp8];
    int pos[kMergeVectorsFp8];  // of the vector's unit in the slot (its {lse, scale} words)
    float acc[kMergeVectorsFp8][2][Words::kPerWord] = {};
#pragma unroll
    for (int j = 0; j < kMergeVectorsFp8; j++) {
      const int v = v0 + 32 * j + lane;
      if (v >= total) continue;
      const int k = p.byVectors.quotient(v), col = v - k * vectors, u = first + k * step;
      const int row = p.byHeads.quotient(u), head = u - row * Hl;
      const PartialAt own = partialAt(p, head, rank);
      const size_t inBlock = (size_t)(u - base) * r.unitBytes + (size_t)col * simple::kLaneBytes;
      at[j] = VectorAt{io.partialOut + inOffset(s, row, own.peer, own.head) * (int64_t)sizeof(T) + col * kOutBytes,
                       slotData + inBlock,
                       io.out + (outRowOf(p, start, rank, row) * s.outRow + head * s.outHead) * (int64_t)sizeof(T) +
                           col * kOutBytes,
                       inBlock, k};
      pos[j] = u - base;
    }
    for (int src = 0; src < n; src++) {
      const int srcIdx = src < rank ? src : src - 1;
      uint4 x[kMergeVectorsFp8][2];
      float scale[kMergeVectorsFp8];
#pragma unroll
      for (int j = 0; j < kMergeVectorsFp8; j++) {
        if (v0 + 32 * j + lane >= total) continue;
        if (src == rank) {
          x[j][0] = loadInput16(at[j].own);
          x[j][1] = loadInput16(at[j].own + Words::kInputBytes);
        } else {
          x[j][0] = loadVolatile16(at[j].remote + (size_t)srcIdx * sourceBytes);
          // The {lse, scale} word's high half.
          scale[j] = __uint_as_float(loadVolatile4(ws + r.lseWordOffsetOf(slot, src, rank, pos[j]) + 4));
        }
      }
#pragma unroll
      for (int j = 0; j < kMergeVectorsFp8; j++) {
        if (v0 + 32 * j + lane >= total) continue;
        const float w = weight[at[j].unit][src];
        if (src == rank) {
          Words::accumulate(acc[j][0], w, true, x[j][0], 0, {});
          Words::accumulate(acc[j][1], w, true, x[j][1], 0, {});
        } else {
          const uint4 q = x[j][0];
          Words::accumulate(acc[j][0], w, false, {}, (uint64_t)q.x | (uint64_t)q.y << 32, {scale[j]});
          Words::accumulate(acc[j][1], w, false, {}, (uint64_t)q.z | (uint64_t)q.w << 32, {scale[j]});
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kMergeVectorsFp8; j++) {
      if (v0 + 32 * j + lane >= total) continue;
      Words::store(at[j].out, 0, acc[j][0]);
      Words::store(at[j].out, 1, acc[j][1]);
    }
  }
  __syncwarp();  // weight[] is the warp's next chunk's
}

// A poisoned context (a wait gave up, in this call or an earlier one): NaN
// where units first + k * step (k < count) would have been merged, so no
// output is left stale. (Wire fp8: a vector of the wire is two of out.)
template <typename T, Wire kWire, class Peers>
__device__ void poisonUnits(const FusedParams<Peers>& p, const RankIo& io, const int* start, int rank, int first,
                            int count, int step, int lane) {
  constexpr int kOutVectors = kWire == Wire::Fp8E4m3 ? 2 : 1;  // 16-byte vectors of out per vector of the wire
  const Strides& s = p.strides;
  const int Hl = p.region.localHeads, vectors = (int)p.byVectors.d;
  const uint64_t nan = Word<T>::nan();
  for (int v = lane; v < count * vectors; v += 32) {
    const int k = p.byVectors.quotient(v), col = v - k * vectors, u = first + k * step;
    const int row = p.byHeads.quotient(u), head = u - row * Hl;
    const int64_t outAt = outRowOf(p, start, rank, row) * s.outRow + mergedOutHead(p, rank, head) * s.outHead;
    char* out = io.out + outAt * (int64_t)sizeof(T) + (size_t)col * kOutVectors * simple::kLaneBytes;
#pragma unroll
    for (int o = 0; o < kOutVectors; o++)
      store16(out + o * simple::kLaneBytes,
              make_uint4((uint32_t)nan, (uint32_t)(nan >> 32), (uint32_t)nan, (uint32_t)(nan >> 32)));
  }
  if (lane < count && io.outLse) {
    const int u = first + lane * step, row = p.byHeads.quotient(u), head = u - row * Hl;
    io.outLse[outRowOf(p, start, rank, row) * s.outLseRow + mergedOutHead(p, rank, head) * s.outLseHead] = NAN;
  }
}

// NONE's phase 2: units first + k * step (k < count) of every peer, from
// this rank's phase-2 half into out heads src * Hl + head, the merged LSEs
// into outLse (NaN when the wait gave up); kMergeVectors loads in flight
// per lane.
template <typename T, class Peers>
__device__ void copyGathered(const FusedParams<Peers>& p, const RankIo& io, const char* ws, int rank, int slot,
                             int first, int count, int step, bool ok, int lane) {
  const Region half = p.region.gatherHalf();
  const Strides& s = p.strides;
  const int Hl = half.localHeads, vectors = (int)p.byVectors.d, total = count * vectors;
  const uint64_t nan = Word<T>::nan();
  const uint4 nanVector = make_uint4((uint32_t)nan, (uint32_t)(nan >> 32), (uint32_t)nan, (uint32_t)(nan >> 32));
  for (int src = 0; src < p.nRanks; src++) {
    if (src == rank) continue;
    const char* block = ws + half.unitOffsetAt(slot, src, rank, 0);
    for (int v0 = lane; v0 < total; v0 += 32 * kMergeVectors) {
      uint4 x[kMergeVectors];
      char* to[kMergeVectors];
#pragma unroll
      for (int j = 0; j < kMergeVectors; j++) {
        const int v = v0 + 32 * j;
        to[j] = nullptr;
        if (v >= total) continue;
        const int k = p.byVectors.quotient(v), col = v - k * vectors, u = first + k * step;
        const int row = p.byHeads.quotient(u), head = u - row * Hl;
        const size_t at = (size_t)col * simple::kLaneBytes;
        to[j] = io.out + ((int64_t)row * s.outRow + (int64_t)(src * Hl + head) * s.outHead) * (int64_t)sizeof(T) + at;
        x[j] = ok ? loadVolatile16(block + (size_t)u * half.unitBytes + at) : nanVector;
      }
#pragma unroll
      for (int j = 0; j < kMergeVectors; j++)
        if (to[j] != nullptr) store16(to[j], x[j]);
    }
    if (lane < count && io.outLse) {
      const int u = first + lane * step, row = p.byHeads.quotient(u), head = u - row * Hl;
      io.outLse[(int64_t)row * s.outLseRow + (int64_t)(src * Hl + head) * s.outLseHead] =
          ok ? __uint_as_float(loadVolatile4(ws + half.lseOffsetOf(slot, src, rank, u))) : NAN;
    }
  }
}

// NONE in two phases: chunk c of this rank's merge is in every peer's
// phase-2 half (the group's lanes stored it before its barrier): a
// system-scope fence, then the chunk's flag at each peer, as signalSteps
// flags a send step.
template <class Peers>
__device__ void flagForwarded(const FusedParams<Peers>& p, int rank, int slot, uint32_t flag, int c, int lane) {
  const Region half = p.region.gatherHalf();
  __syncwarp();  // this warp's own stores, when the group is one warp
  fenceAcqRelSys();
  for (int dst = lane; dst < p.nRanks; dst += 32)
    if (dst != rank) storeRelaxedSys8(p.peers.peerWorkspace(dst) + half.flagOffsetOf(slot, rank, dst, c), flag);
}

// The receiving warps of a group (`warps` of them, named barrier `barrier`)
// wait on each other; one warp needs no barrier.
__device__ __forceinline__ void groupSync(int barrier, int warps) {
  if (warps > 1) asm volatile("bar.sync %0, %1;" ::"r"(barrier), "r"(warps * 32) : "memory");
}

// Chunk c of this rank's units, merged by a group of `warps` receiving
// warps (`receiver`: this one's index in it; the first waits on the flags
// and resets them, their only reader), a warp per unit, next unit + warps.
// `failed`: the group's shared verdict of the flag wait; when the wait gave
// up (or an earlier one did), the chunk's outputs are NaN. kGathered: NONE's
// phase 2 of the chunk, copied from the phase-2 half, not merged.
template <typename T, Wire kWire, bool kGathered, class Peers>
__device__ void receiveChunk(const FusedParams<Peers>& p, const RankIo& io, const int* start, char* ws, int rank,
                             int slot, uint32_t flag, int c, int receiver, int warps, int barrier,
                             float (*weight)[NCCL_DCP_MAX_RANKS], int* failed, Waiter& waiter, int lane) {
  const Region& r = p.region;
  // Phase 2's flags: the same offsets in the phase-2 half (gatherBytes on).
  char* flags = kGathered ? ws + r.gatherBytes : ws;
  if (receiver == 0) {  // the one warp whose verdict the group follows
    const bool ok = !waiter.failed && waitChunk(r, flags, p.nRanks, rank, slot, flag, c, lane, waiter);
    if (lane == 0) *failed = !ok;
    stamp(p.timeline, kStageLastFlag);
  }
  groupSync(barrier, warps);
  __syncwarp();
  const bool ok = !*failed;
  const simple::Chunk chunk = chunkFor(p, start, c, rank);
  const int first = chunk.first + receiver, count = (chunk.count - receiver + warps - 1) / warps;
  if (receiver < chunk.count) {
    if constexpr (kGathered) copyGathered<T>(p, io, ws, rank, slot, first, count, warps, ok, lane);
    else if (!ok) poisonUnits<T, kWire>(p, io, start, rank, first, count, warps, lane);
    else if constexpr (kWire == Wire::Fp8E4m3)
      mergeUnitsFp8<T>(p, io, start, ws, rank, slot, first, count, warps, weight, lane);
    else mergeUnits<T>(p, io, start, ws, rank, slot, first, count, warps, weight, lane);
  }
  groupSync(barrier, warps);  // every warp has read the verdict before the next one is written
  if constexpr (Peers::kGather && !kGathered)
    if (ok && receiver == 0) flagForwarded(p, rank, slot, flag, c, lane);
  if (ok && receiver == 0)
    for (int src = lane; src < p.nRanks; src += 32)
      if (src != rank) storeVolatile8(flags + r.flagOffsetOf(slot, src, rank, c), 0);
}

// Receiving warps per chunk when a block has `chunksPerBlock` chunks to
// merge: all of a block's chunks at once (a chunk's merge latency is the
// call's tail), as many warps on each as that leaves, a power of two.
__device__ __forceinline__ int receiversPerChunk(int chunksPerBlock) {
  int warps = kSimpleRecvWarps;
  while (warps > 1 && warps * chunksPerBlock > kSimpleRecvWarps) warps /= 2;
  return warps;
}

// kWire: what crosses the link (wire.h); fp8 is instantiated for HEAD only.
template <typename T, class Peers, Wire kWire = Wire::Native>
__global__ void __launch_bounds__(kSimpleThreads, 1)
    simpleA2aLseReduceKernel(const __grid_constant__ FusedParams<Peers> p) {
  // Per receiving warp: the weights of the units it merges; per group of
  // receiving warps: the flag wait's verdict.
  __shared__ float weights[kSimpleRecvWarps][simple::kMaxChunkUnits][NCCL_DCP_MAX_RANKS];
  __shared__ int waitFailed[kSimpleRecvWarps];
  // Per writing warp: the send steps it has stored (simple::publishProgress).
  __shared__ int sendProgress[kSimpleSignalWarp];
  __shared__ int sendFlagged;  // send steps whose flags are stored
  __shared__ int splitScratch[kMaxRanks + 1];
  __shared__ TokenItems tokenItems;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  int localBlock;
  const int rank = p.peers.rankOfBlock(p.blocksPerRank, &localBlock);
  const RankIo& io = p.io[Peers::kLoopback ? rank : 0];

  stamp(p.timeline, kStageLaunch, rank);
  // Inputs and the workspace may belong to the previous kernel until here.
  waitForPrerequisiteGrid();
  if (rank == p.silentRank) return;
  if (threadIdx.x < kSimpleSignalWarp) sendProgress[threadIdx.x] = 0;  // before startRound's __syncthreads
  if (threadIdx.x == 0) sendFlagged = 0;
  constexpr bool isToken = Peers::kScatter == Scatter::Token;
  const int* start = isToken ? loadSplit(p, splitScratch) : nullptr;
  const bool refused = isToken && start == nullptr;  // device counts, no split
  const TokenItems* token = isToken && !refused ? &tokenItems : nullptr;
  if (token && threadIdx.x == 0) planTokenItems(p, start, rank, &tokenItems);  // before startRound's barrier

  char* ws = p.peers.workspace(rank);
  RoundStart round = startRound(p, rank);
  stamp(p.timeline, kStageEntry);
  Waiter& waiter = round.waiter;
  if (refused) {
    if (threadIdx.x == 0) waiter.fail(-1, ncclInvalidArgument);
    endRound(p, rank, round);
    return;
  }
  const int chunks = simple::chunksIn(p.region, p.rows);
  const int myChunks = chunksOf(p, start, rank);  // TOKEN: its slice's

  if (warp < kSimpleSendWarps) {
    // Every block sends, step by step: the writers wait only for the
    // signalling warp (plan.ahead), which flags the steps whose bytes
    // have landed.
    const SendPlan plan = sendPlan(p, chunks, localBlock, token);
    const int writers = p.sendWarps;
    if (!waiter.failed && warp == kSimpleSignalWarp) {
      signalSteps(p, start, plan, sendProgress, &sendFlagged, rank, localBlock, round.slot, round.flag, writers,
                  lane);
      if (isToken && localBlock == 0)
        sendPresence(p, start, rank, round.slot, round.flag, lane);
    } else if (!waiter.failed && warp < writers) {
      for (int step = 0; step < plan.steps; step++) {
        simple::awaitFlagged(&sendFlagged, step + 1 - plan.ahead);
        writeStep<T, kWire>(p, io, start, plan, rank, localBlock, round.slot, step, warp, writers, lane);
        __syncwarp();
        if (lane == 0) simple::publishProgress(&sendProgress[warp], step + 1);
      }
    }
    stamp(p.timeline, kStageSendsDone);
    allowDependentGrid();
  } else {
    allowDependentGrid();
    // Groups of receiving warps, a chunk each; chunk c goes to group
    // c % (groups of the grid), so the first chunks sent are merged first.
    const int receiver = warp - kSimpleSendWarps;
    const int warps = receiversPerChunk((myChunks + p.blocksPerRank - 1) / p.blocksPerRank);
    const int groups = kSimpleRecvWarps / warps, group = receiver / warps;
    if (isToken && myChunks == 0 && localBlock == 0 && receiver == 0 && !waiter.failed)
      awaitPresence(p.region, ws, p.nRanks, rank, round.slot, round.flag, lane, waiter);
    for (int c = localBlock * groups + group; c < myChunks; c += p.blocksPerRank * groups)
      receiveChunk<T, kWire, false>(p, io, start, ws, rank, round.slot, round.flag, c, receiver % warps, warps,
                                    kSimpleRecvBarrier + group, weights[receiver], &waitFailed[group], waiter, lane);
    // NONE's phase 2, once this group's merges are flagged: they wait only
    // on sends, which never wait, so no phase 2 can starve a phase 1.
    if constexpr (Peers::kGather)
      for (int c = localBlock * groups + group; c < myChunks; c += p.blocksPerRank * groups)
        receiveChunk<T, kWire, true>(p, io, start, ws, rank, round.slot, round.flag, c, receiver % warps, warps,
                                     kSimpleRecvBarrier + group, weights[receiver], &waitFailed[group], waiter,
                                     lane);
    stamp(p.timeline, kStageDone);
  }
  endRound(p, rank, round);
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_A2A_LSE_REDUCE_SIMPLE_H_
