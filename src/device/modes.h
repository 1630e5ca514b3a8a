/*************************************************************************
 * The algorithm layer: what a fused launch exchanges, as a policy type of
 * its own (the peer policy, peers.h, only says how a peer is reached).
 *
 *   Mode<kScatter, kRelays>
 *     kScatter  the exchange's addressing (scatter.h): HEAD sends each
 *               peer its heads of every row; TOKEN each row to the rank
 *               whose slice holds it; NONE (direct) every head of every
 *               row to every peer
 *     kRelays   NONE in two phases (relay.h, DESIGN §14): HEAD's exchange
 *               and merge, then each rank's merged heads relayed to every
 *               peer
 *
 * A workspace row holds region.localHeads units: HEAD's (and NONE in two
 * phases') unit j from source s is s's partial of head dst * Hl + j;
 * TOKEN's and NONE direct's unit h is head h, the same for every
 * destination. Both protocol drivers (proto_lines.h, proto_simple.h) are
 * written once against these functions.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_MODES_H_
#define NCCL_DCP_DEVICE_MODES_H_

#include "params.h"
#include "scatter.h"

namespace nccl_dcp {

template <Scatter kMode, bool kTwoPhase = false>
struct Mode {
  static_assert(!kTwoPhase || kMode == Scatter::Head, "NONE's two phases exchange as HEAD does");
  static constexpr Scatter kScatter = kMode;
  static constexpr bool kRelays = kTwoPhase;
};
using HeadMode = Mode<Scatter::Head>;
using TokenMode = Mode<Scatter::Token>;
using NoneDirectMode = Mode<Scatter::None>;
using NoneTwoPhaseMode = Mode<Scatter::Head, true>;

// Where the partial of workspace head `sh` bound for rank dst lies in the
// inputs: (peer, head) of partialOut [B][cp][Hl][D].
struct PartialAt {
  int peer, head;
};
template <class Mode, class Args>
__device__ __forceinline__ PartialAt partialAt(const Args& p, int sh, int dst) {
  if (Mode::kScatter == Scatter::Head) return {dst, sh};
  const int peer = p.byLocalHeads.quotient(sh);
  return {peer, sh - peer * p.shape.localHeads};
}

// The out head where this rank's merge of workspace head `head` goes: the
// head itself, but for NONE in two phases (whose merge is HEAD's: the
// rank's heads rank * Hl + head of an out row of every head).
template <class Mode, class Args>
__device__ __forceinline__ int mergedOutHead(const Args& p, int rank, int head) {
  return Mode::kRelays ? rank * p.shape.localHeads + head : head;
}

// This rank's partial LSE of (round row, peer, head) (scatter.h).
template <class Args>
__device__ __forceinline__ float partialLse(const Args& p, const RankIo& io, int row, int peer, int head) {
  return partialLseOf(p.shape, p.strides, p.row0, io.partialLse, io.seqLens, io.queryStartLoc, row, peer, head);
}

// The rows of the round rank q merges, and the out row of a round row.
template <class Mode, class Args>
__device__ __forceinline__ RoundRows roundRows(const Args& p, const int* start, int q) {
  return roundRowsOf(Mode::kScatter, p, start, q);
}
template <class Mode, class Args>
__device__ __forceinline__ int64_t outRow(const Args& p, const int* start, int q, int row) {
  return outRowOf(Mode::kScatter, p, start, q, row);
}

// The outLse element (of the round's outputs) of this rank's merge of
// (round row, workspace head).
template <class Mode, class Args>
__device__ __forceinline__ int64_t mergedLseAt(const Args& p, const int* start, int rank, int row, int head) {
  return outRow<Mode>(p, start, rank, row) * p.strides.outLseRow +
         mergedOutHead<Mode>(p, rank, head) * p.strides.outLseHead;
}

// TOKEN's split as a block reads it (scatter.h's loadSplit), else NULL;
// `refused`: device counts that make no split (the split returned is then
// the last valid one: the rows the call poisons).
template <class Mode, class Args>
__device__ __forceinline__ const int* splitOf(const Args& p, int* scratch, bool* refused) {
  *refused = false;
  if (Mode::kScatter != Scatter::Token) return nullptr;
  bool valid;
  const int* start = loadSplit(p, scratch, &valid);
  *refused = !valid;
  return start;
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_MODES_H_
