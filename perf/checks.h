/*************************************************************************
 * The perf binary's checked calls: a failed CUDA / NCCL / nccl-dcp call
 * prints where and why, then ends the whole run (every thread, every MPI
 * process: none is left waiting in a collective).
 ************************************************************************/
#ifndef NCCL_DCP_PERF_CHECKS_H_
#define NCCL_DCP_PERF_CHECKS_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>

#include "harness.h"
#include "nccl_dcp.h"
#include "team.h"

#define CUDA_OR_DIE(cmd)                                                                      \
  do {                                                                                        \
    cudaError_t e_ = (cmd);                                                                   \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #cmd, cudaGetErrorString(e_));    \
      ::nccl_dcp::perf::abortRun(::nccl_dcp::perf::kExitFailed);                              \
    }                                                                                         \
  } while (0)

#define NCCL_OR_DIE(cmd)                                                                      \
  do {                                                                                        \
    ncclResult_t r_ = (cmd);                                                                  \
    if (r_ != ncclSuccess) {                                                                  \
      fprintf(stderr, "%s:%d %s: %s | %s\n", __FILE__, __LINE__, #cmd, ncclGetErrorString(r_), \
              ncclDcpGetLastError()[0] ? ncclDcpGetLastError() : ncclGetLastError(nullptr));  \
      ::nccl_dcp::perf::abortRun(::nccl_dcp::perf::kExitFailed);                              \
    }                                                                                         \
  } while (0)

#endif  // NCCL_DCP_PERF_CHECKS_H_
