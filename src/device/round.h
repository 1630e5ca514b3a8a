/*************************************************************************
 * What every fused kernel does around its protocol's work: the device-side
 * round counter, the bounded waiter of a launch, and the opt-in timeline.
 *
 * Round: every block learns the round with one atomic add on the rank's
 * 64-bit {arrivals, round} word (Control, layout.h). The block that arrives
 * last -- every other block has read the round by then -- advances it when
 * it ends, with a plain store, so nothing waits on an atomic at the tail of
 * a call. The next launch reads the word only after its grid-dependency
 * wait, once this grid has completed. CUDA-graph replays advance it like
 * eager calls.
 *
 * Status: thread 0 reads the status word (a failed earlier wait, or an
 * abort, poisons the context) once for the block, with the round's atomic
 * in flight, and every warp of the block starts from that one verdict: a
 * stop that lands during the launch can never leave one warp of a block
 * waiting for another that saw it and left (issue 34).
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_ROUND_H_
#define NCCL_DCP_DEVICE_ROUND_H_

#include "params.h"
#include "primitives.h"

#ifndef NCCL_DCP_TIMELINE
#define NCCL_DCP_TIMELINE 0
#endif

namespace nccl_dcp {

struct RoundInfo {
  uint32_t round;
  bool advances;   // this block moves the counter on when it ends
  bool poisoned;   // the status word was set when the block started
};

// Every thread of the block calls it (a barrier).
__device__ __forceinline__ RoundInfo beginRound(Control* ctrl, const uint32_t* status, int blocksPerRank) {
  __shared__ RoundInfo shared;
  if (threadIdx.x == 0) {
    const uint32_t statusAtEntry = loadVolatile4(status);  // in flight with the atomic
    const unsigned long long old = atomicAdd(reinterpret_cast<unsigned long long*>(&ctrl->arrivals), 1ull);
    shared.round = (uint32_t)(old >> 32);
    shared.advances = (uint32_t)old == (uint32_t)blocksPerRank - 1;
    shared.poisoned = statusAtEntry != 0;
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

// The workspace pointers come from the launch parameters, not from NCCL's
// window (a dependent load of its own). Every thread of the block calls it.
template <class Peers>
__device__ __forceinline__ RoundStart startRound(const FusedParams<Peers>& p, int rank) {
  uint32_t* status = p.peers.status(rank);
  RoundStart r;
  r.info = beginRound((Control*)p.peers.workspace(rank), status, p.blocksPerRank);
  r.slot = r.info.round & 1;
  r.flag = flagForRound(r.info.round);
  Waiter& w = r.waiter;
  w.deadlineNs = p.timeoutNs ? globalTimerNs() + p.timeoutNs : ~0ull;
  w.status = status;
  w.hostError = p.hostError;
  w.rank = rank;
  w.round = r.info.round;
  w.spins = 0;
  w.failed = r.info.poisoned;
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

#endif  // NCCL_DCP_DEVICE_ROUND_H_
