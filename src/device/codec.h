/*************************************************************************
 * The codec layer: what a unit -- one source's partial of one (row, head)
 * -- is on the link, for every protocol and the fallback (DESIGN §15).
 * One header owns it; the CPU model (reference.cc) and the kernels call the
 * same functions, so they agree bit for bit.
 *
 *   Native   the D elements as the inputs hold them; LSE word {lse, 0}.
 *   Fp8E4m3  D e4m3 bytes and one fp32 scale, in the unit's LSE word
 *            {lse fp32 (low half), scale fp32 (high half)}.
 *
 * The fp8 unit, one format everywhere: the line protocols carry the LSE
 * word as payload word 0 of every group, SIMPLE in its LSE array (8-byte
 * words), the fallback in its LSE buffer (8-byte words) beside D-byte
 * units. A rank's own share never crosses the link and stays exact, and so
 * do the LSEs (outLse is the native one).
 *
 * fp8 model, per unit of D elements x_d:
 *
 *   amax    = max |x_d| over the finite x_d (0 if none)
 *   scale   = amax / 448 and inverse = 448 / amax (fp32, IEEE division,
 *             once per unit); both 1 when amax < 2^-100 (zeros travel as
 *             zeros: no 0 / 0, no infinite inverse)
 *   q_d     = e4m3_rn_satfinite(x_d * inverse)   (448 is e4m3's largest
 *             finite: amax lands on it, nothing finite saturates further)
 *   x'_d    = q_d * scale
 *
 * The divisions are per unit; an element costs one multiply and half a
 * conversion (the hardware's e4m3x2), where 0.4 divided every element
 * (IEEE division, ~20 instructions: what issue 39 measured). A
 * power-of-two scale (exact products, no division at all) was tried and
 * measured less accurate on units with outlier channels -- their largest
 * element no longer lands exactly on 448 (docs/design.md §15) -- so the
 * scale stays amax / 448. NaN and +-inf elements encode as the e4m3 NaN
 * (e4m3 has no inf) and decode as NaN; they take no part in amax. The
 * encoder never reads the LSE: a unit of an empty shard is encoded like
 * any other and the merge skips it with its select (merge.h).
 *
 * The merge folds the scale into the source's weight: acc += (w * scale) *
 * q, one fma per element as for native words (merge.h's mergeAccumulate
 * of the weight w * scale): that is the model's definition too.
 *
 * Words: a data word is 8 bytes on the link. Native: 8 / sizeof(T)
 * elements; fp8: 8 e4m3 (element 8k + i in byte i of word k), read from
 * 16 bytes of bf16 / fp16 input. Per unit at D 512:
 *
 *   protocol  wire     data words  groups         unit bytes  of them payload
 *   LL128     bf16     128         3 (59,59,10)   1152        1024
 *   LL128     e4m3      64         2 (59,5)        640         512
 *   LL        bf16     128         5 (31x4,4)     2128        1024
 *   LL        e4m3      64         3 (31,31,2)    1072         512
 *   SIMPLE    bf16     data D*2 + lse 4           1028        1024
 *   SIMPLE    e4m3     data D   + {lse, scale} 8   520         512
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_CODEC_H_
#define NCCL_DCP_DEVICE_CODEC_H_

#include <cuda_fp8.h>
#include <stdint.h>

#include <cmath>
#include <cstring>

#include "merge.h"
#include "primitives.h"
#include "types.h"

namespace nccl_dcp {
namespace fp8 {

constexpr float kE4m3Max = 448.f;  // largest finite e4m3
constexpr int kPerWord = 8;        // e4m3 elements of an 8-byte word
constexpr uint8_t kNaN = 0x7f;     // e4m3 NaN (S.1111.111)

NCCL_DCP_HD bool finite(float x) { return fabsf(x) < INFINITY; }  // false for NaN
// What a sender folds into amax for element x: |x|, 0 when not finite.
// A max is order-free, so a warp's reduction equals the model's loop.
NCCL_DCP_HD float amaxTerm(float x) { return finite(x) ? fabsf(x) : 0.f; }

NCCL_DCP_HD uint32_t floatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
NCCL_DCP_HD float bitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// Below this amax a unit travels unscaled (scale and inverse 1): 448 / amax
// stays finite above it.
constexpr float kMinScaledAmax = 0x1p-100f;

// The unit's scale and its inverse from amax (finite, >= 0). Below
// kMinScaledAmax both divide 448 by itself (1, exactly): a select, not a
// branch around each division.
NCCL_DCP_HD float scaledAmax(float amax) { return amax >= kMinScaledAmax ? amax : kE4m3Max; }
NCCL_DCP_HD float scaleFromAmax(float amax) { return scaledAmax(amax) / kE4m3Max; }
NCCL_DCP_HD float inverseFromAmax(float amax) { return kE4m3Max / scaledAmax(amax); }

// One element: e4m3 bits of x * inverse (inverseFromAmax).
NCCL_DCP_HD uint8_t encode(float x, float inverse) {
  if (!finite(x)) return kNaN;
  return (uint8_t)__nv_cvt_float_to_fp8(x * inverse, __NV_SATFINITE, __NV_E4M3);
}

// One element back as the merge takes it: float(q) (NaN for the NaN codes);
// the scale is applied through the weight (see the top).
NCCL_DCP_HD float decodeUnscaled(uint8_t q) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q, __NV_E4M3);
  return __half2float(__half(h));
}
NCCL_DCP_HD float decode(uint8_t q, float scale) { return decodeUnscaled(q) * scale; }

// A unit of n elements of T: writes q[0..n), returns the scale.
template <typename T>
NCCL_DCP_HD float encodeUnit(const T* x, int n, uint8_t* q) {
  float amax = 0.f;
  for (int i = 0; i < n; i++) amax = fmaxf(amax, amaxTerm(Element<T>::toFloat(x[i])));
  const float inverse = inverseFromAmax(amax);
  for (int i = 0; i < n; i++) q[i] = encode(Element<T>::toFloat(x[i]), inverse);
  return scaleFromAmax(amax);
}

// The LSE word of a unit: {lse, scale}.
NCCL_DCP_HD uint64_t packLseWord(float lse, float scale) {
  return (uint64_t)floatBits(lse) | (uint64_t)floatBits(scale) << 32;
}
NCCL_DCP_HD float lseOfWord(uint64_t w) { return bitsFloat((uint32_t)w); }
NCCL_DCP_HD float scaleOfWord(uint64_t w) { return bitsFloat((uint32_t)(w >> 32)); }

}  // namespace fp8

// The model's merge step of one element of a wire unit: the source's
// weight w, its unit's scale, the element as it crossed the link.
NCCL_DCP_HD float mergeWireElement(float acc, float w, float scale, uint8_t q) {
  return mergeAccumulate(acc, w * scale, fp8::decodeUnscaled(q));
}

#if defined(__CUDACC__)

// Codec<T, kWire>: a wire's words for the fused kernels and the fallback.
// Every codec provides:
//   Element           T, the element type of the inputs and outputs
//   kScaled           a unit carries a scale (computed by its sender)
//   kPerWord          elements of T a data word stands for
//   kInputBytes       bytes of input (and of out) a data word stands for
//   Input             what a sender loads for one data word
//   Scale             a unit's scale (empty for native)
//   loadInput(head, dw)        data word dw's input of the head at `head`
//   amaxOf(x, held)            a lane's running amax folded with an input word
//   unitScale(...)             the unit's scale, by the whole sending warp
//   encode(x, scale)           the data word that crosses the link
//   lseWord(lse, scale)        the unit's LSE word
//   scaleOfLseWord(w)          the scale a receiver takes from it
//   accumulate(acc, w, scale, wire)  acc += merge of a data word from the link
//   accumulateOwn(acc, w, x)         acc += merge of the rank's own input word
//   store(out, dw, acc)        the merged word into out
//   storeNaN(out, dw)          NaN over it (a poisoned call)
// and for SIMPLE's 16-byte vectors of the link (two data words; of the
// own share and of out, kVectorBytes = 2 * kInputBytes):
//   OwnVector, loadOwnVector(p)          the own share's input of a vector
//   accumulateOwnVector(acc, w, x)       acc[2][kPerWord] += its merge
//   accumulateVector(acc, w, scale, v)   acc += the merge of a link vector
//   storeVector(out, acc)                the merged vector into out
template <typename T, Wire kWire>
struct Codec;

template <typename T>
struct Codec<T, Wire::Native> {
  using Element = T;
  static constexpr bool kScaled = false;
  using W = Word<T>;
  static constexpr int kPerWord = W::kPerWord;
  static constexpr int kInputBytes = kWordBytes;
  using Input = uint64_t;
  struct Scale {};

  __device__ __forceinline__ static Input loadInput(const char* head, int dw) { return loadInput8(head + (size_t)dw * kInputBytes); }
  __device__ __forceinline__ static uint32_t amaxOf(const Input&, uint32_t held = 0) { return held; }
  __device__ __forceinline__ static Scale unitScale(const char*, int, uint32_t, bool, int) { return {}; }
  __device__ __forceinline__ static uint64_t encode(const Input& x, Scale) { return x; }
  __device__ __forceinline__ static uint64_t lseWord(float lse, Scale) { return (uint64_t)__float_as_uint(lse); }
  __device__ __forceinline__ static Scale scaleOfLseWord(uint64_t) { return {}; }
  // merge.h's select of a source of no weight, once for the word.
  __device__ __forceinline__ static void accumulate(float* acc, float w, Scale, uint64_t wire) { accumulateOwn(acc, w, wire); }
  __device__ __forceinline__ static void accumulateOwn(float* acc, float w, const Input& x) {
    if (w == 0.f) return;
    float f[kPerWord];
    W::unpack(x, f);
#pragma unroll
    for (int i = 0; i < kPerWord; i++) acc[i] = fmaf(w, f[i], acc[i]);
  }
  __device__ __forceinline__ static void store(char* head, int dw, const float* acc) {
    *(uint64_t*)(head + (size_t)dw * kInputBytes) = W::pack(acc);
  }
  __device__ __forceinline__ static void storeNaN(char* head, int dw) { *(uint64_t*)(head + (size_t)dw * kInputBytes) = W::nan(); }

  static constexpr int kVectorBytes = 2 * kInputBytes;
  using OwnVector = uint4;
  __device__ __forceinline__ static OwnVector loadOwnVector(const char* p) { return loadInput16(p); }
  __device__ __forceinline__ static void accumulateOwnVector(float (*acc)[kPerWord], float w, const OwnVector& x) {
    accumulateVector(acc, w, Scale{}, x);
  }
  // (The same select-per-element merge as mergeAccumulate: SIMPLE's lanes
  // hold units of different weights, so no branch on w.)
  __device__ __forceinline__ static void accumulateVector(float (*acc)[kPerWord], float w, Scale, const uint4& v) {
    W::accumulate(acc[0], w, (uint64_t)v.x | (uint64_t)v.y << 32);
    W::accumulate(acc[1], w, (uint64_t)v.z | (uint64_t)v.w << 32);
  }
  __device__ __forceinline__ static void storeVector(char* out, float (*acc)[kPerWord]) { store16(out, packVector(acc)); }
  __device__ __forceinline__ static uint4 packVector(float (*acc)[kPerWord]) {
    const uint64_t lo = W::pack(acc[0]), hi = W::pack(acc[1]);
    return make_uint4((uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32));
  }
};

// fp8's amax on the packed input: |x| as 16-bit bit patterns (sign
// cleared), whose unsigned order is the order of the magnitudes, max.u16x2
// over pairs -- one instruction per element. A NaN or an infinity shows as
// bits at or above the element type's infinity: that unit takes the slow,
// exact path (amax over the finite elements, non-finite codes fixed up).
template <typename T>
struct MagnitudeBits;
template <>
struct MagnitudeBits<__nv_bfloat16> {
  static constexpr uint32_t kInf = 0x7f80;
  __device__ __forceinline__ static float toFloat(uint32_t m) { return __uint_as_float(m << 16); }
};
template <>
struct MagnitudeBits<__half> {
  static constexpr uint32_t kInf = 0x7c00;
  __device__ __forceinline__ static float toFloat(uint32_t m) { return __half2float(__ushort_as_half((unsigned short)m)); }
};
__device__ __forceinline__ uint32_t maxU16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

template <typename T>
struct Codec<T, Wire::Fp8E4m3> {
  static_assert(sizeof(T) == 2, "fp8 on the wire narrows bf16 or fp16 (validate.cc)");
  using Element = T;
  static constexpr bool kScaled = true;
  using W = Word<T>;
  using Bits = MagnitudeBits<T>;
  static constexpr int kPerWord = fp8::kPerWord;
  static constexpr int kInputBytes = kPerWord * (int)sizeof(T);  // 16: one v4 load
  using Input = uint4;
  struct Scale {
    float value;
    float inverse;   // sender only: what its elements are multiplied by
    bool nonFinite;  // sender only: the unit holds a NaN or an infinity
  };

  __device__ __forceinline__ static Input loadInput(const char* head, int dw) { return loadInput16(head + (size_t)dw * kInputBytes); }

  __device__ __forceinline__ static void unpack(const Input& x, float* f) {
    W::unpack((uint64_t)x.x | (uint64_t)x.y << 32, f);
    W::unpack((uint64_t)x.z | (uint64_t)x.w << 32, f + W::kPerWord);
  }
  // The lane's running magnitude max (u16x2) folded with an input word.
  __device__ __forceinline__ static uint32_t amaxOf(const Input& x, uint32_t held = 0) {
    held = maxU16x2(held, x.x & 0x7fff7fffu);
    held = maxU16x2(held, x.y & 0x7fff7fffu);
    held = maxU16x2(held, x.z & 0x7fff7fffu);
    return maxU16x2(held, x.w & 0x7fff7fffu);
  }
  // Per 32-bit pair of elements: magnitude + (0x8000 - kInf) carries into
  // bit 15 of its half exactly when the element is not finite (at or above
  // kInf), and never across halves.
  __device__ __forceinline__ static uint32_t nonFiniteBits(uint32_t pair) {
    return ((pair & 0x7fff7fffu) + (0x8000u - Bits::kInf) * 0x10001u) & 0x80008000u;
  }
  // amaxOf over the finite elements only (fp8::amaxTerm; the slow path):
  // a non-finite element's magnitude counts as 0.
  __device__ __forceinline__ static uint32_t finiteAmaxOf(const Input& x, uint32_t held) {
    const uint32_t pairs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int k = 0; k < 4; k++)
      held = maxU16x2(held, pairs[k] & 0x7fff7fffu & ~((nonFiniteBits(pairs[k]) >> 15) * 0xffffu));
    return held;
  }
  __device__ __forceinline__ static uint32_t warpMagnitudeMax(uint32_t held) {
    return __reduce_max_sync(kFullMask, max(held & 0xffffu, held >> 16));
  }

  // The unit's scale, by the whole sending warp (every lane calls it):
  // `held` is this lane's amaxOf over the words it has loaded; when they
  // are not the whole unit (`holdsAll` false) the lanes fold every word of
  // the unit at `head` (dataWords of them) too. A max is order-free: the
  // warp's equals the model's loop.
  __device__ __forceinline__ static Scale unitScale(const char* head, int dataWords, uint32_t held, bool holdsAll, int lane) {
    if (!holdsAll)
      for (int dw = lane; dw < dataWords; dw += 32) held = amaxOf(loadInput(head, dw), held);
    uint32_t m = warpMagnitudeMax(held);
    const bool nonFinite = m >= Bits::kInf;
    if (nonFinite) {  // a NaN or an infinity in the unit: the amax of its finite elements
      held = 0;
#pragma unroll 1  // rare: kept small
      for (int dw = lane; dw < dataWords; dw += 32) held = finiteAmaxOf(loadInput(head, dw), held);
      m = warpMagnitudeMax(held);
    }
    const float amax = Bits::toFloat(m);
    return {fp8::scaleFromAmax(amax), fp8::inverseFromAmax(amax), nonFinite};
  }

  // Two elements (already times 1 / scale) as the hardware's e4m3x2,
  // round to nearest even, satfinite: what __nv_cvt_float_to_fp8 gives a
  // finite element.
  __device__ __forceinline__ static uint32_t cvtPair(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(r) : "f"(lo), "f"(hi));
    return r;
  }
  __device__ __forceinline__ static uint64_t encode(const Input& x, Scale scale) {
    const float inverse = scale.inverse;
    float f[kPerWord];
    unpack(x, f);
    uint64_t w = 0;
#pragma unroll
    for (int i = 0; i < kPerWord; i += 2) w |= (uint64_t)cvtPair(f[i] * inverse, f[i + 1] * inverse) << (8 * i);
    if (scale.nonFinite) w = markNonFinite(x, w);  // rare
    return w;
  }
  // The model's code for NaN and +-inf (fp8::kNaN) in the bytes of the
  // elements that are not finite, branch-free: it is inlined at every
  // encode site, so it stays a few instructions (with cold caches a small
  // call's time follows the kernel's size: docs/perf-history.md).
  __device__ __forceinline__ static uint64_t markNonFinite(const Input& x, uint64_t w) {
    // Byte i: bit 7 set when element i is not finite (the high bytes of the halves).
    const uint32_t lo = __byte_perm(nonFiniteBits(x.x), nonFiniteBits(x.y), 0x7531);
    const uint32_t hi = __byte_perm(nonFiniteBits(x.z), nonFiniteBits(x.w), 0x7531);
    const uint64_t mask = ((((uint64_t)hi << 32) | lo) >> 7) * 0xffu;  // 0xff per such byte
    return (w & ~mask) | (0x0101010101010101ull * fp8::kNaN & mask);
  }
  __device__ __forceinline__ static uint64_t lseWord(float lse, Scale scale) { return fp8::packLseWord(lse, scale.value); }
  __device__ __forceinline__ static Scale scaleOfLseWord(uint64_t w) { return {fp8::scaleOfWord(w), 1.f, false}; }

  // Two e4m3 elements as two floats (exact: e4m3 is a subset of fp16).
  __device__ __forceinline__ static float2 decodePair(uint32_t q) {
    uint32_t h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"((unsigned short)q));
    return __half22float2(*reinterpret_cast<const __half2*>(&h));
  }
  // mergeWireElement per element: the weight times the scale once, and
  // a source whose product is 0 skipped once for the word.
  __device__ __forceinline__ static void accumulate(float* acc, float w, Scale scale, uint64_t wire) {
    const float ws = w * scale.value;
    if (ws == 0.f) return;
#pragma unroll
    for (int i = 0; i < kPerWord; i += 2) {
      const float2 f = decodePair((uint32_t)(wire >> (8 * i)));
      acc[i] = fmaf(ws, f.x, acc[i]);
      acc[i + 1] = fmaf(ws, f.y, acc[i + 1]);
    }
  }
  __device__ __forceinline__ static void accumulateOwn(float* acc, float w, const Input& x) {
    if (w == 0.f) return;
    float f[kPerWord];
    unpack(x, f);
#pragma unroll
    for (int i = 0; i < kPerWord; i++) acc[i] = fmaf(w, f[i], acc[i]);
  }
  __device__ __forceinline__ static uint4 packOut(const float* acc) {
    const uint64_t lo = W::pack(acc), hi = W::pack(acc + W::kPerWord);
    return make_uint4((uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32));
  }
  __device__ __forceinline__ static void store(char* head, int dw, const float* acc) {
    store16(head + (size_t)dw * kInputBytes, packOut(acc));
  }
  __device__ __forceinline__ static void storeNaN(char* head, int dw) {
    const uint64_t nan = W::nan();
    store16(head + (size_t)dw * kInputBytes,
            make_uint4((uint32_t)nan, (uint32_t)(nan >> 32), (uint32_t)nan, (uint32_t)(nan >> 32)));
  }

  static constexpr int kVectorBytes = 2 * kInputBytes;
  struct OwnVector {
    uint4 lo, hi;
  };
  __device__ __forceinline__ static OwnVector loadOwnVector(const char* p) { return {loadInput16(p), loadInput16(p + 16)}; }
  __device__ __forceinline__ static void accumulateOwnVector(float (*acc)[kPerWord], float w, const OwnVector& x) {
    float f[kPerWord];
    unpack(x.lo, f);
#pragma unroll
    for (int i = 0; i < kPerWord; i++) acc[0][i] = mergeAccumulate(acc[0][i], w, f[i]);
    unpack(x.hi, f);
#pragma unroll
    for (int i = 0; i < kPerWord; i++) acc[1][i] = mergeAccumulate(acc[1][i], w, f[i]);
  }
  __device__ __forceinline__ static void accumulateVector(float (*acc)[kPerWord], float w, Scale scale, const uint4& v) {
    const float ws = w * scale.value;
    const uint32_t q[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 2; k++)
#pragma unroll
      for (int i = 0; i < kPerWord; i += 2) {
        const uint32_t pair = q[2 * k + i / 4] >> (8 * (i % 4));
        const float2 f = decodePair(pair);
        acc[k][i] = mergeAccumulate(acc[k][i], ws, f.x);
        acc[k][i + 1] = mergeAccumulate(acc[k][i + 1], ws, f.y);
      }
  }
  __device__ __forceinline__ static void storeVector(char* out, float (*acc)[kPerWord]) {
    store16(out, packOut(acc[0]));
    store16(out + 16, packOut(acc[1]));
  }
};

#endif  // __CUDACC__

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_CODEC_H_
