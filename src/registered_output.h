/*************************************************************************
 * Registered outputs (ncclDcpOutputRegister): NONE in two phases writes
 * its phase 2 straight into the peers' out and outLse (device/relay.h)
 * when a call's outputs lie in a registered pair at the same offsets on
 * every rank, as NCCL writes a symmetric buffer: each merged head crosses
 * once instead of twice (docs/perf-history.md, "NONE's phase 2 straight
 * into the peers' outputs").
 *
 *   register   nccl-window: both ranges registered as symmetric windows
 *              (collective) and every rank's bases resolved into a device
 *              table; other providers and the fallback: recorded, unused
 *   a call     directCallOf: its whole extent inside one registration,
 *              NONE in two phases, native wire -> a DirectCall; each
 *              SIMPLE round then carries DirectOutputs (device/types.h),
 *              the line protocols' rounds keep staging
 *   the tag    a hash of the registration's serial, the offsets and the
 *              strides, above the round in phase 2's 64-bit flags: a rank
 *              that passed other ones (or staged) never matches, its waits
 *              time out (ncclRemoteError), nothing stale is read
 ************************************************************************/
#ifndef NCCL_DCP_REGISTERED_OUTPUT_H_
#define NCCL_DCP_REGISTERED_OUTPUT_H_

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include <string>

#include "device/params.h"
#include "types.h"

namespace nccl_dcp {

struct OutputRange {
  char* base;
  size_t bytes;  // 0: none
};

// What this rank registered, and how it reaches every rank's.
struct RegisteredOutput {
  OutputRange out = {}, outLse = {};
  ncclWindow_t outWindow = nullptr, lseWindow = nullptr;  // nccl-window: ours to deregister
  PeerOutput* bases = nullptr;  // device [nRanks]: every rank's out and outLse as this rank addresses them
  bool direct = false;          // calls may take the direct path (else they stage: provider, mode)
  uint32_t serial = 0;          // the context's registrations before it, + 1: the same on every rank
};

// A call's direct phase 2, decided once for the call.
struct DirectCall {
  const PeerOutput* bases;       // NCCL: the registration's table; loopback: NULL (RankIo)
  int64_t outOffset, lseOffset;  // the call's row 0 from the registered bases: bytes, floats
  bool withLse;
  uint32_t serial;  // the registration's (RegisteredOutput::serial)
};

// What a rank's registration is to its peers, all-gathered before any
// window is made (context.cc). NCCL resolves a peer's window at this
// rank's offset into its own allocation (the window's base is the
// allocation's base plus that offset), so every rank's out and outLse must
// sit at the same offset of an allocation of their own, a multiple of
// NCCL's window alignment, and hold the same bytes.
struct OutputRecord {
  int32_t ok;  // this rank's ranges passed its own checks
  int32_t hasLse;
  uint64_t outBytes, lseBytes, outOffset, lseOffset;
};

// Whether every rank's record allows the windows (the same verdict on
// every rank: they read the same records); else why, as rank `rank` says it.
bool outputRecordsAgree(const OutputRecord* all, int nRanks, int rank, std::string* why);

// Checks ncclDcpOutputRegister's arguments (naming the one at fault, after
// `where`: "" or which entry): out 16-byte aligned with outBytes > 0;
// outLse 4-byte aligned with lseBytes > 0, or NULL with 0; no range wraps,
// and the two do not overlap.
ncclResult_t checkOutputRanges(const void* out, size_t outBytes, const float* outLse, size_t lseBytes,
                               const char* where = "");

// Whether a call of `batch` rows (out rows of headsPerRow heads) with
// `buf`'s outputs and strides `s` takes the direct path through `reg`:
// NONE in two phases, its every out (and outLse) element inside the
// registered ranges. Fills *call when it does.
bool directCallOf(const Config& cfg, int nRanks, const RegisteredOutput& reg, const CallBuffers& buf, int batch,
                  const Strides& s, DirectCall* call);

// The DirectOutputs of a round at row0 that runs `proto` (staged, tag 0,
// unless the call is direct and the round runs SIMPLE).
DirectOutputs directOutputsOfRound(const DirectCall* call, const Config& cfg, const Strides& s, int row0,
                                   Proto proto);

// The tag of a direct round's phase-2 flags (never 0).
uint32_t directTag(const DirectCall& call, const Strides& s);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_REGISTERED_OUTPUT_H_
