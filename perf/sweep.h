/*************************************************************************
 * The one sweep loop (nccl-tests' TimeTest), run by every thread of every
 * process over the hooks of its launch mode: the floors, then per size the
 * fused call, the baseline and the checks; every figure gathered from every
 * rank and aggregated as -a says; the leader prints the table and writes
 * the JSON.
 ************************************************************************/
#ifndef NCCL_DCP_PERF_SWEEP_H_
#define NCCL_DCP_PERF_SWEEP_H_

#include "harness.h"
#include "mode.h"
#include "team.h"

namespace nccl_dcp {
namespace perf {

// The run's exit code, the same on every thread of every process.
int runSweep(const Args& a, Team& team, int thread, Mode& m);

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_SWEEP_H_
