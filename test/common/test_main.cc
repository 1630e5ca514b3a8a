/*************************************************************************
 * main() of every GoogleTest binary: prints what NCCL_DCP_REQUIRE_GPU
 * promises, the base seed of every failing test that drew random data (to
 * replay it), and, with --dcp_plant_failure, adds one case that fails: the
 * way scripts/gpu-check.sh --plant-failure shows that a failing case makes
 * the whole run fail.
 ************************************************************************/
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "test_util.h"

namespace {

constexpr char kPlantFlag[] = "--dcp_plant_failure";

class PlantedFailure : public testing::Test {
  void TestBody() override {
    FAIL() << "planted failure (" << kPlantFlag << "): a run that includes this case must end with a failure";
  }
};

// Prints how to replay a failing test that drew random data.
class SeedReporter : public testing::EmptyTestEventListener {
  void OnTestEnd(const testing::TestInfo& info) override {
    const uint32_t seed = nccl_dcp::test::testBaseSeed();
    if (info.result()->Failed() && seed != 0)
      printf("[   SEED   ] %s.%s drew its data from seed %u: replay with --gtest_random_seed=%u --gtest_filter=%s.%s\n",
             info.test_suite_name(), info.name(), seed, seed, info.test_suite_name(), info.name());
  }
};

// Removes flag from argv; true when it was there.
bool takeFlag(int* argc, char** argv, const char* flag) {
  bool found = false;
  int kept = 1;
  for (int i = 1; i < *argc; i++) {
    if (strcmp(argv[i], flag) == 0) found = true;
    else argv[kept++] = argv[i];
  }
  *argc = kept;
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = takeFlag(&argc, argv, kPlantFlag);
  ::testing::InitGoogleTest(&argc, argv);
  if (plant)
    testing::RegisterTest("PlantedFailure", "RequestedOnTheCommandLine", nullptr, nullptr, __FILE__, __LINE__,
                          []() -> testing::Test* { return new PlantedFailure(); });
  testing::UnitTest::GetInstance()->listeners().Append(new SeedReporter());
  if (const char* n = getenv("NCCL_DCP_REQUIRE_GPU"))
    printf("NCCL_DCP_REQUIRE_GPU=%s: tests that need up to that many GPUs fail instead of skipping\n", n);
  return RUN_ALL_TESTS();
}
