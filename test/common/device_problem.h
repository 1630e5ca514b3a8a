/*************************************************************************
 * One call's tensors for cp ranks: fresh random inputs on the host, the
 * reference outputs, and each rank's buffers on its device (each rank on
 * its own GPU for NCCL ranks, all on the current GPU for loopback). Packed
 * strides unless given. Used by the create/abort tests, the soak, and the
 * scatter-mode tests (issue 27): a call in the config's scatter mode and
 * LSE dtype, with a TOKEN split (host counts, or device counts the test
 * rewrites between graph replays) and empty-shard arrays (CallSpec).
 ************************************************************************/
#ifndef NCCL_DCP_TEST_DEVICE_PROBLEM_H_
#define NCCL_DCP_TEST_DEVICE_PROBLEM_H_

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace nccl_dcp {
namespace test {

class DeviceProblem {
 public:
  // devices[r]: rank r's GPU; empty: every rank on the current GPU.
  DeviceProblem(const Config& cfg, int nRanks, int batch, LseMix mix, uint64_t seed,
                const std::vector<int>& devices = {});
  // A call in cfg's scatter mode and lseDtype with spec's additions, with
  // `strides` (NULL: packed). Every rank's out and outLse hold the rows the
  // call may write (outCapacityRows) plus slackRows more, all poisoned: a
  // write outside the rank's share is a mismatch of check().
  DeviceProblem(const Config& cfg, int nRanks, int batch, LseMix mix, uint64_t seed, const CallSpec& spec,
                const std::vector<int>& devices = {}, int slackRows = 1, const Strides* strides = nullptr);

  int batch() const { return batch_; }
  const Config& config() const { return cfg_; }
  const Strides& strides() const { return strides_; }
  ncclDcpStrides_t apiStrides() const { return test::apiStrides(strides_); }
  // The call's shape in host form (the split of the counts last set).
  const CallShape& shape() const { return shape_; }
  CallBuffers buffers(int rank) const;
  std::vector<CallBuffers> allBuffers() const;
  // The bytes of rank's out and outLse buffers, slack rows included (0: no outLse).
  size_t outBytes(int rank) const { return dev_[rank].out.bytes; }
  size_t outLseBytes(int rank) const { return dev_[rank].outLse.bytes; }
  // Rank's call args for the spec: its device arrays (on its GPU), the host
  // counts (owned here); NULL when the call has none (the NULL-args path).
  const ncclDcpCallArgs_t* args(int rank) const;

  // TOKEN with device counts: counts into every rank's device array
  // (synchronously). Counts that make a split (each >= 0, sum = batch) are
  // the reference's from now on; others are left for the kernels to refuse.
  void setCounts(const std::vector<int>& counts);
  // Fresh inputs of the same shapes from seed, and their reference (new
  // empty shards too: not for a captured call that has them). Uploaded
  // into the inputs, or with toStaging into staging buffers that
  // stageInputs copies in (a producer a graph can capture).
  void refill(LseMix mix, uint64_t seed, bool toStaging = false);
  // Queues the copy of rank's staged inputs into its inputs (the caller has
  // made the rank's device current).
  void stageInputs(int rank, cudaStream_t stream);

  // Every output byte of rank 0xff (NaN in every dtype), on stream (the
  // caller has made the rank's device current).
  void poison(int rank, cudaStream_t stream);
  // Rank's outputs against the reference, and every byte outside what the
  // call writes still poisoned; and against the fp64 oracle (oracle.h:
  // no code shared with src/, so a break in the headers the reference
  // and the kernels share shows there). The caller has made the rank's
  // device current and its work finished.
  Mismatch check(int rank) const;
  // Every rank's outputs against the reference and the oracle (each
  // rank's device made current in turn).
  Mismatch checkAll() const;
  // The call as the oracle reads it (the host inputs, the test's counts).
  oracle::Problem oracleView() const;
  // Rank's tensors with the outputs as they are on its device now.
  RankTensors outputs(int rank) const;

  const std::vector<RankTensors>& host() const { return host_; }
  const std::vector<RankTensors>& want() const { return want_; }

 private:
  void draw(LseMix mix, uint64_t seed);
  void upload(bool toStaging);
  void referenceAndArgs();
  void download(int rank, RankTensors* got) const;
  int deviceOf(int rank) const;

  struct DeviceRank {
    DeviceBuffer partialOut, partialLse, out, outLse, seqLens, queryStartLoc, counts;
    DeviceBuffer stagedOut, stagedLse;
  };
  Config cfg_;
  int nRanks_, batch_;
  Strides strides_;
  CallSpec spec_;
  int slackRows_ = 0;
  std::vector<int> devices_;
  std::vector<int> counts_;  // the split's host form (empty: even)
  CallShape shape_ = {};
  std::vector<ncclDcpCallArgs_t> args_;
  bool hasArgs_ = false;
  std::vector<RankTensors> host_, want_;
  std::vector<DeviceRank> dev_;
};

}  // namespace test
}  // namespace nccl_dcp

#endif  // NCCL_DCP_TEST_DEVICE_PROBLEM_H_
