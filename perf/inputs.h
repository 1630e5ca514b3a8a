/*************************************************************************
 * The inputs of every rank (the same on every run and in every process:
 * any process can build any rank's) and the reference of the whole
 * collective they give, computed once per size and shared by the threads
 * of a process; -c compares each rank's outputs with it.
 ************************************************************************/
#ifndef NCCL_DCP_PERF_INPUTS_H_
#define NCCL_DCP_PERF_INPUTS_H_

#include <cstdint>
#include <mutex>
#include <vector>

#include "validate.h"

namespace nccl_dcp {
namespace perf {

class Inputs {
 public:
  // Every rank's inputs for maxRows rows, packed [B][cp][Hl][D] (a prefix
  // of rows is the input of a smaller batch).
  Inputs(const Config& cfg, int nRanks, int64_t maxRows);

  const Config& config() const { return cfg_; }
  int nRanks() const { return nRanks_; }
  const std::vector<uint8_t>& partialOut(int rank) const { return out_[rank]; }
  const std::vector<float>& partialLse(int rank) const { return lse_[rank]; }

  // Elements of rank's outputs (host copies of `rows` packed rows) that
  // differ from the reference (the tests' tolerance). Thread-safe.
  int64_t countWrong(int rank, int64_t rows, const uint8_t* out, const float* outLse);

 private:
  void computeReference(int64_t rows);  // under mutex_

  Config cfg_;
  int nRanks_;
  std::vector<std::vector<uint8_t>> out_;
  std::vector<std::vector<float>> lse_;
  std::mutex mutex_;
  int64_t refRows_ = -1;
  std::vector<std::vector<uint8_t>> refOut_;
  std::vector<std::vector<float>> refLse_;
};

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_INPUTS_H_
