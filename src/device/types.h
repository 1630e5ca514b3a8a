/*************************************************************************
 * The ground floor: the small types both sides name -- the host code that
 * resolves a config, picks a protocol or fills a launch, and the kernels
 * that read them. Plain data, no device code but the Divisor's arithmetic,
 * nothing of ours included: a host header includes this one, not merge.h,
 * layout.h or params.h, for an enum. Nothing in src/device/ includes a
 * header above it.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_TYPES_H_
#define NCCL_DCP_DEVICE_TYPES_H_

#include <stdint.h>

#if defined(__CUDACC__)
#define NCCL_DCP_HD __host__ __device__ __forceinline__
#else
#define NCCL_DCP_HD inline
#endif
#if defined(__CUDA_ARCH__)
#define NCCL_DCP_UNROLL _Pragma("unroll")
#else
#define NCCL_DCP_UNROLL
#endif

namespace nccl_dcp {

// Wire protocol of the fused path (DESIGN §4); the values of
// ncclDcpProtocol_t.
enum class Proto : int { LL = 1, LL128 = 2, Simple = 3 };

// Base of the LSEs (DESIGN §1).
enum class LseBase : int { Two = 0, E = 1 };

// Ranks of one group (NCCL_DCP_MAX_RANKS, which params.h checks against).
constexpr int kMaxRanks = 64;

// Virtual ranks one loopback launch serves (a RankIo each in the params:
// 3 KiB at 64, within the 32 KiB kernel parameters of CUDA 12.1+).
constexpr int kMaxLoopbackRanks = 64;

// What crosses the link (ncclDcpWire_t): the partials as the inputs hold
// them, or e4m3 with one fp32 scale per unit (codec.h, DESIGN §15).
enum class Wire : int { Native = 0, Fp8E4m3 = 1 };
// Bytes of an element on the wire: e4m3's one, else the element's own.
NCCL_DCP_HD int wireElementBytes(Wire wire, int eltSize) { return wire == Wire::Fp8E4m3 ? 1 : eltSize; }
// A wire as a type, for dispatching over it.
template <Wire kW>
struct WireTag {
  static constexpr Wire kWire = kW;
};

// Where the merged heads go (ncclDcpScatter_t).
enum class Scatter : int { Head = 0, Token = 1, None = 2 };

// The mode axis of the fused kernels (kernel_table.h, device/modes.h): the
// scatter mode, and NONE's algorithm.
enum class FusedMode : int { Head = 0, Token = 1, NoneDirect = 2, NoneTwoPhase = 3 };
constexpr int kFusedModes = 4;

// TOKEN's split of the call's rows: rank p owns [start[p], start[p + 1]).
// With deviceCounts (the caller's int32[cp]) the kernels compute start
// themselves when they run (graph replays may change the counts), and keep
// the last split they made in lastValid (the engine's device int[kMaxRanks
// + 1], zeroed at init: every slice empty): counts that make none are
// refused and the call writes NaN over that split's rows instead, so a
// replay never leaves the previous step's outputs in place (issue 34).
struct RowSplit {
  const int* deviceCounts;
  int* lastValid;  // NULL: not kept (tests, the perf binary's baselines)
  int start[kMaxRanks + 1];
};

// TOKEN's flags carry a tag of the split: every rank computes the split
// from its own counts, and ranks whose counts differ would otherwise address
// the same rows differently -- a silent misplacement where units are
// addressed within a slice (SIMPLE), a partial wait elsewhere. With the
// tag in the flag, a unit sent under another split never reads as this
// round's, on every protocol alike: the receivers' waits time out
// (ncclRemoteError naming the peer; issue 34). The low 16 bits keep the
// round's (consecutive rounds of a slot still differ; every flag is reset
// by its reader), the high ones the tag, never zero.
NCCL_DCP_HD uint32_t splitTag(const int* start, int nRanks) {
  uint32_t h = 2166136261u;
  for (int q = 0; q <= nRanks; q++) h = (h ^ (uint32_t)start[q]) * 16777619u;
  return h ^ (h >> 16);
}
NCCL_DCP_HD uint32_t taggedFlag(uint32_t flag, uint32_t tag) { return (flag & 0xffffu) | ((tag | 1u) << 16); }
// NONE's phase-2 chunk flag (its flag words are 8 bytes): the round's flag,
// the direct path's tag above it (0: staged, today's value).
NCCL_DCP_HD uint64_t phase2FlagOf(uint32_t flag, uint32_t tag) { return (uint64_t)tag << 32 | flag; }

// What a call asks beyond its buffers, the same for every round and rank:
// the mode, the heads of an output (and workspace) row, the call's rows,
// the LSE element type, and the sequences of the empty-shard arrays.
struct CallShape {
  Scatter scatter;
  int localHeads;  // Hl
  int heads;       // of an out row: Hl (HEAD), cp * Hl (a workspace row's: region.localHeads)
  int batch;       // rows of the call (TOKEN splits them)
  int lseDtype;    // ncclDataType_t of partialLse
  int numSeqs;     // 0: no empty-shard arrays
  RowSplit split;  // TOKEN only
};

// Strides in elements, every one resolved (no "packed" zeros left).
struct Strides {
  int64_t inRow, inPeer, inHead;
  int64_t lseRow, lsePeer, lseHead;
  int64_t outRow, outHead;
  int64_t outLseRow, outLseHead;
};

// One rank's tensors for one round: the inputs offset to the round's
// first row, the outputs too unless the mode is TOKEN (whose output rows
// start at the rank's first row: the kernel places them); the empty-shard
// arrays of the whole call (or NULL).
struct RankIo {
  const char* partialOut;
  const char* partialLse;
  char* out;
  float* outLse;
  const int* seqLens;
  const int* queryStartLoc;
};

// NONE in two phases with registered outputs (ncclDcpOutputRegister,
// relay.h): phase 2 stores each merged head straight into every peer's
// out and outLse instead of its workspace. Peer q's at the round's first
// row: bases[q].out + outOffset bytes, bases[q].outLse + lseOffset floats
// (NCCL: the registration's LSA pointers, a device table; loopback: the
// virtual ranks' RankIo, bases NULL). tag 0: staged, the default; else the
// high half of phase 2's 64-bit flags (phase2FlagOf): a hash of what every
// rank must pass alike (the registration, offsets, strides, an outLse or
// none), so a rank that disagrees, or stages, times out instead of reading
// what was never written.
struct PeerOutput {
  char* out;
  float* outLse;
};
struct DirectOutputs {
  const PeerOutput* bases;
  int64_t outOffset, lseOffset;
  uint32_t tag;
  bool withLse;
};

// Record of the first device-side failure, in host-mapped memory so the host
// reads it without synchronising (ncclDcpGetAsyncError).
struct AsyncErrorRecord {
  uint32_t code;   // ncclResult_t, 0 = none
  int32_t rank;    // rank whose wait failed
  int32_t peer;    // rank it waited for
  uint32_t round;  // device round counter at the time
};

// n / d and n % d for 0 <= n < 2^31, d >= 1 fixed at launch, by a
// multiply-high, an add and a shift (round-up method of Granlund and
// Montgomery): a division by a runtime value costs the kernels ~25
// instructions, and the small batches are bound by instruction issue.
struct Divisor {
  uint32_t d, mul, shift;

  NCCL_DCP_HD uint32_t quotient(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    return (__umulhi(n, mul) + n) >> shift;
#else
    return ((uint32_t)(((uint64_t)n * mul) >> 32) + n) >> shift;
#endif
  }
  NCCL_DCP_HD uint32_t remainder(uint32_t n) const { return n - quotient(n) * d; }
};

// d >= 1: shift = ceil(log2 d), mul = floor(2^32 (2^shift - d) / d) + 1.
inline Divisor makeDivisor(uint32_t d) {
  uint32_t shift = 0;
  while (shift < 31 && (1u << shift) < d) shift++;
  const uint64_t mul = ((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1;
  return Divisor{d, (uint32_t)mul, shift};
}

// Opt-in timeline (meson -Dtimeline=true): per block, %globaltimer at each
// stage of the fused kernel, then the block's rank + 1 (kTimelineSlots per
// block). Stages that keep the block's first stamp hold it complemented.
enum TimelineStage : int {
  kStageLaunch = 0,  // the block runs (before the grid dependency wait)
  kStageEntry,       // the round read (after the grid dependency wait)
  kStageFirstSend,   // first payload store issued (SIMPLE: first flags stored)
  kStageSendsDone,   // every send of the block issued
  kStageLastFlag,    // last peer flag / line seen
  kStageDone,        // merge written
  kTimelineStages
};
constexpr int kTimelineSlots = kTimelineStages + 1;
NCCL_DCP_HD constexpr bool timelineKeepsFirst(int stage) {
  return stage == kStageLaunch || stage == kStageEntry || stage == kStageFirstSend;
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_TYPES_H_
