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

// ranks[r]: rank r's buffers in host memory. Writes every rank's out and,
// where not null, outLse, for batch rows.
void referenceA2aLseReduce(const Config& cfg, int nRanks, int batch, const Strides& strides,
                           const CallBuffers* ranks);

// Compares every rank's outputs (out, and outLse where want has it) with
// the reference's: within one unit of rounding of dtype, LSEs within 1e-5
// relative, -inf exactly, NaN never. Returns the mismatch count; *first
// (if given) describes the first one.
size_t countMismatches(const Config& cfg, int nRanks, int batch, const Strides& strides, const CallBuffers* got,
                       const CallBuffers* want, std::string* first);

// float <-> dtype element at index i of a host buffer (tests, perf).
float loadElement(ncclDataType_t dtype, const void* base, int64_t i);
void storeElement(ncclDataType_t dtype, void* base, int64_t i, float v);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_REFERENCE_H_
