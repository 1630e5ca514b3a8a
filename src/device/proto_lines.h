/*************************************************************************
 * The line protocols' driver, LineProtocol<Lines>: one round of the fused
 * collective over LL or LL128 lines (proto_ll.h, proto_ll128.h), for small
 * batches. Every warp of a block sends, then receives:
 *
 *   send:    one warp per (row, head, destination) writes the unit straight
 *            into the destination's workspace (push: receivers read only
 *            local memory), kSendBatch groups' loads in flight before their
 *            stores; the first batch is loaded before the round is read.
 *            The rank's own share is never sent. HEAD and NONE send every
 *            unit of a workspace row (Hl or H heads) to every peer; TOKEN
 *            sends each row once, to the rank whose slice holds it.
 *   receive: one warp per (row, head, group) of the rows this rank merges
 *            (TOKEN: its slice's). Every group carries the LSE word, so the
 *            warp needs no other: it loads its group from every source at
 *            once (kSourceBatch loads in flight, not one round trip per
 *            source), polls until all flags are the round's, computes the
 *            weights (the whole warp: mergeWeightsWarp), and merges in
 *            source order s = 0..cp-1, its own share read straight from
 *            partialOut. NONE in two phases forwards each merged group
 *            (relay.h) and relays the peers' once its merges are done.
 *
 * Where every item of the round has a warp of its own and receives are
 * no fewer than sends, the receivers are warps apart from the senders' (a
 * receive pass is one warp's dependent chain: it should start at the round
 * read, not after a send); else every block sends everything it owns
 * before it receives anything. The launch is cooperative, so no receive
 * can starve a send either way.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PROTO_LINES_H_
#define NCCL_DCP_DEVICE_PROTO_LINES_H_

#include "codec.h"
#include "merge.h"
#include "modes.h"
#include "peers.h"
#include "primitives.h"
#include "relay.h"
#include "round.h"

namespace nccl_dcp {

constexpr int kLineThreads = 512;
constexpr int kLineWarps = kLineThreads / 32;

template <template <class> class LinesOf>
struct LineProtocol {
  static constexpr int kThreads = kLineThreads;

  // Host: blocks per rank a round wants, a warp per (row, head,
  // destination) to send and per (row, head, group) to receive (TOKEN
  // sends each unit once; HEAD, NONE to every peer). Every warp does both,
  // or the receivers are warps apart (receiversApart) where the blocks
  // for that fit in the `coResident` blocks a rank can have.
  static long blocksWanted(const FusedArgs& a, int coResident) {
    const long units = (long)a.rows * a.region.localHeads;
    const long sendWarps = units * (a.shape.scatter == Scatter::Token ? 1 : a.nRanks - 1);
    const long recvWarps = units * a.region.groups;
    const long apart = (sendWarps + recvWarps + kLineWarps - 1) / kLineWarps;
    if (apart <= coResident && receiversApart(sendWarps, recvWarps, apart * kLineWarps)) return apart;
    return ((sendWarps > recvWarps ? sendWarps : recvWarps) + kLineWarps - 1) / kLineWarps;
  }

  // Whether a rank's receive items get warps of their own, after its send
  // items': where both fit and the receivers are at least as many. A
  // receive pass is one warp's dependent chain, so apart it starts at the
  // round read instead of after a send (cp 2: 5-12% at 1-16 rows, cp 4:
  // 2-9% at 1-4); where sends outnumber receives (cp 8 over LL: 112 send
  // warps against 80 at one row), early receivers polling beside the
  // senders cost 4% (docs/perf-history.md, "Receivers apart from senders").
  NCCL_DCP_HD static bool receiversApart(long sendItems, long recvItems, long warps) {
    return sendItems <= recvItems && sendItems + recvItems <= warps;
  }

  // Where the remote sources' units of one (row, head) lie in this rank's
  // workspace: source index i (self skipped) at first + i * stride.
  struct SourceUnits {
    char* first;
    size_t stride;
    __device__ char* of(int src, int rank) const { return first + (size_t)(src < rank ? src : src - 1) * stride; }
  };

  // Group g of one (row, head) from the remote sources in [s0, s0 +
  // kSourceBatch): loads all in flight, polled until every flag is the
  // round's, then the data fetched (again, where the protocol wants it).
  // Lane 0 leaves each remote source's LSE in lse[]. The loops stop at cp:
  // the kernels are bound by instruction issue at small batches. Returns
  // false if a wait gave up.
  template <class Lines, class Args>
  __device__ static bool fetchSources(const Args& p, const SourceUnits& units, int rank, uint32_t flag, int g,
                                      int s0, typename Lines::Line (&line)[kSourceBatch], float* lse,
                                      Waiter& waiter) {
    const Region& r = p.region;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int b = 0; b < kSourceBatch; b++) {
      if (s0 + b >= p.nRanks) break;
      if (s0 + b != rank) Lines::pollLoad(r, units.of(s0 + b, rank), g, lane, line[b]);
    }
    while (true) {
      int waitingFor = -1;
#pragma unroll
      for (int b = 0; b < kSourceBatch; b++) {
        if (s0 + b >= p.nRanks) break;
        if (s0 + b != rank && !__all_sync(kFullMask, Lines::pollReady(r, g, lane, line[b], flag))) {
          if (waitingFor < 0) waitingFor = s0 + b;
          Lines::pollLoad(r, units.of(s0 + b, rank), g, lane, line[b]);
        }
      }
      if (waitingFor < 0) break;
      if (!waiter.keepWaiting(waitingFor)) return false;
    }
#pragma unroll
    for (int b = 0; b < kSourceBatch; b++) {
      if (s0 + b >= p.nRanks) break;
      if (s0 + b == rank) continue;
      Lines::fetch(r, units.of(s0 + b, rank), g, lane, line[b]);
      if (lane == 0) lse[s0 + b] = fp8::lseOfWord(Lines::lseWordOf(line[b]));
    }
    return true;
  }

  // Merges group g of one (row, head) on rank `rank`. `weight` is the
  // warp's scratch: NCCL_DCP_MAX_RANKS weights, then as many LSEs fetched
  // again. Returns false if a wait gave up.
  template <class Mode, class Codec, class Peers>
  __device__ static bool receiveGroup(const FusedParams<Peers>& p, const RankIo& io, const int* start, char* ws,
                                      int rank, int slot, uint32_t flag, int row, int head, int g, float* weight,
                                      Waiter& waiter) {
    using Lines = LinesOf<Codec>;
    using T = typename Codec::Element;
    const Region& r = p.region;
    const int lane = threadIdx.x & 31;
    typename Lines::Line line[kSourceBatch];
    // The rank's own share and LSE are local: their loads go out before the polls.
    const int dw[2] = {Lines::dataWord(r, g, lane, 0), Lines::dataWord(r, g, lane, 1)};
    const PartialAt at = partialAt<Mode>(p, head, rank);
    const char* self = io.partialOut + inOffset(p.strides, row, at.peer, at.head) * (int64_t)sizeof(T);
    typename Codec::Input own[2];
#pragma unroll
    for (int k = 0; k < 2; k++) own[k] = dw[k] >= 0 ? Codec::loadInput(self, dw[k]) : typename Codec::Input{};
    const float ownLse = lane == 0 ? partialLse(p, io, row, at.peer, at.head) : 0.f;
    const SourceUnits units{ws + r.firstUnitOffset(slot, row, head), r.sourceBytes()};

    // Every remote source's LSE (each group carries it), then the weights.
    for (int s0 = 0; s0 < p.nRanks; s0 += kSourceBatch)
      if (!fetchSources<Lines>(p, units, rank, flag, g, s0, line, weight, waiter)) return false;
    stamp(p.timeline, kStageLastFlag);
    if (lane == 0) weight[rank] = ownLse;
    __syncwarp();
    const float mergedLse = mergeWeightsWarp(weight, p.nRanks, p.lseBase, lane);

    // Merge in source order. Up to kSourceBatch sources are still in
    // registers; more are fetched again (their flags are still set).
    float acc[2][Codec::kPerWord] = {};
    for (int s0 = 0; s0 < p.nRanks; s0 += kSourceBatch) {
      if (p.nRanks > kSourceBatch)
        if (!fetchSources<Lines>(p, units, rank, flag, g, s0, line, weight + NCCL_DCP_MAX_RANKS, waiter))
          return false;
#pragma unroll
      for (int b = 0; b < kSourceBatch; b++) {
        const int src = s0 + b;
        if (src >= p.nRanks) break;
        const float w = weight[src];
        if (src == rank) {
#pragma unroll
          for (int k = 0; k < 2; k++) Codec::accumulateOwn(acc[k], w, own[k]);
        } else {
          typename Codec::Scale scale{};
          if constexpr (Codec::kScaled)  // the source's unit scale rides in its LSE word
            scale = Codec::scaleOfLseWord(__shfl_sync(kFullMask, Lines::lseWordOf(line[b]), 0));
#pragma unroll
          for (int k = 0; k < 2; k++) Codec::accumulate(acc[k], w, scale, Lines::word(line[b], k));
          Lines::release(r, units.of(src, rank), g, lane);
        }
      }
    }
    const int64_t outRowAt = outRow<Mode>(p, start, rank, row);
    const int outHead = mergedOutHead<Mode>(p, rank, head);
    char* out = io.out + (outRowAt * p.strides.outRow + outHead * p.strides.outHead) * (int64_t)sizeof(T);
#pragma unroll
    for (int k = 0; k < 2; k++)
      if (dw[k] >= 0) Codec::store(out, dw[k], acc[k]);
    if (g == 0 && lane == 0 && io.outLse)
      io.outLse[outRowAt * p.strides.outLseRow + outHead * p.strides.outLseHead] = mergedLse;
    if constexpr (Mode::kRelays) LineRelay::forward<Lines, T>(p, rank, slot, flag, row, head, g, acc, mergedLse);
    __syncwarp();  // weight[] is reused by this warp's next group
    return true;
  }

  // A poisoned call: NaN where group g of an out (row, head) would have
  // been written, so no output is left stale.
  template <class Codec, class Peers>
  __device__ static void poisonOutGroup(const FusedParams<Peers>& p, const RankIo& io, int64_t outRowAt,
                                        int outHead, int g) {
    using Lines = LinesOf<Codec>;
    using T = typename Codec::Element;
    const int lane = threadIdx.x & 31;
    char* out = io.out + (outRowAt * p.strides.outRow + outHead * p.strides.outHead) * (int64_t)sizeof(T);
#pragma unroll
    for (int k = 0; k < 2; k++) {
      const int dw = Lines::dataWord(p.region, g, lane, k);
      if (dw >= 0) Codec::storeNaN(out, dw);
    }
    if (g == 0 && lane == 0 && io.outLse)
      io.outLse[outRowAt * p.strides.outLseRow + outHead * p.strides.outLseHead] = NAN;
  }

  // TOKEN keeps the ranks in step: a rank whose slice has no row in the
  // round receives no unit, so it would wait on nobody and could run two
  // rounds ahead, into a peer's slot that peer is still reading. Every rank
  // therefore sends such a rank a presence mark -- group 0 of unit (0, 0)
  // of its slot, flagged, no payload -- and the rank waits for every
  // peer's (then resets it, as any receiver does): each round waits on
  // every peer.
  template <class Mode, class Lines, class Peers>
  __device__ static void sendPresence(const FusedParams<Peers>& p, const int* start, int rank, int slot,
                                      uint32_t flag) {
    for (int dst = 0; dst < p.nRanks; dst++) {
      const RoundRows rows = roundRows<Mode>(p, start, dst);
      if (dst == rank || rows.lo < rows.hi) continue;
      char* unit = p.peers.peerWorkspace(dst) + p.region.unitOffset(slot, rank, dst, 0, 0);
      Lines::storeGroup(p.region, 0, 0, 0, 0, unit, flag, threadIdx.x & 31);
    }
  }
  template <class Lines, class Peers>
  __device__ static bool awaitPresence(const FusedParams<Peers>& p, char* ws, int rank, int slot, uint32_t flag,
                                       float* scratch, Waiter& waiter) {
    const SourceUnits units{ws + p.region.firstUnitOffset(slot, 0, 0), p.region.sourceBytes()};
    typename Lines::Line line[kSourceBatch];
    for (int s0 = 0; s0 < p.nRanks; s0 += kSourceBatch)
      if (!fetchSources<Lines>(p, units, rank, flag, 0, s0, line, scratch, waiter)) return false;
    for (int src = 0; src < p.nRanks; src++)
      if (src != rank) Lines::release(p.region, units.of(src, rank), 0, threadIdx.x & 31);
    return true;
  }

  // Send item -> (row, head, destination) and what it sends. HEAD, NONE:
  // every unit to every peer, destinations rotating with the rank so peers
  // are not all hit at once. TOKEN: each row not in this rank's slice
  // `mine`, to its owner. `heads` (of a workspace row) and `nPeers` (cp -
  // 1) as run holds them in registers.
  struct SendItem {
    int row, head, dst;
    const char* src;
    float lse;
  };
  template <class Mode, class Codec, class Peers>
  __device__ static SendItem sendItemOf(const FusedParams<Peers>& p, const RankIo& io, const int* start,
                                        const RoundRows& mine, int rank, int heads, int nPeers, int item) {
    using T = typename Codec::Element;
    constexpr bool token = Mode::kScatter == Scatter::Token;
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
    const PartialAt at = partialAt<Mode>(p, it.head, it.dst);
    it.src = io.partialOut + inOffset(p.strides, it.row, at.peer, at.head) * (int64_t)sizeof(T);
    it.lse = partialLse(p, io, it.row, at.peer, at.head);
    return it;
  }

  // One round on rank `rank`, block `localBlock` of its blocksPerRank.
  template <class Mode, class Codec, class Peers>
  __device__ static void run(const FusedParams<Peers>& p, int rank, int localBlock) {
    using Lines = LinesOf<Codec>;
    // Per warp: the weights, and room for LSEs fetched again (cp > kSourceBatch).
    __shared__ float weights[kLineWarps][2 * NCCL_DCP_MAX_RANKS];
    __shared__ int splitScratch[kMaxRanks + 1];
    __shared__ uint32_t splitTagOfBlock;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const RankIo& io = p.io[Peers::kLoopback ? rank : 0];
    const Region& r = p.region;
    const int warpInRank = localBlock * kLineWarps + warp;
    const int warpsPerRank = p.blocksPerRank * kLineWarps;
    const int nPeers = p.nRanks - 1;
    const int heads = r.localHeads;  // of a workspace row
    constexpr bool token = Mode::kScatter == Scatter::Token;
    bool refused;  // TOKEN's device counts make no split: NaN over the last split's rows
    const int* start = splitOf<Mode>(p, splitScratch, &refused);
    const RoundRows mine = roundRows<Mode>(p, start, rank);
    if (token && threadIdx.x == 0) splitTagOfBlock = splitTag(start, p.nRanks);  // before startRound's barrier

    const int sendItems = refused ? 0 : token ? (p.rows - (mine.hi - mine.lo)) * heads : p.rows * heads * nPeers;
    // The first item's loads go out before the round is known: they do not
    // depend on it, and the round costs a round trip of its own.
    typename Lines::Batch batch;
    SendItem it = {};
    char* peer = nullptr;
    if (warpInRank < sendItems) {
      it = sendItemOf<Mode, Codec>(p, io, start, mine, rank, heads, nPeers, warpInRank);
      Lines::loadBatch(r, it.src, 0, lane, batch);
      peer = p.peers.peerWorkspace(it.dst);
    }

    char* ws = p.peers.workspace(rank);
    RoundStart round = startRound(p, rank);
    stamp(p.timeline, kStageEntry);
    const int slot = round.slot;
    const uint32_t flag = token ? taggedFlag(round.flag, splitTagOfBlock) : round.flag;
    Waiter& waiter = round.waiter;
    if (refused && threadIdx.x == 0) waiter.fail(-1, ncclInvalidArgument);

    for (int item = warpInRank; !waiter.failed && item < sendItems; item += warpsPerRank) {
      if (item != warpInRank) {
        it = sendItemOf<Mode, Codec>(p, io, start, mine, rank, heads, nPeers, item);
        Lines::loadBatch(r, it.src, 0, lane, batch);
        peer = p.peers.peerWorkspace(it.dst);
      }
      char* unit = peer + r.unitOffset(slot, rank, it.dst, it.row, it.head);
      Lines::sealBatch(r, it.src, lane, batch);  // waits on the loads: after the round read
      Lines::storeBatch(r, batch, 0, it.lse, unit, flag, lane);
      for (int g0 = kSendBatch; g0 < r.groups; g0 += kSendBatch) {
        Lines::loadBatch(r, it.src, g0, lane, batch);
        Lines::storeBatch(r, batch, g0, it.lse, unit, flag, lane);
      }
      stamp(p.timeline, kStageFirstSend);
    }
    if (token && !refused && warpInRank == 0 && !waiter.failed)
      sendPresence<Mode, Lines>(p, start, rank, slot, flag);
    stamp(p.timeline, kStageSendsDone);
    allowDependentGrid();
    if (token && !refused && mine.lo == mine.hi && warpInRank == 0 && !waiter.failed)
      awaitPresence<Lines>(p, ws, rank, slot, flag, weights[warp], waiter);

    const int groups = r.groups;
    const int recvItems = (mine.hi - mine.lo) * heads * groups;
    // Apart, warps [sendItems, sendItems + recvItems) receive: they sent nothing.
    const int firstReceiver = receiversApart(sendItems, recvItems, warpsPerRank) ? sendItems : 0;
    for (int item = warpInRank - firstReceiver; item >= 0 && item < recvItems; item += warpsPerRank) {
      const int rowHead = p.byGroups.quotient(item), g = item - rowHead * groups;
      const int rowInMine = p.byHeads.quotient(rowHead), head = rowHead - rowInMine * heads;
      const int row = mine.lo + rowInMine;
      if (refused || waiter.failed ||
          !receiveGroup<Mode, Codec>(p, io, start, ws, rank, slot, flag, row, head, g, weights[warp], waiter))
        poisonOutGroup<Codec>(p, io, outRow<Mode>(p, start, rank, row), mergedOutHead<Mode>(p, rank, head), g);
    }
    // NONE's phase 2, once this warp's merges are forwarded: they wait only
    // on sends, which never wait, so no rank's phase 2 can starve a phase 1.
    if constexpr (Mode::kRelays)  // (never TOKEN: no refusal here)
      LineRelay::receive<LineProtocol, Lines, Codec>(p, io, ws, rank, slot, flag, recvItems, warpInRank,
                                                     warpsPerRank, weights[warp], waiter);
    stamp(p.timeline, kStageDone);
    endRound(p, rank, round);
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PROTO_LINES_H_
