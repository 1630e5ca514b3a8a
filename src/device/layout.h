/*************************************************************************
 * Workspace layout of the fused path, shared by host (sizes, offsets) and
 * device (addressing). One rank's workspace:
 *
 *   [ control (4 KiB) | region of protocol A | region of protocol B ]
 *
 * A region holds two slots (rounds alternate between them by the parity of
 * the device-side round counter). A slot holds, for every remote source of
 * this rank (cp - 1 of them, in rank order, self skipped), capacity rows of
 * `heads` units (Region::localHeads: Hl for HEAD and NONE in two phases,
 * cp * Hl for TOKEN and NONE direct, whose receivers take every head of a
 * row); a unit is what one
 * source sends for one (row, head), unit index u = row * heads + head.
 *
 * Line protocols (the flag travels inside the data): the head's D elements
 * (Dw 8-byte data words) cut into groups, one warp instruction of the
 * protocol each. Every group carries the unit's LSE, so one warp can merge
 * a group with no other warp's help:
 *
 *   LL128:  4 lines of 128 B; payload word 0 = {lse, 0}, then 59 data words
 *   LL:     32 lines of 16 B; payload word 0 = {lse, 0}, then 31 data words
 *
 * The last group of a unit holds what is left (fewer lines / bytes).
 *
 * SIMPLE (bulk; one flag per chunk of chunkUnits consecutive units):
 *
 *   slot = [ data  [cp-1][capacity * Hl][D elements]
 *          | lse   [cp-1][capacity * Hl] fp32            (16-byte aligned)
 *          | flags [cp-1][chunks] u64 ]                   (16-byte aligned)
 *
 * NONE's two-phase algorithm (DESIGN §14, relay.h) doubles a HEAD-shaped
 * slot:
 *
 *   slot = [ phase 1: the partials, as HEAD's slot | phase 2: the merged
 *            units relayed to the peers, the same geometry ] (relayBytes apart)
 *
 * Phase 2's unit from source s for (row, head j) is s's merged head
 * s * Hl + j, its merged LSE in the LSE word (line protocols) or the LSE
 * array (SIMPLE), flagged as phase 1's are. Region::relayHalf() addresses
 * it with the same functions.
 *
 * Wire fp8 (Region::wire, codec.h): the same geometry over 1-byte
 * elements (Dw = D / 8), the scale in the high half of every LSE word
 * ({lse, scale}), and SIMPLE's LSE array of 8-byte {lse, scale} words.
 *
 * Protocols never share a region: a stale line of one protocol must never
 * be read as a flag of another. Nor do layouts: a context runs one NONE
 * algorithm and one wire (agreed at create), so a region is never read in
 * another layout than it was written in. The kernel a round runs is the
 * context's (KernelKey, kernels.h), never read back from this geometry.
 * With AUTO the workspace carries
 * one region for small batches (LL or LL128) and, when enabled, one for
 * SIMPLE.
 ************************************************************************/
#ifndef NCCL_DCP_LAYOUT_H_
#define NCCL_DCP_LAYOUT_H_

#include <stddef.h>
#include <stdint.h>

#include <cstddef>

#include "types.h"

namespace nccl_dcp {

constexpr int kWordBytes = 8;  // payload word: the unit of the merge

// The line formats of the protocols, in one place (NCCL keeps its
// ncclLLFifoLine and NCCL_LL128_* beside each other the same way).
// LL128: a 128-byte line is 16 words, the last one the flag.
namespace ll128 {
constexpr int kLineBytes = 128;
constexpr int kWordsPerLine = kLineBytes / kWordBytes;        // 16
constexpr int kDataWordsPerLine = kWordsPerLine - 1;          // 15
constexpr int kLaneBytes = 16;                                // one v2.u64 per lane
constexpr int kLanesPerLine = kLineBytes / kLaneBytes;        // 8
constexpr int kFlagLane = kLanesPerLine - 1;                  // holds word 14 + flag
constexpr int kLinesPerWarp = 32 / kLanesPerLine;             // 4
}  // namespace ll128

// LL: a 16-byte line {data32, flag32, data32, flag32}.
namespace ll {
constexpr int kLineBytes = 16;
constexpr int kDataBytesPerLine = 8;  // one payload word
constexpr int kLinesPerWarp = 32;
}  // namespace ll

// SIMPLE: bulk payload; a chunk of units is signalled by one u64 flag.
namespace simple {
constexpr int kLaneBytes = 16;        // one v4.u32 per lane
// Payload per flag (units rounded down): fine enough that the merge of the
// last chunks is short, a send step flags several (docs/perf.md, v10).
constexpr int kChunkBytes = 4096;
constexpr int kMaxChunkUnits = 16;    // a receiving lane per unit for the LSEs
}  // namespace simple

// Data words a group carries (its first payload word is the LSE).
constexpr int kLl128GroupDataWords = ll128::kLinesPerWarp * ll128::kDataWordsPerLine - 1;  // 59
constexpr int kLlGroupDataWords = ll::kLinesPerWarp - 1;                                  // 31

constexpr size_t kControlBytes = 4096;   // round counter, arrivals, status
constexpr size_t kRegionAlign = 4096;    // window offsets are 4 KiB multiples

// Control block at the start of each rank's workspace. Only the owning rank
// touches it; it is zeroed at creation with the rest of the workspace.
// arrivals and round form one 64-bit word (round in the high half): one
// atomic add tells a block both the round and how many blocks came before.
struct alignas(8) Control {
  uint32_t arrivals;  // blocks of the current round that started
  uint32_t round;     // rounds completed; slot = round & 1
  uint32_t status;    // 0, or the error a wait recorded (device copy)
  uint32_t pad;
};
static_assert(offsetof(Control, round) == 4, "round is the high half of the arrivals word");

// Flags are a function of the round, never 0 (a reset flag is 0), and wrap
// with the 32-bit counter.
NCCL_DCP_HD uint32_t flagForRound(uint32_t round) { return round % 0xffffffffu + 1u; }

NCCL_DCP_HD size_t alignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

// An LSE array's element (SIMPLE's slots, the fallback's buffers): fp32
// LSEs, or fp8's 8-byte {lse, scale} words (codec.h).
NCCL_DCP_HD size_t lseWordBytesOf(Wire wire) { return wire == Wire::Fp8E4m3 ? 8 : 4; }
// A unit (one head's D elements) in the fallback's buffers: D e4m3 bytes,
// or D elements.
NCCL_DCP_HD size_t fallbackUnitBytesOf(Wire wire, int headDim, int eltSize) {
  return (size_t)headDim * (wire == Wire::Fp8E4m3 ? 1 : eltSize);
}

// Geometry of one protocol region.
struct Region {
  Proto proto;
  int nRanks, localHeads, headDim, eltSize, capacity;
  int dataWords;       // Dw: 8-byte words of one head's data
  int groupDataWords;  // data words of a full group
  int groups;          // groups of a unit
  Wire wire;           // elements of 1 byte (fp8) or eltSize on the link (the geometry only)
  size_t groupBytes;   // stride between the groups of a unit
  size_t unitBytes;
  size_t slotBytes;
  size_t offset;       // of slot 0, from the start of the rank's workspace
  size_t relayBytes;   // NONE two-phase: from a slot's start to its phase-2 half; 0: none
  // SIMPLE only (0 otherwise): chunk geometry and the slot's LSE / flag arrays.
  int chunkUnits;      // units per flag
  int chunks;          // flags per source: ceil(capacity * Hl / chunkUnits)
  size_t lseOffset;    // from the slot's start
  size_t flagOffset;   // from the slot's start

  NCCL_DCP_HD size_t bytes() const { return 2 * slotBytes; }

  // The phase-2 half of every slot (relayBytes != 0): the same geometry,
  // so every offset below, taken on the half, addresses it.
  NCCL_DCP_HD Region relayHalf() const {
    Region half = *this;
    half.offset += relayBytes;
    return half;
  }

  // SIMPLE's LSE array: fp32 LSEs, or fp8's 8-byte {lse, scale} words.
  NCCL_DCP_HD size_t lseWordBytes() const { return lseWordBytesOf(wire); }

  // Data words group g carries (the last one may be short).
  NCCL_DCP_HD int wordsInGroup(int g) const {
    int left = dataWords - g * groupDataWords;
    return left < groupDataWords ? left : groupDataWords;
  }

  // Bytes between the units of consecutive sources in a slot.
  NCCL_DCP_HD size_t sourceBytes() const { return (size_t)capacity * localHeads * unitBytes; }

  // The (row, head) unit of the first remote source in a slot; source
  // index i's is sourceBytes() * i further.
  NCCL_DCP_HD size_t firstUnitOffset(int slot, int row, int head) const {
    return offset + (size_t)slot * slotBytes + ((size_t)row * localHeads + head) * unitBytes;
  }

  // Unit that source `src` sends to `dst` for (row, head), in dst's workspace.
  NCCL_DCP_HD size_t unitOffset(int slot, int src, int dst, int row, int head) const {
    return unitOffsetAt(slot, src, dst, (size_t)row * localHeads + head);
  }
  // The same for slot position u (row * localHeads + head).
  NCCL_DCP_HD size_t unitOffsetAt(int slot, int src, int dst, size_t u) const {
    int srcIdx = src < dst ? src : src - 1;
    return offset + (size_t)slot * slotBytes + u * unitBytes + (size_t)srcIdx * sourceBytes();
  }

  // SIMPLE: the LSE word of unit u and the flag of chunk c from source
  // `src`, in dst's workspace.
  NCCL_DCP_HD size_t lseOffsetOf(int slot, int src, int dst, size_t u) const {
    int srcIdx = src < dst ? src : src - 1;
    return offset + (size_t)slot * slotBytes + lseOffset +
           ((size_t)srcIdx * capacity * localHeads + u) * lseWordBytes();
  }
  NCCL_DCP_HD size_t flagOffsetOf(int slot, int src, int dst, int c) const {
    int srcIdx = src < dst ? src : src - 1;
    return offset + (size_t)slot * slotBytes + flagOffset + ((size_t)srcIdx * chunks + c) * 8;
  }
};

// Bytes of a line-protocol group carrying `words` data words.
NCCL_DCP_HD size_t groupBytesFor(Proto proto, int words) {
  return proto == Proto::LL128
             ? (size_t)(1 + words + ll128::kDataWordsPerLine - 1) / ll128::kDataWordsPerLine * ll128::kLineBytes
             : (size_t)(1 + words) * ll::kLineBytes;
}

// One slot's geometry without a phase-2 half.
NCCL_DCP_HD Region makeHalfRegion(Proto proto, int nRanks, int localHeads, int headDim, int eltSize, int capacity,
                                  size_t offset, Wire wire) {
  Region r;
  r.proto = proto;
  r.wire = wire;
  r.nRanks = nRanks;
  r.localHeads = localHeads;
  r.headDim = headDim;
  r.eltSize = eltSize;
  r.capacity = capacity;
  r.offset = offset;
  r.relayBytes = 0;
  const int wireEltSize = wireElementBytes(wire, eltSize);
  r.dataWords = headDim * wireEltSize / kWordBytes;
  const size_t sources = (size_t)(nRanks - 1), units = (size_t)capacity * localHeads;
  if (proto == Proto::Simple) {
    // One "group": the whole head, as the input holds it.
    r.groupDataWords = r.dataWords;
    r.groups = 1;
    r.unitBytes = r.groupBytes = (size_t)headDim * wireEltSize;
    const size_t fit = simple::kChunkBytes / r.unitBytes;
    r.chunkUnits = fit < 1 ? 1 : fit > (size_t)simple::kMaxChunkUnits ? simple::kMaxChunkUnits : (int)fit;
    r.chunks = (int)((units + r.chunkUnits - 1) / r.chunkUnits);
    r.lseOffset = sources * units * r.unitBytes;
    r.flagOffset = r.lseOffset + alignUp(sources * units * r.lseWordBytes(), 16);
    r.slotBytes = alignUp(r.flagOffset + sources * r.chunks * 8, kRegionAlign);
    return r;
  }
  r.groupDataWords = proto == Proto::LL128 ? kLl128GroupDataWords : kLlGroupDataWords;
  r.groups = (r.dataWords + r.groupDataWords - 1) / r.groupDataWords;
  r.groupBytes = groupBytesFor(proto, r.groupDataWords);
  r.unitBytes = (r.groups - 1) * r.groupBytes + groupBytesFor(proto, r.wordsInGroup(r.groups - 1));
  r.slotBytes = alignUp(sources * units * r.unitBytes, kRegionAlign);
  r.chunkUnits = r.chunks = 0;
  r.lseOffset = r.flagOffset = 0;
  return r;
}

// wire: the element format of the units; relay: NONE's two-phase slot (a
// phase-2 half after each HEAD-shaped one).
NCCL_DCP_HD Region makeRegion(Proto proto, int nRanks, int localHeads, int headDim, int eltSize,
                              int capacity, size_t offset, Wire wire = Wire::Native, bool relay = false) {
  Region r = makeHalfRegion(proto, nRanks, localHeads, headDim, eltSize, capacity, offset, wire);
  r.relayBytes = relay ? r.slotBytes : 0;
  if (relay) r.slotBytes *= 2;
  return r;
}

// The whole workspace of one rank: the control block and one or two regions.
struct WorkspaceLayout {
  Region small;     // LL or LL128 (or SIMPLE when forced)
  Region large;     // SIMPLE under AUTO; unused (bytes 0) otherwise
  Region tiny;      // LL for one GPU's smallest rounds under AUTO; unused (bytes 0) otherwise
  bool hasLarge;
  bool hasTiny;
  size_t totalBytes;
};

// smallProto: the protocol of small batches; withSimpleRegion: AUTO may
// switch to SIMPLE for large batches, which then has a region of its own.
// wire: the regions' element format (fp8: narrower units); relay: NONE's
// two-phase regions (localHeads then Hl); tinyRows > 0: AUTO runs rounds
// of at most tinyRows rows over LL (one GPU), in a region of that many rows.
inline WorkspaceLayout makeWorkspaceLayout(Proto smallProto, bool withSimpleRegion, int nRanks,
                                           int localHeads, int headDim, int eltSize, int capacity,
                                           Wire wire = Wire::Native, bool relay = false, int tinyRows = 0) {
  WorkspaceLayout w;
  w.small = makeRegion(smallProto, nRanks, localHeads, headDim, eltSize, capacity, kControlBytes, wire, relay);
  size_t end = w.small.offset + w.small.bytes();
  w.hasLarge = withSimpleRegion;
  w.large = makeRegion(Proto::Simple, nRanks, localHeads, headDim, eltSize, capacity, end, wire, relay);
  if (withSimpleRegion) end += w.large.bytes();
  w.hasTiny = tinyRows > 0;
  w.tiny = makeRegion(Proto::LL, nRanks, localHeads, headDim, eltSize, w.hasTiny ? tinyRows : 0, end, wire, relay);
  if (w.hasTiny) end += w.tiny.bytes();
  w.totalBytes = alignUp(end, kRegionAlign);
  return w;
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_LAYOUT_H_
