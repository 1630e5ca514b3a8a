#include "agreement.h"

#include <string.h>

#include "error.h"

namespace nccl_dcp {

namespace {

const char* const kStepNames[] = {"arguments", "agree", "device communicators", "choose path", "workspace", "ready"};
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
    NCCL_DCP_FIELD("NCCL_DCP_FORCE_FALLBACK", forceFallback),
    NCCL_DCP_FIELD("the ll128_reread build option (NCCL_DCP_LL128_REREAD)", ll128Reread),
    NCCL_DCP_FIELD("window (own vs. application's)", inWindow),
    NCCL_DCP_FIELD("window offset", windowOffset),
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
  a.forceFallback = c.forceFallback;
  a.ll128Reread = NCCL_DCP_LL128_REREAD;
  a.inWindow = inWindow;
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

bool allCapable(const RankRecord* all, int nRanks) {
  for (int r = 0; r < nRanks; r++)
    if (!all[r].devComm.capable) return false;
  return true;
}

}  // namespace nccl_dcp
