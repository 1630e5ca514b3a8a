/*************************************************************************
 * LL: a group of a unit is 32 lines of 16 bytes {data32, flag32, data32,
 * flag32}, one line per lane: payload word 0 the LSE, then 31 data words.
 * Only 8-byte atomicity is assumed, so it is safe on any peer-to-peer path;
 * half of the bytes moved are flags. What the words hold is the codec's
 * (codec.h): native elements, or e4m3 with word 0 = {lse, scale}.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PROTO_LL_H_
#define NCCL_DCP_DEVICE_PROTO_LL_H_

#include "primitives.h"
#include "codec.h"

namespace nccl_dcp {

template <class Codec>
struct LlLines {
  static constexpr Proto kProto = Proto::LL;

  struct Line {
    uint32_t d0, f0, d1, f1;
  };

  __device__ static bool active(const Region& r, int g, int lane) { return lane <= r.wordsInGroup(g); }
  __device__ static const char* lanePtr(const Region& r, const char* unit, int g, int lane) {
    return unit + g * r.groupBytes + lane * ll::kLineBytes;
  }

  __device__ static int dataWord(const Region& r, int g, int lane, int k) {
    return (k == 0 && lane >= 1 && lane <= r.wordsInGroup(g)) ? g * r.groupDataWords + lane - 1 : -1;
  }

  // The lane's data word of kSendBatch groups from g0: loaded before any
  // store (sealBatch: a scaled codec's unit scale from group 0's batch, as
  // Ll128Lines does). word(j): what the lane stores in group g0 + j;
  // lseWord: the unit's LSE word.
  struct Batch {
    typename Codec::Input v[kSendBatch];
    typename Codec::Scale scale;
    __device__ uint64_t word(int j) const { return Codec::encode(v[j], scale); }
    __device__ uint64_t lseWord(float lse) const { return Codec::lseWord(lse, scale); }
  };
  __device__ static void loadBatch(const Region& r, const char* src, int g0, int lane, Batch& x) {
#pragma unroll
    for (int j = 0; j < kSendBatch; j++) {
      const int w = g0 + j < r.groups ? dataWord(r, g0 + j, lane, 0) : -1;
      x.v[j] = w >= 0 ? Codec::loadInput(src, w) : typename Codec::Input{};
    }
  }
  __device__ static void sealBatch(const Region& r, const char* src, int lane, Batch& x) {
    if constexpr (Codec::kScaled) {
      uint32_t amax = 0;
#pragma unroll
      for (int j = 0; j < kSendBatch; j++) amax = Codec::amaxOf(x.v[j], amax);
      x.scale = Codec::unitScale(src, r.dataWords, amax, r.groups <= kSendBatch, lane);
    }
  }
  __device__ static void storeBatch(const Region& r, const Batch& x, int g0, float lse, char* unit, uint32_t flag,
                                    int lane) {
#pragma unroll
    for (int j = 0; j < kSendBatch; j++) {
      const int g = g0 + j;
      if (g >= r.groups || !active(r, g, lane)) break;
      storeGroup(r, x.word(j), 0, g, x.lseWord(lse), unit, flag, lane);
    }
  }
  // Group g from the lane's word (dataWord's k = 0; it holds no k = 1):
  // lane 0 carries the LSE word (the codec's) instead.
  __device__ static void storeGroup(const Region& r, uint64_t a, uint64_t /*b*/, int g, uint64_t lseWord, char* unit,
                                    uint32_t flag, int lane) {
    if (!active(r, g, lane)) return;
    const uint64_t v = lane == 0 ? lseWord : a;
    storeVolatile16(const_cast<char*>(lanePtr(r, unit, g, lane)), (uint32_t)v, flag, (uint32_t)(v >> 32), flag);
  }

  __device__ static void pollLoad(const Region& r, const char* unit, int g, int lane, Line& l) {
    l = Line{0, 0, 0, 0};
    if (active(r, g, lane)) loadVolatile16(lanePtr(r, unit, g, lane), l.d0, l.f0, l.d1, l.f1);
  }
  __device__ static bool pollReady(const Region& r, int g, int lane, const Line& l, uint32_t flag) {
    return !active(r, g, lane) || (l.f0 == flag && l.f1 == flag);
  }
  // Each 8-byte half is atomic with its flag: the polled data is the data.
  __device__ static void fetch(const Region&, const char*, int, int, Line&) {}
  __device__ static uint64_t lseWordOf(const Line& l) { return (uint64_t)l.d0 | (uint64_t)l.d1 << 32; }  // lane 0
  __device__ static uint64_t word(const Line& l, int k) {
    return k ? 0 : (uint64_t)l.d0 | ((uint64_t)l.d1 << 32);
  }
  __device__ static void release(const Region& r, char* unit, int g, int lane) {
    if (active(r, g, lane)) storeVolatile16(const_cast<char*>(lanePtr(r, unit, g, lane)), 0u, 0u, 0u, 0u);
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PROTO_LL_H_
