// The dispatch table (src/kernel_table.h): every legal key has a kernel,
// no other key has one, and the table has the size its comment says. No
// GPU: the launchers are host functions, looked up, never called.
#include <gtest/gtest.h>

#include <set>

#include "device/layout.h"
#include "kernel_table.h"
#include "types.h"

namespace nccl_dcp {
namespace {

constexpr ncclDataType_t kDtypes[] = {ncclBfloat16, ncclFloat16, ncclFloat32, ncclInt32, ncclFloat64};
constexpr Wire kWires[] = {Wire::Native, Wire::Fp8E4m3};
constexpr FusedMode kModes[] = {FusedMode::Head, FusedMode::Token, FusedMode::NoneDirect, FusedMode::NoneTwoPhase};
constexpr Proto kProtos[] = {Proto::LL, Proto::LL128, Proto::Simple};

TEST(KernelTable, EveryLegalKeyHasItsOwnKernelAndNoOtherKeyHasOne) {
  std::set<FusedLauncher> seen;
  int legal = 0;
  for (ncclDataType_t dtype : kDtypes)
    for (Wire wire : kWires)
      for (FusedMode mode : kModes)
        for (Proto proto : kProtos)
          for (bool loopback : {false, true}) {
            const FusedKey k{dtype, wire, mode, proto, loopback};
            SCOPED_TRACE(testing::Message() << "dtype " << dtype << " wire " << (int)wire << " mode " << (int)mode
                                            << " proto " << (int)proto << " loopback " << loopback);
            const FusedLauncher l = fusedLauncher(k);
            EXPECT_EQ(l != nullptr, isLegalFused(k));
            if (l == nullptr) continue;
            legal++;
            EXPECT_TRUE(seen.insert(l).second) << "two keys share a kernel";
          }
  // 3 protocols x 2 peers x (3 dtypes x 4 modes native + 2 dtypes x 3 modes fp8).
  EXPECT_EQ(legal, 3 * 2 * (3 * 4 + 2 * 3));
}

TEST(KernelTable, TheRuleAsDocumented) {
  EXPECT_TRUE(isLegalFused(ncclFloat32, Wire::Native, FusedMode::NoneTwoPhase));
  EXPECT_FALSE(isLegalFused(ncclFloat32, Wire::Fp8E4m3, FusedMode::Head));  // e4m3 narrows 16-bit elements
  EXPECT_TRUE(isLegalFused(ncclBfloat16, Wire::Fp8E4m3, FusedMode::Token));
  EXPECT_TRUE(isLegalFused(ncclFloat16, Wire::Fp8E4m3, FusedMode::NoneDirect));
  EXPECT_FALSE(isLegalFused(ncclBfloat16, Wire::Fp8E4m3, FusedMode::NoneTwoPhase));  // no second rounding
  EXPECT_FALSE(isLegalFused(ncclInt8, Wire::Native, FusedMode::Head));
}

// The mode axis of a config: the scatter mode, NONE's algorithm by rank count.
TEST(KernelTable, ModeOfAConfig) {
  Config c = {};
  c.scatter = Scatter::Head;
  EXPECT_EQ(fusedModeOf(c, 8), FusedMode::Head);
  c.scatter = Scatter::Token;
  EXPECT_EQ(fusedModeOf(c, 8), FusedMode::Token);
  c.scatter = Scatter::None;
  c.noneAlgo = NoneAlgo::Direct;
  EXPECT_EQ(fusedModeOf(c, 8), FusedMode::NoneDirect);
  c.noneAlgo = NoneAlgo::TwoPhase;
  EXPECT_EQ(fusedModeOf(c, 8), FusedMode::NoneTwoPhase);
  c.noneAlgo = NoneAlgo::Auto;
  EXPECT_EQ(fusedModeOf(c, 2), FusedMode::NoneDirect);
  EXPECT_EQ(fusedModeOf(c, 3), FusedMode::NoneTwoPhase);
}

// TOKEN's flag tag (device/types.h): never a zero flag, the round's low bits
// kept (consecutive rounds of a slot differ), and splits that differ in any
// rank's count tag differently.
TEST(SplitTag, FlagsOfDifferentSplitsNeverMatch) {
  const int a[] = {0, 10, 40}, b[] = {0, 30, 40}, c[] = {0, 10, 40};
  EXPECT_NE(splitTag(a, 2), splitTag(b, 2));
  EXPECT_EQ(splitTag(a, 2), splitTag(c, 2));
  for (uint32_t round : {0u, 1u, 2u, 65535u, 65536u, 0xfffffffeu, 0xffffffffu}) {
    const uint32_t f = flagForRound(round), g = flagForRound(round + 2);
    for (const int* split : {a, b}) {
      const uint32_t tag = splitTag(split, 2);
      EXPECT_NE(taggedFlag(f, tag), 0u);
      EXPECT_EQ(taggedFlag(f, tag) & 0xffffu, f & 0xffffu);
      EXPECT_NE(taggedFlag(f, tag), taggedFlag(g, tag)) << round;
    }
    EXPECT_NE(taggedFlag(f, splitTag(a, 2)), taggedFlag(f, splitTag(b, 2)));
  }
}

}  // namespace
}  // namespace nccl_dcp
