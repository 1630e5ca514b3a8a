// The test helpers that decide what a run means (test/common/test_util.h):
// when a GPU test runs, skips or fails (NCCL_DCP_REQUIRE_GPU, the result of
// cudaGetDeviceCount), and the per-test seed sequences that
// --gtest_random_seed replays.
#include <set>
#include <string>

#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

// ---------------------------------------------------------------------------
// NCCL_DCP_REQUIRE_GPU.

TEST(RequireGpuVariable, UnsetOrEmptyIsZero) {
  int n = -1;
  std::string why;
  EXPECT_TRUE(parseRequiredGpus(nullptr, &n, &why));
  EXPECT_EQ(n, 0);
  n = -1;
  EXPECT_TRUE(parseRequiredGpus("", &n, &why));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(why, "");
}

TEST(RequireGpuVariable, GpuCountsAccepted) {
  for (auto [text, want] : {std::pair{"0", 0}, std::pair{"1", 1}, std::pair{"8", 8}, std::pair{"64", 64}}) {
    int n = -1;
    std::string why;
    EXPECT_TRUE(parseRequiredGpus(text, &n, &why)) << text << ": " << why;
    EXPECT_EQ(n, want) << text;
  }
}

TEST(RequireGpuVariable, GarbageRejectedNamingTheValue) {
  for (const char* text : {"yes", "1x", "x1", "-1", "+1", " 1", "1 ", "65", "1.0", "99999999999999999999"}) {
    int n = -1;
    std::string why;
    EXPECT_FALSE(parseRequiredGpus(text, &n, &why)) << text;
    EXPECT_NE(why.find(std::string("NCCL_DCP_REQUIRE_GPU=") + text), std::string::npos) << why;
  }
}

// ---------------------------------------------------------------------------
// gateGpus: the decision of DCP_REQUIRE_GPUS.

TEST(GpuGate, EnoughGpusRun) {
  EXPECT_EQ(gateGpus(1, nullptr, cudaSuccess, 1).verdict, GpuGate::Run);
  EXPECT_EQ(gateGpus(2, "8", cudaSuccess, 8).verdict, GpuGate::Run);
  EXPECT_EQ(gateGpus(4, "0", cudaSuccess, 4).verdict, GpuGate::Run);
}

TEST(GpuGate, TooFewGpusSkipWithTheCount) {
  const GpuGate g = gateGpus(2, nullptr, cudaSuccess, 1);
  EXPECT_EQ(g.verdict, GpuGate::Skip);
  EXPECT_EQ(g.message, "needs 2 GPU(s), found 1");
  EXPECT_EQ(gateGpus(4, "2", cudaSuccess, 2).verdict, GpuGate::Skip) << "requires 2, needs 4: more than promised";
}

TEST(GpuGate, NoDriverOrNoDeviceSkips) {
  for (cudaError_t e : {cudaErrorInsufficientDriver, cudaErrorNoDevice}) {
    // cudaGetDeviceCount may leave the count unwritten: garbage must not count.
    const GpuGate g = gateGpus(1, nullptr, e, 12345);
    EXPECT_EQ(g.verdict, GpuGate::Skip) << cudaGetErrorName(e);
    EXPECT_NE(g.message.find("found 0"), std::string::npos) << g.message;
    EXPECT_NE(g.message.find(cudaGetErrorString(e)), std::string::npos) << g.message;
  }
}

TEST(GpuGate, PromisedGpusThatAreMissingFail) {
  const GpuGate g = gateGpus(2, "2", cudaSuccess, 1);
  EXPECT_EQ(g.verdict, GpuGate::Fail);
  EXPECT_NE(g.message.find("NCCL_DCP_REQUIRE_GPU=2"), std::string::npos) << g.message;
  EXPECT_NE(g.message.find("needs 2 GPU(s), found 1"), std::string::npos) << g.message;
  EXPECT_EQ(gateGpus(1, "1", cudaErrorNoDevice, 0).verdict, GpuGate::Fail);
  EXPECT_EQ(gateGpus(1, "1", cudaErrorInsufficientDriver, 0).verdict, GpuGate::Fail);
}

TEST(GpuGate, OtherDeviceCountErrorsFailEvenWhenNothingIsRequired) {
  for (cudaError_t e : {cudaErrorInitializationError, cudaErrorUnknown, cudaErrorDevicesUnavailable,
                        cudaErrorSystemNotReady, cudaErrorCompatNotSupportedOnDevice}) {
    const GpuGate g = gateGpus(1, nullptr, e, 0);
    EXPECT_EQ(g.verdict, GpuGate::Fail) << cudaGetErrorName(e);
    EXPECT_NE(g.message.find(cudaGetErrorName(e)), std::string::npos) << g.message;
  }
}

TEST(GpuGate, GarbageRequirementFailsEvenWithGpus) {
  const GpuGate g = gateGpus(1, "all", cudaSuccess, 8);
  EXPECT_EQ(g.verdict, GpuGate::Fail);
  EXPECT_NE(g.message.find("NCCL_DCP_REQUIRE_GPU=all"), std::string::npos) << g.message;
}

// ---------------------------------------------------------------------------
// Seeds.

// Restores --gtest_random_seed when a test that sets it ends.
class Seeds : public testing::Test {
 protected:
  void SetUp() override { saved_ = GTEST_FLAG_GET(random_seed); }
  void TearDown() override { GTEST_FLAG_SET(random_seed, saved_); }
  int32_t saved_ = 0;
};

TEST_F(Seeds, NoBaseBeforeTheFirstDraw) { EXPECT_EQ(testBaseSeed(), 0u); }

TEST_F(Seeds, FreshBaseGtestAcceptsAndDistinctDraws) {
  GTEST_FLAG_SET(random_seed, 0);
  std::set<uint64_t> draws;
  for (int i = 0; i < 100; i++) draws.insert(freshSeed());
  EXPECT_EQ(draws.size(), 100u);
  EXPECT_GE(testBaseSeed(), 1u);
  EXPECT_LE(testBaseSeed(), 99999u);
}

// The same flag gives the same draws in another test: whichever of the two
// runs second compares with the first.
uint64_t gFirstDrawsOf777[3] = {};

void drawOrCompare777() {
  GTEST_FLAG_SET(random_seed, 777);
  uint64_t draws[3] = {freshSeed(), freshSeed(), freshSeed()};
  EXPECT_EQ(testBaseSeed(), 777u);
  EXPECT_NE(draws[0], draws[1]);
  if (gFirstDrawsOf777[0] == 0) {
    for (int i = 0; i < 3; i++) gFirstDrawsOf777[i] = draws[i];
    return;
  }
  for (int i = 0; i < 3; i++) EXPECT_EQ(draws[i], gFirstDrawsOf777[i]) << "draw " << i;
}

TEST_F(Seeds, FlagReplaysTheSequence) { drawOrCompare777(); }
TEST_F(Seeds, FlagReplaysTheSequenceInAnotherTest) { drawOrCompare777(); }

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
