#include "mode.h"

#include <sstream>

#include "topology.h"

namespace nccl_dcp {
namespace perf {

void Mode::enqueueFloor(const FloorRig& rig, Call c, int64_t rows, cudaStream_t stream) const {
  switch (c) {
    case Call::PeerWrite: CUDA_OR_DIE(launchPeerWrite(rig.copies, rows, stream)); break;
    case Call::CopyEngine: CUDA_OR_DIE(launchCopyEngine(rig.copies, rows, stream)); break;
    case Call::RoundTrip: CUDA_OR_DIE(launchRoundTrips(rig.flags, rig.state, stream)); break;
    default: break;
  }
}

bool Mode::timedOut(const FloorRig& rig) const {
  RoundTripState st;
  CUDA_OR_DIE(cudaMemcpy(&st, rig.state, sizeof(st), cudaMemcpyDeviceToHost));
  return st.timedOut != 0;
}

RoundTripState* Mode::newRoundTripState() const {
  RoundTripState* st = nullptr;
  CUDA_OR_DIE(cudaMalloc(&st, sizeof(*st)));
  CUDA_OR_DIE(cudaMemset(st, 0, sizeof(*st)));
  // The floors' zeroed flags and state are in place before any stream of
  // ours (non-blocking: they do not wait for these memsets) can run.
  CUDA_OR_DIE(cudaDeviceSynchronize());
  return st;
}

Inputs::RankOutputs Mode::download(int rank, const void* out, size_t outBytes, const float* outLse, size_t lseCount,
                                   bool negated) const {
  Inputs::RankOutputs o = {rank, std::vector<uint8_t>(outBytes), std::vector<float>(lseCount)};
  CUDA_OR_DIE(cudaMemcpy(o.out.data(), out, outBytes, cudaMemcpyDeviceToHost));
  CUDA_OR_DIE(cudaMemcpy(o.outLse.data(), outLse, lseCount * sizeof(float), cudaMemcpyDeviceToHost));
  if (negated) flipSignBits(o.out.data(), outBytes, cfg_.eltSize);
  return o;
}

void appendTopologyLines(const ncclDcpTopology_t& t, const std::string& pinning, std::vector<std::string>* lines) {
  std::istringstream report(formatTopology(t, "#    "));
  for (std::string line; std::getline(report, line);) lines->push_back(line);
  lines->push_back("#    thread " + pinning);
}

}  // namespace perf
}  // namespace nccl_dcp
