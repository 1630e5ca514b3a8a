// The fused kernels of one family of the table (kernel_table.h):
// protocol LL128, wire fp8, peers lsa.
#include "kernels/fused.cuh"

namespace nccl_dcp {
NCCL_DCP_FUSED_FAMILY(Proto::LL128, Wire::Fp8E4m3, false)
}  // namespace nccl_dcp
