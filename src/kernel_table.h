/*************************************************************************
 * The dispatch table: every fused kernel there is, listed once. A kernel
 * is a point of five axes (device/kernel.h builds each one from its layers):
 *
 *   axis      values                          chosen by
 *   dtype     bf16, fp16, fp32                config->dtype
 *   wire      native, fp8 (e4m3)              config->wire
 *   mode      HEAD, TOKEN, NONE direct,       config->scatter, and NONE's
 *             NONE in two phases              algorithm (NCCL_DCP_NONE_ALGO)
 *   protocol  LL, LL128, SIMPLE               the protocol policy, per round
 *   peers     NCCL window (LSA), loopback     the context (loopback: tests, perf)
 *
 * Legal: every combination, but fp8 on the wire takes bf16 or fp16 only
 * (e4m3 narrows 16-bit elements), and never NONE in two phases (the relay
 * would round the merged heads a second time: relay.h). That is 3 x 4 =
 * 12 native and 2 x 3 = 6 fp8 kernels per (protocol, peers): 108 in all,
 * instantiated in one translation unit per (protocol, wire, peers)
 * (src/kernels/fused_*.cu), so a parallel build compiles them side by side.
 *
 * A context computes its keys once, from its config, when it is made
 * (Engine::init): the kernel a round runs is never read back from the
 * workspace geometry.
 ************************************************************************/
#ifndef NCCL_DCP_KERNEL_TABLE_H_
#define NCCL_DCP_KERNEL_TABLE_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "device/params.h"

namespace nccl_dcp {

struct FusedKey {
  ncclDataType_t dtype;
  Wire wire;
  FusedMode mode;
  Proto proto;
  bool loopback;
};

// The one rule of the table (see the top); the family translation units
// instantiate exactly the combinations it allows.
constexpr bool isLegalFused(ncclDataType_t dtype, Wire wire, FusedMode mode) {
  const bool dtypeOk = dtype == ncclBfloat16 || dtype == ncclFloat16 || dtype == ncclFloat32;
  if (!dtypeOk) return false;
  if (wire == Wire::Native) return true;
  return wire == Wire::Fp8E4m3 && dtype != ncclFloat32 && mode != FusedMode::NoneTwoPhase;
}
inline bool isLegalFused(const FusedKey& k) {
  const bool protoOk = k.proto == Proto::LL || k.proto == Proto::LL128 || k.proto == Proto::Simple;
  return protoOk && isLegalFused(k.dtype, k.wire, k.mode);
}

// How a kernel reaches the workspaces of its peers (DESIGN §3).
struct Addressing {
  bool loopback;
  // NCCL: rank r's workspace as this rank addresses it (nRanks entries,
  // resolveLsaPointers at create); lsa[rank] is its own.
  char* const* lsa;
  // loopback: virtual rank p's workspace at base + p * rankBytes, one GPU.
  char* base;
  size_t rankBytes;
  // The round's peers' registered outputs for NONE's phase 2 (tag 0:
  // staged; registered_output.h).
  DirectOutputs direct;
};

// One round of the fused collective: a cooperative launch (plus PDL when
// asked) sized to the work and to what the GPU holds co-resident. args:
// makeFusedArgs's; io: the round's tensors (loopback: nRanks of them;
// NCCL: 1); rank: the NCCL path's (loopback derives it from the block).
using FusedLauncher = ncclResult_t (*)(const FusedArgs& args, const Addressing& addr, const RankIo* io, int rank,
                                       bool pdl, cudaStream_t stream);

// The launcher of k's kernel; nullptr for a key the table does not allow.
FusedLauncher fusedLauncher(const FusedKey& k);

// The launchers of one family (src/kernels/fused_<protocol>_<wire>_<peers>.cu).
template <Proto kProto, Wire kWire, bool kLoopback>
FusedLauncher familyLauncher(ncclDataType_t dtype, FusedMode mode);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_KERNEL_TABLE_H_
