// Workspace layout math (src/device/layout.h): unit geometry of each protocol,
// slot sizes, that every unit a source may write owns its bytes, the
// regions of a workspace, the round flags, and ncclDcpWorkspaceSize; and the
// kernels' index division (Divisor, src/device/types.h).
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device/layout.h"
#include "device/params.h"
#include "enums.h"
#include "env.h"
#include "test_util.h"
#include "validate.h"

namespace nccl_dcp {
namespace {

constexpr Proto kProtos[] = {Proto::LL, Proto::LL128, Proto::Simple};

const char* name(Proto p) {
  switch (p) {
    case Proto::LL: return "LL";
    case Proto::LL128: return "LL128";
    default: return "SIMPLE";
  }
}

size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

// Every head size a config accepts, for 2- and 4-byte elements.
std::vector<std::pair<int, int>> validHeadDims() {
  std::vector<std::pair<int, int>> dims;  // {headDim, eltSize}
  for (int elt : {2, 4})
    for (int d = 16 / elt; d <= NCCL_DCP_MAX_HEAD_DIM; d += 16 / elt) dims.push_back({d, elt});
  return dims;
}

// Bytes of one unit (a source's D elements for one row and head, with the
// LSE), from the wire formats written out here rather than from layout.h:
//   LL128:  groups of 4 lines x 15 payload words carry the LSE word + 59
//           data words; the last group as many 128-byte lines as it needs
//   LL:     groups of 32 lines of 16 bytes, each line one payload word
//   SIMPLE: the head's bytes alone (its LSE and flag live in arrays of
//           their own: expectedSlotBytes)
size_t expectedUnitBytes(Proto p, int D, int elt) {
  const size_t bytes = (size_t)D * elt, words = bytes / 8;
  switch (p) {
    case Proto::LL128: {
      const size_t groups = ceilDiv(words, 59), last = words - (groups - 1) * 59;
      return 512 * (groups - 1) + 128 * ceilDiv(1 + last, 15);
    }
    case Proto::LL: {
      const size_t groups = ceilDiv(words, 31), last = words - (groups - 1) * 31;
      return 512 * (groups - 1) + 16 * (1 + last);
    }
    default: return bytes;
  }
}

size_t roundUp4K(size_t x) { return ceilDiv(x, 4096) * 4096; }

// Units one SIMPLE flag covers: as many heads as fit in 4 KiB, 1 to 16.
size_t expectedChunkUnits(int D, int elt) {
  const size_t fit = 4096 / ((size_t)D * elt);
  return fit < 1 ? 1 : fit > 16 ? 16 : fit;
}

// One slot: every remote source's capacity rows of Hl units, page-rounded;
// SIMPLE adds every source's LSEs (from a 16-byte boundary) and a u64 flag
// per chunk.
size_t expectedSlotBytes(Proto p, int cp, int Hl, int D, int elt, int capacity) {
  const size_t units = (size_t)(cp - 1) * capacity * Hl;
  size_t bytes = units * expectedUnitBytes(p, D, elt);
  if (p == Proto::Simple)
    bytes += ceilDiv(units * 4, 16) * 16 + (size_t)(cp - 1) * ceilDiv((size_t)capacity * Hl, expectedChunkUnits(D, elt)) * 8;
  return roundUp4K(bytes);
}

// A rank's workspace: the 4 KiB control block, two slots of the small
// protocol, and two SIMPLE slots when AUTO may switch to SIMPLE.
size_t expectedWorkspaceBytes(Proto small, bool withSimple, int cp, int Hl, int D, int elt, int capacity) {
  size_t total = 4096 + 2 * expectedSlotBytes(small, cp, Hl, D, elt, capacity);
  if (withSimple) total += 2 * expectedSlotBytes(Proto::Simple, cp, Hl, D, elt, capacity);
  return roundUp4K(total);
}

// ---------------------------------------------------------------------------
// Unit geometry.

// Every group of a line-protocol unit carries the LSE in its first payload
// word, then up to groupDataWords data words.
TEST(UnitGeometry, LL128GroupsAreFourLinesWithTheLseFirst) {
  for (auto [D, elt] : validHeadDims()) {
    const Region r = makeRegion(Proto::LL128, 2, 1, D, elt, 1, kControlBytes);
    const size_t dataWords = (size_t)D * elt / 8;
    const size_t groups = ceilDiv(dataWords, 59);                   // 4 lines x 15 words - the LSE word
    const size_t lastWords = dataWords - (groups - 1) * 59;
    const size_t lastLines = ceilDiv(1 + lastWords, 15);            // 15 payload words + 1 flag word per line
    SCOPED_TRACE(::testing::Message() << "D " << D << " elt " << elt);
    ASSERT_EQ((size_t)r.dataWords, dataWords);
    ASSERT_EQ(r.groupDataWords, 59);
    ASSERT_EQ((size_t)r.groups, groups);
    ASSERT_EQ(r.groupBytes, 512u);
    ASSERT_EQ(r.unitBytes, 512 * (groups - 1) + 128 * lastLines);
    ASSERT_EQ(r.unitBytes, expectedUnitBytes(Proto::LL128, D, elt));
    ASSERT_EQ((size_t)r.wordsInGroup(r.groups - 1), lastWords);
  }
}

TEST(UnitGeometry, LL128BoundaryHeads) {
  // 14 data words + the LSE word fill one line exactly; 15 need two.
  EXPECT_EQ(makeRegion(Proto::LL128, 2, 1, 56, 2, 1, 0).unitBytes, 128u);   // 112 bytes = 14 words
  EXPECT_EQ(makeRegion(Proto::LL128, 2, 1, 60, 2, 1, 0).unitBytes, 256u);   // 120 bytes = 15 words
  EXPECT_EQ(makeRegion(Proto::LL128, 2, 1, 236, 2, 1, 0).unitBytes, 512u);  // 59 words: one full group
  EXPECT_EQ(makeRegion(Proto::LL128, 2, 1, 512, 2, 1, 0).groups, 3);        // 128 words = 59 + 59 + 10
  EXPECT_EQ(makeRegion(Proto::LL128, 2, 1, 512, 2, 1, 0).unitBytes, 2 * 512u + 128u);
}

TEST(UnitGeometry, LLGroupsAreThirtyTwoLines) {
  for (auto [D, elt] : validHeadDims()) {
    const Region r = makeRegion(Proto::LL, 2, 1, D, elt, 1, kControlBytes);
    const size_t dataWords = (size_t)D * elt / 8, groups = ceilDiv(dataWords, 31);
    const size_t lastWords = dataWords - (groups - 1) * 31;
    SCOPED_TRACE(::testing::Message() << "D " << D << " elt " << elt);
    ASSERT_EQ((size_t)r.groups, groups);
    ASSERT_EQ(r.groupBytes, 32 * 16u);  // a line per lane
    ASSERT_EQ(r.unitBytes, 512 * (groups - 1) + 16 * (1 + lastWords));
  }
}

// SIMPLE moves the head as the input holds it and signals a chunk of up to
// 16 units, 4 KiB at most (at least one unit), with one flag.
TEST(UnitGeometry, SimpleUnitsAreTheHeadInChunksOfAtMostFourKiB) {
  for (auto [D, elt] : validHeadDims())
    for (int Hl : {1, 3, 16}) {
      const int capacity = 5;
      const Region r = makeRegion(Proto::Simple, 3, Hl, D, elt, capacity, kControlBytes);
      const size_t headBytes = (size_t)D * elt;
      size_t chunkUnits = 16;  // counted down here, computed by division in layout.h
      while (chunkUnits > 1 && chunkUnits * headBytes > 4096) chunkUnits--;
      SCOPED_TRACE(::testing::Message() << "D " << D << " elt " << elt << " Hl " << Hl);
      ASSERT_EQ(r.groups, 1);
      ASSERT_EQ(r.unitBytes, headBytes);
      ASSERT_EQ((size_t)r.chunkUnits, chunkUnits);
      ASSERT_EQ((size_t)r.chunks, ceilDiv((size_t)capacity * Hl, chunkUnits));
    }
}

// The slot of SIMPLE: every source's data, then every source's LSEs, then
// every source's chunk flags; all disjoint, 16-byte aligned, in the slot.
TEST(UnitGeometry, SimpleSlotHoldsDataThenLsesThenFlags) {
  for (int cp : {2, 3, 9})
    for (auto [D, elt] : {std::pair{8, 2}, std::pair{512, 2}, std::pair{4096, 4}}) {
      const int Hl = 3, capacity = 7;
      const Region r = makeRegion(Proto::Simple, cp, Hl, D, elt, capacity, kControlBytes);
      const size_t units = (size_t)capacity * Hl, dataBytes = (size_t)(cp - 1) * units * D * elt;
      SCOPED_TRACE(::testing::Message() << "cp " << cp << " D " << D << " elt " << elt);
      ASSERT_EQ(r.lseOffset, dataBytes);
      ASSERT_EQ(r.flagOffset, dataBytes + ceilDiv((size_t)(cp - 1) * units * 4, 16) * 16);
      ASSERT_LE(r.flagOffset + (size_t)(cp - 1) * r.chunks * 8, r.slotBytes);
      for (int slot = 0; slot < 2; slot++)
        for (int src = 1; src < cp; src++) {
          const size_t lastUnit = r.unitOffset(slot, src, 0, capacity - 1, Hl - 1) + r.unitBytes;
          const size_t firstLse = r.lseOffsetOf(slot, src, 0, 0), lastLse = r.lseOffsetOf(slot, src, 0, units - 1) + 4;
          const size_t firstFlag = r.flagOffsetOf(slot, src, 0, 0);
          const size_t lastFlag = r.flagOffsetOf(slot, src, 0, r.chunks - 1) + 8;
          const size_t slotStart = r.offset + slot * r.slotBytes;
          ASSERT_LE(lastUnit, slotStart + r.lseOffset);
          ASSERT_GE(firstLse, slotStart + r.lseOffset);
          ASSERT_LE(lastLse, slotStart + r.flagOffset);
          ASSERT_GE(firstFlag, slotStart + r.flagOffset);
          ASSERT_LE(lastFlag, slotStart + r.slotBytes);
          ASSERT_EQ(firstFlag % 8, 0u);
          // Sources follow each other without overlap.
          if (src > 1) {
            ASSERT_EQ(r.lseOffsetOf(slot, src, 0, 0), r.lseOffsetOf(slot, src - 1, 0, units - 1) + 4);
            ASSERT_EQ(r.flagOffsetOf(slot, src, 0, 0), r.flagOffsetOf(slot, src - 1, 0, r.chunks - 1) + 8);
          }
        }
    }
}

TEST(UnitGeometry, UnitsAreWholeSixteenByteLines) {
  // Units start on 16-byte boundaries (LL128 on 128): vector stores need it.
  for (Proto p : kProtos)
    for (auto [D, elt] : validHeadDims()) {
      const Region r = makeRegion(p, 2, 1, D, elt, 1, 0);
      ASSERT_EQ(r.unitBytes % (p == Proto::LL128 ? 128 : 16), 0u) << name(p) << " D " << D << " elt " << elt;
    }
}

// ---------------------------------------------------------------------------
// Slots and regions.

TEST(SlotBytes, PageAlignedAndJustLargeEnough) {
  for (Proto p : kProtos)
    for (int cp : {1, 2, 3, 8, 17, 64})
      for (int capacity : {1, 7, 256, 4096})
        for (int Hl : {1, 3, 128})
          for (auto [D, elt] : {std::pair{8, 2}, std::pair{128, 4}, std::pair{520, 2}, std::pair{4096, 2}}) {
            const Region r = makeRegion(p, cp, Hl, D, elt, capacity, kControlBytes);
            SCOPED_TRACE(::testing::Message() << name(p) << " cp " << cp << " capacity " << capacity << " Hl "
                                              << Hl << " D " << D << " elt " << elt);
            ASSERT_EQ(r.slotBytes, expectedSlotBytes(p, cp, Hl, D, elt, capacity));
            ASSERT_EQ(r.bytes(), 2 * r.slotBytes);
          }
}

TEST(SlotBytes, LargestConfigDoesNotOverflow) {
  // 63 sources x 2^20 rows x 1024 heads x 4096 fp32: far beyond memory, but
  // the size must be computed, not wrapped.
  const Region r = makeRegion(Proto::Simple, NCCL_DCP_MAX_RANKS, NCCL_DCP_MAX_LOCAL_HEADS, NCCL_DCP_MAX_HEAD_DIM, 4,
                              NCCL_DCP_MAX_BATCH_CAPACITY, kControlBytes);
  const double need = 63.0 * (1 << 20) * 1024 * (4096.0 * 4 + 4);  // data and LSEs
  EXPECT_GE((double)r.slotBytes, need);
}

// Every unit any source may write into dst's workspace, as [begin, end).
std::vector<std::pair<size_t, size_t>> unitsOf(const Region& r, int dst) {
  std::vector<std::pair<size_t, size_t>> units;
  for (int slot = 0; slot < 2; slot++)
    for (int src = 0; src < r.nRanks; src++) {
      if (src == dst) continue;  // the rank's own share is never sent
      for (int row = 0; row < r.capacity; row++)
        for (int head = 0; head < r.localHeads; head++) {
          const size_t at = r.unitOffset(slot, src, dst, row, head);
          units.push_back({at, at + r.unitBytes});
        }
    }
  std::sort(units.begin(), units.end());
  return units;
}

TEST(UnitOffset, EveryUnitOwnsItsBytesInsideTheRegion) {
  for (Proto p : kProtos)
    for (int cp : {1, 2, 3, 5, 17, 64})
      for (int capacity : {1, 3})
        for (int Hl : {1, 2, 3})
          for (int D : {8, 64}) {
            const Region r = makeRegion(p, cp, Hl, D, 2, capacity, kControlBytes);
            for (int dst = 0; dst < cp; dst++) {
              SCOPED_TRACE(::testing::Message() << name(p) << " cp " << cp << " capacity " << capacity << " Hl "
                                                << Hl << " D " << D << " dst " << dst);
              const auto units = unitsOf(r, dst);
              ASSERT_EQ(units.size(), (size_t)2 * (cp - 1) * capacity * Hl);
              for (size_t i = 0; i < units.size(); i++) {
                ASSERT_GE(units[i].first, r.offset) << "unit " << i << " starts before the region";
                ASSERT_LE(units[i].second, r.offset + r.bytes()) << "unit " << i << " ends past the region";
                ASSERT_EQ(units[i].first % 16, 0u) << "unit " << i;
                if (i == 0) continue;
                ASSERT_LE(units[i - 1].second, units[i].first) << "units " << i - 1 << " and " << i << " overlap";
              }
            }
          }
}

TEST(UnitOffset, SlotsAreDisjointHalves) {
  const Region r = makeRegion(Proto::LL128, 4, 3, 128, 2, 5, kControlBytes);
  for (int src = 1; src < 4; src++)
    for (int row = 0; row < 5; row++)
      for (int head = 0; head < 3; head++) {
        const size_t s0 = r.unitOffset(0, src, 0, row, head), s1 = r.unitOffset(1, src, 0, row, head);
        EXPECT_LT(s0, r.offset + r.slotBytes);
        EXPECT_GE(s1, r.offset + r.slotBytes);
        EXPECT_EQ(s1 - s0, r.slotBytes);
      }
}

TEST(UnitOffset, FirstRegionStartsAfterTheControlBlock) {
  for (Proto p : kProtos)
    for (bool withSimple : {false, true}) {
      const WorkspaceLayout w = makeWorkspaceLayout(p, withSimple, 3, 2, 64, 2, 4);
      EXPECT_EQ(w.small.offset, kControlBytes) << name(p);
      EXPECT_GE(kControlBytes, sizeof(Control));
      // The lowest unit of all is the first of slot 0.
      EXPECT_EQ(w.small.unitOffset(0, 1, 0, 0, 0), kControlBytes) << name(p);
      EXPECT_EQ(w.small.unitOffset(0, 0, 1, 0, 0), kControlBytes) << name(p);
    }
}

// ---------------------------------------------------------------------------
// The workspace of one rank.

TEST(WorkspaceLayout, RegionsFollowTheControlBlockWithoutOverlap) {
  for (Proto small : kProtos)
    for (bool withSimple : {false, true})
      for (int cp : {1, 2, 5, 64})
        for (int capacity : {1, 100}) {
          const WorkspaceLayout w = makeWorkspaceLayout(small, withSimple, cp, 3, 128, 2, capacity);
          SCOPED_TRACE(::testing::Message() << name(small) << (withSimple ? " + SIMPLE" : "") << " cp " << cp
                                            << " capacity " << capacity);
          EXPECT_EQ(w.hasLarge, withSimple);
          EXPECT_EQ(w.small.proto, small);
          EXPECT_EQ(w.small.offset, kControlBytes);
          EXPECT_EQ(w.small.offset % kRegionAlign, 0u);
          size_t end = w.small.offset + w.small.bytes();
          if (withSimple) {
            EXPECT_EQ(w.large.proto, Proto::Simple);
            EXPECT_GE(w.large.offset, end);  // after the small region: no shared byte
            EXPECT_EQ(w.large.offset % kRegionAlign, 0u);
            end = w.large.offset + w.large.bytes();
          }
          EXPECT_FALSE(w.hasTiny);
          EXPECT_EQ(w.totalBytes % kRegionAlign, 0u);
          EXPECT_GE(w.totalBytes, end);
          EXPECT_LT(w.totalBytes, end + kRegionAlign);
        }
}

// One GPU's LL tier: a region of its own for rounds of at most tinyRows
// rows, after the others.
TEST(WorkspaceLayout, TinyRegionFollowsTheOthers) {
  for (bool relay : {false, true})
    for (Wire wire : {Wire::Native, Wire::Fp8E4m3}) {
      const WorkspaceLayout w = makeWorkspaceLayout(Proto::LL128, true, 8, 16, 512, 2, 64, wire, relay, 2);
      const WorkspaceLayout without = makeWorkspaceLayout(Proto::LL128, true, 8, 16, 512, 2, 64, wire, relay);
      ASSERT_TRUE(w.hasTiny);
      EXPECT_EQ(w.tiny.proto, Proto::LL);
      EXPECT_EQ(w.tiny.capacity, 2);
      EXPECT_EQ(w.tiny.wire, wire);
      EXPECT_EQ(w.tiny.relayBytes != 0, relay);
      EXPECT_EQ(w.tiny.bytes(), makeRegion(Proto::LL, 8, 16, 512, 2, 2, 0, wire, relay).bytes());
      EXPECT_GE(w.tiny.offset, w.large.offset + w.large.bytes());  // no shared byte
      EXPECT_EQ(w.tiny.offset % kRegionAlign, 0u);
      EXPECT_GE(w.totalBytes, w.tiny.offset + w.tiny.bytes());
      EXPECT_EQ(w.small.offset, without.small.offset);
      EXPECT_EQ(w.large.offset, without.large.offset);
    }
}

TEST(WorkspaceLayout, TotalIsControlPlusRegions) {
  for (Proto small : kProtos)
    for (bool withSimple : {false, true})
      for (int cp : {2, 5, 17, 64})
        for (auto [D, elt] : {std::pair{8, 2}, std::pair{512, 2}, std::pair{100, 4}}) {
          const WorkspaceLayout w = makeWorkspaceLayout(small, withSimple, cp, 8, D, elt, 64);
          SCOPED_TRACE(::testing::Message() << name(small) << (withSimple ? " + SIMPLE" : "") << " cp " << cp
                                            << " D " << D << " elt " << elt);
          EXPECT_EQ(w.totalBytes, expectedWorkspaceBytes(small, withSimple, cp, 8, D, elt, 64));
          if (withSimple) {
            EXPECT_EQ(w.large.offset, 4096 + 2 * expectedSlotBytes(small, cp, 8, D, elt, 64));
          }
        }
  // D 512 bf16 under SIMPLE: the head as the input holds it.
  EXPECT_EQ(makeWorkspaceLayout(Proto::LL128, true, 4, 8, 512, 2, 64).large.unitBytes, 1024u);
}

// NONE's two-phase slots (DESIGN §14): a HEAD-shaped half, then a phase-2
// half of the same geometry; every offset taken on relayHalf() is the
// same offset one half further, inside its slot's second half.
TEST(RelayHalf, IsTheSecondHalfOfEachSlotWithTheSameGeometry) {
  for (Proto p : kProtos)
    for (int cp : {2, 3, 8, 64})
      for (int capacity : {1, 37}) {
        SCOPED_TRACE(::testing::Message() << name(p) << " cp " << cp << " capacity " << capacity);
        const Region one = makeRegion(p, cp, 3, 128, 2, capacity, kControlBytes);
        const Region two = makeRegion(p, cp, 3, 128, 2, capacity, kControlBytes, Wire::Native, /*relay=*/true);
        EXPECT_EQ(one.relayBytes, 0u);
        EXPECT_EQ(two.relayBytes, one.slotBytes);
        EXPECT_EQ(two.slotBytes, 2 * one.slotBytes);
        EXPECT_EQ(two.unitBytes, one.unitBytes);
        EXPECT_EQ(two.chunks, one.chunks);
        const Region half = two.relayHalf();
        const size_t last = (size_t)capacity * 3 - 1;
        for (int slot : {0, 1})
          for (auto [src, dst] : {std::pair{0, cp - 1}, std::pair{cp - 1, 0}})
            for (size_t u : {(size_t)0, last}) {
              const size_t lo = two.offset + slot * two.slotBytes, mid = lo + one.slotBytes, hi = lo + two.slotBytes;
              const size_t a = two.unitOffsetAt(slot, src, dst, u), b = half.unitOffsetAt(slot, src, dst, u);
              EXPECT_EQ(a, one.unitOffsetAt(0, src, dst, u) + slot * two.slotBytes);
              EXPECT_EQ(b, a + one.slotBytes);
              EXPECT_GE(a, lo);
              EXPECT_LE(a + two.unitBytes, mid);
              EXPECT_GE(b, mid);
              EXPECT_LE(b + two.unitBytes, hi);
              if (p != Proto::Simple) continue;
              const size_t lse = half.lseOffsetOf(slot, src, dst, u), flag = half.flagOffsetOf(slot, src, dst, (int)(u / two.chunkUnits));
              EXPECT_EQ(lse, two.lseOffsetOf(slot, src, dst, u) + one.slotBytes);
              EXPECT_GE(lse, mid);
              EXPECT_LE(lse + 4, hi);
              EXPECT_GE(flag, mid);
              EXPECT_LE(flag + 8, hi);
            }
      }
}

TEST(WorkspaceLayout, OneRankNeedsOnlyTheControlBlock) {
  for (Proto p : kProtos)
    for (bool withSimple : {false, true}) {
      const WorkspaceLayout w = makeWorkspaceLayout(p, withSimple, 1, 16, 512, 2, 256);
      EXPECT_EQ(w.small.slotBytes, 0u) << name(p);
      EXPECT_EQ(w.totalBytes, kControlBytes) << name(p);
    }
}

// ---------------------------------------------------------------------------
// Round flags.

TEST(RoundFlags, NeverZero) {
  for (uint32_t round : {0u, 1u, 2u, 0x7fffffffu, 0x80000000u, 0xfffffffdu, 0xfffffffeu, 0xffffffffu})
    EXPECT_NE(flagForRound(round), 0u) << "round 0x" << std::hex << round;
  EXPECT_EQ(flagForRound(0xfffffffeu), 0xffffffffu);
  std::mt19937_64 rng(std::random_device{}());
  for (int i = 0; i < 100000; i++) {
    const uint32_t round = (uint32_t)rng();
    ASSERT_NE(flagForRound(round), 0u) << "round 0x" << std::hex << round;
  }
}

TEST(RoundFlags, ConsecutiveRoundsDiffer) {
  // Across the wrap of the 32-bit counter too. Rounds 0xffffffff and 0 both
  // get flag 1 (2^32 rounds onto 2^32 - 1 non-zero flags), which is safe
  // only because consecutive rounds use different slots; the next test
  // checks what each slot sees.
  for (uint32_t round = 0xffff0000u; round != 0x10000u; round++) {
    const uint32_t next = round + 1;
    if (round == 0xffffffffu) {
      EXPECT_NE(round & 1, next & 1) << "the wrap pair must use different slots";
      continue;
    }
    ASSERT_NE(flagForRound(round), flagForRound(next)) << "rounds 0x" << std::hex << round << " and 0x" << next;
  }
}

TEST(RoundFlags, SameSlotRoundsDiffer) {
  // A slot is reused two rounds on: a stale flag there must never read as
  // the current one, including across the wrap.
  for (uint32_t round = 0xffff0000u; round != 0x10000u; round++) {
    const uint32_t reuse = round + 2;
    ASSERT_EQ(round & 1, reuse & 1);
    ASSERT_NE(flagForRound(round), flagForRound(reuse)) << "rounds 0x" << std::hex << round << " and 0x" << reuse;
  }
}

// ---------------------------------------------------------------------------
// ncclDcpWorkspaceSize.

size_t workspaceSize(int protocol, int nRanks, int headDim = 128, int localHeads = 4,
                     ncclDataType_t dtype = ncclBfloat16, int maxBatch = 64) {
  // Every field set: NCCL_DCP_* in the environment cannot change the answer.
  ncclDcpConfig_t cfg = test::makeConfig(headDim, localHeads, dtype, ncclDcpLseBase2, maxBatch, protocol);
  cfg.timeoutMs = 1000;
  size_t bytes = 0;
  EXPECT_EQ(ncclDcpWorkspaceSize(&cfg, nRanks, &bytes), ncclSuccess) << ncclDcpGetLastError();
  return bytes;
}

// LL128 forced over PCIe runs as LL (protocol.cc): its bound covers both.
TEST(WorkspaceSize, ExplicitProtocolIsItsLayout) {
  for (Proto p : kProtos)
    for (int cp : {2, 3, 8, 17, 64}) {
      const size_t layout = expectedWorkspaceBytes(p, false, cp, 4, 128, 2, 64);
      const size_t ll = expectedWorkspaceBytes(Proto::LL, false, cp, 4, 128, 2, 64);
      EXPECT_EQ(workspaceSize((int)p, cp), p == Proto::LL128 ? std::max(layout, ll) : layout)
          << name(p) << " cp " << cp;
    }
}

TEST(WorkspaceSize, AutoCoversEveryOutcome) {
  for (int cp : {2, 3, 8, 17, 64})
    for (auto [D, elt] : {std::pair{8, 2}, std::pair{128, 2}, std::pair{512, 2}, std::pair{4, 4}, std::pair{1024, 4}}) {
      const ncclDataType_t dtype = elt == 2 ? ncclBfloat16 : ncclFloat32;
      SCOPED_TRACE(::testing::Message() << "cp " << cp << " D " << D << " " << dtypeName(dtype));
      const size_t autoBytes = workspaceSize(ncclDcpProtoAuto, cp, D, 4, dtype);
      for (Proto p : kProtos) EXPECT_GE(autoBytes, workspaceSize((int)p, cp, D, 4, dtype)) << name(p);
      // AUTO settles on LL or LL128 later and may add SIMPLE for large rounds.
      EXPECT_EQ(autoBytes, std::max(expectedWorkspaceBytes(Proto::LL, true, cp, 4, D, elt, 64),
                                    expectedWorkspaceBytes(Proto::LL128, true, cp, 4, D, elt, 64)));
    }
}

// NONE: cp x HEAD's units a row directly, 2 x in two phases (the default
// from 3 ranks; NCCL_DCP_NONE_ALGO chooses either anywhere).
TEST(WorkspaceSize, NoneFollowsItsAlgorithm) {
  for (int protocol : {(int)ncclDcpProtoLL, (int)ncclDcpProtoLL128, (int)ncclDcpProtoSimple})
    for (int cp : {2, 3, 8}) {
      const Proto p = (Proto)protocol;
      SCOPED_TRACE(::testing::Message() << name(p) << " cp " << cp);
      ncclDcpConfig_t cfg = test::makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 64, protocol);
      cfg.timeoutMs = 1000;
      cfg.scatter = ncclDcpScatterNone;
      const size_t direct = expectedWorkspaceBytes(p, false, cp, 4 * cp, 128, 2, 64);
      const size_t twoPhase = roundUp4K(4096 + 4 * expectedSlotBytes(p, cp, 4, 128, 2, 64));
      for (NoneAlgo algo : {NoneAlgo::Auto, NoneAlgo::Direct, NoneAlgo::TwoPhase}) {
        Env e;
        e.noneAlgo = (int)algo;
        test::ScopedEnv env(e);
        size_t bytes = 0;
        ASSERT_EQ(ncclDcpWorkspaceSize(&cfg, cp, &bytes), ncclSuccess) << ncclDcpGetLastError();
        const bool gathers = algo == NoneAlgo::TwoPhase || (algo == NoneAlgo::Auto && cp > 2);
        if (p == Proto::LL128) {
          // Forced LL128 covers LL too (over PCIe it runs as LL).
          const size_t ll = gathers ? roundUp4K(4096 + 4 * expectedSlotBytes(Proto::LL, cp, 4, 128, 2, 64))
                                    : expectedWorkspaceBytes(Proto::LL, false, cp, 4 * cp, 128, 2, 64);
          EXPECT_EQ(bytes, std::max(gathers ? twoPhase : direct, ll)) << noneAlgoName((int)algo);
        } else {
          EXPECT_EQ(bytes, gathers ? twoPhase : direct) << noneAlgoName((int)algo);
        }
      }
      if (cp > 2) {
        EXPECT_LT(twoPhase, direct);
      }
    }
}

TEST(WorkspaceSize, GrowsWithCapacity) {
  for (int protocol = 0; protocol < ncclDcpNumProtocols; protocol++)
    EXPECT_LT(workspaceSize(protocol, 4, 128, 4, ncclBfloat16, 64), workspaceSize(protocol, 4, 128, 4, ncclBfloat16, 256))
        << protocolName(protocol);
}

TEST(WorkspaceSize, OneRankIsTheControlBlock) {
  for (int protocol = 0; protocol < ncclDcpNumProtocols; protocol++)
    EXPECT_EQ(workspaceSize(protocol, 1), kControlBytes) << protocolName(protocol);
}

// Divisor: the kernels' n / d for 0 <= n < 2^31 (host arithmetic here, the
// same formula as __umulhi on the device), against the hardware division.
void expectDivides(uint32_t d, const std::vector<uint32_t>& ns) {
  const Divisor v = makeDivisor(d);
  for (uint32_t n : ns) {
    ASSERT_EQ(v.quotient(n), n / d) << n << " / " << d;
    ASSERT_EQ(v.remainder(n), n % d) << n << " % " << d;
  }
}

std::vector<uint32_t> numeratorsFor(uint32_t d, std::mt19937* rng) {
  constexpr uint32_t kMax = 0x7fffffffu;
  std::vector<uint32_t> ns = {0, 1, kMax, kMax - 1};
  for (uint64_t m : {uint64_t(1), uint64_t(2), uint64_t(3), uint64_t(kMax / d), uint64_t(kMax / d - 1)})
    for (int64_t delta = -1; delta <= 1; delta++) {
      const int64_t n = (int64_t)(m * d) + delta;
      if (n >= 0 && n <= kMax) ns.push_back((uint32_t)n);
    }
  std::uniform_int_distribution<uint32_t> any(0, kMax), small(0, 1u << 16);
  for (int i = 0; i < 64; i++) ns.push_back(any(*rng)), ns.push_back(small(*rng));
  return ns;
}

TEST(Divisor, MatchesDivisionForEverySmallDivisor) {
  std::mt19937 rng(7);
  for (uint32_t d = 1; d <= 4096; d++) expectDivides(d, numeratorsFor(d, &rng));
}

TEST(Divisor, MatchesDivisionForPowersOfTwoAndTheirNeighbours) {
  std::mt19937 rng(11);
  for (int k = 1; k <= 30; k++)
    for (uint32_t d : {(1u << k) - 1, 1u << k, (1u << k) + 1}) expectDivides(d, numeratorsFor(d, &rng));
  expectDivides(0x7fffffffu, numeratorsFor(0x7fffffffu, &rng));
}

}  // namespace
}  // namespace nccl_dcp
