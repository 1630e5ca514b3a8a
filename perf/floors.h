/*************************************************************************
 * The floors (issue 10): what the hardware gives for the bytes and the
 * flags the fused collective moves, measured in the same run on the same
 * ranks:
 *   (a) a copy kernel on every SM, 16-byte stores straight into the
 *       destination (the peers' NCCL windows through LSA pointers);
 *   (b) the copy engine, cudaMemcpyAsync to the same destinations;
 *   (c) a flag round trip: one lane stores a flag into the partner's
 *       window and waits for the answer in its own (two warps of one block
 *       when there is no partner).
 * Host interface of the floors in kernels.cu; the launch modes say where the
 * bytes go.
 ************************************************************************/
#ifndef NCCL_DCP_PERF_FLOORS_H_
#define NCCL_DCP_PERF_FLOORS_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <vector>

namespace nccl_dcp {
namespace perf {

constexpr int kMaxFloorCopies = 64;
constexpr int kRoundTripsPerLaunch = 100;   // (c) is reported per round trip
constexpr uint64_t kRoundTripTimeoutNs = 2000000000ull;  // bounded: a missing partner costs 2 s, once

// (a) and (b): copy rows * bytesPerRow bytes from src[i] to dst[i], for
// every i (at most kMaxFloorCopies).
struct CopyPlan {
  std::vector<const char*> src;
  std::vector<char*> dst;
  int64_t bytesPerRow = 0;
};

// (c): side 0 stores into outbox[0] and waits on inbox[0] (when it
// initiates), side 1 likewise; one side per rank with a partner, two sides
// (two warps of one block, flags in local memory) without.
struct FlagPlan {
  int sides = 0;
  bool initiator[2] = {false, false};
  uint64_t* inbox[2] = {nullptr, nullptr};
  uint64_t* outbox[2] = {nullptr, nullptr};
};

// Device words of one rank's round trips: each side's count of flags sent
// so far (graph replays advance it) and the timeout record.
struct RoundTripState {
  uint64_t epoch[2];
  int timedOut;
};

// One rank's floors: where its copies go, its flags, its round-trip state.
struct FloorRig {
  CopyPlan copies;
  FlagPlan flags;
  RoundTripState* state = nullptr;  // device memory, zeroed
};

// Both sides of (c) in one block, flags in `lines` (2 x 128 bytes, zeroed,
// on this rank's GPU): the round trip without a link.
FlagPlan localFlagPlan(char* lines);

// Threads the copy kernel runs on this device: every SM, full occupancy.
int peerWriteThreads(int device);

cudaError_t launchPeerWrite(const CopyPlan& p, int64_t rows, cudaStream_t stream);
cudaError_t launchCopyEngine(const CopyPlan& p, int64_t rows, cudaStream_t stream);
// kRoundTripsPerLaunch round trips; state zeroed before the first launch.
cudaError_t launchRoundTrips(const FlagPlan& p, RoundTripState* state, cudaStream_t stream);

// The least step of %globaltimer on the current device (the resolution of
// the in-kernel timeline, --timeline); synchronises it.
cudaError_t globalTimerStepNs(uint64_t* ns);

// Rank p's address of a registered window's offset 0, for every rank of an
// LSA team spanning the communicator (NCCL's device API, on the current
// device; synchronises it).
cudaError_t windowPeerPointers(ncclWindow_t window, int nRanks, std::vector<char*>* out);

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_FLOORS_H_
