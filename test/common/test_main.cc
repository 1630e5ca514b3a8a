#include <gtest/gtest.h>

#include <cstdio>

#include "test_util.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (nccl_dcp::test::requireGpu())
    printf("NCCL_DCP_REQUIRE_GPU=1: tests that need a missing GPU fail instead of skipping\n");
  return RUN_ALL_TESTS();
}
