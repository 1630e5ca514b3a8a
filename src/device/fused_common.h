/*************************************************************************
 * What the fused kernels of every protocol share: tensor offsets, the
 * device-side round counter, the bounded waiter of a launch, and the opt-in
 * timeline.
 *
 * Round: every block learns the round with one atomic add on the rank's
 * 64-bit {arrivals, round} word (Control, layout.h). The block that arrives
 * last -- every other block has read the round by then -- advances it when
 * it ends, with a plain store, so nothing waits on an atomic at the tail of
 * a call. The next launch reads the word only after its grid-dependency
 * wait, once this grid has completed. CUDA-graph replays advance it like
 * eager calls.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_FUSED_COMMON_H_
#define NCCL_DCP_DEVICE_FUSED_COMMON_H_

#include "params.h"
#include "primitives.h"
#include "scatter.h"

#ifndef NCCL_DCP_TIMELINE
#define NCCL_DCP_TIMELINE 0
#endif

namespace nccl_dcp {

// ---- Scatter modes (CallShape, types.h). A workspace row holds
// region.localHeads units: HEAD's unit j from source s is s's partial of
// head dst * Hl + j; TOKEN's and NONE's (direct) unit h is head h, the same
// for every destination. TOKEN sends a row only to the rank whose slice
// holds it; HEAD and NONE send every unit to every peer. NONE in two phases
// runs HEAD's (kScatter Head, kGather).

// Where the partial of (unit head sh) bound for rank dst lies in the
// inputs: (peer, head) of partialOut [B][cp][Hl][D].
struct PartialAt {
  int peer, head;
};
template <class Args>
__device__ __forceinline__ PartialAt partialAt(const Args& p, int sh, int dst) {
  if (scatterOf(p) == Scatter::Head) return {dst, sh};
  const int peer = p.byLocalHeads.quotient(sh);
  return {peer, sh - peer * p.shape.localHeads};
}

// The out head where this rank's merge of (workspace) head `head` goes:
// the head itself, but for NONE in two phases (whose merge is HEAD's: the
// rank's heads rank * Hl + head of an out row of every head).
template <class Peers>
__device__ __forceinline__ int mergedOutHead(const FusedParams<Peers>& p, int rank, int head) {
  return Peers::kGather ? rank * p.shape.localHeads + head : head;
}

// This rank's partial LSE of (round row, peer, head) (scatter.h).
template <class Args>
__device__ __forceinline__ float partialLse(const Args& p, const RankIo& io, int row, int peer, int head) {
  return partialLseOf(p.shape, p.strides, p.row0, io.partialLse, io.seqLens, io.queryStartLoc, row, peer, head);
}

struct RoundInfo {
  uint32_t round;
  bool advances;  // this block moves the counter on when it ends
};

__device__ __forceinline__ RoundInfo beginRound(Control* ctrl, int blocksPerRank) {
  __shared__ RoundInfo shared;
  if (threadIdx.x == 0) {
    const unsigned long long old = atomicAdd(reinterpret_cast<unsigned long long*>(&ctrl->arrivals), 1ull);
    shared.round = (uint32_t)(old >> 32);
    shared.advances = (uint32_t)old == (uint32_t)blocksPerRank - 1;
  }
  __syncthreads();
  return shared;
}

__device__ __forceinline__ void endRound(Control* ctrl, RoundInfo info) {
  if (threadIdx.x == 0 && info.advances) storeVolatile8(&ctrl->arrivals, (uint64_t)(info.round + 1) << 32);
}

// What a block knows once its round starts: the round, the slot and flag
// value it gives, and the bounded waiter of this launch.
struct RoundStart {
  RoundInfo info;
  int slot;
  uint32_t flag;
  Waiter waiter;
};

// The status word (a failed earlier wait poisons the context: do nothing)
// is loaded before the round's atomic, so the two round trips overlap; the
// workspace pointers come from the launch parameters, not from NCCL's
// window (a dependent load of its own).
template <class Peers>
__device__ __forceinline__ RoundStart startRound(const FusedParams<Peers>& p, int rank) {
  uint32_t* status = p.peers.status(rank);
  const uint32_t statusAtEntry = loadVolatile4(status);
  RoundStart r;
  r.info = beginRound((Control*)p.peers.workspace(rank), p.blocksPerRank);
  r.slot = r.info.round & 1;
  r.flag = flagForRound(r.info.round);
  Waiter& w = r.waiter;
  w.deadlineNs = p.timeoutNs ? globalTimerNs() + p.timeoutNs : ~0ull;
  w.status = status;
  w.hostError = p.hostError;
  w.rank = rank;
  w.round = r.info.round;
  w.spins = 0;
  w.failed = statusAtEntry != 0;
  return r;
}

template <class Peers>
__device__ __forceinline__ void endRound(const FusedParams<Peers>& p, int rank, const RoundStart& r) {
  endRound((Control*)p.peers.workspace(rank), r.info);
}

// Timeline stamp of this block (lane 0 of the calling warp): a "first"
// stage keeps the earliest stamp of the block, stored complemented so that
// both kinds are one reduction with no result (nothing waits on it); the
// others keep the latest. The launch stamp also records the block's rank.
__device__ __forceinline__ void stamp(uint64_t* timeline, TimelineStage stage, int rank = -1) {
#if NCCL_DCP_TIMELINE
  if (timeline == nullptr || (threadIdx.x & 31) != 0) return;
  unsigned long long* block = reinterpret_cast<unsigned long long*>(timeline) + blockIdx.x * kTimelineSlots;
  if (rank >= 0) block[kTimelineStages] = rank + 1;
  const unsigned long long now = globalTimerNs();
  atomicMax(block + stage, timelineKeepsFirst(stage) ? ~now : now);
#else
  (void)timeline;
  (void)stage;
  (void)rank;
#endif
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_FUSED_COMMON_H_
