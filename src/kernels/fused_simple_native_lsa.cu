// The fused kernels of one family of the table (kernel_table.h):
// protocol SIMPLE, wire native, peers lsa.
#include "kernels/fused.cuh"

namespace nccl_dcp {
NCCL_DCP_FUSED_FAMILY(Proto::Simple, Wire::Native, false)
}  // namespace nccl_dcp
