#include "agreement.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <random>

#include "enums.h"
#include "error.h"

namespace nccl_dcp {

namespace {

const char* const kStepNames[] = {"arguments", "agree", "device communicators", "choose path", "workspace",
                                   "map peers", "ready"};
static_assert(sizeof(kStepNames) / sizeof(kStepNames[0]) == (size_t)CreateStep::Count, "a name per step");

// An agreed input, named as the user sets it.
struct Field {
  const char* name;
  int64_t (*get)(const Agreement&);
};

#define NCCL_DCP_FIELD(name, member) {name, [](const Agreement& a) -> int64_t { return (int64_t)a.member; }}
const Field kAgreedFields[] = {
    NCCL_DCP_FIELD("nccl-dcp version", libVersion),
    NCCL_DCP_FIELD("NCCL version", ncclVersion),
    NCCL_DCP_FIELD("config->headDim", headDim),
    NCCL_DCP_FIELD("config->localHeads", localHeads),
    NCCL_DCP_FIELD("config->dtype", dtype),
    NCCL_DCP_FIELD("config->lseBase", lseBase),
    NCCL_DCP_FIELD("config->maxBatch (else NCCL_DCP_MAX_BATCH)", maxBatch),
    NCCL_DCP_FIELD("config->protocol (else NCCL_DCP_PROTO)", protocol),
    NCCL_DCP_FIELD("config->timeoutMs (else NCCL_DCP_TIMEOUT_MS)", timeoutMs),
    NCCL_DCP_FIELD("NCCL_DCP_SIMPLE_MIN_ROWS", simpleMinRows),
    NCCL_DCP_FIELD("NCCL_DCP_PDL", pdl),
    NCCL_DCP_FIELD("NCCL_DCP_PROVIDER (or NCCL_DCP_FORCE_FALLBACK)", provider),
    NCCL_DCP_FIELD("the ll128_reread build option (NCCL_DCP_LL128_REREAD)", ll128Reread),
    NCCL_DCP_FIELD("window (own vs. application's)", inWindow),
    NCCL_DCP_FIELD("window offset", windowOffset),
    NCCL_DCP_FIELD("config->scatter", scatter),
    NCCL_DCP_FIELD("config->lseDtype", lseDtype),
    NCCL_DCP_FIELD("NCCL_DCP_NONE_ALGO", noneAlgo),
    NCCL_DCP_FIELD("config->wire", wire),
};
#undef NCCL_DCP_FIELD

}  // namespace

const char* createStepName(CreateStep step) {
  const int i = (int)step;
  return i >= 0 && i < (int)CreateStep::Count ? kStepNames[i] : "unknown";
}

Agreement agreementOf(const Config& c, int ncclVersion, bool inWindow, size_t windowOffset) {
  Agreement a;
  memset(&a, 0, sizeof(a));
  a.libVersion = NCCL_DCP_VERSION_CODE;
  a.ncclVersion = ncclVersion;
  a.headDim = c.headDim;
  a.localHeads = c.localHeads;
  a.dtype = c.dtype;
  a.lseBase = (int)c.lseBase;
  a.maxBatch = c.maxBatch;
  a.protocol = c.protocol;
  a.timeoutMs = c.timeoutMs;
  a.simpleMinRows = c.protocol == ncclDcpProtoAuto ? c.simpleMinRows : 0;  // only AUTO reads it
  a.pdl = c.pdl;
  a.provider = c.provider;
  a.ll128Reread = NCCL_DCP_LL128_REREAD;
  a.inWindow = inWindow;
  a.scatter = (int)c.scatter;
  a.lseDtype = (int)c.lseDtype;
  a.noneAlgo = c.scatter == Scatter::None ? (int)c.noneAlgo : 0;  // only NONE reads it
  a.wire = (int)c.wire;
  a.windowOffset = windowOffset;
  return a;
}

void recordFailure(StepStatus* status, ncclResult_t code, CreateStep step, const char* message) {
  if (code == ncclSuccess || status->code != ncclSuccess) return;
  status->code = code;
  status->step = (int32_t)step;
  strncpy(status->message, message, sizeof(status->message) - 1);
  status->message[sizeof(status->message) - 1] = '\0';
}

ncclResult_t firstFailure(const RankRecord* all, int nRanks) {
  for (int r = 0; r < nRanks; r++) {
    const StepStatus& s = all[r].status;
    if (s.code != ncclSuccess)
      return fail((ncclResult_t)s.code, "create step '%s' failed on rank %d: %.*s", createStepName((CreateStep)s.step), r,
                  (int)sizeof(s.message), s.message);
  }
  return ncclSuccess;
}

ncclResult_t checkAgreement(const RankRecord* all, int nRanks) {
  for (const Field& f : kAgreedFields)
    for (int r = 1; r < nRanks; r++)
      if (f.get(all[r].agreement) != f.get(all[0].agreement))
        return fail(ncclInvalidUsage,
                    "create step 'agree' failed on rank %d: ranks disagree on %s: %lld on rank 0 but %lld on "
                    "rank %d (every rank must create the context with the same settings)",
                    r, f.name, (long long)f.get(all[0].agreement), (long long)f.get(all[r].agreement), r);
  for (int q = 1; q < nRanks; q++)
    for (int p = 0; p < q; p++)
      if (all[p].view.links.hostHash == all[q].view.links.hostHash &&
          strncmp(all[p].view.busId, all[q].view.busId, sizeof(all[p].view.busId)) == 0)
        return fail(ncclInvalidUsage, "create step 'agree' failed on rank %d: ranks %d and %d use the same GPU %.16s", q,
                    p, q, all[q].view.busId);
  return ncclSuccess;
}

namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

// Why NCCL's symmetric memory does not reach every rank ("" when it does).
std::string whyNoWindow(const RankRecord* all, int nRanks) {
  for (int r = 0; r < nRanks; r++) {
    const DevCommOutcome& d = all[r].devComm;
    if (d.capable) continue;
    if (!d.tried) return "NCCL's symmetric memory was not tried (NCCL_DCP_PROVIDER)";
    if (!d.created)
      return d.cumemDisabled
                 ? format("NCCL has no symmetric memory on rank %d: NCCL_CUMEM_ENABLE=0 (as vLLM sets it on one "
                          "node); NCCL_CUMEM_ENABLE=1 gives the nccl-window provider",
                          r)
                 : format("NCCL has no symmetric memory on rank %d (ncclDevCommCreate failed: NCCL built without "
                          "cuMem, or no P2P; NCCL_DEBUG=INFO says which)",
                          r);
    return format("NCCL's LSA team of rank %d holds %d of %d ranks (ranks on several nodes, or not "
                  "node-contiguous)",
                  r, d.lsaSize, nRanks);
  }
  return "";
}

// Why CUDA IPC cannot map every peer ("" when it can).
std::string whyNoIpc(const RankRecord* all, int nRanks) {
  for (int r = 0; r < nRanks; r++) {
    const IpcOutcome& o = all[r].ipc;
    const int p = o.peer;
    const char* peerBus = p >= 0 && p < nRanks ? all[p].view.busId : "?";
    switch ((IpcBlock)o.block) {
      case IpcBlock::None: continue;
      case IpcBlock::NotTried: return "cuda-ipc was not tried (NCCL_DCP_PROVIDER, or an application's window)";
      case IpcBlock::OtherHost:
        return format("ranks %d and %d are on different hosts: CUDA IPC maps GPUs of one host only (multi-node: "
                      "NCCL's symmetric memory over multi-node NVLink)",
                      r, p);
      case IpcBlock::NoP2p:
        return format("no P2P between GPU %.16s (rank %d) and GPU %.16s (rank %d): check nvidia-smi topo -m, "
                      "or an IOMMU / ACS setting that blocks P2P",
                      all[r].view.busId, r, peerBus, p);
      case IpcBlock::NotVisible:
        return format("GPU %.16s of rank %d is not visible to rank %d (CUDA_VISIBLE_DEVICES) and not known to be "
                      "NVLink-connected: P2P cannot be checked; make every GPU of the host visible to every rank",
                      peerBus, p, r);
    }
    return format("rank %d: unknown cuda-ipc outcome %d", r, o.block);
  }
  return "";
}

}  // namespace

ncclResult_t chooseProvider(ncclDcpProvider_t requested, const RankRecord* all, int nRanks,
                            ncclDcpProvider_t* provider, std::string* note) {
  const std::string noWindow = whyNoWindow(all, nRanks), noIpc = whyNoIpc(all, nRanks);
  note->clear();
  switch (requested) {
    case ncclDcpProviderNcclWindow:
    case ncclDcpProviderCudaIpc: {
      const std::string& why = requested == ncclDcpProviderNcclWindow ? noWindow : noIpc;
      if (!why.empty())
        return fail(ncclInvalidUsage, "create step 'choose path': NCCL_DCP_PROVIDER=%s is not available: %s",
                    providerName(requested), why.c_str());
      *provider = requested;
      return ncclSuccess;
    }
    case ncclDcpProviderFallback:
      *provider = ncclDcpProviderFallback;
      *note = "fallback path (ncclAlltoAll + combine) forced by NCCL_DCP_PROVIDER=fallback or "
              "NCCL_DCP_FORCE_FALLBACK=1: unset it for the fused path";
      return ncclSuccess;
    default: break;
  }
  if (noWindow.empty()) {
    *provider = ncclDcpProviderNcclWindow;
  } else if (noIpc.empty()) {
    *provider = ncclDcpProviderCudaIpc;
    *note = "fused path on CUDA IPC mappings of nccl-dcp's own (cuda-ipc provider), not NCCL's window: " + noWindow;
  } else {
    *provider = ncclDcpProviderFallback;
    *note = "fallback path (ncclAlltoAll + combine, slower than the fused kernel): " + noWindow + "; and " + noIpc;
  }
  return ncclSuccess;
}

ncclResult_t checkArrivals(const char* what, const RecordSeal* seals, int nRanks, uint32_t sequence, int myRank,
                           bool ownPosted, bool* noneArrived) {
  int missing = -1, arrived = 0;
  for (int r = 0; r < nRanks; r++) {
    const RecordSeal& s = seals[r];
    if (s.magic == kRecordMagic && s.sequence == sequence && s.rank == r) arrived++;
    else if (missing < 0) missing = r;
  }
  // This rank's own record was copied, so the all-gather ran if its slot is
  // empty only when NCCL has not run it yet.
  *noneArrived = arrived == 0 && ownPosted;
  if (missing < 0) return ncclSuccess;
  if (*noneArrived)
    return fail(ncclInvalidUsage,
                "%s failed on rank %d: no rank's record arrived in its all-gather, this rank's own neither: called "
                "inside ncclGroupStart/End? NCCL defers the all-gather to the caller's ncclGroupEnd; create and "
                "destroy are collective and blocking: call them outside any NCCL group (one thread driving several "
                "GPUs: ncclDcpContextCreateGroup / ncclDcpContextDestroyGroup)",
                what, myRank);
  return fail(ncclSystemError,
              "%s failed on rank %d: its record did not arrive in the all-gather (seal %#llx, gather %u of rank %d; "
              "expected gather %u): its copy to the device failed, or it was called inside ncclGroupStart/End?",
              what, missing, (unsigned long long)seals[missing].magic, seals[missing].sequence, seals[missing].rank,
              sequence);
}

bool everyPeerClosed(const ReleaseRecord* all, const IpcExport* expected, int nRanks, std::string* why) {
  for (int r = 0; r < nRanks; r++) {
    const ReleaseRecord& a = all[r];
    if (a.address != expected[r].address || a.process != expected[r].process) {
      *why = format("rank %d's record is of another context (workspace %#llx, not %#llx: contexts of one "
                    "communicator destroyed in a different order on different ranks?)",
                    r, (unsigned long long)a.address, (unsigned long long)expected[r].address);
      return false;
    }
    if (a.closed != 1) {
      *why = format("rank %d could not close its mappings of its peers' workspaces", r);
      return false;
    }
  }
  return true;
}

uint64_t processIdentity() {
  static const uint64_t id = [] {
    std::random_device rd;
    return ((uint64_t)rd() << 32 | rd()) ^ (uint64_t)getpid();
  }();
  return id;
}

}  // namespace nccl_dcp
