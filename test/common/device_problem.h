/*************************************************************************
 * One call's tensors for cp ranks: fresh random inputs on the host, the
 * reference outputs, and each rank's buffers on its device (each rank on
 * its own GPU for NCCL ranks, all on the current GPU for loopback). Packed
 * strides. Used by the create/abort tests and the soak.
 ************************************************************************/
#ifndef NCCL_DCP_TEST_DEVICE_PROBLEM_H_
#define NCCL_DCP_TEST_DEVICE_PROBLEM_H_

#include <cuda_runtime_api.h>

#include <vector>

#include "test_util.h"

namespace nccl_dcp {
namespace test {

class DeviceProblem {
 public:
  // devices[r]: rank r's GPU; empty: every rank on the current GPU.
  DeviceProblem(const Config& cfg, int nRanks, int batch, LseMix mix, uint64_t seed,
                const std::vector<int>& devices = {});

  int batch() const { return batch_; }
  CallBuffers buffers(int rank) const;
  std::vector<CallBuffers> allBuffers() const;

  // Every output byte of rank 0xff (NaN in every dtype), on stream (the
  // caller has made the rank's device current).
  void poison(int rank, cudaStream_t stream);
  // Rank's outputs against the reference (the caller has made the rank's
  // device current and its work finished).
  Mismatch check(int rank) const;
  // Every rank's outputs against the reference (loopback: all ranks on the
  // current GPU).
  Mismatch checkAll() const;

 private:
  void download(int rank, RankTensors* got) const;

  struct DeviceRank {
    DeviceBuffer partialOut, partialLse, out, outLse;
  };
  Config cfg_;
  int nRanks_, batch_;
  Strides strides_;
  std::vector<RankTensors> host_, want_;
  std::vector<DeviceRank> dev_;
};

}  // namespace test
}  // namespace nccl_dcp

#endif  // NCCL_DCP_TEST_DEVICE_PROBLEM_H_
