/*************************************************************************
 * SIMPLE: a group of a unit is a 16-byte header {lse, 0, flag} and up to
 * 512 bytes of data, moved with plain 16-byte stores (one warp instruction).
 * The sender writes the whole unit, fences once at system scope, then
 * release-stores one flag per group; the receiver acquire-loads its group's
 * flag, then reads header and data. One signal per 512 bytes instead of one
 * per 128-byte line, and no data bytes spent on flags.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PROTO_SIMPLE_H_
#define NCCL_DCP_DEVICE_PROTO_SIMPLE_H_

#include "primitives.h"

namespace nccl_dcp {

struct SimpleTransport {
  static constexpr Proto kProto = Proto::Simple;

  struct Line {
    uint64_t flag;  // the group's
    uint64_t a, b;  // the lane's 16 bytes of data
    float lse;
  };

  __device__ static const char* header(const Region& r, const char* unit, int g) { return unit + g * r.groupBytes; }
  __device__ static bool active(const Region& r, int g, int lane) { return 2 * lane < r.wordsInGroup(g); }
  __device__ static const char* lanePtr(const Region& r, const char* unit, int g, int lane) {
    return header(r, unit, g) + simple::kHeaderBytes + lane * simple::kLaneBytes;
  }

  __device__ static int dataWord(const Region& r, int g, int lane, int k) {
    const int w = 2 * lane + k;
    return w < r.wordsInGroup(g) ? g * r.groupDataWords + w : -1;
  }

  __device__ static void send(const Region& r, const char* src, float lse, char* unit, uint32_t flag, int lane) {
    for (int g0 = 0; g0 < r.groups; g0 += kSendBatch) {
      uint64_t v[kSendBatch][2];
#pragma unroll
      for (int j = 0; j < kSendBatch; j++) {
        const int g = g0 + j;
        const bool live = g < r.groups && active(r, g, lane);
        const char* s = src + (size_t)(live ? dataWord(r, g, lane, 0) : 0) * kWordBytes;
        v[j][0] = live ? loadInput8(s) : 0;
        v[j][1] = live ? loadInput8(s + kWordBytes) : 0;
      }
#pragma unroll
      for (int j = 0; j < kSendBatch; j++) {
        const int g = g0 + j;
        if (g >= r.groups || !active(r, g, lane)) break;
        storeVolatile16(const_cast<char*>(lanePtr(r, unit, g, lane)), v[j][0], v[j][1]);
      }
    }
    for (int g = lane; g < r.groups; g += 32) storeVolatile4(const_cast<char*>(header(r, unit, g)), __float_as_uint(lse));
    // One fence for the whole unit, then every group's flag.
    __threadfence_system();
    __syncwarp();
    for (int g = lane; g < r.groups; g += 32)
      storeRelease8(const_cast<char*>(header(r, unit, g)) + simple::kFlagOffset, flag);
  }

  __device__ static void pollLoad(const Region& r, const char* unit, int g, int, Line& l) {
    l.flag = loadAcquire8(header(r, unit, g) + simple::kFlagOffset);
  }
  __device__ static bool pollReady(const Region&, int, int, const Line& l, uint32_t flag) {
    return l.flag == (uint64_t)flag;
  }
  // After this lane's acquire of the flag: header and data.
  __device__ static void fetch(const Region& r, const char* unit, int g, int lane, Line& l) {
    l.a = l.b = 0;
    if (active(r, g, lane)) loadVolatile16(lanePtr(r, unit, g, lane), l.a, l.b);
    l.lse = __uint_as_float(loadVolatile4(header(r, unit, g)));
  }
  __device__ static float lseOf(const Line& l) { return l.lse; }
  __device__ static uint64_t word(const Line& l, int k) { return k ? l.b : l.a; }
  __device__ static void release(const Region& r, char* unit, int g, int lane) {
    if (lane == 0) storeVolatile8(const_cast<char*>(header(r, unit, g)) + simple::kFlagOffset, 0);
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PROTO_SIMPLE_H_
