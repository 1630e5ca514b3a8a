/*************************************************************************
 * What the NCCL context and loopback share: the resolved config, the
 * workspace layout, the protocol policy, the host-mapped error record, and
 * the enqueue of one call as rounds of at most maxBatch rows.
 ************************************************************************/
#ifndef NCCL_DCP_ENGINE_H_
#define NCCL_DCP_ENGINE_H_

#include "launch.h"
#include "protocol.h"
#include "validate.h"

namespace nccl_dcp {

struct Engine {
  Config cfg;
  int nRanks = 0;
  int rank = 0;  // NCCL path only
  ProtocolPolicy policy;
  WorkspaceLayout layout;
  AsyncErrorRecord* hostError = nullptr;     // host view (mapped, pinned)
  AsyncErrorRecord* hostErrorDev = nullptr;  // device view of the same memory
  bool pdl = true;

  // Layout for the policy; allocates the error record.
  ncclResult_t init(const Config& config, int ranks, int myRank, const ProtocolPolicy& p);
  void release();

  // ncclSuccess, or the error a device-side wait recorded (message set).
  ncclResult_t asyncError() const;

  // Enqueues rounds of at most cfg.maxBatch rows. buffers: one per rank
  // that this launch serves (loopback: every virtual rank; NCCL: this one).
  ncclResult_t enqueue(const CallBuffers* buffers, int batch, const Strides& strides,
                       const Addressing& addr, cudaStream_t stream, int silentRank = -1) const;
};

// Workspace bytes of a config for any protocol the policy may pick later.
size_t workspaceBound(const Config& cfg, int nRanks);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_ENGINE_H_
