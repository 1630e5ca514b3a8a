/*************************************************************************
 * SIMPLE, SimpleProtocol: bulk payload, one flag per (source, chunk), for
 * large batches. The protocol's primitives (namespace simple) and its
 * driver, the same interface as LineProtocol (primitives.h).
 *
 * In the destination's workspace, per slot and remote source (layout.h):
 *   data  [capacity * Hl units][headDim elements of the link]
 *   lse   [capacity * Hl units] LSE words (fp32; fp8: {lse, scale})
 *   flags [chunks] u64                 chunk c = units [c * chunkUnits, ...)
 *
 *   send:    the first warps of every block (sendWarpsOf). The block's items
 *            (chunk, destination) go in steps: all in one when they fit
 *            in kSendBytesInFlight, else kSendStepBytes each (every step
 *            costs a fence that waits for the link); the writing warps
 *            copy a step's units together from partialOut into the
 *            destinations' workspaces (16-byte stores, no fence; a scaled
 *            codec encodes instead of copying) and publish their progress
 *            in shared memory; the last send warp waits for it, fences
 *            once for every step published and stores their flags. Items
 *            go round the blocks first, so step s of every block is wave s
 *            of the grid: it lands and is merged while the next crosses
 *            NVLink. Senders never wait on a peer; writers stay at most
 *            kSendBytesInFlight ahead of the flags. TOKEN: chunks count
 *            from each destination's first unit (its slice), items
 *            chunk-major as HEAD's; an item past a destination's last
 *            chunk (uneven splits) is empty, skipped.
 *   receive: the other warps, at the same time, in groups: a block takes
 *            all of its chunks at once, as many warps on each as that
 *            leaves (8 on one chunk at small batches, a warp per chunk at
 *            large ones). The first warp of a group acquires the chunk's
 *            flag from every remote source (a lane each); each warp then
 *            merges its units of the chunk: a lane per (unit, source) loads
 *            the LSEs in one round trip, a lane per unit turns them into
 *            weights (merge.h), and every lane merges 16-byte vectors of
 *            the link in source order s = 0..cp-1, its own share read
 *            straight from partialOut; once the group is done its first
 *            warp resets the chunk's flags (it is their only reader). NONE
 *            in two phases forwards each merged vector and the chunk's
 *            flag (relay.h), then relays the peers' chunks.
 *
 * One signal per chunk (4 KiB at D 512 bf16) instead of one per 128-byte
 * line, and no payload bytes spent on flags. Receivers wait only on
 * senders, which never wait on a peer, and the launch is cooperative: no
 * wait starves a send.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PROTO_SIMPLE_H_
#define NCCL_DCP_DEVICE_PROTO_SIMPLE_H_

#include <limits.h>

#include <type_traits>

#include "codec.h"
#include "merge.h"
#include "modes.h"
#include "peers.h"
#include "primitives.h"
#include "relay.h"
#include "round.h"

namespace nccl_dcp {

namespace simple {

constexpr int kCopyBatch = 8;  // 16-byte vectors per lane in flight

// Units [first, first + count) of chunk c in a round of `rows` rows.
struct Chunk {
  int first, count;
};
__device__ __forceinline__ Chunk chunkOf(const Region& r, int c, int rows) {
  const int first = c * r.chunkUnits, units = rows * r.localHeads;
  return {first, min(r.chunkUnits, units - first)};
}
__device__ __forceinline__ int chunksIn(const Region& r, int rows) {
  return (rows * r.localHeads + r.chunkUnits - 1) / r.chunkUnits;
}

// Copies a step's units, byVectors.d 16-byte vectors each, with `lanes`
// lanes of several warps: this warp's lanes are [warpFirst, warpFirst + 32)
// of them, each taking every lanes-th vector. Lane i of the warp holds unit
// i's source and destination (null: no such unit). kCopyBatch loads per lane
// are in flight before their stores.
__device__ __forceinline__ void copyShare(const char* src, char* dst, int units, Divisor byVectors, int warpFirst,
                                          int lanes, int lane) {
  const int vectors = (int)byVectors.d, total = units * vectors;
  const int unitStep = (int)byVectors.quotient(lanes), colStep = lanes - unitStep * vectors;
  int unit = (int)byVectors.quotient(warpFirst + lane), col = warpFirst + lane - unit * vectors;
  for (int v0 = warpFirst; v0 < total; v0 += lanes * kCopyBatch) {  // warp-uniform: shuffles below
    uint4 x[kCopyBatch];
    int at[kCopyBatch][2];
#pragma unroll
    for (int j = 0; j < kCopyBatch; j++) {
      at[j][0] = min(unit, 31);
      at[j][1] = v0 + j * lanes + lane < total ? col : -1;
      const char* s = (const char*)__shfl_sync(kFullMask, (unsigned long long)src, at[j][0]);
      if (s == nullptr) at[j][1] = -1;
      if (at[j][1] >= 0) x[j] = loadInput16(s + (size_t)col * kLaneBytes);
      unit += unitStep;
      col += colStep;
      if (col >= vectors) {
        col -= vectors;
        unit++;
      }
    }
#pragma unroll
    for (int j = 0; j < kCopyBatch; j++) {
      char* d = (char*)__shfl_sync(kFullMask, (unsigned long long)dst, at[j][0]);
      if (at[j][1] >= 0) store16(d + (size_t)at[j][1] * kLaneBytes, x[j]);
    }
  }
}

// Wire fp8: encodeShare's units in flight per warp (two 16-byte loads of
// each per lane).
constexpr int kEncodeUnits = 4;

// A scaled codec's copyShare (fp8, codec.h): writes a step's `units` units
// (lane i of the warp holds unit i's source, destination, LSE-word
// destination and LSE; src null: no such unit): unit writer + m * writers
// goes to writing warp `writer`, kEncodeUnits at once. A lane takes a
// 16-byte vector of the link (two data words, 32 bytes of input), the
// warp the unit's scale (Codec::unitScale); lane 0 stores the LSE word.
template <class Codec>
__device__ void encodeShare(const char* src, char* dst, char* lseDst, float lse, int units, int headDim, int writer,
                            int writers, int lane) {
  const int vectors = headDim / kLaneBytes;  // link vectors of a unit
  for (int u0 = writer; u0 < units; u0 += writers * kEncodeUnits) {  // warp-uniform: shuffles below
    const char* from[kEncodeUnits];
    typename Codec::Input x[kEncodeUnits][2];
    uint32_t amax[kEncodeUnits];
#pragma unroll
    for (int q = 0; q < kEncodeUnits; q++) {
      const int u = min(u0 + q * writers, 31);
      from[q] = (const char*)__shfl_sync(kFullMask, (unsigned long long)src, u);
      if (u0 + q * writers >= units) from[q] = nullptr;
      amax[q] = 0;
      if (from[q] != nullptr && lane < vectors) {
        x[q][0] = Codec::loadInput(from[q], 2 * lane);
        x[q][1] = Codec::loadInput(from[q], 2 * lane + 1);
        amax[q] = Codec::amaxOf(x[q][1], Codec::amaxOf(x[q][0]));
      }
    }
#pragma unroll
    for (int q = 0; q < kEncodeUnits; q++) {
      if (from[q] == nullptr) continue;  // warp-uniform
      const int u = u0 + q * writers;
      char* to = (char*)__shfl_sync(kFullMask, (unsigned long long)dst, u);
      char* lseTo = (char*)__shfl_sync(kFullMask, (unsigned long long)lseDst, u);
      const float unitLse = __shfl_sync(kFullMask, lse, u);
      const typename Codec::Scale scale = Codec::unitScale(from[q], 2 * vectors, amax[q], vectors <= 32, lane);
      auto encodeVector = [&](const typename Codec::Input& a, const typename Codec::Input& b) {
        const uint64_t lo = Codec::encode(a, scale), hi = Codec::encode(b, scale);
        return make_uint4((uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32));
      };
      if (lane < vectors) store16(to + (size_t)lane * kLaneBytes, encodeVector(x[q][0], x[q][1]));
      for (int c = lane + 32; c < vectors; c += 32)  // D > 512: loaded again
        store16(to + (size_t)c * kLaneBytes,
                encodeVector(Codec::loadInput(from[q], 2 * c), Codec::loadInput(from[q], 2 * c + 1)));
      if (lane == 0) storeVolatile8(lseTo, Codec::lseWord(unitLse, scale));
    }
  }
}

// A writing warp's progress, for the block's signalling warp: release at
// block scope orders the warp's payload stores (after a __syncwarp) before
// it; the signalling warp's acquire, then its system-scope fence and flag
// store, carry them to the peer (cumulativity), without the writer ever
// waiting for NVLink. Both sides are atomics (an exchange, an OR of 0):
// compute-sanitizer's racecheck does not model plain release/acquire
// accesses between warps and reports them as hazards; atomics it accepts.
// Returns the progress it replaced (callers need only the release).
__device__ __forceinline__ int publishProgress(int* progress, int steps) {
  int old;
  asm volatile("atom.release.cta.shared.exch.b32 %0, [%1], %2;"
               : "=r"(old)
               : "r"((unsigned)__cvta_generic_to_shared(progress)), "r"(steps)
               : "memory");
  return old;
}
__device__ __forceinline__ int loadProgress(const int* progress) {
  int v;
  asm volatile("atom.acquire.cta.shared.or.b32 %0, [%1], 0;"
               : "=r"(v)
               : "r"((unsigned)__cvta_generic_to_shared(progress))
               : "memory");
  return v;
}

// A wait inside the block (writers and their signaller): each side waits
// only for the other, which never waits on a peer, so it ends once both
// started from the same status (round.h); it is bounded all the same, by
// the launch's deadline (UINT64_MAX: none). A side that gives up leaves
// its steps unflagged, and the peers' receivers time out and record it.
// Checks the clock every 1024 spins.
__device__ __forceinline__ bool pastDeadline(uint32_t spins, uint64_t deadlineNs) {
  return (spins & 1023u) == 1023u && globalTimerNs() > deadlineNs;
}

// Spins until each of the first `writers` progress counters (a lane each)
// reaches `steps`; returns the least of them, or -1 past the deadline.
__device__ __forceinline__ int awaitProgress(const int* progress, int writers, int steps, int lane,
                                             uint64_t deadlineNs) {
  for (uint32_t spins = 0;; spins++) {
    const int least = __reduce_min_sync(kFullMask, lane < writers ? loadProgress(progress + lane) : INT_MAX);
    if (least >= steps) return least;
    if (__shfl_sync(kFullMask, pastDeadline(spins, deadlineNs), 0)) return -1;
    __nanosleep(32);
  }
}

// Writers stay at most this many bytes (and kMinStepsAhead steps) of a
// block ahead of its flags: enough in flight to keep NVLink busy, few enough
// that the first steps land, and are merged, while the last are sent. A
// block's share larger than that goes in steps of kSendStepBytes.
// 2 x H200, SIMPLE, 256 / 512 / 1024 rows (docs/perf.md): in flight 16 KiB
// 27.8 / 46.9 / 68.6 us, 32 KiB 26.7 / 43.9 / 68.6, unbounded 27.9 / 49.3 /
// 75.9 (v9); 4 KiB chunks, steps of 16 KiB 23.9 / 37.6 / 62.5, of 32 KiB
// 22.7 / 39.8 / 69.1 (v10).
constexpr int kSendBytesInFlight = 32768;
constexpr int kSendStepBytes = 16384;
constexpr int kMinStepsAhead = 2;

// A writer's wait for the signalling warp: until `steps` steps are
// flagged (published with publishProgress; atomics for the same reason).
// False past the deadline (as awaitProgress).
__device__ __forceinline__ bool awaitFlagged(const int* flagged, int steps, uint64_t deadlineNs) {
  for (uint32_t spins = 0; loadProgress(flagged) < steps; spins++) {
    if (pastDeadline(spins, deadlineNs)) return false;
    __nanosleep(32);
  }
  return true;
}

// One poll of the flags of up to 32 sources (a lane each; `mine` false for
// lanes with no source). Returns the lanes whose flag is not yet the round's.
__device__ __forceinline__ unsigned pollFlags(const char* flagPtr, bool mine, uint64_t flag) {
  const bool ready = !mine || loadAcquire8(flagPtr) == flag;
  return __ballot_sync(kFullMask, !ready);
}

}  // namespace simple

// Warps [0, sendWarps) of a block send -- the writers, then the signalling
// warp -- and the others receive: kSimpleSendWarps of them, but
// kSimpleSendWarpsLarge where the sends bound the round and a block has
// kSimpleLargeChunksPerBlock chunks or more to merge, and
// kSimpleSendWarpsEncoding where fp8's encoders do (sendWarpsOf).
constexpr int kSimpleThreads = 512;
constexpr int kSimpleSendWarps = 8;
constexpr int kSimpleSendWarpsLarge = 10;
constexpr int kSimpleSendWarpsEncoding = 11;
constexpr int kSimpleLargeChunksPerBlock = 8;
constexpr int kSimpleRecvWarps = kSimpleThreads / 32 - kSimpleSendWarps;  // the most a block has
constexpr int kSimpleSignalWarp = kSimpleSendWarps - 1;
constexpr int kSimpleMostWriters = kSimpleSendWarpsEncoding - 1;
// Of the writing warps, how many write (NCCL_DCP_SIMPLE_SEND_WARPS, at
// most kSimpleSignalWarp; 0: every warp before the signalling one).
// Named barriers of the receiving groups: kSimpleRecvBarrier + group (0 is
// __syncthreads); sending warps never take part.
constexpr int kSimpleRecvBarrier = 1;

// Per lane, 16-byte vectors merged at once and sources loaded per step
// (registers bound both): native kMergeVectors x kMergeSources loads in
// flight; a scaled codec's vectors stand for twice the bytes of out.
constexpr int kMergeVectors = 4;
constexpr int kMergeSources = 2;
template <class Codec>
struct MergeShape {
  static constexpr int kVectors = Codec::kScaled ? 2 : kMergeVectors;
  static constexpr int kSources = Codec::kScaled ? 1 : kMergeSources;
};

struct SimpleProtocol {
  static constexpr int kThreads = kSimpleThreads;

  // Host: blocks per rank a round wants, a block per (chunk, destination)
  // to send, up to every co-resident one (the launcher caps at
  // `coResident`); a block's receiving warps per chunk (TOKEN sends each
  // chunk once, to the rank whose slice holds it).
  static long blocksWanted(const FusedArgs& a, int /*coResident*/) {
    const Region& r = a.region;
    const long chunks = ((long)a.rows * r.localHeads + r.chunkUnits - 1) / r.chunkUnits;
    if (a.shape.scatter == Scatter::Token) return chunks;
    return chunks * (a.nRanks - 1) > chunks ? chunks * (a.nRanks - 1) : chunks;
  }

  // Units [first, end) of the round that rank q merges: every unit, or
  // (TOKEN) those of its slice's rows.
  struct UnitRange {
    int first, end;
  };
  template <class Mode, class Peers>
  __device__ static UnitRange unitsOf(const FusedParams<Peers>& p, const int* start, int q) {
    const RoundRows rows = roundRows<Mode>(p, start, q);
    return {rows.lo * p.region.localHeads, rows.hi * p.region.localHeads};
  }

  // Chunks and slot positions count a destination's units from its first
  // (unitsOf(q).first: 0 but for TOKEN), so TOKEN's chunk c of every
  // destination is sent in the same wave and merged in index order, as
  // HEAD's are, and its units sit at the start of each source's block.
  // The units of chunk c of rank q (none past its last):
  template <class Mode, class Peers>
  __device__ static simple::Chunk chunkFor(const FusedParams<Peers>& p, const int* start, int c, int q) {
    const UnitRange units = unitsOf<Mode>(p, start, q);
    const int first = units.first + c * p.region.chunkUnits;
    return {first, max(min(p.region.chunkUnits, units.end - first), 0)};
  }
  template <class Mode, class Peers>
  __device__ static int chunksOf(const FusedParams<Peers>& p, const int* start, int q) {
    const UnitRange units = unitsOf<Mode>(p, start, q);
    return (units.end - units.first + p.region.chunkUnits - 1) / p.region.chunkUnits;
  }

  // TOKEN's chunks per destination turn t (dst = rank + 1 + t mod cp), and
  // the most of any. Filled by one thread per block before the round's
  // first barrier.
  struct TokenItems {
    int chunks[kMaxRanks - 1];
    int most;
  };
  template <class Mode, class Peers>
  __device__ static void planTokenItems(const FusedParams<Peers>& p, const int* start, int rank, TokenItems* t) {
    t->most = 0;
    for (int turn = 0; turn < p.nRanks - 1; turn++) {
      const int dst = rank + 1 + turn < p.nRanks ? rank + 1 + turn : rank + 1 + turn - p.nRanks;
      t->chunks[turn] = chunksOf<Mode>(p, start, dst);
      t->most = max(t->most, t->chunks[turn]);
    }
  }

  // A block's sends: items localBlock + m * blocksPerRank (m = 0, 1, ...),
  // item = chunk * (cp - 1) + the destination's turn, perStep of them a
  // step (TOKEN: an item past its destination's chunks is empty -- uneven
  // splits only -- and skipped).
  struct SendPlan {
    int items;    // of the block
    int perStep;  // items per step: a lane of the step's warp per (item, unit)
    int steps;
    int ahead;    // steps written and not yet flagged, at most
    const TokenItems* token;  // TOKEN's chunks per turn, or NULL
  };
  template <class Peers>
  __device__ static SendPlan sendPlan(const FusedParams<Peers>& p, int chunks, int localBlock,
                                      const TokenItems* token) {
    const int all = (token ? token->most : chunks) * (p.nRanks - 1);
    const int perBlock = (all + p.blocksPerRank - 1) / p.blocksPerRank;
    SendPlan s;
    s.items = all > localBlock ? (all - localBlock + p.blocksPerRank - 1) / p.blocksPerRank : 0;
    // One GPU has no link to overlap: the fewest steps (each costs a load
    // round trip). Over NVLink a block whose share fits in what may be in
    // flight sends it in one step (one fence); a larger share goes in steps
    // of kSendStepBytes, flagged while the next ones cross.
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
  __device__ static bool sendItem(const FusedParams<Peers>& p, const SendPlan& plan, int rank, int localBlock,
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
  // unit i of the step's item k (the first writer also stores its LSE
  // word), then the writers copy every unit of the step together. A scaled
  // codec: every writer holds the LSEs, and the warp that encodes a unit
  // stores its LSE word.
  template <class Mode, class Codec, class Peers>
  __device__ static void writeStep(const FusedParams<Peers>& p, const RankIo& io, const int* start,
                                   const SendPlan& plan, int rank, int localBlock, int slot, int step, int writer,
                                   int writers, int lane) {
    using T = typename Codec::Element;
    const Region& r = p.region;
    const char* src = nullptr;
    char* to = nullptr;
    char* lseTo = nullptr;  // scaled codecs
    float lse = 0.f;        // scaled codecs
    SendItem item;
    const int k = p.byChunkUnits.quotient(lane), i = lane - k * r.chunkUnits;
    if (sendItem(p, plan, rank, localBlock, step, k, &item)) {
      const simple::Chunk chunk = chunkFor<Mode>(p, start, item.chunk, item.dst);
      if (i < chunk.count) {
        const int u = chunk.first + i, row = p.byHeads.quotient(u), head = u - row * r.localHeads;
        const PartialAt at = partialAt<Mode>(p, head, item.dst);
        char* peer = p.peers.peerWorkspace(item.dst);
        src = io.partialOut + inOffset(p.strides, row, at.peer, at.head) * (int64_t)sizeof(T);
        const int pos = u - unitsOf<Mode>(p, start, item.dst).first;  // its slot position
        to = peer + r.unitOffsetAt(slot, rank, item.dst, pos);
        if constexpr (Codec::kScaled) {
          lse = partialLse(p, io, row, at.peer, at.head);
          lseTo = peer + r.lseOffsetOf(slot, rank, item.dst, pos);
        } else if (writer == 0) {
          storeVolatile4(peer + r.lseOffsetOf(slot, rank, item.dst, pos),
                         __float_as_uint(partialLse(p, io, row, at.peer, at.head)));
        }
      }
    }
    if constexpr (Codec::kScaled)
      simple::encodeShare<Codec>(src, to, lseTo, lse, plan.perStep * r.chunkUnits, r.headDim, writer, writers, lane);
    else
      simple::copyShare(src, to, plan.perStep * r.chunkUnits, p.byVectors, writer * 32, writers * 32, lane);
  }

  // The signalling warp: waits for every writer to finish the next step,
  // fences (system scope: every writer's stores of the steps they
  // published are then visible at their destinations), and stores the
  // flags of all those steps, a lane per item; publishes how many steps are
  // flagged.
  template <class Mode, class Peers>
  __device__ static void signalSteps(const FusedParams<Peers>& p, const int* start, const SendPlan& plan,
                                     const int* progress, int* flagged, int rank, int localBlock, int slot,
                                     uint32_t flag, int writers, uint64_t deadlineNs, int lane) {
    for (int done = 0; done < plan.steps;) {
      const int written = simple::awaitProgress(progress, writers, done + 1, lane, deadlineNs);
      if (written < 0) return;
      fenceAcqRelSys();
      for (int i = lane; i < (written - done) * plan.perStep; i += 32) {
        SendItem item;
        if (sendItem(p, plan, rank, localBlock, done + i / plan.perStep, i % plan.perStep, &item))
          storeRelaxedSys8(p.peers.peerWorkspace(item.dst) + p.region.flagOffsetOf(slot, rank, item.dst, item.chunk),
                           flag);
      }
      done = written;
      __syncwarp();
      if (lane == 0) simple::publishProgress(flagged, done);
      stamp(p.timeline, kStageFirstSend);
    }
  }

  // Waits until every remote source has signalled chunk c of the region's
  // flags at `flags` (the workspace, or its phase-2 half). False if a wait
  // gave up.
  __device__ static bool waitChunk(const Region& r, const char* flags, int nRanks, int rank, int slot,
                                   uint64_t flag, int c, int lane, Waiter& waiter) {
    for (int s0 = 0; s0 < nRanks; s0 += 32) {
      const int src = s0 + lane;
      const bool mine = src < nRanks && src != rank;
      const char* f = mine ? flags + r.flagOffsetOf(slot, src, rank, c) : nullptr;
      for (unsigned late; (late = simple::pollFlags(f, mine, flag)) != 0;)
        if (!waiter.keepWaiting(s0 + __ffs(late) - 1)) return false;
    }
    return true;
  }

  // TOKEN keeps the ranks in step (see LineProtocol::sendPresence): a rank
  // whose slice has no row in the round gets chunk 0's flag from every
  // peer, with no payload, and waits for all of them (then resets them).
  template <class Mode, class Peers>
  __device__ static void sendPresence(const FusedParams<Peers>& p, const int* start, int rank, int slot,
                                      uint32_t flag, int lane) {
    for (int dst = lane; dst < p.nRanks; dst += 32) {
      const RoundRows rows = roundRows<Mode>(p, start, dst);
      if (dst != rank && rows.lo == rows.hi)
        storeRelaxedSys8(p.peers.peerWorkspace(dst) + p.region.flagOffsetOf(slot, rank, dst, 0), flag);
    }
  }
  __device__ static void awaitPresence(const Region& r, char* ws, int nRanks, int rank, int slot, uint32_t flag,
                                       int lane, Waiter& waiter) {
    if (!waitChunk(r, ws, nRanks, rank, slot, flag, 0, lane, waiter)) return;
    for (int src = lane; src < nRanks; src += 32)
      if (src != rank) storeVolatile8(ws + r.flagOffsetOf(slot, src, rank, 0), 0);
  }

  // Where one vector of the link (column col of unit u) of this rank lives:
  // its own share in partialOut, the remote sources' in the workspace (one
  // source's block of units after another), the merged one in out.
  struct VectorAt {
    const char* own;
    const char* remote;  // the first remote source's
    char* out;
    size_t inBlock;      // offset in a source's block of the slot (NONE's phase 2 forwards there)
    int unit;            // index of u among the warp's units (its weights)
    int pos;             // slot position of u (its LSE word)
  };

  // The weights of units first + k * step (k < count) of this rank: a lane
  // per (unit, source) loads the LSEs (one round trip; a scaled codec's
  // are the low halves of its LSE words), a lane per unit turns them into
  // weights (merge.h) and writes the merged LSE (NONE in two phases: into
  // every peer's phase-2 half too). `weight`: the warp's scratch, as
  // mergeUnits'.
  template <class Mode, class Peers>
  __device__ static void unitWeights(const FusedParams<Peers>& p, const RankIo& io, const int* start,
                                     const char* ws, int rank, int slot, int first, int count, int step,
                                     float (*weight)[NCCL_DCP_MAX_RANKS], int lane) {
    const Region& r = p.region;
    const int n = p.nRanks, Hl = r.localHeads;
    const int base = unitsOf<Mode>(p, start, rank).first;  // slot position of this rank's first unit
    for (int i = lane; i < count * n; i += 32) {
      const int k = p.byRanks.quotient(i), src = i - k * n, u = first + k * step;
      const int row = p.byHeads.quotient(u), head = u - row * Hl;
      const PartialAt at = partialAt<Mode>(p, head, rank);
      weight[k][src] = src == rank ? partialLse(p, io, row, at.peer, at.head)
                                   : __uint_as_float(loadVolatile4(ws + r.lseOffsetOf(slot, src, rank, u - base)));
    }
    __syncwarp();
    if (lane < count) {
      const int u = first + lane * step, row = p.byHeads.quotient(u), head = u - row * Hl;
      const float merged = mergeWeights(weight[lane], n, p.lseBase, weight[lane]);
      if (io.outLse) io.outLse[mergedLseAt<Mode>(p, start, rank, row, head)] = merged;
      if constexpr (Mode::kRelays)
        SimpleRelay::forwardLse(p, rank, slot, u - base, mergedLseAt<Mode>(p, start, rank, row, head), merged);
    }
    __syncwarp();
  }

  // Merges units first + k * step (k < count <= kMaxChunkUnits) of this
  // rank with one warp: the weights (unitWeights), then every lane merges
  // vectors of the link in source order s = 0..cp-1, MergeShape's vectors x
  // sources of loads in flight; a scaled codec takes each (unit, source)'s
  // scale from the high half of its LSE word. `weight`: the warp's
  // [kMaxChunkUnits][NCCL_DCP_MAX_RANKS] scratch.
  template <class Mode, class Codec, class Peers>
  __device__ static void mergeUnits(const FusedParams<Peers>& p, const RankIo& io, const int* start,
                                    const char* ws, int rank, int slot, int first, int count, int step,
                                    float (*weight)[NCCL_DCP_MAX_RANKS], int lane) {
    using T = typename Codec::Element;
    constexpr int kVectors = MergeShape<Codec>::kVectors, kSources = MergeShape<Codec>::kSources;
    constexpr int kOut = Codec::kVectorBytes;  // bytes of the own share and of out per vector of the link
    const Region& r = p.region;
    const Strides& s = p.strides;
    const int n = p.nRanks, Hl = r.localHeads;
    const int base = unitsOf<Mode>(p, start, rank).first;  // slot position of this rank's first unit
    unitWeights<Mode>(p, io, start, ws, rank, slot, first, count, step, weight, lane);

    const int vectors = (int)p.byVectors.d, total = count * vectors;
    const size_t sourceBytes = r.sourceBytes();
    const char* slotData = ws + r.offset + (size_t)slot * r.slotBytes;
    auto vectorAt = [&](int v) {
      const int k = p.byVectors.quotient(v), col = v - k * vectors, u = first + k * step;
      const int row = p.byHeads.quotient(u), head = u - row * Hl;
      const size_t inBlock = (size_t)(u - base) * r.unitBytes + (size_t)col * simple::kLaneBytes;
      const PartialAt own = partialAt<Mode>(p, head, rank);
      const int64_t outAt = outRow<Mode>(p, start, rank, row) * s.outRow + mergedOutHead<Mode>(p, rank, head) * s.outHead;
      return VectorAt{io.partialOut + inOffset(s, row, own.peer, own.head) * (int64_t)sizeof(T) + col * kOut,
                      slotData + inBlock, io.out + outAt * (int64_t)sizeof(T) + col * kOut, inBlock, k, u - base};
    };
    for (int v0 = 0; v0 < total; v0 += 32 * kVectors) {
      VectorAt at[kVectors];
      float acc[kVectors][2][Codec::kPerWord] = {};
#pragma unroll
      for (int j = 0; j < kVectors; j++)
        if (v0 + 32 * j + lane < total) at[j] = vectorAt(v0 + 32 * j + lane);
      for (int s0 = 0; s0 < n; s0 += kSources) {
        // A native own vector is one 16-byte load: it takes the source's
        // place in x (no registers of its own).
        constexpr bool kOwnInX = std::is_same<typename Codec::OwnVector, uint4>::value;
        uint4 x[kVectors][kSources];
        typename Codec::OwnVector own[kOwnInX ? 1 : kVectors];
        typename Codec::Scale scale[kVectors][kSources];
#pragma unroll
        for (int j = 0; j < kVectors; j++)
#pragma unroll
          for (int b = 0; b < kSources; b++) {
            const int src = s0 + b;
            if (src >= n || v0 + 32 * j + lane >= total) continue;
            if constexpr (kOwnInX) {
              x[j][b] = src == rank ? Codec::loadOwnVector(at[j].own)
                                    : loadPayload16(at[j].remote + (size_t)(src < rank ? src : src - 1) * sourceBytes);
            } else if (src == rank) {
              own[j] = Codec::loadOwnVector(at[j].own);
            } else {
              x[j][b] = loadPayload16(at[j].remote + (size_t)(src < rank ? src : src - 1) * sourceBytes);
              scale[j][b] = Codec::scaleOfLseWord(
                  (uint64_t)loadVolatile4(ws + r.lseOffsetOf(slot, src, rank, at[j].pos) + 4) << 32);
            }
          }
#pragma unroll
        for (int j = 0; j < kVectors; j++)
#pragma unroll
          for (int b = 0; b < kSources; b++) {
            const int src = s0 + b;
            if (src >= n || v0 + 32 * j + lane >= total) continue;
            const float w = weight[at[j].unit][src];
            if constexpr (kOwnInX) {
              Codec::accumulateVector(acc[j], w, scale[j][b], x[j][b]);  // the own vector is one of the link's
            } else {
              if (src == rank) Codec::accumulateOwnVector(acc[j], w, own[j]);
              else Codec::accumulateVector(acc[j], w, scale[j][b], x[j][b]);
            }
          }
      }
#pragma unroll
      for (int j = 0; j < kVectors; j++) {
        if (v0 + 32 * j + lane >= total) continue;
        Codec::storeVector(at[j].out, acc[j]);
        if constexpr (Mode::kRelays)
          SimpleRelay::forwardVector(p, rank, slot, at[j].inBlock, at[j].out - io.out, Codec::packVector(acc[j]));
      }
    }
    __syncwarp();  // weight[] is the warp's next chunk's
  }

  // A poisoned call: NaN where units first + k * step (k < count) would
  // have been merged, so no output is left stale.
  template <class Mode, class Codec, class Peers>
  __device__ static void poisonUnits(const FusedParams<Peers>& p, const RankIo& io, const int* start, int rank,
                                     int first, int count, int step, int lane) {
    using T = typename Codec::Element;
    constexpr int kOutVectors = Codec::kVectorBytes / simple::kLaneBytes;  // 16-byte vectors of out per link vector
    const Strides& s = p.strides;
    const int Hl = p.region.localHeads, vectors = (int)p.byVectors.d;
    const uint64_t nan = Word<T>::nan();
    for (int v = lane; v < count * vectors; v += 32) {
      const int k = p.byVectors.quotient(v), col = v - k * vectors, u = first + k * step;
      const int row = p.byHeads.quotient(u), head = u - row * Hl;
      const int64_t outAt = outRow<Mode>(p, start, rank, row) * s.outRow + mergedOutHead<Mode>(p, rank, head) * s.outHead;
      char* out = io.out + outAt * (int64_t)sizeof(T) + (size_t)col * Codec::kVectorBytes;
#pragma unroll
      for (int o = 0; o < kOutVectors; o++)
        store16(out + o * simple::kLaneBytes,
                make_uint4((uint32_t)nan, (uint32_t)(nan >> 32), (uint32_t)nan, (uint32_t)(nan >> 32)));
    }
    if (lane < count && io.outLse) {
      const int u = first + lane * step, row = p.byHeads.quotient(u), head = u - row * Hl;
      io.outLse[mergedLseAt<Mode>(p, start, rank, row, head)] = NAN;
    }
  }

  // The receiving warps of a group (`warps` of them, named barrier
  // `barrier`) wait on each other; one warp needs no barrier.
  __device__ static void groupSync(int barrier, int warps) {
    if (warps > 1) asm volatile("bar.sync %0, %1;" ::"r"(barrier), "r"(warps * 32) : "memory");
  }

  // Chunk c of this rank's units, merged by a group of `warps` receiving
  // warps (`receiver`: this one's index in it; the first waits on the
  // flags and resets them, their only reader), a warp per unit, next unit
  // + warps. `failed`: the group's shared verdict of the flag wait; when
  // the wait gave up (or an earlier one did), the chunk's outputs are NaN.
  // kRelayed: NONE's phase 2 of the chunk, copied from the phase-2 half
  // (relay.h), not merged.
  template <class Mode, class Codec, bool kRelayed, class Peers>
  __device__ static void receiveChunk(const FusedParams<Peers>& p, const RankIo& io, const int* start, char* ws,
                                      int rank, int slot, uint32_t flag, int c, int receiver, int warps,
                                      int barrier, float (*weight)[NCCL_DCP_MAX_RANKS], int* failed,
                                      Waiter& waiter, int lane) {
    const Region& r = p.region;
    // Phase 2's flags: the same offsets in the phase-2 half, tagged with
    // registered outputs.
    char* flags = kRelayed ? ws + r.relayBytes : ws;
    const uint64_t waitFlag = kRelayed ? SimpleRelay::phase2Flag(p, flag) : flag;
    if (receiver == 0) {  // the one warp whose verdict the group follows
      const bool ok = !waiter.failed && waitChunk(r, flags, p.nRanks, rank, slot, waitFlag, c, lane, waiter);
      if (lane == 0) *failed = !ok;
      stamp(p.timeline, kStageLastFlag);
    }
    groupSync(barrier, warps);
    __syncwarp();
    const bool ok = !*failed;
    const simple::Chunk chunk = chunkFor<Mode>(p, start, c, rank);
    const int first = chunk.first + receiver, count = (chunk.count - receiver + warps - 1) / warps;
    if (receiver < chunk.count) {
      if constexpr (kRelayed) SimpleRelay::copyRelayed<typename Codec::Element>(p, io, ws, rank, slot, first, count, warps, ok, lane);
      else if (!ok) poisonUnits<Mode, Codec>(p, io, start, rank, first, count, warps, lane);
      else mergeUnits<Mode, Codec>(p, io, start, ws, rank, slot, first, count, warps, weight, lane);
    }
    groupSync(barrier, warps);  // every warp has read the verdict before the next one is written
    if constexpr (Mode::kRelays && !kRelayed)
      if (ok && receiver == 0) SimpleRelay::flagForwarded(p, rank, slot, SimpleRelay::phase2Flag(p, flag), c, lane);
    if (ok && receiver == 0)
      for (int src = lane; src < p.nRanks; src += 32)
        if (src != rank) storeVolatile8(flags + r.flagOffsetOf(slot, src, rank, c), 0);
  }

  // Receiving warps per chunk when a block of `receivers` receiving warps
  // has `chunksPerBlock` chunks to merge: all of a block's chunks at once
  // (a chunk's merge latency is the call's tail), as many warps on each as
  // that leaves, halving.
  __device__ static int receiversPerChunk(int chunksPerBlock, int receivers) {
    int warps = receivers;
    while (warps > 1 && warps * chunksPerBlock > receivers) warps /= 2;
    return warps;
  }

  // The sending warps of a block whose rank merges `myChunks` chunks in
  // the round. One GPU (loopback), where every virtual rank's copies share
  // one HBM: a rank copies 2 (cp - 1) chunks' bytes for the cp + 1 it
  // merges, so from cp 8 the sends bound large rounds, and fp8's encode
  // from cp 4; but a block with few chunks to merge wants every receiver.
  // Measured, 10 of 16 warps sending in rounds of 8+ chunks a block
  // (docs/perf-history.md "SIMPLE's warps"): HEAD 2% / 7% faster from 256
  // rows at cp 8 / 16, TOKEN 1-8%, fp8 9-21% at cp 4-16; but HEAD 5-27%
  // and TOKEN 9-42% slower at cp 2-4, NONE (both algorithms) 7-30% at
  // every cp, and TOKEN 13% at cp 8 and 16 rows, counted by all of the
  // round's chunks (a block merged 4 of its slice's): they keep 8. NVLink
  // keeps 8: not measured (no two GPUs yet). fp8's HEAD and TOKEN rounds
  // from cp 8 take one writer more (11 of 16; perf-history "One writer
  // more for fp8's encoders"): HEAD 4% faster at 1024 rows at cp 8, 2-3%
  // from 64 rows at cp 16, TOKEN 2% from 256 rows at cp 8, where 11 cost
  // cp 4's fp8 9-10% and native 10-12%.
  template <class Mode, class Codec, class Peers>
  __device__ static int sendWarpsOf(const FusedParams<Peers>& p, int myChunks) {
    const bool sendBound = Mode::kScatter != Scatter::None && !Mode::kRelays && p.nRanks >= (Codec::kScaled ? 4 : 8);
    const bool large = myChunks >= kSimpleLargeChunksPerBlock * p.blocksPerRank;
    if (!Peers::kLoopback || !sendBound || !large) return kSimpleSendWarps;
    const bool encodeBound = Codec::kScaled && p.nRanks >= 8;
    return encodeBound ? kSimpleSendWarpsEncoding : kSimpleSendWarpsLarge;
  }

  // What every warp of a block holds of its round (run), for its sending
  // and receiving halves.
  template <class Peers>
  struct BlockRound {
    const FusedParams<Peers>& p;
    const RankIo& io;
    const int* start;         // the round's split (splitOf)
    const TokenItems* token;  // TOKEN's sends per turn (planTokenItems); null otherwise
    char* ws;                 // this rank's workspace
    int rank, localBlock, slot;
    uint32_t flag;
    Waiter& waiter;
  };

  // A refused round (TOKEN's device counts make no split): the block
  // records it, and a receiving warp per chunk of the last split's rows
  // writes NaN over them.
  template <class Mode, class Codec, class Peers>
  __device__ static void refuseRound(const BlockRound<Peers>& b, int warp, int lane) {
    if (threadIdx.x == 0) b.waiter.fail(-1, ncclInvalidArgument);
    if (warp >= kSimpleSendWarps) {
      const int myChunks = chunksOf<Mode>(b.p, b.start, b.rank), receiver = warp - kSimpleSendWarps;
      for (int c = b.localBlock * kSimpleRecvWarps + receiver; c < myChunks;
           c += b.p.blocksPerRank * kSimpleRecvWarps) {
        const simple::Chunk chunk = chunkFor<Mode>(b.p, b.start, c, b.rank);
        poisonUnits<Mode, Codec>(b.p, b.io, b.start, b.rank, chunk.first, chunk.count, 1, lane);
      }
    }
  }

  // The sending warps of a block, [0, sendWarps): the writers, then the
  // signalling warp. Every block sends its share of the round's `chunks`
  // step by step; the writers wait only for the signalling warp
  // (plan.ahead), which flags the steps whose bytes have landed.
  // `progress`, `flagged`: the block's simple::publishProgress counters.
  template <class Mode, class Codec, class Peers>
  __device__ static void sendSteps(const BlockRound<Peers>& b, int chunks, int sendWarps, int* progress,
                                   int* flagged) {
    const FusedParams<Peers>& p = b.p;
    // warp and lane from threadIdx, not parameters: as parameters, six
    // compares below compiled with their operands swapped, no longer the
    // SASS of the code before the split (a3ea078's check).
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, signalWarp = sendWarps - 1;
    const SendPlan plan = sendPlan(p, chunks, b.localBlock, b.token);
    const int writers = p.sendWarps > 0 ? min(p.sendWarps, signalWarp) : signalWarp;
    if (!b.waiter.failed && warp == signalWarp) {
      signalSteps<Mode>(p, b.start, plan, progress, flagged, b.rank, b.localBlock, b.slot, b.flag, writers,
                        b.waiter.deadlineNs, lane);
      if (Mode::kScatter == Scatter::Token && b.localBlock == 0)
        sendPresence<Mode>(p, b.start, b.rank, b.slot, b.flag, lane);
    } else if (!b.waiter.failed && warp < writers) {
      for (int step = 0; step < plan.steps; step++) {
        if (!simple::awaitFlagged(flagged, step + 1 - plan.ahead, b.waiter.deadlineNs)) break;
        writeStep<Mode, Codec>(p, b.io, b.start, plan, b.rank, b.localBlock, b.slot, step, warp, writers, lane);
        __syncwarp();
        if (lane == 0) simple::publishProgress(&progress[warp], step + 1);
      }
    }
  }

  // The receiving warps of a block, `groups` groups of `warps`, a chunk
  // each: chunk c goes to group c % (groups of the grid), so the first
  // chunks sent are merged first. kRelayed: NONE's phase 2 of the same
  // chunks. `weights`, `waitFailed`: the block's, per receiving warp and
  // group.
  template <class Mode, class Codec, bool kRelayed, class Peers>
  __device__ static void receiveChunks(const BlockRound<Peers>& b, int myChunks, int receiver, int warps, int group,
                                       int groups, float (*weights)[simple::kMaxChunkUnits][NCCL_DCP_MAX_RANKS],
                                       int* waitFailed, int lane) {
    for (int c = b.localBlock * groups + group; c < myChunks; c += b.p.blocksPerRank * groups)
      receiveChunk<Mode, Codec, kRelayed>(b.p, b.io, b.start, b.ws, b.rank, b.slot, b.flag, c, receiver % warps,
                                          warps, kSimpleRecvBarrier + group, weights[receiver], &waitFailed[group],
                                          b.waiter, lane);
  }

  // One round on rank `rank`, block `localBlock` of its blocksPerRank.
  template <class Mode, class Codec, class Peers>
  __device__ static void run(const FusedParams<Peers>& p, int rank, int localBlock) {
    // Per receiving warp: the weights of the units it merges; per group of
    // receiving warps: the flag wait's verdict.
    __shared__ float weights[kSimpleRecvWarps][simple::kMaxChunkUnits][NCCL_DCP_MAX_RANKS];
    __shared__ int waitFailed[kSimpleRecvWarps];
    // Per writing warp: the send steps it has stored (simple::publishProgress).
    __shared__ int sendProgress[kSimpleMostWriters];
    __shared__ int sendFlagged;  // send steps whose flags are stored
    __shared__ int splitScratch[kMaxRanks + 1];
    __shared__ TokenItems tokenItems;
    __shared__ uint32_t splitTagOfBlock;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const RankIo& io = p.io[Peers::kLoopback ? rank : 0];

    if (threadIdx.x < kSimpleMostWriters) sendProgress[threadIdx.x] = 0;  // before startRound's __syncthreads
    if (threadIdx.x == 0) sendFlagged = 0;
    constexpr bool isToken = Mode::kScatter == Scatter::Token;
    bool refused;  // TOKEN's device counts make no split: NaN over the last split's rows
    const int* start = splitOf<Mode>(p, splitScratch, &refused);
    const TokenItems* token = isToken && !refused ? &tokenItems : nullptr;
    if (token && threadIdx.x == 0) {  // before startRound's barrier
      planTokenItems<Mode>(p, start, rank, &tokenItems);
      splitTagOfBlock = splitTag(start, p.nRanks);
    }

    char* ws = p.peers.workspace(rank);
    RoundStart round = startRound(p, rank);
    stamp(p.timeline, kStageEntry);
    const uint32_t flag = token ? taggedFlag(round.flag, splitTagOfBlock) : round.flag;
    const BlockRound<Peers> b{p, io, start, token, ws, rank, localBlock, round.slot, flag, round.waiter};
    if (refused) {
      refuseRound<Mode, Codec>(b, warp, lane);
      endRound(p, rank, round);
      return;
    }
    const int chunks = simple::chunksIn(p.region, p.rows);
    const int myChunks = chunksOf<Mode>(p, start, rank);  // TOKEN: its slice's
    const int sendWarps = sendWarpsOf<Mode, Codec>(p, myChunks);
    if (warp < sendWarps) {
      sendSteps<Mode, Codec>(b, chunks, sendWarps, sendProgress, &sendFlagged);
      stamp(p.timeline, kStageSendsDone);
      allowDependentGrid();
    } else {
      allowDependentGrid();
      const int receiver = warp - sendWarps, receivers = kSimpleThreads / 32 - sendWarps;
      const int warps = receiversPerChunk((myChunks + p.blocksPerRank - 1) / p.blocksPerRank, receivers);
      const int groups = receivers / warps, group = receiver / warps;
      if (isToken && myChunks == 0 && localBlock == 0 && receiver == 0 && !b.waiter.failed)
        awaitPresence(p.region, ws, p.nRanks, rank, round.slot, flag, lane, b.waiter);
      receiveChunks<Mode, Codec, false>(b, myChunks, receiver, warps, group, groups, weights, waitFailed, lane);
      // NONE's phase 2, once this group's merges are flagged: they wait
      // only on sends, which never wait, so no phase 2 can starve a phase 1.
      if constexpr (Mode::kRelays)
        receiveChunks<Mode, Codec, true>(b, myChunks, receiver, warps, group, groups, weights, waitFailed, lane);
      stamp(p.timeline, kStageDone);
    }
    endRound(p, rank, round);
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PROTO_SIMPLE_H_
