/*************************************************************************
 * The payload words as the fused kernels' senders and receivers handle
 * them, per wire (Wire, types.h): WireWords<T, wire>. A data word is 8
 * bytes on the wire; what it stands for in the inputs and outputs differs:
 *
 *   Native  8 bytes of the input as they are (8 / sizeof(T) elements);
 *   Fp8E4m3 8 e4m3 elements (fp8_wire.h): 8 * sizeof(T) bytes of input
 *           (T bf16 or fp16: 16 bytes, one v4 load) and of output, and a
 *           scale per unit, which a sending warp computes (unitScale) and
 *           a receiving warp takes from the unit's LSE word.
 *
 * The line-protocol kernel is written once against this interface (its
 * native merge keeps its one select of Word<T>::accumulate). The element math is
 * fp8_wire.h's and merge.h's: the same functions as the CPU model, so the
 * kernels match it bit for bit.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_WIRE_H_
#define NCCL_DCP_DEVICE_WIRE_H_

#include "fp8_wire.h"
#include "merge.h"
#include "primitives.h"

namespace nccl_dcp {

template <typename T, Wire kWire>
struct WireWords;

template <typename T>
struct WireWords<T, Wire::Native> {
  using W = Word<T>;
  static constexpr int kPerWord = W::kPerWord;  // elements of a data word
  using Input = uint64_t;                       // one data word of the input (or own share)

  __device__ static Input loadInput(const char* head, int dw) { return loadInput8(head + (size_t)dw * kWordBytes); }
  // (The merge is Word<T>::accumulate of the own or the wire's word.)
  __device__ static void store(char* head, int dw, const float* acc) {
    *(uint64_t*)(head + (size_t)dw * kWordBytes) = W::pack(acc);
  }
  // nan: Word<T>::nan(), computed once by the caller.
  __device__ static void storeNaN(char* head, int dw, uint64_t nan) {
    *(uint64_t*)(head + (size_t)dw * kWordBytes) = nan;
  }
};

template <typename T>
struct WireWords<T, Wire::Fp8E4m3> {
  static_assert(sizeof(T) == 2, "fp8 on the wire narrows bf16 or fp16 (validate.cc)");
  using W = Word<T>;
  static constexpr int kPerWord = fp8::kPerWord;
  static constexpr int kInputBytes = kPerWord * (int)sizeof(T);  // 16: one v4 load
  using Input = uint4;
  struct Scale {
    float value;
  };

  __device__ static Input loadInput(const char* head, int dw) { return loadInput16(head + (size_t)dw * kInputBytes); }

  // The elements of an input word, as the model reads them.
  __device__ static void unpack(const Input& x, float* f) {
    W::unpack((uint64_t)x.x | (uint64_t)x.y << 32, f);
    W::unpack((uint64_t)x.z | (uint64_t)x.w << 32, f + W::kPerWord);
  }
  // fp8::amaxTerm folded over an input word.
  __device__ static float amaxOf(const Input& x) {
    float f[kPerWord], a = 0.f;
    unpack(x, f);
#pragma unroll
    for (int i = 0; i < kPerWord; i++) a = fmaxf(a, fp8::amaxTerm(f[i]));
    return a;
  }
  __device__ static uint64_t encode(const Input& x, float scale) {
    float f[kPerWord];
    unpack(x, f);
    return fp8::packWord(f, scale);
  }

  // The unit's scale, by the whole sending warp (every lane calls it):
  // `held` is this lane's amax over the words it has loaded; when they are
  // not the whole unit (`holdsAll` false: more groups than a batch) the
  // lanes fold every word of the unit at `head` (dataWords of them) too. A
  // max is order-free: the warp's equals the model's loop (fp8_wire.h),
  // and amax >= 0 orders as its bits do.
  __device__ static float unitScale(const char* head, int dataWords, float held, bool holdsAll, int lane) {
    if (!holdsAll)
      for (int dw = lane; dw < dataWords; dw += 32) held = fmaxf(held, amaxOf(loadInput(head, dw)));
    const uint32_t amax = __reduce_max_sync(kFullMask, __float_as_uint(held));
    return fp8::scaleFromAmax(__uint_as_float(amax));
  }

  // The scale of the unit a line belongs to: word 0's high half, in lane 0.
  template <class Transport, class Line>
  __device__ static Scale scaleOf(const Line& l) {
    return {__uint_as_float(__shfl_sync(kFullMask, Transport::scaleBitsOf(l), 0))};
  }
  __device__ static void accumulate(float* acc, float weight, bool own, const Input& mine, uint64_t wire,
                                    Scale scale) {
    float f[kPerWord];
    if (own) unpack(mine, f);
    else fp8::unpackWord(wire, scale.value, f);
#pragma unroll
    for (int i = 0; i < kPerWord; i++) acc[i] = mergeAccumulate(acc[i], weight, f[i]);
  }
  __device__ static uint4 packOut(const float* acc) {
    const uint64_t lo = W::pack(acc), hi = W::pack(acc + W::kPerWord);
    return make_uint4((uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32));
  }
  __device__ static void store(char* head, int dw, const float* acc) {
    store16(head + (size_t)dw * kInputBytes, packOut(acc));
  }
  __device__ static void storeNaN(char* head, int dw, uint64_t nan) {
    store16(head + (size_t)dw * kInputBytes, make_uint4((uint32_t)nan, (uint32_t)(nan >> 32), (uint32_t)nan,
                                                        (uint32_t)(nan >> 32)));
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_WIRE_H_
