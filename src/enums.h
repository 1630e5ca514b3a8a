/*************************************************************************
 * One table per enum the host code names or parses: the element types
 * (name, bytes, rounding unit, and the one host-side dispatch to the C++
 * element type) and the wire protocols: the C++ side's one table of each,
 * which perf and the tests use too.
 * Kernels dispatch on the dtype through the dispatch table (kernel_table.h)
 * and, for the fallback's kernels, withElementType (device/params.h).
 ************************************************************************/
#ifndef NCCL_DCP_ENUMS_H_
#define NCCL_DCP_ENUMS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include "nccl_dcp.h"

namespace nccl_dcp {

// "bf16", "fp16", "fp32"; "unsupported" for any other dtype.
const char* dtypeName(ncclDataType_t dtype);
// nccl-tests' names: "bfloat16", "half", "float"; "unsupported" otherwise.
const char* dtypeNcclTestsName(ncclDataType_t dtype);
// Bytes of one element, 0 for an unsupported dtype.
int dtypeSize(ncclDataType_t dtype);
// One unit of rounding of the dtype, relative (the comparison tolerance).
float dtypeRoundingUnit(ncclDataType_t dtype);
// A supported dtype from its name or an alias ("bfloat16", "half" or
// "float16", "float" or "float32"), case-insensitive. False when the name is none of them.
bool parseDtype(const char* name, ncclDataType_t* dtype);

// "AUTO", "LL", "LL128", "SIMPLE" (ncclDcpProtocol_t or Proto values);
// "unknown" otherwise.
const char* protocolName(int protocol);
// ncclDcpProtocol_t from its name, case-insensitive.
bool parseProtocol(const char* name, int* protocol);

// "auto", "nccl-window", "cuda-ipc", "fallback" (ncclDcpProvider_t);
// "unknown" otherwise.
const char* providerName(int provider);
// ncclDcpProvider_t from its name, case-insensitive.
bool parseProvider(const char* name, int* provider);

// "head", "token", "none" (ncclDcpScatter_t); "unknown" otherwise.
const char* scatterName(int scatter);
// ncclDcpScatter_t from its name, case-insensitive.
bool parseScatter(const char* name, int* scatter);

// "auto", "direct", "two_phase" (NoneAlgo, types.h); "unknown" otherwise.
const char* noneAlgoName(int algo);
// NoneAlgo from its name, case-insensitive.
bool parseNoneAlgo(const char* name, int* algo);
// "native", "fp8" (ncclDcpWire_t); "unknown" otherwise.
const char* wireName(int wire);
// ncclDcpWire_t from its name, case-insensitive.
bool parseWire(const char* name, int* wire);

// The host's one dispatch on the dtype: f(T{}) with the element type of a
// supported dtype (the caller refused the others when the config was resolved).
template <typename F>
auto withHostElementType(ncclDataType_t dtype, F&& f) {
  switch (dtype) {
    case ncclBfloat16: return f(__nv_bfloat16{});
    case ncclFloat16: return f(__half{});
    default: return f(float{});
  }
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_ENUMS_H_
