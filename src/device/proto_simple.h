/*************************************************************************
 * SIMPLE: a unit is a 16-byte header {lse, 0, flag} and the head's data,
 * moved with plain 16-byte stores (512 bytes per warp instruction). The
 * sender fences at system scope and then release-stores the flag; the
 * receiver acquire-loads it once per unit, then reads the data. One signal
 * per (source, row, head) instead of one per 128-byte line.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PROTO_SIMPLE_H_
#define NCCL_DCP_DEVICE_PROTO_SIMPLE_H_

#include "primitives.h"

namespace nccl_dcp {

struct SimpleTransport {
  static constexpr Proto kProto = Proto::Simple;

  __device__ static int chunkOf(int g, int lane) { return g * 32 + lane; }  // 16-byte chunk of the data

  __device__ static int dataWord(const Region& r, int g, int lane, int k) {
    int w = 2 * chunkOf(g, lane) + k;
    return w < r.dataWords ? w : -1;
  }

  __device__ static void send(const Region& r, const char* src, float lse, char* unit, uint32_t flag,
                              int lane) {
    char* data = unit + simple::kHeaderBytes;
    for (int g = 0; g < r.groups; g++) {
      const int c = chunkOf(g, lane);
      if (2 * c >= r.dataWords) break;
      const char* s = src + (size_t)c * simple::kLaneBytes;
      storeVolatile16(data + (size_t)c * simple::kLaneBytes, loadInput8(s), loadInput8(s + 8));
    }
    if (lane == 0) storeVolatile4(unit, __float_as_uint(lse));
    __threadfence_system();
    __syncwarp();
    if (lane == 0) storeRelease8(unit + simple::kFlagOffset, flag);
  }

  __device__ static bool waitLse(const Region& r, const char* unit, uint32_t flag, int lane, Waiter& w,
                                 int peer, float* lse) {
    while (true) {
      const bool ready = loadAcquire8(unit + simple::kFlagOffset) == (uint64_t)flag;
      if (__all_sync(kFullMask, ready)) break;
      if (!w.keepWaiting(peer)) return false;
    }
    *lse = __uint_as_float(loadVolatile4(unit));
    __syncwarp();
    // Every lane has acquired; the flag goes back to zero for its next use.
    if (lane == 0) storeVolatile8(const_cast<char*>(unit) + simple::kFlagOffset, 0);
    return true;
  }

  __device__ static bool recvGroup(const Region& r, char* unit, int g, uint32_t, int lane, Waiter&, int,
                                   uint64_t word[2]) {
    const int c = chunkOf(g, lane);
    word[0] = word[1] = 0;
    if (2 * c < r.dataWords)
      loadVolatile16(unit + simple::kHeaderBytes + (size_t)c * simple::kLaneBytes, word[0], word[1]);
    return true;
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PROTO_SIMPLE_H_
