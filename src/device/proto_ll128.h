/*************************************************************************
 * LL128: a group of a unit is 4 lines of 128 bytes = 60 payload words
 * (word 0 the LSE, then 59 data words), each line 15 payload words + 1 flag
 * word. Lane i of each 8-lane quarter of the warp owns 16 bytes of one line:
 * payload words 2i and 2i+1, except the flag lane (i = 7), whose second word
 * is the flag. A warp moves a group in one instruction. A line is trusted
 * once its flag reads the round's value: NCCL's premise that a warp's
 * 128-byte store becomes visible as a whole, which holds over NVLink (and
 * within one GPU), not over PCIe. What the words hold is the codec's
 * (codec.h): native elements, or e4m3 with payload word 0 = {lse, scale}.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PROTO_LL128_H_
#define NCCL_DCP_DEVICE_PROTO_LL128_H_

#include "primitives.h"
#include "codec.h"

// On sm_90 NCCL re-reads a slice once all its flags are seen rather than
// trusting the data loaded together with the flag; 0 builds without it.
#ifndef NCCL_DCP_LL128_REREAD
#define NCCL_DCP_LL128_REREAD 1
#endif

namespace nccl_dcp {

template <class Codec>
struct Ll128Lines {
  static constexpr Proto kProto = Proto::LL128;

  struct Line {
    uint64_t a, b;  // the lane's 16 bytes of its line
  };

  __device__ static int lineOf(int lane) { return lane / ll128::kLanesPerLine; }
  __device__ static int slotOf(int lane) { return lane % ll128::kLanesPerLine; }
  __device__ static int payloadWord(int lane, int k) {
    return lineOf(lane) * ll128::kDataWordsPerLine + 2 * slotOf(lane) + k;
  }
  __device__ static const char* lanePtr(const Region& r, const char* unit, int g, int lane) {
    return unit + g * r.groupBytes + lineOf(lane) * ll128::kLineBytes + slotOf(lane) * ll128::kLaneBytes;
  }

  // Data word of the head (0..Dw) the lane holds as its k-th word in group g, or -1.
  __device__ static int dataWord(const Region& r, int g, int lane, int k) {
    if (k == 1 && slotOf(lane) == ll128::kFlagLane) return -1;
    const int p = payloadWord(lane, k);
    return (p >= 1 && p <= r.wordsInGroup(g)) ? g * r.groupDataWords + p - 1 : -1;
  }

  // Lines carrying payload are written whole, flag included; the rest of a
  // short last group is neither written nor read.
  __device__ static bool lineWritten(const Region& r, int g, int lane) {
    return lineOf(lane) * ll128::kDataWordsPerLine <= r.wordsInGroup(g);
  }

  // The lane's data of kSendBatch groups from g0: loaded before any store.
  // sealBatch gives group 0's batch a scaled codec's unit scale (from the
  // batch when it is the whole unit, at most kSendBatch groups, else the
  // warp loads the rest once more). word(j, k): what the lane stores as
  // its k-th word of group g0 + j; lseWord: the unit's LSE word.
  struct Batch {
    typename Codec::Input v[kSendBatch][2];
    typename Codec::Scale scale;
    __device__ uint64_t word(int j, int k) const { return Codec::encode(v[j][k], scale); }
    __device__ uint64_t lseWord(float lse) const { return Codec::lseWord(lse, scale); }
  };
  __device__ static void loadBatch(const Region& r, const char* src, int g0, int lane, Batch& x) {
#pragma unroll
    for (int j = 0; j < kSendBatch; j++) {
      const int g = g0 + j;
      const bool live = g < r.groups;
#pragma unroll
      for (int k = 0; k < 2; k++) {
        const int w = live ? dataWord(r, g, lane, k) : -1;
        x.v[j][k] = w >= 0 ? Codec::loadInput(src, w) : typename Codec::Input{};
      }
    }
  }
  __device__ static void sealBatch(const Region& r, const char* src, int lane, Batch& x) {
    if constexpr (Codec::kScaled) {
      uint32_t amax = 0;
#pragma unroll
      for (int j = 0; j < kSendBatch; j++)
#pragma unroll
        for (int k = 0; k < 2; k++) amax = Codec::amaxOf(x.v[j][k], amax);
      x.scale = Codec::unitScale(src, r.dataWords, amax, r.groups <= kSendBatch, lane);
    }
  }
  __device__ static void storeBatch(const Region& r, const Batch& x, int g0, float lse, char* unit, uint32_t flag,
                                    int lane) {
#pragma unroll
    for (int j = 0; j < kSendBatch; j++) {
      const int g = g0 + j;
      if (g >= r.groups || !lineWritten(r, g, lane)) break;
      storeGroup(r, x.word(j, 0), x.word(j, 1), g, x.lseWord(lse), unit, flag, lane);
    }
  }
  // Group g from the lane's two words (dataWord's k = 0, 1): the LSE word
  // (the codec's) into payload word 0, the flag into the
  // flag word.
  __device__ static void storeGroup(const Region& r, uint64_t a, uint64_t b, int g, uint64_t lseWord, char* unit,
                                    uint32_t flag, int lane) {
    if (!lineWritten(r, g, lane)) return;
    if (payloadWord(lane, 0) == 0) a = lseWord;
    if (slotOf(lane) == ll128::kFlagLane) b = flag;
    storeVolatile16(const_cast<char*>(lanePtr(r, unit, g, lane)), a, b);
  }

  __device__ static void pollLoad(const Region& r, const char* unit, int g, int lane, Line& l) {
    l.a = l.b = 0;
    if (lineWritten(r, g, lane)) loadVolatile16(lanePtr(r, unit, g, lane), l.a, l.b);
  }
  __device__ static bool pollReady(const Region& r, int g, int lane, const Line& l, uint32_t flag) {
    return !lineWritten(r, g, lane) || slotOf(lane) != ll128::kFlagLane || l.b == (uint64_t)flag;
  }
  // Hopper rule: the data is read again once every flag of the group is seen.
  __device__ static void fetch(const Region& r, const char* unit, int g, int lane, Line& l) {
#if NCCL_DCP_LL128_REREAD
    if (lineWritten(r, g, lane)) loadVolatile16(lanePtr(r, unit, g, lane), l.a, l.b);
#endif
  }
  __device__ static uint64_t lseWordOf(const Line& l) { return l.a; }  // lane 0
  __device__ static uint64_t word(const Line& l, int k) { return k ? l.b : l.a; }
  // This warp is the group's only reader: its flags go back to zero.
  __device__ static void release(const Region& r, char* unit, int g, int lane) {
    if (lineWritten(r, g, lane) && slotOf(lane) == ll128::kFlagLane)
      storeVolatile8(const_cast<char*>(lanePtr(r, unit, g, lane)) + kWordBytes, 0);
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PROTO_LL128_H_
