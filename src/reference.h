/*************************************************************************
 * CPU reference of the whole collective: every rank's inputs -> every
 * rank's outputs, strided views included, on the merge math of
 * device/merge.h. Used by the tests and by the perf binary's -c.
 ************************************************************************/
#ifndef NCCL_DCP_REFERENCE_H_
#define NCCL_DCP_REFERENCE_H_

#include <string>

#include "validate.h"

namespace nccl_dcp {

// ranks[r]: rank r's buffers in host memory (the empty-shard arrays too).
// Writes every rank's out and, where not null, outLse, for batch rows, in
// cfg's scatter mode; shape: the call's (resolveCallArgs; TOKEN's split in
// its host form), NULL: no additions (the even split). wire Fp8E4m3: the
// model of fp8 on the wire -- every remote source's unit is encoded and
// decoded (codec.h) before the same fp32 merge; a rank's own share and
// every LSE stay exact, so outLse is the same as Native's. A rank whose
// out is null is skipped (its inputs are still read). A large call
// computes each rank's outputs on a thread of its own.
void referenceA2aLseReduce(const Config& cfg, int nRanks, int batch, const Strides& strides,
                           const CallBuffers* ranks, const CallShape* shape = nullptr, Wire wire = Wire::Native);

// Compares every rank's outputs (out, and outLse where want has it) with
// the reference's: within one unit of rounding of dtype, LSEs within 1e-5
// relative, -inf exactly, NaN never. A rank whose got.out is null is not
// compared. Returns the mismatch count; *first (if given) describes the
// first one.
size_t countMismatches(const Config& cfg, int nRanks, int batch, const Strides& strides, const CallBuffers* got,
                       const CallBuffers* want, std::string* first, const CallShape* shape = nullptr);

// f(b, h, row, head) for every output element rank r owns in shape's mode:
// the merge of (row b, global head h) lands at out[row][head].
template <typename F>
void forEachOutput(const CallShape& shape, int nRanks, int r, F&& f) {
  const int Hl = shape.localHeads;
  switch (shape.scatter) {
    case Scatter::Head:
      for (int b = 0; b < shape.batch; b++)
        for (int j = 0; j < Hl; j++) f(b, r * Hl + j, b, j);
      break;
    case Scatter::Token:
      for (int b = shape.split.start[r]; b < shape.split.start[r + 1]; b++)
        for (int h = 0; h < nRanks * Hl; h++) f(b, h, b - shape.split.start[r], h);
      break;
    case Scatter::None:
      for (int b = 0; b < shape.batch; b++)
        for (int h = 0; h < nRanks * Hl; h++) f(b, h, b, h);
      break;
  }
}

// float <-> dtype element at index i of a host buffer (tests, perf).
float loadElement(ncclDataType_t dtype, const void* base, int64_t i);
void storeElement(ncclDataType_t dtype, void* base, int64_t i, float v);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_REFERENCE_H_
