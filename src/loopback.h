/*************************************************************************
 * Loopback (internal API, for tests and perf): cp virtual ranks whose
 * workspaces all live on the current GPU, one cooperative launch per round
 * whose block index selects the virtual rank. The kernel body is the one
 * the NCCL path runs; only the peer addressing differs.
 ************************************************************************/
#ifndef NCCL_DCP_LOOPBACK_H_
#define NCCL_DCP_LOOPBACK_H_

#include <memory>
#include <vector>

#include "engine.h"
#include "registered_output.h"

namespace nccl_dcp {

class Loopback {
 public:
  // nRanks virtual ranks (1..kMaxLoopbackRanks) on the current device.
  static ncclResult_t create(const ncclDcpConfig_t* cfg, int nRanks, std::unique_ptr<Loopback>* out);
  ~Loopback();

  // One collective call: ranks[r] are virtual rank r's device buffers
  // (its empty-shard arrays too: args->seqLens and queryStartLoc only say
  // that the call has them, and numSeqs how many). Same checks as
  // ncclDcpA2aLseReduceEx (Engine::admit), for every rank; any stream,
  // ordered after the previous call as a context orders them.
  ncclResult_t call(const CallBuffers* ranks, int batch, const ncclDcpStrides_t* strides, cudaStream_t stream,
                    const ncclDcpCallArgs_t* args = nullptr);

  // ncclDcpOutputRegister's loopback form: virtual rank r's out is
  // [ranks[r].out, + outBytes), its outLse [ranks[r].outLse, + lseBytes)
  // (0 and NULL: none). A NONE call in two phases whose every rank's
  // outputs lie inside, at the same offsets, then writes its SIMPLE rounds'
  // phase 2 straight into the peers' outputs, as real ranks with registered
  // outputs do; any other call stages. Replaces an earlier registration;
  // no memory is held.
  ncclResult_t registerOutputs(const CallBuffers* ranks, size_t outBytes, size_t lseBytes);
  void deregisterOutputs() { outputs_.clear(); }
  // Whether a call of these buffers would take the direct path.
  bool takesDirectPath(const CallBuffers* ranks, int batch, const Strides& s, DirectCall* call) const;

  // ncclDcpContextAbort's device side on one GPU: every wait gives up at
  // once, the kernels leave (at most `drainMs`), the workspace is freed.
  // Returns ncclSystemError, leaving the workspace allocated, if the last
  // call did not drain in time. Later calls are refused.
  ncclResult_t abort(int drainMs);

  ncclResult_t asyncError() const { return engine_.asyncError(); }

  // Test hooks. setRound synchronises the device.
  ncclResult_t setRound(uint32_t round);
  ncclResult_t getRound(int rank, uint32_t* round);
  void setSilentRank(int rank) { silentRank_ = rank; }

  const Config& config() const { return engine_.cfg; }
  int nRanks() const { return engine_.nRanks; }
  const Engine& engine() const { return engine_; }
  Engine& engine() { return engine_; }

 private:
  Loopback() = default;
  Engine engine_;
  char* workspace_ = nullptr;  // nRanks * layout.totalBytes
  bool aborted_ = false;
  int silentRank_ = -1;
  std::vector<RegisteredOutput> outputs_;  // per virtual rank, or none
  uint32_t registrations_ = 0;             // registerOutputs calls so far (RegisteredOutput::serial)
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_LOOPBACK_H_
