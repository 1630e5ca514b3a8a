/*************************************************************************
 * The scatter modes' addressing, for the fused kernels and the fallback's
 * pack and combine (CallShape in types.h). Rows are the call's batch rows;
 * a round covers [row0, row0 + rows) of them.
 *
 *   HEAD   rank q merges heads q*Hl .. q*Hl+Hl-1 of every row of the round;
 *   TOKEN  rank q merges every head of the rows of its slice
 *          [start[q], start[q+1]), start the prefix sums of the counts;
 *          its out rows start at its slice (out row = row - start[q]);
 *   NONE   every rank merges every head of every row.
 *
 * The split is the launch's (host counts, or the even split) or, for
 * device counts, summed by each block when it runs (loadSplit), so a graph
 * replay takes the counts of that moment.
 *
 * Every function takes the mode explicitly: the fused kernels pass their
 * Mode's compile-time constant (modes.h), so each mode's kernels carry only
 * its own addressing; the fallback's kernels pass the call's.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_SCATTER_H_
#define NCCL_DCP_DEVICE_SCATTER_H_

#include "merge.h"
#include "params.h"
#include "primitives.h"
#include "types.h"

namespace nccl_dcp {

// Element offsets of (row, peer, head) in the strided tensors.
__device__ __forceinline__ int64_t inOffset(const Strides& s, int row, int peer, int head) {
  return row * s.inRow + peer * s.inPeer + head * s.inHead;
}
__device__ __forceinline__ int64_t lseOffset(const Strides& s, int row, int peer, int head) {
  return row * s.lseRow + peer * s.lsePeer + head * s.lseHead;
}

// A rank's partial LSE of (round row, peer, head), as the merge reads it:
// -inf where the row is empty on that rank (its empty-shard arrays).
__device__ __forceinline__ float partialLseOf(const CallShape& shape, const Strides& s, int row0, const char* base,
                                              const int* seqLens, const int* queryStartLoc, int row, int peer,
                                              int head) {
  if (shape.numSeqs != 0 && rowIsEmpty(seqLens, queryStartLoc, shape.numSeqs, row0 + row)) return -INFINITY;
  const int64_t i = lseOffset(s, row, peer, head);
  return shape.lseDtype == ncclFloat32 ? loadInputF32((const float*)base + i) : partialLseAt(base, i, shape.lseDtype);
}

// TOKEN's split where a block reads it: the launch's host form, or the
// caller's device counts summed into `scratch` (kMaxRanks + 1 ints of
// shared memory). Every thread of the block calls it. Device counts that
// are negative or do not sum to the batch make no split: *valid is false
// and the split returned is the last valid one (RowSplit::lastValid)
// clamped to this call's batch, the rows the refused call writes NaN over
// (nothing sent, the error recorded); a valid one is kept there for the
// next call (by block 0).
template <class Args>
__device__ const int* loadSplit(const Args& p, int* scratch, bool* valid) {
  *valid = true;
  if (p.shape.split.deviceCounts == nullptr) return p.shape.split.start;
  __shared__ int ok;
  int* last = p.shape.split.lastValid;
  if (threadIdx.x < p.nRanks) scratch[threadIdx.x + 1] = p.shape.split.deviceCounts[threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    bool good = true;
    long long sum = 0;
    scratch[0] = 0;
    for (int q = 0; q < p.nRanks; q++) {
      good = good && scratch[q + 1] >= 0;
      sum += scratch[q + 1];
      scratch[q + 1] = (int)min(sum, (long long)INT32_MAX);
    }
    ok = good && sum == p.shape.batch;
  }
  __syncthreads();
  *valid = ok;
  if (threadIdx.x <= p.nRanks) {
    if (ok && last && blockIdx.x == 0) last[threadIdx.x] = scratch[threadIdx.x];
    // Clamped to this call's batch: the last split may be a larger call's,
    // and this call's out holds no more than its own rows.
    if (!ok) scratch[threadIdx.x] = last ? min(last[threadIdx.x], p.shape.batch) : 0;
  }
  if (!ok) __syncthreads();  // block-uniform
  return scratch;
}

// Rows [lo, hi) of the round that rank q merges.
struct RoundRows {
  int lo, hi;
};
template <class Args>
__device__ __forceinline__ RoundRows roundRowsOf(Scatter mode, const Args& p, const int* start, int q) {
  if (mode != Scatter::Token) return {0, p.rows};
  const int lo = max(start[q] - p.row0, 0), hi = min(start[q + 1] - p.row0, p.rows);
  return {lo, max(lo, hi)};
}

// The out row of round row `row` on rank q: TOKEN's out starts at the
// rank's first row (the host does not advance it to the round), the other
// modes' at the round's (it does).
template <class Args>
__device__ __forceinline__ int64_t outRowOf(Scatter mode, const Args& p, const int* start, int q, int row) {
  return mode == Scatter::Token ? (int64_t)p.row0 + row - start[q] : row;
}

// The rank whose slice holds row `globalRow` of the call (TOKEN): the last
// one starting at or before it (ranks of no rows start where the next does).
__device__ __forceinline__ int ownerOf(const int* start, int nRanks, int globalRow) {
  int lo = 0, hi = nRanks - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (start[mid] <= globalRow) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_SCATTER_H_
