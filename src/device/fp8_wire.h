/*************************************************************************
 * fp8 (e4m3) on the wire (issue 28; DESIGN §15): the unit format, once, for
 * the CPU model (reference.cc) and the kernels. Opt-in; the merge stays
 * fp32 (merge.h), only what crosses the link is narrowed, and a rank's own
 * share never crosses it (it stays exact).
 *
 * A unit -- what one source sends for one (row, head) -- is its D elements
 * as e4m3 (one byte each) and one fp32 scale computed by the sender:
 *
 *   amax  = max |x_d| over the unit's finite elements
 *   scale = amax / 448 (448: e4m3's largest finite); 1 when that is 0 (a
 *           unit of zeros, or amax below ~6e-43 where the quotient
 *           underflows): zeros travel as zeros, no 0 / 0
 *   q_d   = e4m3(x_d / scale), round to nearest even, saturating to +-448
 *           (IEEE division: kernels must not use fast-math division, or
 *           they differ from the model by a rounding)
 *   x'_d  = float(q_d) * scale            (the receiver, before the merge)
 *
 * Non-finite elements: NaN and +-inf encode as the e4m3 NaN (e4m3 has no
 * inf) and decode as NaN, element by element; they take no part in amax,
 * so the unit's other elements keep their precision. The encoder never
 * reads the LSE: a unit whose LSE is -inf (an empty shard, padding) is
 * encoded like any other, whatever it holds, and the merge skips it with
 * its select (merge.h), so what it decodes to never matters.
 *
 * Words: an 8-byte payload word holds 8 e4m3 elements (element 8k + i in
 * byte i of data word k, little-endian as Word<T>), so a unit has
 * Dw = D / 8 data words: D % 8 == 0, which the row rule already gives
 * bf16 and fp16 (D * size % 16) but not fp32; SIMPLE's 16-byte lanes want
 * D % 16 == 0 (a rule for the config check to add, or a padded tail).
 * The scale rides in the free half of the LSE word:
 *
 *   payload word 0 = {lse fp32 (low 32 bits), scale fp32 (high 32 bits)}
 *                    today {lse, 0}: the LL line's second data32, LL128's
 *                    lane-0 word's high half
 *
 * Per unit at D 512 (bytes; today's layout.h geometry, 8-byte words):
 *
 *   protocol  wire     data words  groups         unit bytes  of them payload
 *   LL128     bf16     128         3 (59,59,10)   1152        1024
 *   LL128     e4m3      64         2 (59,5)        640         512
 *   LL        bf16     128         5 (31x4,4)     2128        1024
 *   LL        e4m3      64         3 (31,31,2)    1072         512
 *   SIMPLE    bf16     data D*2 + lse 4           1028        1024
 *   SIMPLE    e4m3     data D   + {lse, scale} 8   520         512
 *
 * (every line-protocol group repeats word 0, so every group carries the
 * scale too; SIMPLE's LSE array becomes an array of 8-byte {lse, scale}
 * pairs, one 8-byte load per receiving lane instead of 4 bytes.)
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_FP8_WIRE_H_
#define NCCL_DCP_DEVICE_FP8_WIRE_H_

#include <cuda_fp8.h>
#include <stdint.h>

#include <cmath>
#include <cstring>

#include "merge.h"
#include "types.h"

namespace nccl_dcp {
namespace fp8 {

constexpr float kE4m3Max = 448.f;        // largest finite e4m3
constexpr int kPerWord = 8;              // e4m3 elements of an 8-byte word
constexpr uint8_t kNaN = 0x7f;           // e4m3 NaN (S.1111.111)

// What a sender folds into amax for element x: |x|, 0 when not finite.
// A max is order-free, so a warp's shuffle reduction equals this loop.
NCCL_DCP_HD bool finite(float x) { return fabsf(x) < INFINITY; }  // false for NaN
NCCL_DCP_HD float amaxTerm(float x) { return finite(x) ? fabsf(x) : 0.f; }

// The unit's scale from its amax (amax >= 0, finite).
NCCL_DCP_HD float scaleFromAmax(float amax) {
  const float s = amax / kE4m3Max;
  return s > 0.f ? s : 1.f;
}

// One element: e4m3 bits of x / scale (scale > 0, finite).
NCCL_DCP_HD uint8_t encode(float x, float scale) {
  if (!finite(x)) return kNaN;
  return (uint8_t)__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
}

// One element back: float(q) * scale (NaN for the NaN codes).
NCCL_DCP_HD float decode(uint8_t q, float scale) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q, __NV_E4M3);
  return __half2float(__half(h)) * scale;
}

// A unit of n elements of T: writes q[0..n), returns the scale.
template <typename T>
NCCL_DCP_HD float encodeUnit(const T* x, int n, uint8_t* q) {
  float amax = 0.f;
  for (int i = 0; i < n; i++) amax = fmaxf(amax, amaxTerm(Element<T>::toFloat(x[i])));
  const float scale = scaleFromAmax(amax);
  for (int i = 0; i < n; i++) q[i] = encode(Element<T>::toFloat(x[i]), scale);
  return scale;
}

NCCL_DCP_HD void decodeUnit(const uint8_t* q, int n, float scale, float* x) {
  for (int i = 0; i < n; i++) x[i] = decode(q[i], scale);
}

// An 8-byte data word of the 8 elements f (the senders; element i in byte i).
NCCL_DCP_HD uint64_t packWord(const float* f, float scale) {
  uint64_t w = 0;
NCCL_DCP_UNROLL
  for (int i = 0; i < kPerWord; i++) w |= (uint64_t)encode(f[i], scale) << (8 * i);
  return w;
}

// An 8-byte data word of 8 elements, as the receivers consume it.
NCCL_DCP_HD void unpackWord(uint64_t w, float scale, float* f) {
NCCL_DCP_UNROLL
  for (int i = 0; i < kPerWord; i++) f[i] = decode((uint8_t)(w >> (8 * i)), scale);
}

// Payload word 0 of a unit (every line-protocol group): {lse, scale}.
NCCL_DCP_HD uint64_t packLseWord(float lse, float scale) {
  uint32_t l, s;
  memcpy(&l, &lse, 4);
  memcpy(&s, &scale, 4);
  return (uint64_t)l | (uint64_t)s << 32;
}
NCCL_DCP_HD float lseOfWord(uint64_t w) {
  const uint32_t l = (uint32_t)w;
  float f;
  memcpy(&f, &l, 4);
  return f;
}
NCCL_DCP_HD float scaleOfWord(uint64_t w) {
  const uint32_t s = (uint32_t)(w >> 32);
  float f;
  memcpy(&f, &s, 4);
  return f;
}

}  // namespace fp8
}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_FP8_WIRE_H_
