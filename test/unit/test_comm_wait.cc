// The wait for a nonblocking communicator's background work
// (waitForComm, src/engine.h), without a GPU: NCCL's state query replaced
// by a scripted one. The wait ends on success or failure as NCCL reports
// it, and at timeoutMs while the state stays ncclInProgress (a peer that
// never joined): no path of create, a call or destroy waits for ever.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "engine.h"
#include "error.h"

namespace nccl_dcp {
namespace {

// The state the scripted query reports after `inProgressFor` queries in
// progress (-1: in progress for ever), and how often it was asked.
int inProgressFor = 0;
ncclResult_t finalState = ncclSuccess;
int queries = 0;

ncclResult_t scriptedQuery(ncclComm_t, ncclResult_t* state) {
  *state = inProgressFor < 0 || queries < inProgressFor ? ncclInProgress : finalState;
  queries++;
  return ncclSuccess;
}

ncclResult_t failingQuery(ncclComm_t, ncclResult_t*) { return ncclInvalidArgument; }

class CommWait : public ::testing::Test {
 protected:
  void script(int polls, ncclResult_t final) {
    inProgressFor = polls;
    finalState = final;
    queries = 0;
  }
};

TEST_F(CommWait, EndsWhenTheOperationDoes) {
  script(1000, ncclSuccess);
  EXPECT_EQ(waitForComm(nullptr, "the test's group", 60000, scriptedQuery), ncclSuccess);
  EXPECT_EQ(queries, 1001);
}

TEST_F(CommWait, ReturnsWhatTheOperationCameTo) {
  script(3, ncclSystemError);
  EXPECT_EQ(waitForComm(nullptr, "the test's group", 0, scriptedQuery), ncclSystemError);
  EXPECT_NE(std::string(lastError()).find("the test's group failed on the communicator"), std::string::npos)
      << lastError();
}

TEST_F(CommWait, AFailedQueryIsNamed) {
  script(0, ncclSuccess);
  EXPECT_EQ(waitForComm(nullptr, "the test's group", 0, failingQuery), ncclInvalidArgument);
  EXPECT_NE(std::string(lastError()).find("ncclCommGetAsyncError failed"), std::string::npos) << lastError();
}

// In progress for ever: ncclRemoteError at the bound, not before, naming
// the operation, the bound and the way out.
TEST_F(CommWait, AnOperationThatNeverEndsTimesOut) {
  script(-1, ncclSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(waitForComm(nullptr, "destroy's all-gather", 50, scriptedQuery), ncclRemoteError);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(ms, 50.0);
  EXPECT_LT(ms, 5000.0);
  EXPECT_GT(queries, 1);
  const std::string message = lastError();
  for (const char* part : {"destroy's all-gather", "still in progress after 50 ms", "ncclCommAbort"})
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
}

// settle: a call's own failure is returned as is; ncclInProgress waited
// for with the bound.
TEST_F(CommWait, SettleWaitsOnlyForInProgress) {
  EXPECT_EQ(settle(nullptr, ncclSuccess, "a call", 10), ncclSuccess);
  EXPECT_EQ(settle(nullptr, ncclInvalidUsage, "a call", 10), ncclInvalidUsage);
  EXPECT_NE(std::string(lastError()).find("a call failed"), std::string::npos) << lastError();
}

}  // namespace
}  // namespace nccl_dcp
