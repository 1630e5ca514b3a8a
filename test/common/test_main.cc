#include <gtest/gtest.h>

#include <cstdio>

#include "test_util.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (int n = nccl_dcp::test::requiredGpus())
    printf("NCCL_DCP_REQUIRE_GPU=%d: tests that need up to %d GPU(s) fail instead of skipping\n", n, n);
  return RUN_ALL_TESTS();
}
