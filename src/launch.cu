/*************************************************************************
 * The launchers, beside their header (launch.h): the one CUDA translation
 * unit, instantiating the kernel templates of device/ and launching them.
 * The only file that sees both sides: nothing in device/ includes a host
 * header.
 ************************************************************************/
#include "launch.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "device/a2a_lse_reduce.h"
#include "device/a2a_lse_reduce_simple.h"
#include "device/combine.h"
#include "device/nccl_compat.h"
#include "device/proto_ll.h"
#include "device/proto_ll128.h"
#include "error.h"
#include "log.h"

namespace nccl_dcp {

namespace {

constexpr int kMaxDevices = 256;

// Blocks of `kernel` the current device holds at once, cached per device
// in `cache` (one cache per kernel: register counts differ).
template <typename Kernel>
ncclResult_t coResidentBlocks(Kernel kernel, int threads, size_t smem, std::atomic<int>* cache, int* blocks) {
  int dev;
  CUDACHECK(cudaGetDevice(&dev));
  if (dev < kMaxDevices && cache[dev].load() > 0) {
    *blocks = cache[dev].load();
    return ncclSuccess;
  }
  int perSm = 0, sms = 0, coop = 0;
  CUDACHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, threads, smem));
  CUDACHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDACHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  if (!coop) return fail(ncclInvalidUsage, "device %d does not support cooperative launches", dev);
  *blocks = perSm * sms;
  if (dev < kMaxDevices) cache[dev].store(*blocks);
  return ncclSuccess;
}

// The timeline buffer of the current device ([kTimelineBlocks][stages]),
// allocated on first use; NULL when built without -Dtimeline=true.
ncclResult_t timelineBuffer(uint64_t** buffer) {
  *buffer = nullptr;
#if NCCL_DCP_TIMELINE
  static std::mutex lock;
  static uint64_t* buffers[kMaxDevices];
  int dev;
  CUDACHECK(cudaGetDevice(&dev));
  if (dev >= kMaxDevices) return ncclSuccess;
  std::lock_guard<std::mutex> guard(lock);
  if (buffers[dev] == nullptr) {
    const size_t bytes = sizeof(uint64_t) * kTimelineBlocks * kTimelineSlots;
    CUDACHECK(cudaMalloc(&buffers[dev], bytes));
    CUDACHECK(cudaMemset(buffers[dev], 0, bytes));
  }
  *buffer = buffers[dev];
#endif
  return ncclSuccess;
}

// One cooperative (+ PDL) launch of a fused kernel: `blocksWanted` blocks
// per rank, capped at what the GPU holds co-resident (occupancy computed for
// `maxSmem`, the most dynamic shared memory any config of it takes, so it
// can be cached per kernel).
template <class Peers, typename Kernel>
ncclResult_t launchCooperative(Kernel kernel, std::atomic<int>* cache, int threads, size_t smem, size_t maxSmem,
                               long blocksWanted, const FusedArgs& args, const Peers& peers, const RankIo* io,
                               bool pdl, cudaStream_t stream) {
  int maxBlocks;
  DCPCHECK(coResidentBlocks(kernel, threads, maxSmem, cache, &maxBlocks));
  const int nVirtual = Peers::kLoopback ? args.nRanks : 1;
  const int blocksPerRank = (int)std::min<long>(std::max<long>(blocksWanted, 1), maxBlocks / nVirtual);
  if (blocksPerRank < 1)
    return fail(ncclInvalidUsage, "%d virtual ranks need %d co-resident blocks; this GPU holds %d",
                nVirtual, nVirtual, maxBlocks);

  // The one copy of a launch: the engine's arguments as the call and the
  // round set them, then what this launch decides.
  FusedParams<Peers> p;
  static_cast<FusedArgs&>(p) = args;
  p.blocksPerRank = blocksPerRank;
  p.byHeads = makeDivisor(args.region.localHeads);
  p.byLocalHeads = makeDivisor(args.shape.localHeads);
  p.byGroups = makeDivisor(args.region.groups);
  p.byVectors = makeDivisor((uint32_t)std::max<size_t>(args.region.unitBytes / simple::kLaneBytes, 1));
  p.byChunkUnits = makeDivisor(std::max(args.region.chunkUnits, 1));
  DCPCHECK(timelineBuffer(&p.timeline));
  if (blocksPerRank * nVirtual > kTimelineBlocks) p.timeline = nullptr;
  p.peers = peers;
  for (int i = 0; i < nVirtual; i++) p.io[i] = io[i];

  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeCooperative;
  attrs[0].val.cooperative = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocksPerRank * nVirtual);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = pdl ? 2 : 1;
  TRACE("fused launch: proto %d rows %d ranks %d grid %d x %d pdl %d", (int)args.region.proto, args.rows,
        args.nRanks, blocksPerRank, nVirtual, (int)pdl);
  CUDACHECK(cudaLaunchKernelEx(&cfg, kernel, p));
  return ncclSuccess;
}

// Line protocols: a warp per (row, head, destination) to send, per
// (row, head, group) to receive; every warp does both, sends first.
template <typename T, class Transport, class Peers>
ncclResult_t launchFusedLines(const FusedArgs& a, const Peers& peers, const RankIo* io, bool pdl,
                              cudaStream_t stream) {
  static std::atomic<int> cache[kMaxDevices];
  // TOKEN sends each unit once (HEAD, NONE: to every peer).
  const int fanOut = a.shape.scatter == Scatter::Token ? 1 : a.nRanks - 1;
  const long warps = (long)a.rows * a.region.localHeads * std::max(std::max(fanOut, a.region.groups), 1);
  return launchCooperative(a2aLseReduceKernel<T, Transport, Peers>, cache, kFusedThreads, 0, 0,
                           (warps + kFusedWarps - 1) / kFusedWarps, a, peers, io, pdl, stream);
}

// SIMPLE: a block per (chunk, destination) to send, up to every
// co-resident one; a block's receiving warps per chunk.
template <typename T, class Peers, Wire kWire = Wire::Native>
ncclResult_t launchFusedSimple(const FusedArgs& a, const Peers& peers, const RankIo* io, bool pdl,
                               cudaStream_t stream) {
  static std::atomic<int> cache[kMaxDevices];
  const Region& r = a.region;
  const long chunks = ((long)a.rows * r.localHeads + r.chunkUnits - 1) / r.chunkUnits;
  // TOKEN sends each chunk once (to the rank whose slice holds it).
  const long blocks = a.shape.scatter == Scatter::Token ? chunks : std::max(chunks * (a.nRanks - 1), chunks);
  return launchCooperative(simpleA2aLseReduceKernel<T, Peers, kWire>, cache, kSimpleThreads, 0, 0, blocks, a, peers,
                           io, pdl, stream);
}

template <typename T, class Peers>
ncclResult_t launchFusedProto(const FusedArgs& a, const Peers& peers, const RankIo* io, bool pdl,
                              cudaStream_t stream) {
  switch (a.region.proto) {
    case Proto::LL: return launchFusedLines<T, LlTransport>(a, peers, io, pdl, stream);
    case Proto::LL128: return launchFusedLines<T, Ll128Transport>(a, peers, io, pdl, stream);
    case Proto::Simple: return launchFusedSimple<T>(a, peers, io, pdl, stream);
  }
  return fail(ncclInternalError, "unknown protocol %d", (int)a.region.proto);
}

template <class Peers>
ncclResult_t launchFusedPeers(const FusedArgs& a, ncclDataType_t dtype, const Peers& peers, const RankIo* io,
                              bool pdl, cudaStream_t stream) {
  return withElementType(dtype,
                         [&](auto elt) { return launchFusedProto<decltype(elt)>(a, peers, io, pdl, stream); });
}

// The kernels of the call's scatter mode (a compile-time constant of each);
// NONE's region says its algorithm (a phase-2 half: two phases).
template <class Peers>
ncclResult_t launchFusedMode(const FusedArgs& a, ncclDataType_t dtype, const Peers& peers, const RankIo* io,
                             bool pdl, cudaStream_t stream) {
  using TwoPhaseNone = Scattered<Peers, Scatter::Head, true>;
  switch (a.shape.scatter) {
    case Scatter::Head: return launchFusedPeers(a, dtype, Scattered<Peers, Scatter::Head>{peers}, io, pdl, stream);
    case Scatter::Token: return launchFusedPeers(a, dtype, Scattered<Peers, Scatter::Token>{peers}, io, pdl, stream);
    case Scatter::None:
      if (a.region.gatherBytes != 0) return launchFusedPeers(a, dtype, TwoPhaseNone{peers}, io, pdl, stream);
      return launchFusedPeers(a, dtype, Scattered<Peers, Scatter::None>{peers}, io, pdl, stream);
  }
  return fail(ncclInternalError, "unknown scatter mode %d", (int)a.shape.scatter);
}

// Wire fp8 (DESIGN §15): its own branch, HEAD and bf16 / fp16 only (the
// config check refuses the rest), so it adds 2 dtypes x 3 protocols
// kernels per peer policy, not every mode's and dtype's.
template <class Peers>
ncclResult_t launchFusedFp8(const FusedArgs& a, ncclDataType_t dtype, const Peers& peers, const RankIo* io, bool pdl,
                            cudaStream_t stream) {
  if (a.shape.scatter != Scatter::Head)
    return fail(ncclInternalError, "wire fp8 in scatter mode %d: validate.cc allows HEAD only", (int)a.shape.scatter);
  const Scattered<Peers, Scatter::Head> head{peers};
  auto launchProto = [&](auto elt) -> ncclResult_t {
    using T = decltype(elt);
    switch (a.region.proto) {
      case Proto::LL: return launchFusedLines<T, LlFp8Transport<T>>(a, head, io, pdl, stream);
      case Proto::LL128: return launchFusedLines<T, Ll128Fp8Transport<T>>(a, head, io, pdl, stream);
      case Proto::Simple:
        return launchFusedSimple<T, Scattered<Peers, Scatter::Head>, Wire::Fp8E4m3>(a, head, io, pdl, stream);
    }
    return fail(ncclInternalError, "unknown protocol %d", (int)a.region.proto);
  };
  switch (dtype) {
    case ncclBfloat16: return launchProto(__nv_bfloat16{});
    case ncclFloat16: return launchProto(__half{});
    default: return fail(ncclInternalError, "wire fp8 with dtype %d: validate.cc allows bf16 and fp16", (int)dtype);
  }
}

template <class Peers>
ncclResult_t launchFusedWire(const FusedArgs& a, ncclDataType_t dtype, const Peers& peers, const RankIo* io,
                             bool pdl, cudaStream_t stream) {
  if (a.region.wire == Wire::Fp8E4m3) return launchFusedFp8(a, dtype, peers, io, pdl, stream);
  return launchFusedMode(a, dtype, peers, io, pdl, stream);
}

__global__ void zeroWindowKernel(ncclWindow_t window, size_t offset, size_t bytes) {
  uint4* p = (uint4*)ncclGetLocalPointer(window, offset);
  const size_t n = bytes / sizeof(uint4);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = make_uint4(0, 0, 0, 0);
}

__global__ void resolveLsaKernel(ncclWindow_t window, size_t offset, int nRanks, char** lsa) {
  for (int i = threadIdx.x; i < nRanks; i += blockDim.x) lsa[i] = (char*)ncclGetLsaPointer(window, offset, i);
}

unsigned blocksFor(size_t units) { return (unsigned)((units + kCombineWarps - 1) / kCombineWarps); }

}  // namespace

FusedArgs fusedArgs(int nRanks, LseBase lseBase, uint64_t timeoutNs, AsyncErrorRecord* hostError,
                    int simpleSendWarps) {
  FusedArgs a = {};
  a.lseBase = lseBase;
  a.nRanks = nRanks;
  a.silentRank = -1;
  a.sendWarps = simpleSendWarps > 0 ? std::min(simpleSendWarps, kSimpleSignalWarp) : kSimpleDefaultWriters;
  a.byRanks = makeDivisor(nRanks);
  a.byPeers = makeDivisor(std::max(nRanks - 1, 1));
  a.timeoutNs = timeoutNs;
  a.hostError = hostError;
  return a;
}

ncclResult_t launchFused(const FusedArgs& args, const RankIo* io, ncclDataType_t dtype, int rank,
                         const Addressing& addr, bool pdl, cudaStream_t stream) {
  if (addr.loopback) {
    if (args.nRanks > kMaxLoopbackRanks)
      return fail(ncclInvalidArgument, "loopback supports at most %d virtual ranks, not %d",
                  kMaxLoopbackRanks, args.nRanks);
    LoopbackPeers peers{addr.base, addr.rankBytes};
    return launchFusedWire(args, dtype, peers, io, pdl, stream);
  }
  LsaPeers peers;
  for (int i = 0; i < args.nRanks; i++) peers.base[i] = addr.lsa[i];
  peers.rank = rank;
  return launchFusedWire(args, dtype, peers, io, pdl, stream);
}

// The fallback of a wire-fp8 context (HEAD, bf16 / fp16: the config check
// refuses the rest): the pack and combine kernels of e4m3 units.
template <typename F>
ncclResult_t withFp8ElementType(ncclDataType_t dtype, F&& f) {
  switch (dtype) {
    case ncclBfloat16: return f(__nv_bfloat16{});
    case ncclFloat16: return f(__half{});
    default: return fail(ncclInternalError, "wire fp8 with dtype %d: validate.cc allows bf16 and fp16", (int)dtype);
  }
}

ncclResult_t launchCombine(const CombineParams& l, cudaStream_t stream) {
  const unsigned grid = blocksFor((size_t)l.rows * l.shape.heads);
  if (grid == 0) return ncclSuccess;
  if (l.wire == Wire::Fp8E4m3)
    return withFp8ElementType(l.dtype, [&](auto elt) {
      combineKernel<decltype(elt), Wire::Fp8E4m3><<<grid, kCombineThreads, 0, stream>>>(l);
      CUDACHECK(cudaGetLastError());
      return ncclSuccess;
    });
  return withElementType(l.dtype, [&](auto elt) {
    combineKernel<decltype(elt)><<<grid, kCombineThreads, 0, stream>>>(l);
    CUDACHECK(cudaGetLastError());
    return ncclSuccess;
  });
}

ncclResult_t launchPack(const PackParams& l, cudaStream_t stream) {
  const unsigned grid = blocksFor((size_t)l.nRanks * l.rows * l.localHeads);
  if (grid == 0) return ncclSuccess;
  if (l.wire == Wire::Fp8E4m3)
    return withFp8ElementType(l.dtype, [&](auto elt) {
      packKernel<decltype(elt), Wire::Fp8E4m3><<<grid, kCombineThreads, 0, stream>>>(l);
      CUDACHECK(cudaGetLastError());
      return ncclSuccess;
    });
  return withElementType(l.dtype, [&](auto elt) {
    packKernel<decltype(elt)><<<grid, kCombineThreads, 0, stream>>>(l);
    CUDACHECK(cudaGetLastError());
    return ncclSuccess;
  });
}

ncclResult_t launchPoison(const CombineParams& l, cudaStream_t stream) {
  const unsigned grid = blocksFor((size_t)l.rows * l.shape.heads);
  if (grid == 0) return ncclSuccess;
  return withElementType(l.dtype, [&](auto elt) {
    poisonKernel<decltype(elt)><<<grid, kCombineThreads, 0, stream>>>(l);
    CUDACHECK(cudaGetLastError());
    return ncclSuccess;
  });
}

ncclResult_t timelineReset(cudaStream_t stream) {
  uint64_t* buffer;
  DCPCHECK(timelineBuffer(&buffer));
  if (buffer == nullptr) return fail(ncclInvalidUsage, "built without the timeline (meson -Dtimeline=true)");
  CUDACHECK(cudaMemsetAsync(buffer, 0, sizeof(uint64_t) * kTimelineBlocks * kTimelineSlots, stream));
  return ncclSuccess;
}

ncclResult_t timelineRead(uint64_t* stamps) {
  uint64_t* buffer;
  DCPCHECK(timelineBuffer(&buffer));
  if (buffer == nullptr) return fail(ncclInvalidUsage, "built without the timeline (meson -Dtimeline=true)");
  CUDACHECK(cudaMemcpy(stamps, buffer, sizeof(uint64_t) * kTimelineBlocks * kTimelineSlots, cudaMemcpyDeviceToHost));
  return ncclSuccess;
}

ncclResult_t resolveLsaPointers(ncclWindow_t window, size_t offset, int nRanks, char** lsa, cudaStream_t stream) {
  // Stream-ordered allocation: a cudaFree would wait for every kernel on
  // the device, stuck ones of an aborted context included.
  char** dev = nullptr;
  CUDACHECK(cudaMallocAsync(&dev, sizeof(char*) * nRanks, stream));
  resolveLsaKernel<<<1, 64, 0, stream>>>(window, offset, nRanks, dev);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpyAsync(lsa, dev, sizeof(char*) * nRanks, cudaMemcpyDeviceToHost, stream);
  const cudaError_t freed = cudaFreeAsync(dev, stream);
  if (e == cudaSuccess) e = freed;
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return fail(ncclUnhandledCudaError, "resolving the window's LSA pointers failed: %s",
                                    cudaGetErrorString(e));
  return ncclSuccess;
}

ncclResult_t launchZeroWindow(ncclWindow_t window, size_t offset, size_t bytes, cudaStream_t stream) {
  if (bytes % sizeof(uint4) != 0) return fail(ncclInternalError, "window region of %zu bytes is not 16-byte sized", bytes);
  zeroWindowKernel<<<1024, 256, 0, stream>>>(window, offset, bytes);
  CUDACHECK(cudaGetLastError());
  return ncclSuccess;
}

}  // namespace nccl_dcp
