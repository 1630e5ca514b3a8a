/*************************************************************************
 * The hooks of a launch mode, nccl-tests style: what one thread's ranks
 * allocate, call and check. The sweep (sweep.h) is written once against
 * this interface; two modes implement it:
 *   loopback (--virtual-ranks N): N virtual ranks on one GPU, one thread, one process;
 *   ranks:            real NCCL ranks, this thread's -g GPUs, in one of -t
 *                     threads of one of the MPI processes (the Team joins
 *                     threads and processes; the mode does not care which).
 ************************************************************************/
#ifndef NCCL_DCP_PERF_MODE_H_
#define NCCL_DCP_PERF_MODE_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "checks.h"
#include "nccl_dcp.h"
#include "floors.h"
#include "harness.h"
#include "inputs.h"
#include "team.h"

namespace nccl_dcp {
namespace perf {

// What the sweep asks a mode to enqueue, one call on every rank it drives.
enum class Call {
  Fused,             // ncclDcpA2aLseReduce (loopback: every virtual rank in one launch)
  Baseline,          // the mode's exchange (HEAD, TOKEN: all-to-all; NONE: all-gather) + the combine kernel
  BaselineAllToAll,  // that exchange alone (-B 2)
  Baseline2,         // NONE: the HEAD call + an all-gather of the merged heads (hasBaseline2)
  PeerWrite,         // floor (a)
  CopyEngine,        // floor (b)
  RoundTrip,         // floor (c): kRoundTripsPerLaunch round trips
};

// A GPU this thread drives, with the stream its calls go to.
struct Slot {
  int dev;
  cudaStream_t stream;
};

class Mode {
 public:
  virtual ~Mode() = default;

  virtual int nRanks() const = 0;                     // ranks of the collective
  const std::vector<Slot>& slots() const { return slots_; }

  // Header: the run (printed by the leader) and one line per rank this
  // thread drives (gathered to the leader).
  virtual std::string title() const = 0;
  virtual std::vector<std::string> rankLines() const = 0;
  virtual RunInfo runInfo() const = 0;
  // This thread's ranks' GPUs, in rank order (the JSON's config.devices).
  virtual std::vector<DeviceInfo> devices() const = 0;
  // The protocol(s) the fused call runs a batch with (protocolsOfBatch).
  virtual std::string protocolOf(int64_t rows) const = 0;
  // The floors this mode can measure, or why not (Floors::measured false).
  virtual Floors floors() const = 0;

  // Per size, before any call of that size (not timed).
  virtual void prepare(int64_t rows) = 0;
  // One call on every slot, grouped where NCCL needs it; capturable.
  virtual void enqueue(Call c, int64_t rows) = 0;
  // Poisons c's outputs (Fused, Baseline or Baseline2), runs one call, and
  // counts the wrong elements of this thread's ranks; `negated`: the inputs'
  // signs are flipped (flipInputSigns), so the outputs are compared negated back.
  virtual int64_t countWrong(Call c, int64_t rows, bool negated) = 0;
  // Flips the sign bit of every element of this thread's ranks' partial
  // outputs, on their streams (-c's checked calls, sweep.cc).
  virtual void flipInputSigns() = 0;
  // Loopback: the ideal time of a size at the copy bandwidth (0: none).
  virtual double idealUs(int64_t) const { return 0; }
  // Floor (c) timed out on one of this thread's ranks.
  virtual bool roundTripTimedOut() = 0;
  // After the sweep: an error a device-side wait recorded ends the run.
  virtual void checkAsyncErrors() = 0;

  // Bytes of the table's bytes column: the partials each rank holds.
  int64_t bytesOf(int64_t rows) const {
    return rows * nRanks() * cfg_.localHeads * (int64_t)cfg_.headDim * cfg_.eltSize;
  }
  // Waits for everything enqueued on this thread's slots.
  void syncSlots() const {
    for (const Slot& s : slots_) {
      CUDA_OR_DIE(cudaSetDevice(s.dev));
      CUDA_OR_DIE(cudaStreamSynchronize(s.stream));
    }
  }

 protected:
  explicit Mode(const Config& cfg) : cfg_(cfg) {}
  // The floors' calls, the same in every mode (c: PeerWrite, CopyEngine, RoundTrip).
  void enqueueFloor(const FloorRig& rig, Call c, int64_t rows, cudaStream_t stream) const;
  bool timedOut(const FloorRig& rig) const;  // (c) timed out; on the current device
  // Zeroed, on the current device; call it last in the floors' setup: it
  // waits for the device (the setup's memsets) before returning.
  RoundTripState* newRoundTripState() const;
  // Rank `rank`'s outputs copied from the current device (outBytes of out,
  // lseCount of outLse), as Inputs::countWrong takes them; `negated`: the
  // outputs of negated inputs, their signs flipped back on the host.
  Inputs::RankOutputs download(int rank, const void* out, size_t outBytes, const float* outLse, size_t lseCount,
                               bool negated) const;

  Config cfg_;
  std::vector<Slot> slots_;
};

// The header lines of a topology report (topology.h) and of this thread's
// CPU pinning, appended to *lines (nccl-tests style: each rank's thread runs
// on the CPUs near its GPU).
void appendTopologyLines(const ncclDcpTopology_t& t, const std::string& pinning, std::vector<std::string>* lines);

// --virtual-ranks: every virtual rank on the current GPU.
std::unique_ptr<Mode> makeLoopbackMode(const Args& a, Inputs& inputs);

// Real ranks: thread `thread`'s GPUs of the placement, on a communicator
// of every rank of the run (ncclUniqueId broadcast through the team).
std::unique_ptr<Mode> makeRankMode(const Args& a, const Placement& p, int thread, Team& team, Inputs& inputs);

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_MODE_H_
