/*************************************************************************
 * NONE in two phases (DESIGN §14), the one algorithm beyond a single
 * exchange: each rank merges its heads as HEAD does (phase 1), forwards
 * every merged piece, merged LSE with it, into every peer's phase-2 half of
 * the same slot (layout.h: Region::relayHalf) as source `rank`, and once
 * its own merges are done copies every peer's merged heads from its own
 * phase-2 half into out heads src * Hl + j (phase 2). A row costs
 * 2 (cp - 1) Hl units received instead of (cp - 1) cp Hl.
 *
 * The protocol drivers call in at two points: after a merged piece
 * (forward*), and after their merges (receive / copyRelayed). Merges wait
 * only on sends, which never wait, so no rank's phase 2 can starve a phase
 * 1. The merged heads cross as they are (native words): a relay through
 * fp8 would round them a second time, so two phases run the native wire
 * (validate.cc refuses fp8 with them).
 *
 * LineRelay: a merged group is stored with the protocol's storeGroup, its
 * merged LSE in the LSE word, flagged as any group is; phase 2 polls the
 * peers' groups with the protocol's fetchSources.
 * SimpleRelay: a merging lane also stores its merged vector and LSE into
 * every peer's phase-2 half; the group's first warp then fences and flags
 * the chunk there (as the signalling warp flags a send step); phase 2
 * waits for every peer's chunk flag and copies. With registered outputs
 * (p.direct, types.h) the lane stores them straight into every peer's out
 * and outLse, where the peer owns the head at the offset this rank does;
 * the flags stay in the phase-2 half, tagged, and phase 2 only waits: one
 * crossing instead of two. A peer's out may be written then: an owner
 * merges only with every peer's phase-1 data of the round, which a peer
 * sends after its grid-dependency wait (every earlier kernel of its stream,
 * a reader of the last call's out included, is done), and a peer's kernel
 * ends only once its phase 2 has seen every owner's flags.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_RELAY_H_
#define NCCL_DCP_DEVICE_RELAY_H_

#include "merge.h"
#include "modes.h"
#include "primitives.h"
#include "round.h"

namespace nccl_dcp {

struct LineRelay {
  // Group g of this rank's merged (row, head): the lane's words of it and
  // the merged LSE, into every peer's phase-2 half as source `rank`
  // (destinations rotating with the rank).
  template <class Lines, typename T, class Peers>
  __device__ static void forward(const FusedParams<Peers>& p, int rank, int slot, uint32_t flag, int row, int head,
                                 int g, const float (&acc)[2][Word<T>::kPerWord], float lse) {
    const Region half = p.region.relayHalf();
    const uint64_t a = Word<T>::pack(acc[0]), b = Word<T>::pack(acc[1]);
    for (int turn = 1; turn < p.nRanks; turn++) {
      const int dst = rank + turn < p.nRanks ? rank + turn : rank + turn - p.nRanks;
      char* unit = p.peers.peerWorkspace(dst) + half.unitOffset(slot, rank, dst, row, head);
      Lines::storeGroup(p.region, a, b, g, (uint64_t)__float_as_uint(lse), unit, flag, threadIdx.x & 31);
    }
  }

  // Group g of every peer's merged (row, head) -- out head src * Hl + head
  // -- from this rank's phase-2 half into out, the merged LSE into outLse,
  // the flags reset. `lse`: the warp's NCCL_DCP_MAX_RANKS floats. False if
  // a wait gave up.
  template <class Protocol, class Lines, typename T, class Peers>
  __device__ static bool copyGroup(const FusedParams<Peers>& p, const RankIo& io, char* ws, int rank, int slot,
                                   uint32_t flag, int row, int head, int g, float* lse, Waiter& waiter) {
    const Region& r = p.region;
    const int lane = threadIdx.x & 31;
    const int dw[2] = {Lines::dataWord(r, g, lane, 0), Lines::dataWord(r, g, lane, 1)};
    const typename Protocol::SourceUnits units{ws + r.relayHalf().firstUnitOffset(slot, row, head), r.sourceBytes()};
    typename Lines::Line line[kSourceBatch];
    for (int s0 = 0; s0 < p.nRanks; s0 += kSourceBatch) {
      if (!Protocol::template fetchSources<Lines>(p, units, rank, flag, g, s0, line, lse, waiter)) return false;
#pragma unroll
      for (int b = 0; b < kSourceBatch; b++) {
        const int src = s0 + b;
        if (src >= p.nRanks) break;
        if (src == rank) continue;
        const int outHead = src * p.shape.localHeads + head;
        char* out = io.out + (row * p.strides.outRow + outHead * p.strides.outHead) * (int64_t)sizeof(T);
#pragma unroll
        for (int k = 0; k < 2; k++)
          if (dw[k] >= 0) *(uint64_t*)(out + (size_t)dw[k] * kWordBytes) = Lines::word(line[b], k);
        if (g == 0 && lane == 0 && io.outLse)
          io.outLse[row * p.strides.outLseRow + outHead * p.strides.outLseHead] = lse[src];
        Lines::release(r, units.of(src, rank), g, lane);
      }
    }
    return true;
  }

  // Phase 2 of the warp: its receive items (row, head, group) again, each
  // peer's merged group copied, or NaN where a wait gave up.
  template <class Protocol, class Lines, class Codec, class Peers>
  __device__ static void receive(const FusedParams<Peers>& p, const RankIo& io, char* ws, int rank, int slot,
                                 uint32_t flag, int items, int warpInRank, int warpsPerRank, float* lse,
                                 Waiter& waiter) {
    static_assert(!Codec::kScaled, "NONE's two phases relay native words");
    using T = typename Codec::Element;
    const int groups = p.region.groups, heads = p.region.localHeads;
    for (int item = warpInRank; item < items; item += warpsPerRank) {
      const int rowHead = p.byGroups.quotient(item), g = item - rowHead * groups;
      const int row = p.byHeads.quotient(rowHead), head = rowHead - row * heads;
      if (!waiter.failed && copyGroup<Protocol, Lines, T>(p, io, ws, rank, slot, flag, row, head, g, lse, waiter))
        continue;
      for (int src = 0; src < p.nRanks; src++)
        if (src != rank)
          Protocol::template poisonOutGroup<Codec>(p, io, row, src * p.shape.localHeads + head, g);
    }
  }
};

struct SimpleRelay {
  // Peer dst's out and outLse at the round's first row (registered
  // outputs only; outLse NULL when the call has none).
  template <class Peers>
  __device__ static char* directOut(const FusedParams<Peers>& p, int dst) {
    if constexpr (Peers::kLoopback) return p.io[dst].out;
    else return p.direct.bases[dst].out + p.direct.outOffset;
  }
  template <class Peers>
  __device__ static float* directOutLse(const FusedParams<Peers>& p, int dst) {
    if (!p.direct.withLse) return nullptr;
    if constexpr (Peers::kLoopback) return p.io[dst].outLse;
    else return p.direct.bases[dst].outLse + p.direct.lseOffset;
  }
  // Phase 2's chunk flags: tagged when it writes the outputs directly, so
  // an owner and a peer that took different paths never match.
  template <class Peers>
  __device__ static uint64_t phase2Flag(const FusedParams<Peers>& p, uint32_t flag) {
    return phase2FlagOf(flag, p.direct.tag);
  }

  // What this rank merged at `inBlock` of its block of a slot, into the
  // same place of every peer's phase-2 half (source `rank`), or with
  // registered outputs into every peer's out at `outAt` bytes from the
  // round's first row.
  template <class Peers>
  __device__ static void forwardVector(const FusedParams<Peers>& p, int rank, int slot, size_t inBlock,
                                       int64_t outAt, uint4 v) {
    if (p.direct.tag != 0) {
      for (int turn = 1; turn < p.nRanks; turn++) {
        const int dst = rank + turn < p.nRanks ? rank + turn : rank + turn - p.nRanks;
        store16(directOut(p, dst) + outAt, v);
      }
      return;
    }
    const Region half = p.region.relayHalf();
    for (int turn = 1; turn < p.nRanks; turn++) {
      const int dst = rank + turn < p.nRanks ? rank + turn : rank + turn - p.nRanks;
      store16(p.peers.peerWorkspace(dst) + half.unitOffsetAt(slot, rank, dst, 0) + inBlock, v);
    }
  }
  // The merged LSE of slot position `pos`, outLse element `lseAt` of the
  // round, likewise.
  template <class Peers>
  __device__ static void forwardLse(const FusedParams<Peers>& p, int rank, int slot, int pos, int64_t lseAt,
                                    float lse) {
    const Region half = p.region.relayHalf();
    for (int dst = 0; dst < p.nRanks; dst++) {
      if (dst == rank) continue;
      if (p.direct.tag == 0)
        storeVolatile4(p.peers.peerWorkspace(dst) + half.lseOffsetOf(slot, rank, dst, pos), __float_as_uint(lse));
      else if (float* outLse = directOutLse(p, dst))
        outLse[lseAt] = lse;
    }
  }

  // Chunk c of this rank's merge is in every peer's phase-2 half (the
  // group's lanes stored it before its barrier): a system-scope fence, then
  // the chunk's flag at each peer.
  template <class Peers>
  __device__ static void flagForwarded(const FusedParams<Peers>& p, int rank, int slot, uint64_t flag, int c,
                                       int lane) {
    const Region half = p.region.relayHalf();
    __syncwarp();  // this warp's own stores, when the group is one warp
    fenceAcqRelSys();
    for (int dst = lane; dst < p.nRanks; dst += 32)
      if (dst != rank) storeRelaxedSys8(p.peers.peerWorkspace(dst) + half.flagOffsetOf(slot, rank, dst, c), flag);
  }

  // Phase 2 of units first + k * step (k < count) of every peer, from this
  // rank's phase-2 half into out heads src * Hl + head, the merged LSEs
  // into outLse (NaN when the wait gave up); kMergeVectors loads in flight
  // per lane. Registered outputs: nothing to copy, NaN when the wait gave
  // up.
  template <typename T, class Peers>
  __device__ static void copyRelayed(const FusedParams<Peers>& p, const RankIo& io, const char* ws, int rank,
                                     int slot, int first, int count, int step, bool ok, int lane) {
    constexpr int kVectors = 4;
    if (ok && p.direct.tag != 0) return;  // the owners wrote it
    const Region half = p.region.relayHalf();
    const Strides& s = p.strides;
    const int Hl = half.localHeads, vectors = (int)p.byVectors.d, total = count * vectors;
    const uint64_t nan = Word<T>::nan();
    const uint4 nanVector = make_uint4((uint32_t)nan, (uint32_t)(nan >> 32), (uint32_t)nan, (uint32_t)(nan >> 32));
    for (int src = 0; src < p.nRanks; src++) {
      if (src == rank) continue;
      const char* block = ws + half.unitOffsetAt(slot, src, rank, 0);
      for (int v0 = lane; v0 < total; v0 += 32 * kVectors) {
        uint4 x[kVectors];
        char* to[kVectors];
#pragma unroll
        for (int j = 0; j < kVectors; j++) {
          const int v = v0 + 32 * j;
          to[j] = nullptr;
          if (v >= total) continue;
          const int k = p.byVectors.quotient(v), col = v - k * vectors, u = first + k * step;
          const int row = p.byHeads.quotient(u), head = u - row * Hl;
          const size_t at = (size_t)col * simple::kLaneBytes;
          to[j] =
              io.out + ((int64_t)row * s.outRow + (int64_t)(src * Hl + head) * s.outHead) * (int64_t)sizeof(T) + at;
          x[j] = ok ? loadVolatile16(block + (size_t)u * half.unitBytes + at) : nanVector;
        }
#pragma unroll
        for (int j = 0; j < kVectors; j++)
          if (to[j] != nullptr) store16(to[j], x[j]);
      }
      if (lane < count && io.outLse) {
        const int u = first + lane * step, row = p.byHeads.quotient(u), head = u - row * Hl;
        io.outLse[(int64_t)row * s.outLseRow + (int64_t)(src * Hl + head) * s.outLseHead] =
            ok ? __uint_as_float(loadVolatile4(ws + half.lseOffsetOf(slot, src, rank, u))) : NAN;
      }
    }
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_RELAY_H_
