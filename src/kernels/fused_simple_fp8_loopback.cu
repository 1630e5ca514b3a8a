// The fused kernels of one family of the table (kernel_table.h):
// protocol SIMPLE, wire fp8, peers loopback.
#include "kernels/fused.cuh"

namespace nccl_dcp {
NCCL_DCP_FUSED_FAMILY(Proto::Simple, Wire::Fp8E4m3, true)
}  // namespace nccl_dcp
