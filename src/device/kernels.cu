/*************************************************************************
 * The one CUDA translation unit: instantiations of the kernel templates
 * and their thin launchers (the host interface of src/launch.h). The only
 * file that sees both sides: kernel headers never include host headers.
 ************************************************************************/
#include <algorithm>
#include <atomic>

#include "../error.h"
#include "../launch.h"
#include "../log.h"
#include "a2a_lse_reduce.h"
#include "combine.h"
#include "proto_ll.h"
#include "proto_ll128.h"
#include "proto_simple.h"

namespace nccl_dcp {

namespace {

constexpr int kMaxDevices = 256;

// The one dtype dispatch: f(T{}) with the element type of `dtype`.
template <typename F>
ncclResult_t withElementType(ncclDataType_t dtype, F&& f) {
  switch (dtype) {
    case ncclBfloat16: return f(__nv_bfloat16{});
    case ncclFloat16: return f(__half{});
    case ncclFloat32: return f(float{});
    default: return fail(ncclInvalidArgument, "dtype %d is not supported", (int)dtype);
  }
}

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

template <typename T, class Transport, class Peers>
ncclResult_t launchFusedTyped(const FusedLaunch& l, const Peers& peers, cudaStream_t stream) {
  auto kernel = a2aLseReduceKernel<T, Transport, Peers>;
  static std::atomic<int> coResidentCache[kMaxDevices];
  int maxBlocks;
  DCPCHECK(coResidentBlocks(kernel, kFusedThreads, coResidentCache, &maxBlocks));
  const int nVirtual = Peers::kLoopback ? l.nRanks : 1;
  const int Hl = l.region.localHeads;
  // One warp per (row, head, destination) to send, per (row, head, group) to receive.
  const long warpsOfWork = (long)l.rows * Hl * std::max(std::max(l.nRanks - 1, l.region.groups), 1);
  int blocksPerRank = (int)((warpsOfWork + kFusedWarps - 1) / kFusedWarps);
  if (blocksPerRank > maxBlocks / nVirtual) blocksPerRank = maxBlocks / nVirtual;
  if (blocksPerRank < 1)
    return fail(ncclInvalidUsage, "%d virtual ranks need %d co-resident blocks; this GPU holds %d",
                nVirtual, nVirtual, maxBlocks);

  FusedParams<Peers> p;
  p.region = l.region;
  p.strides = l.strides;
  p.lseBase = l.lseBase;
  p.nRanks = l.nRanks;
  p.rows = l.rows;
  p.blocksPerRank = blocksPerRank;
  p.silentRank = l.silentRank;
  p.timeoutNs = l.timeoutNs;
  p.hostError = l.hostError;
  p.timeline = l.timeline;
  for (int i = 0; i < kMaxLoopbackRanks; i++) p.io[i] = l.io[i];
  p.peers = peers;

  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeCooperative;
  attrs[0].val.cooperative = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocksPerRank * nVirtual);
  cfg.blockDim = dim3(kFusedThreads);
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = l.pdl ? 2 : 1;
  TRACE("fused launch: proto %d rows %d ranks %d grid %d x %d pdl %d", (int)Transport::kProto, l.rows,
        l.nRanks, blocksPerRank, nVirtual, (int)l.pdl);
  CUDACHECK(cudaLaunchKernelEx(&cfg, kernel, p));
  return ncclSuccess;
}

template <typename T, class Peers>
ncclResult_t launchFusedProto(const FusedLaunch& l, const Peers& peers, cudaStream_t stream) {
  switch (l.region.proto) {
    case Proto::LL: return launchFusedTyped<T, LlTransport>(l, peers, stream);
    case Proto::LL128: return launchFusedTyped<T, Ll128Transport>(l, peers, stream);
    case Proto::Simple: return launchFusedTyped<T, SimpleTransport>(l, peers, stream);
  }
  return fail(ncclInternalError, "unknown protocol %d", (int)l.region.proto);
}

template <class Peers>
ncclResult_t launchFusedPeers(const FusedLaunch& l, const Peers& peers, cudaStream_t stream) {
  return withElementType(l.dtype, [&](auto elt) { return launchFusedProto<decltype(elt)>(l, peers, stream); });
}

__global__ void zeroWindowKernel(ncclWindow_t window, size_t offset, size_t bytes) {
  uint4* p = (uint4*)ncclGetLocalPointer(window, offset);
  const size_t n = bytes / sizeof(uint4);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = make_uint4(0, 0, 0, 0);
}

unsigned blocksFor(size_t units) { return (unsigned)((units + kCombineWarps - 1) / kCombineWarps); }

}  // namespace

ncclResult_t launchFused(const FusedLaunch& l, cudaStream_t stream) {
  if (l.addr.loopback) {
    if (l.nRanks > kMaxLoopbackRanks)
      return fail(ncclInvalidArgument, "loopback supports at most %d virtual ranks, not %d",
                  kMaxLoopbackRanks, l.nRanks);
    LoopbackPeers peers{l.addr.base, l.addr.rankBytes};
    return launchFusedPeers(l, peers, stream);
  }
  LsaPeers peers{l.addr.window, l.addr.windowOffset, l.rank};
  return launchFusedPeers(l, peers, stream);
}

ncclResult_t launchCombine(const CombineParams& l, cudaStream_t stream) {
  const dim3 grid(blocksFor((size_t)l.rows * l.localHeads), l.copies);
  if (grid.x == 0 || l.copies < 1) return ncclSuccess;
  return withElementType(l.dtype, [&](auto elt) {
    combineKernel<decltype(elt)><<<grid, kCombineThreads, 0, stream>>>(l);
    CUDACHECK(cudaGetLastError());
    return ncclSuccess;
  });
}

ncclResult_t launchPack(const PackParams& l, cudaStream_t stream) {
  const dim3 grid(blocksFor((size_t)l.nRanks * l.rows * l.localHeads), l.copies);
  if (grid.x == 0 || l.copies < 1) return ncclSuccess;
  return withElementType(l.dtype, [&](auto elt) {
    packKernel<decltype(elt)><<<grid, kCombineThreads, 0, stream>>>(l);
    CUDACHECK(cudaGetLastError());
    return ncclSuccess;
  });
}

ncclResult_t launchZeroWindow(ncclWindow_t window, size_t offset, size_t bytes, cudaStream_t stream) {
  if (bytes % sizeof(uint4) != 0) return fail(ncclInternalError, "window region of %zu bytes is not 16-byte sized", bytes);
  zeroWindowKernel<<<1024, 256, 0, stream>>>(window, offset, bytes);
  CUDACHECK(cudaGetLastError());
  return ncclSuccess;
}

}  // namespace nccl_dcp
