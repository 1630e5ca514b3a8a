/*************************************************************************
 * What the ranks of a context agree on at create (DESIGN §10): each rank's
 * record, all-gathered over the communicator after every step that can
 * fail locally, and the pure checks every rank runs over the same gathered
 * records -- so every rank reaches the same verdict and the same message,
 * and no rank enters the next collective step after another one failed.
 * Pure functions: unit-tested without a GPU.
 ************************************************************************/
#ifndef NCCL_DCP_AGREEMENT_H_
#define NCCL_DCP_AGREEMENT_H_

#include <stddef.h>
#include <stdint.h>

#include <string>

#include "protocol.h"
#include "topology.h"
#include "types.h"

namespace nccl_dcp {

// The steps of create (context.cc), in order. Errors name them.
enum class CreateStep : int32_t {
  Arguments = 0,        // local checks: config, versions, window, output pointer
  Agree,                // the agreed inputs equal on every rank (pure)
  DeviceCommunicators,  // ncclDevCommCreate (collective)
  ChoosePath,           // fused or fallback, the protocol policy, the error record
  Workspace,            // memory (cuda-ipc: its IPC handle)
  MapPeers,             // window registration (collective) or peers' IPC handles opened; zeroing
  Ready,                // every rank's workspace zero before any first call
  Count
};
const char* createStepName(CreateStep step);

// Every input that shapes the workspace, the protocol, the wire format or
// the launches, whatever its source (config, environment, build): must be
// equal on every rank.
struct Agreement {
  int32_t libVersion, ncclVersion;
  int32_t headDim, localHeads, dtype, lseBase, maxBatch, protocol, timeoutMs;
  int32_t simpleMinRows;  // the effective NCCL_DCP_SIMPLE_MIN_ROWS (0 unless AUTO reads it)
  int32_t pdl, provider, ll128Reread;  // provider: the requested ncclDcpProvider_t
  int32_t inWindow;  // the application's window (1) or our own (0)
  int32_t scatter;   // ncclDcpScatter_t: the heads of a workspace row (Hl or cp * Hl)
  int32_t lseDtype;  // ncclDataType_t of partialLse (read into fp32 before the wire; agreed like dtype)
  int32_t noneAlgo;  // NCCL_DCP_NONE_ALGO as NONE reads it (0 in the other modes): the workspace's layout
  int32_t wire;      // ncclDcpWire_t: the workspace's unit geometry and the kernels
  uint64_t windowOffset;
};

// Built without -Dll128_reread=false: LL128 receivers re-read after the flags.
#ifndef NCCL_DCP_LL128_REREAD
#define NCCL_DCP_LL128_REREAD 1
#endif

Agreement agreementOf(const Config& cfg, int ncclVersion, bool inWindow, size_t windowOffset);

// What differs by rank and every rank needs to know: its GPU, its host and
// its view of its links (topology.h; known from the device-communicator step).
struct RankView {
  char busId[16];
  LinkView links;  // links.hostHash from the first step on
};

// A rank's outcome of ncclDevCommCreate.
struct DevCommOutcome {
  int32_t capable;  // a device communicator whose LSA team is every rank
  int32_t lsaSize, lsaRank;
  int32_t created;        // ncclDevCommCreate succeeded (0: failed, or not tried)
  int32_t tried;          // 0: the requested provider skipped it
  int32_t cumemDisabled;  // NCCL_CUMEM_ENABLE=0 in this rank's environment
};

// Why a rank cannot map every peer's memory with CUDA IPC (cuda-ipc provider).
enum class IpcBlock : int32_t {
  None = 0,    // it can
  NotTried,    // the requested provider or an application window excludes cuda-ipc
  OtherHost,   // `peer` is on another host
  NoP2p,       // no P2P between this rank's GPU and `peer`'s
  NotVisible,  // `peer`'s GPU is not visible here (CUDA_VISIBLE_DEVICES) and not known NVLink
};
struct IpcOutcome {
  int32_t block;  // IpcBlock
  int32_t peer;   // the first peer that blocks it; -1 when none
};

// A rank's workspace on the cuda-ipc provider, as its peers open it.
struct IpcExport {
  unsigned char handle[64];  // cudaIpcMemHandle_t of the workspace's allocation
  uint64_t address;          // the workspace in its own process (peers in that process use it)
  uint64_t process;          // identity of its process (processIdentity())
};

// A rank's status: its first failure, the step, and the message.
struct StepStatus {
  int32_t code;  // ncclResult_t; ncclSuccess = no failure so far
  int32_t step;  // CreateStep of the failure
  char message[240];
};

// One rank's record, all-gathered after every step that can fail locally.
struct RankRecord {
  StepStatus status;
  Agreement agreement;
  RankView view;
  DevCommOutcome devComm;
  IpcOutcome ipc;
  IpcExport ipcExport;
};

// Records a rank's failure at step (the first one sticks).
void recordFailure(StepStatus* status, ncclResult_t code, CreateStep step, const char* message);

// The failure of the lowest failing rank, as every rank's error:
// "create step 'S' failed on rank R: <its message>". ncclSuccess if none.
ncclResult_t firstFailure(const RankRecord* all, int nRanks);

// Every agreed input equal on every rank, every rank on its own GPU (bus
// ids compared between ranks of one host); the
// error names the input (its variable) and the first rank that differs.
ncclResult_t checkAgreement(const RankRecord* all, int nRanks);

// The provider of the workspace (nccl_dcp.h: ncclDcpProvider_t), the same
// on every rank from the same records: the requested one, or under Auto
// the first available of nccl-window, cuda-ipc, fallback. note: why the
// context is not on the fastest path its GPUs could take, with the remedy
// ("" when it is). A forced provider that is not available fails.
ncclResult_t chooseProvider(ncclDcpProvider_t requested, const RankRecord* all, int nRanks,
                            ncclDcpProvider_t* provider, std::string* note);

// A value unique to this process (threads of one process share it; two
// processes never do, PID namespaces included).
uint64_t processIdentity();

// ---- The exchange's seals (exchange.h). Every record of an all-gather
// travels behind a seal naming the gather (its sequence number in the
// exchange, from 1) and the rank that sent it; the scratch it lands in is
// zeroed first and the sender's copy lives apart from the received ones.
// So a slot that holds no record of this gather is seen as such: the
// sender's copy to the device failed (its slot holds nothing, or its
// previous record), or the all-gather did not run before its result was
// read -- NCCL defers it inside the caller's ncclGroupStart/End, and then
// no slot holds one, this rank's own included.
constexpr uint64_t kRecordMagic = 0x6463702d72656364ull;  // "dcp-recd"
struct RecordSeal {
  uint64_t magic;
  uint32_t sequence;
  int32_t rank;
};
// Every seal says (magic, sequence, its rank): ncclSuccess. Else an error
// "<what> failed on rank R: ..." (what: "create step 'arguments'", "destroy
// of a cuda-ipc context"), R the lowest rank whose record is missing;
// *noneArrived: no slot holds a record of this gather (this rank's own
// included) although this rank's own copy to the device succeeded
// (ownPosted): the all-gather is still queued. Both messages ask "called
// inside ncclGroupStart/End?".
ncclResult_t checkArrivals(const char* what, const RecordSeal* seals, int nRanks, uint32_t sequence, int myRank,
                           bool ownPosted, bool* noneArrived);

// What each rank says at the destroy of a cuda-ipc context whose ranks
// span processes (context.cc): it closed its mappings of its peers'
// workspaces, and which context it destroys (its own workspace's address
// and process, as create's records gave them).
struct ReleaseRecord {
  int32_t closed;  // 1: every peer's workspace unmapped (cudaIpcCloseMemHandle), its kernels done
  int32_t reserved;
  uint64_t address, process;  // this rank's exported workspace
};
// Every peer closed, and every record is of this context (rank r's address
// and process as expected[r] from create): its owner may free its
// workspace. Else false, *why saying which rank and what.
bool everyPeerClosed(const ReleaseRecord* all, const IpcExport* expected, int nRanks, std::string* why);


}  // namespace nccl_dcp

#endif  // NCCL_DCP_AGREEMENT_H_
