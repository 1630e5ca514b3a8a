/*************************************************************************
 * LL: each 8-byte payload word travels in a 16-byte line
 * {data32, flag32, data32, flag32}, one line per lane, 32 lines per warp
 * instruction. Only 8-byte atomicity is assumed, so it is safe on any
 * peer-to-peer path; half of the bytes moved are flags.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PROTO_LL_H_
#define NCCL_DCP_DEVICE_PROTO_LL_H_

#include "primitives.h"

namespace nccl_dcp {

struct LlTransport {
  static constexpr Proto kProto = Proto::LL;

  __device__ static int lineOf(int g, int lane) { return g * ll::kLinesPerWarp + lane; }

  __device__ static int dataWord(const Region& r, int g, int lane, int k) {
    int p = lineOf(g, lane);
    return (k == 0 && p >= 1 && p <= r.dataWords) ? p - 1 : -1;
  }

  __device__ static void send(const Region& r, const char* src, float lse, char* unit, uint32_t flag,
                              int lane) {
    for (int g = 0; g < r.groups; g++) {
      const int p = lineOf(g, lane);
      if (p >= r.unitLines) break;
      uint64_t v = p == 0 ? (uint64_t)__float_as_uint(lse) : loadInput8(src + (size_t)(p - 1) * kWordBytes);
      storeVolatile16(unit + (size_t)p * ll::kLineBytes, (uint32_t)v, flag, (uint32_t)(v >> 32), flag);
    }
  }

  __device__ static bool poll(const Region& r, const char* unit, int g, uint32_t flag, int lane, Waiter& w,
                              int peer, uint64_t& v) {
    const int p = lineOf(g, lane);
    const bool valid = p < r.unitLines;
    uint32_t d0 = 0, f0 = 0, d1 = 0, f1 = 0;
    while (true) {
      if (valid) loadVolatile16(unit + (size_t)p * ll::kLineBytes, d0, f0, d1, f1);
      const bool ready = !valid || (f0 == flag && f1 == flag);
      if (__all_sync(kFullMask, ready)) break;
      if (!w.keepWaiting(peer)) return false;
    }
    v = (uint64_t)d0 | ((uint64_t)d1 << 32);
    return true;
  }

  __device__ static bool waitLse(const Region& r, const char* unit, uint32_t flag, int lane, Waiter& w,
                                 int peer, float* lse) {
    uint64_t v;
    if (!poll(r, unit, 0, flag, lane, w, peer, v)) return false;
    *lse = __uint_as_float(__shfl_sync(kFullMask, (uint32_t)v, 0));
    return true;
  }

  __device__ static bool recvGroup(const Region& r, char* unit, int g, uint32_t flag, int lane, Waiter& w,
                                   int peer, uint64_t word[2]) {
    if (!poll(r, unit, g, flag, lane, w, peer, word[0])) return false;
    word[1] = 0;
    const int p = lineOf(g, lane);
    if (p < r.unitLines) storeVolatile16(unit + (size_t)p * ll::kLineBytes, 0u, 0u, 0u, 0u);
    return true;
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PROTO_LL_H_
