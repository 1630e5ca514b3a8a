/*************************************************************************
 * The inputs of every rank (the same on every run and in every process:
 * any process can build any rank's) and the reference of the whole
 * collective they give, computed once per size and shared by the threads
 * of a process; -c compares each rank's outputs with it, a CPU thread per
 * rank: at large batches the comparison, not the GPU, sets a sweep's time
 * (NONE at cp 8 and 1024 rows compares 3 calls x 8 ranks x 64 M elements).
 ************************************************************************/
#ifndef NCCL_DCP_PERF_INPUTS_H_
#define NCCL_DCP_PERF_INPUTS_H_

#include <cstdint>
#include <shared_mutex>
#include <vector>

#include "validate.h"

namespace nccl_dcp {
namespace perf {

// The sign bit of every element (eltSize 2 or 4) of `bytes` bytes flipped,
// in place. -c's checked calls run on inputs flipped so (every other call:
// sweep.cc), which negates the outputs exactly: the merge's weights come
// from the LSEs alone and sums round symmetrically, the e4m3 wire's scale
// comes from |x| and its rounding is symmetric, and the LSEs do not move.
// Their outputs are flipped back before the count.
void flipSignBits(uint8_t* data, size_t bytes, size_t eltSize);

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

  // One rank's outputs of a call, copied to the host: its packed output
  // rows in the config's scatter mode ([B][Hl], TOKEN [n_rank][H], NONE
  // [B][H]); for NONE's second baseline every rank's merged heads as an
  // all-gather leaves them, rank-major [cp][B][Hl].
  struct RankOutputs {
    int rank;
    std::vector<uint8_t> out;
    std::vector<float> outLse;
  };

  // Elements of the outputs that differ from the reference of the mode
  // (referenceA2aLseReduce with the call's CallShape and `wire`: the fused
  // call's is the config's, the baselines' native; the tests' tolerance),
  // summed over the entries (one per rank at most; countMismatches takes
  // each on a thread of its own). Thread-safe.
  int64_t countWrong(int64_t rows, const std::vector<RankOutputs>& outs, Wire wire = Wire::Native);
  // NONE's second baseline: each entry's gathered heads compared with the
  // NONE reference [B][H] they hold in another order.
  int64_t countWrongGathered(int64_t rows, const std::vector<RankOutputs>& gathered);

 private:
  // The reference of `rows` rows on `wire`, held (shared) while the caller
  // reads it: a thread that needs another one waits for the readers.
  std::shared_lock<std::shared_mutex> referenceOf(int64_t rows, Wire wire);
  void computeReference(int64_t rows, Wire wire);  // under mutex_, exclusive
  // One reference serves every rank: NONE on the native wire.
  bool sharedReference(Wire wire) const { return cfg_.scatter == Scatter::None && wire == Wire::Native; }
  // [cp][B][Hl] -> [B][H], the NONE output order.
  void ungather(int64_t rows, const RankOutputs& gathered, RankOutputs* out) const;

  Config cfg_;
  int nRanks_;
  std::vector<std::vector<uint8_t>> out_;
  std::vector<std::vector<float>> lse_;
  std::shared_mutex mutex_;
  // Per wire (Wire's value): the reference of refRows_[w] rows.
  int64_t refRows_[2] = {-1, -1};
  CallShape shape_[2];  // per wire: the reference's call (refRows_ rows)
  std::vector<std::vector<uint8_t>> refOut_[2];
  std::vector<std::vector<float>> refLse_[2];
};

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_INPUTS_H_
