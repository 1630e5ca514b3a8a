/*************************************************************************
 * The fused kernel, once for every combination (kernels.h lists the legal
 * ones): a protocol (proto_lines.h, proto_simple.h) running one round of a
 * mode (modes.h) over a codec (codec.h) between peers (peers.h).
 *
 *   codec -> protocol -> algorithm (mode, relay) -> kernel -> dispatch
 *
 * The kernel itself only finds its rank, waits for the previous grid (PDL)
 * and hands the block to the protocol's driver, which starts and ends the
 * round (round.h).
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_KERNEL_H_
#define NCCL_DCP_DEVICE_KERNEL_H_

#include "proto_lines.h"
#include "proto_ll.h"
#include "proto_ll128.h"
#include "proto_simple.h"

namespace nccl_dcp {

using LlProtocol = LineProtocol<LlLines>;
using Ll128Protocol = LineProtocol<Ll128Lines>;

template <class Protocol, class Mode, class Codec, class Peers>
__global__ void __launch_bounds__(Protocol::kThreads, 1) fusedKernel(const __grid_constant__ FusedParams<Peers> p) {
  int localBlock;
  const int rank = p.peers.rankOfBlock(p.blocksPerRank, &localBlock);
  stamp(p.timeline, kStageLaunch, rank);
  // Inputs and the workspace may belong to the previous kernel until here.
  waitForPrerequisiteGrid();
  if (rank == p.silentRank) return;
  Protocol::template run<Mode, Codec>(p, rank, localBlock);
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_KERNEL_H_
