/*************************************************************************
 * perf's one CUDA file: the floors' kernels (the all-SM copy, the flag
 * round trip, the LSA pointers of a window) and the loopback baseline's
 * (the library's pack and combine unit bodies, several virtual ranks per
 * launch).
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>

#include "baseline_kernels.h"
#include "device/combine.h"
#include "floors.h"

namespace nccl_dcp {
namespace perf {

namespace {

constexpr int kCopyThreads = 512;
constexpr int kCopyBlocksPerSm = 4;  // 2048 threads: a full SM
constexpr int kUnroll = 4;           // 16-byte loads in flight per thread

struct CopyArgs {
  const char* src[kMaxFloorCopies];
  char* dst[kMaxFloorCopies];
  int n;
  size_t bytes;
};

// The grid's copy of `words` 16-byte words, thread t of `stride`, kUnroll
// loads in flight before their stores.
__device__ __forceinline__ void copyWords16(const int4* from, int4* to, size_t words, size_t t, size_t stride) {
  size_t i = t;
  for (; i + (kUnroll - 1) * stride < words; i += kUnroll * stride) {
    int4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) v[u] = __ldg(from + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; u++) to[i + u * stride] = v[u];
  }
  for (; i < words; i += stride) to[i] = __ldg(from + i);
}

// Whole 16-byte words, then the tail bytes.
__global__ void __launch_bounds__(kCopyThreads) peerWriteKernel(CopyArgs a) {
  const size_t words = a.bytes / 16, stride = (size_t)gridDim.x * blockDim.x;
  const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (int c = 0; c < a.n; c++) {
    copyWords16((const int4*)a.src[c], (int4*)a.dst[c], words, t, stride);
    for (size_t b = words * 16 + t; b < a.bytes; b += stride) a.dst[c][b] = a.src[c][b];
  }
}

__device__ uint64_t globalNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until the inbox holds at least v; false past the deadline.
__device__ bool waitFlag(const volatile uint64_t* inbox, uint64_t v, uint64_t deadline) {
  for (unsigned spin = 0;; spin++) {
    if (*inbox >= v) return true;
    if ((spin & 1023) == 0 && globalNs() > deadline) return false;
  }
}

// Lane 0 of warp `side` plays that side. Flags only grow (epoch + i), so
// graph replays need no reset; a timed-out rank stops measuring.
__global__ void roundTripKernel(FlagPlan p, RoundTripState* st) {
  const int side = threadIdx.x / 32;
  if (threadIdx.x % 32 != 0 || side >= p.sides) return;
  volatile int* timedOut = &st->timedOut;
  if (*timedOut) return;
  volatile uint64_t* out = p.outbox[side];
  const uint64_t base = st->epoch[side], deadline = globalNs() + kRoundTripTimeoutNs;
  for (uint64_t i = 1; i <= kRoundTripsPerLaunch; i++) {
    if (p.initiator[side]) *out = base + i;
    if (!waitFlag(p.inbox[side], base + i, deadline)) {
      *timedOut = 1;
      return;
    }
    if (!p.initiator[side]) *out = base + i;
  }
  st->epoch[side] = base + kRoundTripsPerLaunch;
}

// The least nonzero step of %globaltimer in kTimerReads reads: the
// timeline's resolution on this device.
constexpr int kTimerReads = 100000;
__global__ void timerStepKernel(uint64_t* step) {
  uint64_t least = ~0ull, last = globalNs();
  for (int i = 0; i < kTimerReads; i++) {
    const uint64_t now = globalNs();
    if (now != last) least = min(least, now - last);
    last = now;
  }
  *step = least;
}

__global__ void peerPointersKernel(ncclWindow_t w, int nRanks, char** out) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p < nRanks) out[p] = (char*)ncclGetPeerPointer(w, 0, p);
}

bool toArgs(const CopyPlan& p, int64_t rows, CopyArgs* a) {
  if (p.src.size() != p.dst.size() || p.src.size() > (size_t)kMaxFloorCopies) return false;
  *a = CopyArgs{};
  a->n = (int)p.src.size();
  a->bytes = (size_t)(rows * p.bytesPerRow);
  for (int i = 0; i < a->n; i++) {
    a->src[i] = p.src[i];
    a->dst[i] = p.dst[i];
  }
  return true;
}

}  // namespace

FlagPlan localFlagPlan(char* lines) {
  FlagPlan p;
  p.sides = 2;
  p.initiator[0] = true;
  p.inbox[0] = (uint64_t*)lines;
  p.inbox[1] = (uint64_t*)(lines + 128);
  p.outbox[0] = p.inbox[1];
  p.outbox[1] = p.inbox[0];
  return p;
}

int peerWriteThreads(int device) {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 0;
  return sms * kCopyBlocksPerSm * kCopyThreads;
}

cudaError_t launchPeerWrite(const CopyPlan& p, int64_t rows, cudaStream_t stream) {
  CopyArgs a;
  if (!toArgs(p, rows, &a)) return cudaErrorInvalidValue;
  int dev;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  // Every SM at full occupancy, or fewer blocks when there is less work.
  const int64_t perBlock = (int64_t)kCopyThreads * kUnroll * 16;
  const int64_t work = ((int64_t)a.bytes * a.n + perBlock - 1) / perBlock;
  const int64_t most = peerWriteThreads(dev) / kCopyThreads;
  const int blocks = (int)(work < 1 ? 1 : work < most ? work : most);
  peerWriteKernel<<<blocks, kCopyThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launchCopyEngine(const CopyPlan& p, int64_t rows, cudaStream_t stream) {
  CopyArgs a;
  if (!toArgs(p, rows, &a)) return cudaErrorInvalidValue;
  for (int i = 0; i < a.n; i++) {
    cudaError_t e = cudaMemcpyAsync(a.dst[i], a.src[i], a.bytes, cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t launchRoundTrips(const FlagPlan& p, RoundTripState* state, cudaStream_t stream) {
  if (p.sides < 1 || p.sides > 2) return cudaErrorInvalidValue;
  roundTripKernel<<<1, 32 * p.sides, 0, stream>>>(p, state);
  return cudaGetLastError();
}

cudaError_t globalTimerStepNs(uint64_t* ns) {
  uint64_t* dev = nullptr;
  cudaError_t e = cudaMalloc(&dev, sizeof(uint64_t));
  if (e != cudaSuccess) return e;
  timerStepKernel<<<1, 1>>>(dev);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(ns, dev, sizeof(uint64_t), cudaMemcpyDeviceToHost);
  cudaFree(dev);
  return e;
}

cudaError_t windowPeerPointers(ncclWindow_t window, int nRanks, std::vector<char*>* out) {
  char** dev = nullptr;
  cudaError_t e = cudaMalloc(&dev, nRanks * sizeof(char*));
  if (e != cudaSuccess) return e;
  peerPointersKernel<<<(nRanks + 63) / 64, 64>>>(window, nRanks, dev);
  out->assign(nRanks, nullptr);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(out->data(), dev, nRanks * sizeof(char*), cudaMemcpyDeviceToHost);
  cudaFree(dev);
  return e;
}

// ---- loopback baseline: copy c of every pointer at + c * its stride.

namespace {

template <typename T>
__global__ void __launch_bounds__(kCombineThreads) packCopiesKernel(PackParams p, PackCopies c) {
  const size_t unit = (size_t)blockIdx.x * kCombineWarps + threadIdx.x / 32;
  const int64_t k = blockIdx.y;
  p.partialOut += k * c.in;
  p.partialLse += k * c.lse;
  p.sendData += k * c.send;
  p.sendLse += k * c.sendLse;
  if (unit < (size_t)p.nRanks * p.rows * p.localHeads) packUnit<T>(p, unit);
}

template <typename T>
__global__ void __launch_bounds__(kCombineThreads) combineCopiesKernel(CombineParams p, CombineCopies c) {
  __shared__ float weights[kCombineWarps][2 * NCCL_DCP_MAX_RANKS];
  const int warp = threadIdx.x / 32, unit = blockIdx.x * kCombineWarps + warp;
  const int64_t k = blockIdx.y;
  p.recvData += k * c.recv;
  p.recvLse += k * c.recvLse;
  p.out += k * c.out;
  if (p.outLse) p.outLse = (float*)((char*)p.outLse + k * c.outLse);
  p.rank = (int)k;  // HEAD, NONE: the rank changes nothing but the outputs, offset above
  const int* start = nullptr;
  int units = p.rows * p.shape.heads;
  if (p.shape.scatter == Scatter::Token) {  // rank k's rows, the first p.rows of each source's block
    start = p.shape.split.start;
    p.row0 = start[k];
    units = (start[k + 1] - start[k]) * p.shape.heads;
  }
  if (unit < units) combineUnit<T>(p, start, unit, weights[warp]);
}

// Block (x, pair, plane): pair = s * ranks + d. 16-byte words when the pair's
// pointers and size allow, else 4-byte words (LSE rows), else bytes.
__global__ void __launch_bounds__(kCopyThreads) exchangeKernel(Exchange x) {
  const ExchangePlane& p = x.plane[blockIdx.z];
  const int s = blockIdx.y / x.ranks, d = blockIdx.y % x.ranks;
  const char* src = p.src + s * p.srcRank + p.srcOff[d];
  char* dst = p.dst + d * p.dstRank + s * p.dstSlot;
  const size_t bytes = (size_t)p.bytes[d], t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const uintptr_t align = (uintptr_t)src | (uintptr_t)dst | bytes;
  if (align % 16 == 0) {
    copyWords16((const int4*)src, (int4*)dst, bytes / 16, t, stride);
  } else if (align % 4 == 0) {
    for (size_t i = t; i < bytes / 4; i += stride) ((int*)dst)[i] = __ldg((const int*)src + i);
  } else {
    for (size_t i = t; i < bytes; i += stride) dst[i] = src[i];
  }
}

template <typename Word>  // one element of 2 or 4 bytes
__global__ void __launch_bounds__(kCopyThreads) flipSignBitsKernel(Word* data, size_t elements) {
  constexpr Word kSign = Word(1) << (8 * sizeof(Word) - 1);
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < elements; i += stride) data[i] ^= kSign;
}

unsigned blocksFor(size_t units) { return (unsigned)((units + kCombineWarps - 1) / kCombineWarps); }

}  // namespace

cudaError_t launchPackCopies(const PackParams& p, const PackCopies& c, cudaStream_t stream) {
  const dim3 grid(blocksFor((size_t)p.nRanks * p.rows * p.localHeads), c.copies);
  if (grid.x == 0 || c.copies < 1) return cudaSuccess;
  withElementType(p.dtype, [&](auto elt) {
    packCopiesKernel<decltype(elt)><<<grid, kCombineThreads, 0, stream>>>(p, c);
    return ncclSuccess;
  });
  return cudaGetLastError();
}

cudaError_t launchCombineCopies(const CombineParams& p, const CombineCopies& c, cudaStream_t stream) {
  const dim3 grid(blocksFor((size_t)p.rows * p.shape.heads), c.copies);
  if (grid.x == 0 || c.copies < 1) return cudaSuccess;
  withElementType(p.dtype, [&](auto elt) {
    combineCopiesKernel<decltype(elt)><<<grid, kCombineThreads, 0, stream>>>(p, c);
    return ncclSuccess;
  });
  return cudaGetLastError();
}

cudaError_t launchExchange(const Exchange& x, cudaStream_t stream) {
  if (x.ranks < 1 || x.ranks > kMaxLoopbackRanks || x.planes < 1 || x.planes > 2) return cudaErrorInvalidValue;
  int64_t most = 0;
  for (int k = 0; k < x.planes; k++)
    for (int d = 0; d < x.ranks; d++) most = std::max(most, x.plane[k].bytes[d]);
  if (most == 0) return cudaSuccess;
  // Enough blocks per pair for its largest copy, at most 64 (cp 8: 4096
  // blocks of the data plane, every SM busy).
  const int64_t perBlock = (int64_t)kCopyThreads * kUnroll * 16;
  const unsigned blocks = (unsigned)std::min<int64_t>(std::max<int64_t>((most + perBlock - 1) / perBlock, 1), 64);
  exchangeKernel<<<dim3(blocks, x.ranks * x.ranks, x.planes), kCopyThreads, 0, stream>>>(x);
  return cudaGetLastError();
}

cudaError_t launchFlipSignBits(void* data, size_t bytes, size_t eltSize, cudaStream_t stream) {
  if ((eltSize != 2 && eltSize != 4) || bytes % eltSize != 0) return cudaErrorInvalidValue;
  const size_t elements = bytes / eltSize;
  if (elements == 0) return cudaSuccess;
  const unsigned blocks = (unsigned)std::min<size_t>((elements + kCopyThreads - 1) / kCopyThreads, 4096);
  if (eltSize == 2) {
    flipSignBitsKernel<<<blocks, kCopyThreads, 0, stream>>>((uint16_t*)data, elements);
  } else {
    flipSignBitsKernel<<<blocks, kCopyThreads, 0, stream>>>((uint32_t*)data, elements);
  }
  return cudaGetLastError();
}

}  // namespace perf
}  // namespace nccl_dcp
