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
  // of rows is the input of a smaller batch). cfg.scatter: the mode the
// reference is computed in.
  Inputs(const Config& cfg, int nRanks, int64_t maxRows);

  const Config& config() const { return cfg_; }
  int nRanks() const { return nRanks_; }
  const std::vector<uint8_t>& partialOut(int rank) const { return out_[rank]; }
  const std::vector<float>& partialLse(int rank) const { return lse_[rank]; }

  // Elements of rank's outputs (host copies of its packed output rows in
  // the config's scatter mode: [B][Hl], TOKEN [n_rank][H], NONE [B][H])
  // that differ from the reference of that mode (referenceA2aLseReduce
  // with the call's CallShape and `wire`: the fused call's is the
  // config's, the baselines' native; the tests' tolerance). Thread-safe.
  int64_t countWrong(int rank, int64_t rows, const uint8_t* out, const float* outLse, Wire wire = Wire::Native);
  // NONE's second baseline: every rank's merged heads as an all-gather
  // leaves them, rank-major [cp][B][Hl] (`gathered`, `gatheredLse`),
  // compared with the NONE reference [B][H] they hold in another order.
  int64_t countWrongGathered(int rank, int64_t rows, const uint8_t* gathered, const float* gatheredLse);

 private:
  void computeReference(int64_t rows, Wire wire);  // under mutex_

  Config cfg_;
  int nRanks_;
  std::vector<std::vector<uint8_t>> out_;
  std::vector<std::vector<float>> lse_;
  std::mutex mutex_;
  // Per wire (Wire's value): the reference of refRows_[w] rows.
  int64_t refRows_[2] = {-1, -1};
  CallShape shape_;  // of the reference's call (refRows_ rows)
  std::vector<std::vector<uint8_t>> refOut_[2];
  std::vector<std::vector<float>> refLse_[2];
};

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_INPUTS_H_
