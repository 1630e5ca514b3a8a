/*************************************************************************
 * The merge math of DESIGN §1, once, for the CPU reference and the kernels.
 *
 *   l_s = sanitize(lse_s)       NaN and +inf -> -inf
 *   m   = max_s l_s             0 if every l_s is -inf
 *   w_s = base^(l_s - m)        exactly 0 when l_s = -inf
 *   out = sum_s (w_s / W) o_s   W = sum_k w_k; 0 when W = 0
 *   lse = m + log_base(W)       -inf when W = 0
 *
 * Sources are visited in order s = 0..n-1 and accumulated in fp32, so the
 * result is a pure function of the inputs. A source whose normalised weight
 * is 0 is skipped with a select, never multiplied: its payload may be NaN.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_MERGE_H_
#define NCCL_DCP_DEVICE_MERGE_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>
#include <stdint.h>

#include <cmath>
#include <cstring>

#include "types.h"

namespace nccl_dcp {

NCCL_DCP_HD float negInf() { return -INFINITY; }

// NaN and +inf carry no usable weight: they read as an empty source.
NCCL_DCP_HD float sanitizeLse(float l) {
  return (l != l || l == INFINITY) ? -INFINITY : l;
}

NCCL_DCP_HD float expBase(float x, LseBase base) {
  return base == LseBase::Two ? exp2f(x) : expf(x);
}

NCCL_DCP_HD float logBase(float x, LseBase base) {
  return base == LseBase::Two ? log2f(x) : logf(x);
}

// Normalised weights of n sources: weight[s] = w_s / W. Returns the merged
// LSE. Written for one thread: the kernels run it once per (row, head).
NCCL_DCP_HD float mergeWeights(const float* lse, int n, LseBase base, float* weight) {
  float m = -INFINITY;
  for (int s = 0; s < n; s++) m = fmaxf(m, sanitizeLse(lse[s]));
  if (m == -INFINITY) m = 0.f;
  float sum = 0.f;
  for (int s = 0; s < n; s++) {
    float w = expBase(sanitizeLse(lse[s]) - m, base);
    weight[s] = w;
    sum += w;
  }
  if (sum == 0.f) {
    for (int s = 0; s < n; s++) weight[s] = 0.f;
    return -INFINITY;
  }
  for (int s = 0; s < n; s++) weight[s] = weight[s] / sum;
  return m + logBase(sum, base);
}

#if defined(__CUDACC__)
// mergeWeights by a whole warp, in place on `weight` (shared memory, n <=
// 64 LSEs in, the normalised weights out; lane s takes sources s and s +
// 32): the max is a reduction (order-free), the powers and quotients one
// per lane, and the sum is the same sequential sum s = 0..n-1 in every
// lane (broadcast reads), so the weights and the merged LSE, returned in
// every lane, are mergeWeights' bit for bit -- in a few dozen instructions
// instead of one lane's few hundred.
__device__ __forceinline__ float mergeWeightsWarp(float* weight, int n, LseBase base, int lane) {
  float l[2], m = -INFINITY;
#pragma unroll
  for (int k = 0; k < 2; k++) {
    const int s = lane + 32 * k;
    l[k] = s < n ? sanitizeLse(weight[s]) : -INFINITY;
    m = fmaxf(m, l[k]);
  }
#pragma unroll
  for (int d = 16; d >= 1; d /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  if (m == -INFINITY) m = 0.f;
  __syncwarp();
#pragma unroll
  for (int k = 0; k < 2; k++)
    if (lane + 32 * k < n) weight[lane + 32 * k] = l[k] = expBase(l[k] - m, base);
  __syncwarp();
  float sum = 0.f;
  for (int s = 0; s < n; s++) sum += weight[s];
  __syncwarp();
#pragma unroll
  for (int k = 0; k < 2; k++)
    if (lane + 32 * k < n) weight[lane + 32 * k] = sum == 0.f ? 0.f : l[k] / sum;
  __syncwarp();
  return sum == 0.f ? -INFINITY : m + logBase(sum, base);
}
#endif

// acc += weight * x, unless the source carries no weight (x may be NaN then).
NCCL_DCP_HD float mergeAccumulate(float acc, float weight, float x) {
  return weight != 0.f ? fmaf(weight, x, acc) : acc;
}

// Row b of a rank's inputs is empty (its LSE reads as -inf, whatever it
// holds) when it lies in a sequence whose local KV length is 0, or outside
// [queryStartLoc[0], queryStartLoc[numSeqs]) (padding). numSeqs 0: never.
// Rows of sequence i are [queryStartLoc[i], queryStartLoc[i + 1]).
NCCL_DCP_HD bool rowIsEmpty(const int* seqLens, const int* queryStartLoc, int numSeqs, int b) {
  if (numSeqs == 0) return false;
  if (b < queryStartLoc[0] || b >= queryStartLoc[numSeqs]) return true;
  int lo = 0, hi = numSeqs - 1;  // the last sequence starting at or before b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (queryStartLoc[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  return seqLens[lo] <= 0;
}

// Element conversions, one definition for host and device.
template <typename T>
struct Element;

template <>
struct Element<float> {
  NCCL_DCP_HD static float toFloat(float v) { return v; }
  NCCL_DCP_HD static float fromFloat(float v) { return v; }
};

template <>
struct Element<__nv_bfloat16> {
  NCCL_DCP_HD static float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
  NCCL_DCP_HD static __nv_bfloat16 fromFloat(float v) { return __float2bfloat16_rn(v); }
};

template <>
struct Element<__half> {
  NCCL_DCP_HD static float toFloat(__half v) { return __half2float(v); }
  NCCL_DCP_HD static __half fromFloat(float v) { return __float2half_rn(v); }
};

// Partial LSE i of an array of `lseDtype` (ncclFloat32, ncclBfloat16 or
// ncclFloat16), as the merge reads it.
NCCL_DCP_HD float partialLseAt(const void* base, int64_t i, int lseDtype) {
  if (lseDtype == ncclBfloat16) return Element<__nv_bfloat16>::toFloat(((const __nv_bfloat16*)base)[i]);
  if (lseDtype == ncclFloat16) return Element<__half>::toFloat(((const __half*)base)[i]);
  return ((const float*)base)[i];
}

// An 8-byte word of payload holds kPerWord elements: the unit every
// transport moves and every merge step consumes.
template <typename T>
struct Word {
  static constexpr int kPerWord = 8 / sizeof(T);

  NCCL_DCP_HD static void unpack(uint64_t w, float* f) {
    T e[kPerWord];
    memcpy(e, &w, 8);
NCCL_DCP_UNROLL
    for (int i = 0; i < kPerWord; i++) f[i] = Element<T>::toFloat(e[i]);
  }

  NCCL_DCP_HD static uint64_t pack(const float* f) {
    T e[kPerWord];
NCCL_DCP_UNROLL
    for (int i = 0; i < kPerWord; i++) e[i] = Element<T>::fromFloat(f[i]);
    uint64_t w;
    memcpy(&w, e, 8);
    return w;
  }

  // A word of quiet NaNs: what a poisoned context writes instead of a merge.
  NCCL_DCP_HD static uint64_t nan() {
    float f[kPerWord];
NCCL_DCP_UNROLL
    for (int i = 0; i < kPerWord; i++) f[i] = NAN;
    return pack(f);
  }

  // acc[0..kPerWord) += weight * word, with the select of mergeAccumulate.
  NCCL_DCP_HD static void accumulate(float* acc, float weight, uint64_t w) {
    float f[kPerWord];
    unpack(w, f);
NCCL_DCP_UNROLL
    for (int i = 0; i < kPerWord; i++) acc[i] = mergeAccumulate(acc[i], weight, f[i]);
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_MERGE_H_
