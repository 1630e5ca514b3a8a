// The fused kernels of one family of the table (kernel_table.h):
// protocol LL128, wire native, peers loopback.
#include "kernels/fused.cuh"

namespace nccl_dcp {
NCCL_DCP_FUSED_FAMILY(Proto::LL128, Wire::Native, true)
}  // namespace nccl_dcp
