/*************************************************************************
 * LL: a group of a unit is 32 lines of 16 bytes {data32, flag32, data32,
 * flag32}, one line per lane: payload word 0 the LSE, then 31 data words.
 * Only 8-byte atomicity is assumed, so it is safe on any peer-to-peer path;
 * half of the bytes moved are flags. LlFp8Transport<T>: the same lines
 * carrying e4m3 words (wire.h), word 0 = {lse, scale}.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PROTO_LL_H_
#define NCCL_DCP_DEVICE_PROTO_LL_H_

#include "primitives.h"
#include "wire.h"

namespace nccl_dcp {

struct LlTransport {
  static constexpr Proto kProto = Proto::LL;
  static constexpr Wire kWire = Wire::Native;

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

  // The lane's data word of kSendBatch groups from g0 (the LSE where the
  // lane carries none): loaded before any store.
  // word(j): what the lane stores in group g0 + j; lseWord: the unit's LSE
  // word ({lse, 0}).
  struct Batch {
    uint64_t v[kSendBatch];
    __device__ uint64_t word(int j) const { return v[j]; }
    __device__ static uint64_t lseWord(float lse) { return (uint64_t)__float_as_uint(lse); }
  };
  __device__ static void loadBatch(const Region& r, const char* src, int g0, int lane, Batch& x) {
#pragma unroll
    for (int j = 0; j < kSendBatch; j++) {
      const int w = g0 + j < r.groups ? dataWord(r, g0 + j, lane, 0) : -1;
      x.v[j] = w >= 0 ? loadInput8(src + (size_t)w * kWordBytes) : 0;
    }
  }
  // Any wire's batch (Batch, LlFp8Transport's): its words as it says.
  template <class AnyBatch>
  __device__ static void storeBatch(const Region& r, const AnyBatch& x, int g0, float lse, char* unit,
                                    uint32_t flag, int lane) {
#pragma unroll
    for (int j = 0; j < kSendBatch; j++) {
      const int g = g0 + j;
      if (g >= r.groups || !active(r, g, lane)) break;
      storeGroup(r, x.word(j), 0, g, x.lseWord(lse), unit, flag, lane);
    }
  }
  // Group g from the lane's word (dataWord's k = 0; it holds no k = 1):
  // lane 0 carries the LSE word ({lse, 0}, fp8's {lse, scale}) instead.
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
  __device__ static float lseOf(const Line& l) { return __uint_as_float(l.d0); }  // lane 0
  __device__ static uint64_t word(const Line& l, int k) {
    return k ? 0 : (uint64_t)l.d0 | ((uint64_t)l.d1 << 32);
  }
  __device__ static void release(const Region& r, char* unit, int g, int lane) {
    if (active(r, g, lane)) storeVolatile16(const_cast<char*>(lanePtr(r, unit, g, lane)), 0u, 0u, 0u, 0u);
  }
};

// Wire fp8 (Region::wire; inputs of T, bf16 or fp16): a lane's data word
// is loaded as 8 elements of T (16 bytes), the unit's scale computed by the
// warp over the first batch (the whole unit but for D > 992), and each
// word encoded on its store; lane 0 carries {lse, scale}. Receiving is
// LlTransport's: the decode is the kernel's (WireWords).
template <typename T>
struct LlFp8Transport : LlTransport {
  static constexpr Wire kWire = Wire::Fp8E4m3;
  using Words = WireWords<T, kWire>;

  // Stored through LlTransport::storeBatch: each word encoded, the scale
  // beside the LSE.
  struct Batch {
    uint4 v[kSendBatch];
    float scale;  // of the unit: set by the batch of group 0
    __device__ uint64_t word(int j) const { return Words::encode(v[j], scale); }
    __device__ uint64_t lseWord(float lse) const { return fp8::packLseWord(lse, scale); }
  };
  __device__ static void loadBatch(const Region& r, const char* src, int g0, int lane, Batch& x) {
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < kSendBatch; j++) {
      const int w = g0 + j < r.groups ? dataWord(r, g0 + j, lane, 0) : -1;
      x.v[j] = w >= 0 ? Words::loadInput(src, w) : uint4{0, 0, 0, 0};
      amax = fmaxf(amax, Words::amaxOf(x.v[j]));
    }
    if (g0 == 0) x.scale = Words::unitScale(src, r.dataWords, amax, r.groups <= kSendBatch, lane);
  }
  __device__ static uint32_t scaleBitsOf(const Line& l) { return l.d1; }  // lane 0: word 0's high half
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PROTO_LL_H_
