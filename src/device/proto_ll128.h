/*************************************************************************
 * LL128: a unit's payload (word 0 = LSE, then the head's data words) cut
 * into 128-byte lines of 15 data words + 1 flag word. Lane i of each 8-lane
 * group owns 16 bytes of one line: words 2i and 2i+1, except the flag lane
 * (i = 7), whose second word is the flag. A warp moves 4 lines per
 * instruction. A line is trusted once its flag reads the round's value:
 * NCCL's premise that a warp's 128-byte store becomes visible as a whole,
 * which holds over NVLink (and within one GPU), not over PCIe.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PROTO_LL128_H_
#define NCCL_DCP_DEVICE_PROTO_LL128_H_

#include "primitives.h"

// On sm_90 NCCL re-reads a slice once all its flags are seen rather than
// trusting the data loaded together with the flag; 0 builds without it.
#ifndef NCCL_DCP_LL128_REREAD
#define NCCL_DCP_LL128_REREAD 1
#endif

namespace nccl_dcp {

struct Ll128Transport {
  static constexpr Proto kProto = Proto::LL128;

  __device__ static int lineOf(int g, int lane) { return g * ll128::kLinesPerWarp + lane / ll128::kLanesPerLine; }
  __device__ static int slotOf(int lane) { return lane % ll128::kLanesPerLine; }

  // Payload word index of the lane's k-th word in group g (LSE = word 0).
  __device__ static int payloadWord(int g, int lane, int k) {
    return lineOf(g, lane) * ll128::kDataWordsPerLine + 2 * slotOf(lane) + k;
  }

  // Data word (8 bytes of the head's D elements) the lane holds as its k-th
  // word in group g, or -1.
  __device__ static int dataWord(const Region& r, int g, int lane, int k) {
    if (lineOf(g, lane) >= r.unitLines) return -1;
    if (k == 1 && slotOf(lane) == ll128::kFlagLane) return -1;
    int p = payloadWord(g, lane, k);
    return (p >= 1 && p <= r.dataWords) ? p - 1 : -1;
  }

  __device__ static uint64_t payload(const Region& r, const char* src, float lse, int p) {
    if (p == 0) return (uint64_t)__float_as_uint(lse);
    if (p <= r.dataWords) return loadInput8(src + (size_t)(p - 1) * kWordBytes);
    return 0;  // padding of the last line
  }

  __device__ static void send(const Region& r, const char* src, float lse, char* unit, uint32_t flag,
                              int lane) {
    const int i = slotOf(lane);
    for (int g = 0; g < r.groups; g++) {
      const int line = lineOf(g, lane);
      if (line >= r.unitLines) break;
      const int p = payloadWord(g, lane, 0);
      uint64_t v0 = payload(r, src, lse, p);
      uint64_t v1 = i == ll128::kFlagLane ? (uint64_t)flag : payload(r, src, lse, p + 1);
      storeVolatile16(unit + (size_t)line * ll128::kLineBytes + i * ll128::kLaneBytes, v0, v1);
    }
  }

  // Polls group g until every line's flag is the round's, then (Hopper
  // rule) re-reads the data. Returns false if the wait gave up.
  __device__ static bool poll(const Region& r, const char* unit, int g, uint32_t flag, int lane,
                              Waiter& w, int peer, uint64_t& v0, uint64_t& v1) {
    const int line = lineOf(g, lane);
    const bool valid = line < r.unitLines;
    const int i = slotOf(lane);
    const char* p = unit + (size_t)line * ll128::kLineBytes + i * ll128::kLaneBytes;
    v0 = v1 = 0;
    while (true) {
      if (valid) loadVolatile16(p, v0, v1);
      const bool ready = !valid || i != ll128::kFlagLane || v1 == (uint64_t)flag;
      if (__all_sync(kFullMask, ready)) break;
      if (!w.keepWaiting(peer)) return false;
    }
#if NCCL_DCP_LL128_REREAD
    if (valid) {
      uint64_t f;
      loadVolatile16(p, v0, f);
      if (i != ll128::kFlagLane) v1 = f;
    }
#endif
    return true;
  }

  __device__ static bool waitLse(const Region& r, const char* unit, uint32_t flag, int lane, Waiter& w,
                                 int peer, float* lse) {
    uint64_t v0, v1;
    if (!poll(r, unit, 0, flag, lane, w, peer, v0, v1)) return false;
    *lse = __uint_as_float(__shfl_sync(kFullMask, (uint32_t)v0, 0));
    return true;
  }

  // Takes group g: poll, then hand the flag lines back to zero (this warp
  // is their only reader).
  __device__ static bool recvGroup(const Region& r, char* unit, int g, uint32_t flag, int lane, Waiter& w,
                                   int peer, uint64_t word[2]) {
    if (!poll(r, unit, g, flag, lane, w, peer, word[0], word[1])) return false;
    const int line = lineOf(g, lane);
    if (line < r.unitLines && slotOf(lane) == ll128::kFlagLane)
      storeVolatile8(unit + (size_t)line * ll128::kLineBytes + ll128::kLineBytes - kWordBytes, 0);
    return true;
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PROTO_LL128_H_
