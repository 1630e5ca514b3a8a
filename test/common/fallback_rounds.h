/*************************************************************************
 * The fallback path on one GPU, for tests: every virtual rank's rounds
 * through the library's own FallbackRound (src/engine.h: the real pack and
 * combine launch parameters, the codec's LSE words), with the exchange
 * NCCL would make (ncclAlltoAll for HEAD, ncclAllGather otherwise) as
 * device copies between the ranks' FallbackBuffers.
 ************************************************************************/
#ifndef NCCL_DCP_TEST_FALLBACK_ROUNDS_H_
#define NCCL_DCP_TEST_FALLBACK_ROUNDS_H_

#include "device_problem.h"

namespace nccl_dcp {
namespace test {

// p's call (args: the call's additions, e.g. p.args(0)) on every rank,
// into p's outputs; synchronises the device. Fatal failures on error.
void runFallbackRounds(const DeviceProblem& p, const ncclDcpCallArgs_t* args);

}  // namespace test
}  // namespace nccl_dcp

#endif  // NCCL_DCP_TEST_FALLBACK_ROUNDS_H_
