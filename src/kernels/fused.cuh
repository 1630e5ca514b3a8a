/*************************************************************************
 * The fused kernels' launcher, beside the kernel (device/kernel.h), and the
 * family template every src/kernels/fused_*.cu instantiates once: the
 * kernels of one (protocol, wire, peers) for every dtype and mode the
 * table allows (kernel_table.h).
 ************************************************************************/
#ifndef NCCL_DCP_KERNELS_FUSED_CUH_
#define NCCL_DCP_KERNELS_FUSED_CUH_

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "device/kernel.h"
#include "error.h"
#include "kernel_table.h"
#include "log.h"
#include "timeline.h"

namespace nccl_dcp {

constexpr int kMaxDevices = 256;

// Blocks of `kernel` the current device holds at once, cached per device
// in `cache` (one cache per kernel: register counts differ).
template <typename Kernel>
ncclResult_t coResidentBlocks(Kernel kernel, int threads, std::atomic<int>* cache, int* blocks) {
  int dev;
  CUDACHECK(cudaGetDevice(&dev));
  if (dev < kMaxDevices && cache[dev].load() > 0) {
    *blocks = cache[dev].load();
    return ncclSuccess;
  }
  int perSm = 0, sms = 0, coop = 0;
  CUDACHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, threads, 0));
  CUDACHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDACHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  if (!coop) return fail(ncclInvalidUsage, "device %d does not support cooperative launches", dev);
  *blocks = perSm * sms;
  if (dev < kMaxDevices) cache[dev].store(*blocks);
  return ncclSuccess;
}

// One cooperative (+ PDL) launch of the kernel of (Protocol, Mode, Codec,
// Peers): the blocks per rank the protocol wants for the round, capped at
// what the GPU holds co-resident.
template <class Protocol, class Mode, class Codec, class Peers>
ncclResult_t launchFusedKernel(const FusedArgs& args, const Addressing& addr, const RankIo* io, int rank, bool pdl,
                               cudaStream_t stream) {
  static std::atomic<int> cache[kMaxDevices];
  auto kernel = fusedKernel<Protocol, Mode, Codec, Peers>;
  int maxBlocks;
  DCPCHECK(coResidentBlocks(kernel, Protocol::kThreads, cache, &maxBlocks));
  const int nVirtual = Peers::kLoopback ? args.nRanks : 1;
  if (nVirtual > kMaxLoopbackRanks)
    return fail(ncclInvalidArgument, "loopback supports at most %d virtual ranks, not %d", kMaxLoopbackRanks,
                nVirtual);
  const int coResident = maxBlocks / nVirtual;
  const long wanted = std::max<long>(Protocol::blocksWanted(args, coResident), 1);
  const int blocksPerRank = (int)std::min<long>(wanted, coResident);
  if (blocksPerRank < 1)
    return fail(ncclInvalidUsage, "%d virtual ranks need %d co-resident blocks; this GPU holds %d", nVirtual,
                nVirtual, maxBlocks);

  // The one copy of a launch: the arguments as the engine, the call and
  // the round set them, then what this launch decides.
  FusedParams<Peers> p;
  static_cast<FusedArgs&>(p) = args;
  p.blocksPerRank = blocksPerRank;
  DCPCHECK(timelineBuffer(&p.timeline));
  if (blocksPerRank * nVirtual > kTimelineBlocks) p.timeline = nullptr;
  if constexpr (Peers::kLoopback) {
    p.peers = LoopbackPeers{addr.base, addr.rankBytes};
  } else {
    for (int i = 0; i < args.nRanks; i++) p.peers.base[i] = addr.lsa[i];
    p.peers.rank = rank;
  }
  for (int i = 0; i < nVirtual; i++) p.io[i] = io[i];
  p.direct = addr.direct;

  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeCooperative;
  attrs[0].val.cooperative = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocksPerRank * nVirtual);
  cfg.blockDim = dim3(Protocol::kThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = pdl ? 2 : 1;
  TRACE("fused launch: proto %d rows %d ranks %d grid %d x %d pdl %d", (int)args.region.proto, args.rows,
        args.nRanks, blocksPerRank, nVirtual, (int)pdl);
  CUDACHECK(cudaLaunchKernelEx(&cfg, kernel, p));
  return ncclSuccess;
}

template <Proto kProto>
struct ProtocolOf;
template <>
struct ProtocolOf<Proto::LL> {
  using type = LlProtocol;
};
template <>
struct ProtocolOf<Proto::LL128> {
  using type = Ll128Protocol;
};
template <>
struct ProtocolOf<Proto::Simple> {
  using type = SimpleProtocol;
};

// The launcher of (T, mode) in the family, or nullptr where the table
// allows none (and then nothing is instantiated).
template <class Protocol, Wire kWire, class Peers, typename T, ncclDataType_t kDtype, class M, FusedMode kMode>
FusedLauncher launcherIfLegal() {
  if constexpr (isLegalFused(kDtype, kWire, kMode)) return &launchFusedKernel<Protocol, M, Codec<T, kWire>, Peers>;
  else return nullptr;
}
template <class Protocol, Wire kWire, class Peers, typename T, ncclDataType_t kDtype>
FusedLauncher launcherOf(FusedMode mode) {
  using K = Protocol;
  switch (mode) {
    case FusedMode::Head: return launcherIfLegal<K, kWire, Peers, T, kDtype, HeadMode, FusedMode::Head>();
    case FusedMode::Token: return launcherIfLegal<K, kWire, Peers, T, kDtype, TokenMode, FusedMode::Token>();
    case FusedMode::NoneDirect:
      return launcherIfLegal<K, kWire, Peers, T, kDtype, NoneDirectMode, FusedMode::NoneDirect>();
    case FusedMode::NoneTwoPhase:
      return launcherIfLegal<K, kWire, Peers, T, kDtype, NoneTwoPhaseMode, FusedMode::NoneTwoPhase>();
  }
  return nullptr;
}

template <Proto kProto, Wire kWire, bool kLoopback>
FusedLauncher familyLauncher(ncclDataType_t dtype, FusedMode mode) {
  using Protocol = typename ProtocolOf<kProto>::type;
  using Peers = typename std::conditional<kLoopback, LoopbackPeers, LsaPeers>::type;
  switch (dtype) {
    case ncclBfloat16:
      if constexpr (isLegalFused(ncclBfloat16, kWire, FusedMode::Head))
        return launcherOf<Protocol, kWire, Peers, __nv_bfloat16, ncclBfloat16>(mode);
      break;
    case ncclFloat16:
      if constexpr (isLegalFused(ncclFloat16, kWire, FusedMode::Head))
        return launcherOf<Protocol, kWire, Peers, __half, ncclFloat16>(mode);
      break;
    case ncclFloat32:
      if constexpr (isLegalFused(ncclFloat32, kWire, FusedMode::Head))
        return launcherOf<Protocol, kWire, Peers, float, ncclFloat32>(mode);
      break;
    default: break;
  }
  return nullptr;
}

// In one family's translation unit: its explicit instantiation.
#define NCCL_DCP_FUSED_FAMILY(proto, wire, loopback) \
  template FusedLauncher familyLauncher<proto, wire, loopback>(ncclDataType_t, FusedMode);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_KERNELS_FUSED_CUH_
