#include "validate.h"

#include <inttypes.h>

#include <algorithm>
#include <climits>
#include <cstddef>

#include "error.h"
#include "protocol.h"
#include "device/layout.h"
#include "device/nccl_compat.h"

namespace nccl_dcp {

// Defaults: the config's value if set, else the environment's, else ours.
static int pick(int configValue, int envValue, int fallback) {
  if (configValue != NCCL_CONFIG_UNDEF_INT) return configValue;
  return envValue != kEnvUnset ? envValue : fallback;
}

// The header of a versioned struct (`what`: "config", "strides", "args";
// `initializer`: what sets it) before any other field of it is read: its
// magic, and a version from `oldest` to this library's.
static ncclResult_t checkHeader(const char* what, const char* initializer, unsigned magic, unsigned wantMagic,
                                const char* magicName, unsigned version, unsigned oldest) {
  if (magic != wantMagic)
    return fail(ncclInvalidArgument, "%s->magic is 0x%x, not %s: initialise the %s with %s", what, magic,
                magicName, what, initializer);
  if (version > NCCL_DCP_VERSION_CODE || version < oldest)
    return fail(ncclInvalidArgument,
                "%s->version %u is not one this library (%d) knows: rebuild against its nccl_dcp.h", what, version,
                NCCL_DCP_VERSION_CODE);
  return ncclSuccess;
}

// The config's header and size: magic, a known version, and the sizeof of
// this version's struct or of an older one's.
static ncclResult_t checkConfigStruct(const ncclDcpConfig_t* cfg) {
  if (cfg == nullptr) return fail(ncclInvalidArgument, "config is NULL");
  DCPCHECK(checkHeader("config", "NCCL_DCP_CONFIG_INITIALIZER", cfg->magic, NCCL_DCP_CONFIG_MAGIC,
                       "NCCL_DCP_CONFIG_MAGIC", cfg->version, NCCL_DCP_VERSION(0, 1, 0)));
  // Append-only: a caller built against 0.2 passes the struct without
  // scatter and lseDtype, one built against 0.3 without wire, each padded
  // to its alignment (the sizeof of that version's struct).
  const size_t v2 = alignUp(offsetof(ncclDcpConfig_t, scatter), alignof(ncclDcpConfig_t));
  const size_t v3size = alignUp(offsetof(ncclDcpConfig_t, reserved0), alignof(ncclDcpConfig_t));
  if (cfg->size != sizeof(ncclDcpConfig_t) && cfg->size != v3size && cfg->size != v2)
    return fail(ncclInvalidArgument,
                "config->size %zu is not sizeof(ncclDcpConfig_t) = %zu (or 0.3's %zu, 0.2's %zu)", cfg->size,
                sizeof(ncclDcpConfig_t), v3size, v2);
  return ncclSuccess;
}

// What a call's tensors look like: dtype, headDim, localHeads, lseBase
// (required: no default).
static ncclResult_t resolveShape(const ncclDcpConfig_t* cfg, Config* c) {
  c->dtype = cfg->dtype;
  if ((int)cfg->dtype == NCCL_CONFIG_UNDEF_INT)
    return fail(ncclInvalidArgument, "config->dtype is not set: use ncclBfloat16, ncclFloat16 or ncclFloat32");
  c->eltSize = dtypeSize(cfg->dtype);
  if (c->eltSize == 0)
    return fail(ncclInvalidArgument,
                "config->dtype %d is not supported: use ncclBfloat16, ncclFloat16 or ncclFloat32",
                (int)cfg->dtype);

  if (cfg->headDim == NCCL_CONFIG_UNDEF_INT) return fail(ncclInvalidArgument, "config->headDim is not set");
  if (cfg->headDim <= 0 || cfg->headDim > NCCL_DCP_MAX_HEAD_DIM)
    return fail(ncclInvalidArgument, "config->headDim %d is out of range [1, %d]", cfg->headDim,
                NCCL_DCP_MAX_HEAD_DIM);
  if (cfg->headDim * c->eltSize % 16 != 0)
    return fail(ncclInvalidArgument,
                "config->headDim %d: a row of %d bytes (headDim * sizeof(%s)) is not a multiple "
                "of 16 bytes",
                cfg->headDim, cfg->headDim * c->eltSize, dtypeName(cfg->dtype));
  c->headDim = cfg->headDim;

  if (cfg->localHeads == NCCL_CONFIG_UNDEF_INT)
    return fail(ncclInvalidArgument, "config->localHeads is not set");
  if (cfg->localHeads <= 0 || cfg->localHeads > NCCL_DCP_MAX_LOCAL_HEADS)
    return fail(ncclInvalidArgument, "config->localHeads %d is out of range [1, %d]",
                cfg->localHeads, NCCL_DCP_MAX_LOCAL_HEADS);
  c->localHeads = cfg->localHeads;

  if (cfg->lseBase == NCCL_CONFIG_UNDEF_INT)
    return fail(ncclInvalidArgument, "config->lseBase is not set: use ncclDcpLseBase2 or ncclDcpLseBaseE");
  if (cfg->lseBase != ncclDcpLseBase2 && cfg->lseBase != ncclDcpLseBaseE)
    return fail(ncclInvalidArgument, "config->lseBase %d is not ncclDcpLseBase2 or ncclDcpLseBaseE",
                cfg->lseBase);
  c->lseBase = cfg->lseBase == ncclDcpLseBase2 ? LseBase::Two : LseBase::E;
  return ncclSuccess;
}

// Capacity, protocol and timeout: the config's, else the environment's,
// else ours.
static ncclResult_t resolveLimits(const ncclDcpConfig_t* cfg, const Env& env, Config* c) {
  c->maxBatch = pick(cfg->maxBatch, env.maxBatch, kDefaultMaxBatch);
  if (c->maxBatch <= 0 || c->maxBatch > NCCL_DCP_MAX_BATCH_CAPACITY)
    return fail(ncclInvalidArgument, "config->maxBatch %d is out of range [1, %d]", c->maxBatch,
                NCCL_DCP_MAX_BATCH_CAPACITY);

  int proto = pick(cfg->protocol, env.protocol, ncclDcpProtoAuto);
  if (proto < 0 || proto >= ncclDcpNumProtocols)
    return fail(ncclInvalidArgument,
                "config->protocol %d is not one of ncclDcpProtoAuto, LL, LL128, Simple", proto);
  c->protocol = (ncclDcpProtocol_t)proto;

  c->timeoutMs = pick(cfg->timeoutMs, env.timeoutMs, kDefaultTimeoutMs);
  if (c->timeoutMs < 0)
    return fail(ncclInvalidArgument, "config->timeoutMs %d is negative (0 waits forever)", c->timeoutMs);
  return ncclSuccess;
}

// The fields appended after 0.2, where the caller's struct has them.
static ncclResult_t resolveAppended(const ncclDcpConfig_t* cfg, Config* c) {
  // Appended in 0.3: a 0.2 caller's config ends before them.
  const bool v3 = cfg->size >= offsetof(ncclDcpConfig_t, lseDtype) + sizeof(cfg->lseDtype);
  const int scatter = v3 && cfg->scatter != NCCL_CONFIG_UNDEF_INT ? cfg->scatter : ncclDcpScatterHead;
  if (scatter < 0 || scatter >= ncclDcpNumScatters)
    return fail(ncclInvalidArgument,
                "config->scatter %d is not ncclDcpScatterHead, ncclDcpScatterToken or ncclDcpScatterNone", scatter);
  c->scatter = (Scatter)scatter;
  c->lseDtype = v3 && (int)cfg->lseDtype != NCCL_CONFIG_UNDEF_INT ? cfg->lseDtype : ncclFloat32;
  c->lseEltSize = dtypeSize(c->lseDtype);
  if (c->lseEltSize == 0)
    return fail(ncclInvalidArgument,
                "config->lseDtype %d is not supported: use ncclFloat32, ncclBfloat16 or ncclFloat16",
                (int)c->lseDtype);

  // Appended in 0.4 (behind reserved0, 0.3's padding: a 0.3 caller's
  // size ends before wire). fp8 narrows 16-bit elements (fp32 would lose more
  // than the format is measured for), in 16-element words (SIMPLE's 16-byte
  // lanes), in every scatter mode; NONE then runs its direct algorithm
  // (resolveFromEnv: a relay of the merged heads would round them a second time).
  const bool hasWire = cfg->size >= offsetof(ncclDcpConfig_t, wire) + sizeof(cfg->wire);
  const int wire = hasWire && cfg->wire != NCCL_CONFIG_UNDEF_INT ? cfg->wire : ncclDcpWireNative;
  if (wire < 0 || wire >= ncclDcpNumWires)
    return fail(ncclInvalidArgument, "config->wire %d is not ncclDcpWireNative or ncclDcpWireFp8E4m3", wire);
  c->wire = (Wire)wire;
  if (c->wire == Wire::Fp8E4m3) {
    if (c->dtype != ncclBfloat16 && c->dtype != ncclFloat16)
      return fail(ncclInvalidArgument, "config->wire fp8 needs dtype bf16 or fp16, not %s", dtypeName(c->dtype));
    if (c->headDim % 16 != 0)
      return fail(ncclInvalidArgument, "config->wire fp8 needs headDim %% 16 == 0, not %d", c->headDim);
  }
  return ncclSuccess;
}

// From the environment alone (parseEnv range-checked them), against the
// config resolved so far.
static ncclResult_t resolveFromEnv(const Env& env, Config* c) {
  c->simpleMinRows = env.simpleMinRows;  // unset (-1): the policy's measured default for the links
  c->pdl = env.pdl != 0;  // unset (-1) means on
  c->noneAlgo = env.noneAlgo == kEnvUnset ? kDefaultNoneAlgo : (NoneAlgo)env.noneAlgo;
  if (c->wire == Wire::Fp8E4m3 && c->scatter == Scatter::None && c->noneAlgo == NoneAlgo::TwoPhase)
    return fail(ncclInvalidArgument,
                "config->wire fp8 with scatter NONE runs NONE's direct algorithm: NCCL_DCP_NONE_ALGO=two_phase "
                "would relay the merged heads through fp8, rounding them a second time (unset it or use auto)");
  c->provider = env.provider == kEnvUnset ? ncclDcpProviderAuto : (ncclDcpProvider_t)env.provider;
  if (env.forceFallback) {
    if (c->provider != ncclDcpProviderAuto && c->provider != ncclDcpProviderFallback)
      return fail(ncclInvalidUsage, "NCCL_DCP_FORCE_FALLBACK=1 contradicts NCCL_DCP_PROVIDER=%s: set one of them",
                  providerName(c->provider));
    c->provider = ncclDcpProviderFallback;
  }
  return ncclSuccess;
}

// *out is written only when the whole config is valid.
ncclResult_t resolveConfig(const ncclDcpConfig_t* cfg, const Env& env, Config* out) {
  DCPCHECK(checkConfigStruct(cfg));
  Config c;
  DCPCHECK(resolveShape(cfg, &c));
  DCPCHECK(resolveLimits(cfg, env, &c));
  DCPCHECK(resolveAppended(cfg, &c));
  DCPCHECK(resolveFromEnv(env, &c));
  *out = c;
  return ncclSuccess;
}

ncclResult_t checkRanks(int nRanks) {
  if (nRanks < 1 || nRanks > NCCL_DCP_MAX_RANKS)
    return fail(ncclInvalidArgument, "nRanks %d is out of range [1, %d]", nRanks, NCCL_DCP_MAX_RANKS);
  return ncclSuccess;
}

Strides packedStrides(const Config& cfg, int nRanks) {
  Strides s;
  const int64_t D = cfg.headDim, Hl = cfg.localHeads, cp = nRanks;
  s.inHead = D;
  s.inPeer = Hl * D;
  s.inRow = cp * Hl * D;
  s.lseHead = 1;
  s.lsePeer = Hl;
  s.lseRow = cp * Hl;
  const int64_t heads = headsPerRow(cfg, nRanks);
  s.outHead = D;
  s.outRow = heads * D;
  s.outLseHead = 1;
  s.outLseRow = heads;
  return s;
}

// Strides beyond 2^40 elements cannot describe a real buffer and would
// overflow the extent arithmetic below.
static constexpr int64_t kMaxStride = int64_t(1) << 40;

static ncclResult_t resolveOne(const char* name, int64_t given, int64_t packed, int64_t eltBytes,
                               bool multipleOf16, int64_t* out) {
  if (given < 0)
    return fail(ncclInvalidArgument, "strides->%s %" PRId64 " is negative (0 means packed)", name, given);
  if (given > kMaxStride)
    return fail(ncclInvalidArgument, "strides->%s %" PRId64 " exceeds 2^40 elements", name, given);
  int64_t v = given == 0 ? packed : given;
  if (multipleOf16 && (v * eltBytes) % 16 != 0)
    return fail(ncclInvalidArgument,
                "strides->%s %" PRId64 " is %" PRId64 " bytes, not a multiple of 16 bytes", name, v,
                v * eltBytes);
  *out = v;
  return ncclSuccess;
}

ncclResult_t resolveStrides(const ncclDcpStrides_t* in, const Config& cfg, int nRanks, Strides* out) {
  Strides p = packedStrides(cfg, nRanks);
  if (in == nullptr) {
    *out = p;
    return ncclSuccess;
  }
  DCPCHECK(checkHeader("strides", "NCCL_DCP_STRIDES_INITIALIZER", in->magic, NCCL_DCP_STRIDES_MAGIC,
                       "NCCL_DCP_STRIDES_MAGIC", in->version, NCCL_DCP_VERSION(0, 1, 0)));
  if (in->size != sizeof(ncclDcpStrides_t))
    return fail(ncclInvalidArgument, "strides->size %zu is not sizeof(ncclDcpStrides_t) = %zu",
                in->size, sizeof(ncclDcpStrides_t));
  const int64_t e = cfg.eltSize;
  Strides s;
  DCPCHECK(resolveOne("inRow", in->inRow, p.inRow, e, true, &s.inRow));
  DCPCHECK(resolveOne("inPeer", in->inPeer, p.inPeer, e, true, &s.inPeer));
  DCPCHECK(resolveOne("inHead", in->inHead, p.inHead, e, true, &s.inHead));
  const int64_t l = cfg.lseEltSize;
  DCPCHECK(resolveOne("lseRow", in->lseRow, p.lseRow, l, false, &s.lseRow));
  DCPCHECK(resolveOne("lsePeer", in->lsePeer, p.lsePeer, l, false, &s.lsePeer));
  DCPCHECK(resolveOne("lseHead", in->lseHead, p.lseHead, l, false, &s.lseHead));
  DCPCHECK(resolveOne("outRow", in->outRow, p.outRow, e, true, &s.outRow));
  DCPCHECK(resolveOne("outHead", in->outHead, p.outHead, e, true, &s.outHead));
  DCPCHECK(resolveOne("outLseRow", in->outLseRow, p.outLseRow, 4, false, &s.outLseRow));
  DCPCHECK(resolveOne("outLseHead", in->outLseHead, p.outLseHead, 4, false, &s.outLseHead));
  *out = s;
  return ncclSuccess;
}

namespace {

// One dimension of a strided view: count elements `stride` apart.
struct Dim {
  const char* name;
  int64_t count, stride;
};

// Byte range [lo, hi) covered by a view of dims over an innermost
// contiguous run of `inner` elements.
struct Extent {
  uintptr_t lo, hi;
};

// Views beyond 2^56 bytes cannot be real buffers; the limit also keeps the
// extent arithmetic (batch up to 2^31 times strides up to 2^40) exact.
constexpr __int128 kMaxViewBytes = (__int128)1 << 56;

__int128 viewBytes(const Dim* dims, int n, int64_t inner, int64_t eltBytes) {
  __int128 last = inner;
  for (int i = 0; i < n; i++) last += (__int128)(dims[i].count - 1) * dims[i].stride;
  return last * eltBytes;
}

ncclResult_t checkViewSize(const char* tensor, const Dim* dims, int n, int64_t inner, int64_t eltBytes) {
  if (viewBytes(dims, n, inner, eltBytes) <= kMaxViewBytes) return ncclSuccess;
  const Dim* widest = &dims[0];
  for (int i = 1; i < n; i++)
    if ((__int128)(dims[i].count - 1) * dims[i].stride > (__int128)(widest->count - 1) * widest->stride) widest = &dims[i];
  return fail(ncclInvalidArgument,
              "strides->%s %" PRId64 " with batch/extent %" PRId64 " makes %s span more than 2^56 bytes",
              widest->name, widest->stride, widest->count, tensor);
}

Extent extentOf(const void* base, const Dim* dims, int n, int64_t inner, int64_t eltBytes) {
  uintptr_t lo = (uintptr_t)base;
  return {lo, lo + (uintptr_t)viewBytes(dims, n, inner, eltBytes)};
}

bool overlaps(Extent a, Extent b) { return a.lo < b.hi && b.lo < a.hi; }

// An output view must give every element its own address: sorted by
// stride, each dimension must step over everything inside it.
ncclResult_t checkNoSelfOverlap(const char* tensor, Dim* dims, int n, int64_t inner) {
  std::sort(dims, dims + n, [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  int64_t span = inner;
  for (int i = 0; i < n; i++) {
    if (dims[i].count <= 1) continue;
    if (dims[i].stride < span)
      return fail(ncclInvalidArgument,
                  "strides->%s %" PRId64 " makes elements of %s overlap (needs >= %" PRId64 ")",
                  dims[i].name, dims[i].stride, tensor, span);
    span = dims[i].stride * (dims[i].count - 1) + span;
  }
  return ncclSuccess;
}

ncclResult_t checkAligned(const char* name, const void* p, size_t alignment) {
  if ((uintptr_t)p % alignment != 0)
    return fail(ncclInvalidArgument, "%s %p is not %zu-byte aligned", name, p, alignment);
  return ncclSuccess;
}

}  // namespace

void evenSplit(int batch, int nRanks, RowSplit* split) {
  split->deviceCounts = nullptr;
  split->start[0] = 0;
  for (int p = 0; p < nRanks; p++) split->start[p + 1] = split->start[p] + batch / nRanks + (p < batch % nRanks);
}

int outRowsOf(const CallShape& shape, int rank) {
  if (shape.scatter != Scatter::Token) return shape.batch;
  if (shape.split.deviceCounts) return -1;
  return shape.split.start[rank + 1] - shape.split.start[rank];
}

// A call's batch runs in rounds of maxBatch rows, indexed in int: its last
// round's end must stay an int.
static ncclResult_t checkBatch(const Config& cfg, int batch) {
  if (batch < 0) return fail(ncclInvalidArgument, "batch %d is negative", batch);
  if (batch > INT_MAX - cfg.maxBatch)
    return fail(ncclInvalidArgument, "batch %d is above INT_MAX - maxBatch (%d): its rounds of maxBatch %d rows "
                                     "would overflow a row index", batch, INT_MAX - cfg.maxBatch, cfg.maxBatch);
  return ncclSuccess;
}

ncclResult_t resolveCallArgs(const ncclDcpCallArgs_t* args, const Config& cfg, int nRanks, int batch,
                             CallShape* shape) {
  DCPCHECK(checkBatch(cfg, batch));
  CallShape c = {};
  c.scatter = cfg.scatter;
  c.localHeads = cfg.localHeads;
  c.heads = headsPerRow(cfg, nRanks);
  c.batch = batch;
  c.lseDtype = cfg.lseDtype;
  evenSplit(batch, nRanks, &c.split);
  if (args != nullptr) {
    DCPCHECK(checkHeader("args", "NCCL_DCP_CALL_ARGS_INITIALIZER", args->magic, NCCL_DCP_CALL_ARGS_MAGIC,
                         "NCCL_DCP_CALL_ARGS_MAGIC", args->version, NCCL_DCP_VERSION(0, 3, 0)));
    if (args->size != sizeof(ncclDcpCallArgs_t))
      return fail(ncclInvalidArgument, "args->size %zu is not sizeof(ncclDcpCallArgs_t) = %zu", args->size,
                  sizeof(ncclDcpCallArgs_t));
    const bool counts = args->rowCounts || args->rowCountsDevice;
    if (counts && cfg.scatter != Scatter::Token)
      return fail(ncclInvalidArgument, "args->rowCounts%s is set but the context's scatter mode is %s, not TOKEN",
                  args->rowCounts ? "" : "Device", scatterName((ncclDcpScatter_t)cfg.scatter));
    if (args->rowCounts && args->rowCountsDevice)
      return fail(ncclInvalidArgument, "args->rowCounts and args->rowCountsDevice are both set: give one form");
    if (args->rowCounts) {
      int64_t sum = 0;
      for (int p = 0; p < nRanks; p++) {
        if (args->rowCounts[p] < 0)
          return fail(ncclInvalidArgument, "args->rowCounts[%d] = %d is negative", p, args->rowCounts[p]);
        sum += args->rowCounts[p];
        c.split.start[p + 1] = (int)std::min<int64_t>(sum, INT32_MAX);
      }
      if (sum != batch)
        return fail(ncclInvalidArgument, "args->rowCounts sum to %lld over the %d ranks, not batch %d",
                    (long long)sum, nRanks, batch);
    }
    if (args->rowCountsDevice) {
      DCPCHECK(checkAligned("args->rowCountsDevice", args->rowCountsDevice, 4));
      c.split.deviceCounts = args->rowCountsDevice;
    }
    if ((args->seqLens == nullptr) != (args->queryStartLoc == nullptr))
      return fail(ncclInvalidArgument, "args->%s is set without args->%s: give both or neither",
                  args->seqLens ? "seqLens" : "queryStartLoc", args->seqLens ? "queryStartLoc" : "seqLens");
    if (args->seqLens) {
      if (args->numSeqs < 1 || args->numSeqs > NCCL_DCP_MAX_BATCH_CAPACITY)
        return fail(ncclInvalidArgument, "args->numSeqs %d is out of range [1, %d]", args->numSeqs,
                    NCCL_DCP_MAX_BATCH_CAPACITY);
      DCPCHECK(checkAligned("args->seqLens", args->seqLens, 4));
      DCPCHECK(checkAligned("args->queryStartLoc", args->queryStartLoc, 4));
      c.numSeqs = args->numSeqs;
    } else if (args->numSeqs != 0) {
      return fail(ncclInvalidArgument, "args->numSeqs %d is set without args->seqLens and args->queryStartLoc",
                  args->numSeqs);
    }
  }
  *shape = c;
  return ncclSuccess;
}

PointerAnswer cudaPointerAnswer(const void* p) {
  cudaPointerAttributes a = {};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) cudaGetLastError();  // not sticky: the next call must not see it
  return {e, e == cudaSuccess ? a.type : cudaMemoryTypeUnregistered, e == cudaSuccess ? a.device : -1};
}

namespace {

ncclResult_t checkDeviceArray(const char* name, const void* p, int cudaDev, PointerQuery query) {
  if (p == nullptr) return ncclSuccess;
  const PointerAnswer a = query(p);
  if (a.error != cudaSuccess)
    return fail(ncclInvalidArgument,
                "%s %p: cudaPointerGetAttributes failed (%s): it cannot be shown to be device memory, which the "
                "kernels read it as",
                name, p, cudaGetErrorString(a.error));
  switch (a.type) {
    case cudaMemoryTypeManaged: return ncclSuccess;
    case cudaMemoryTypeDevice:
      if (a.device == cudaDev) return ncclSuccess;
      return fail(ncclInvalidArgument,
                  "%s %p is memory of device %d, not of the context's device %d: the kernels read it there; "
                  "pass an int32 array on device %d (or managed memory)",
                  name, p, a.device, cudaDev, cudaDev);
    case cudaMemoryTypeHost:
      return fail(ncclInvalidArgument,
                  "%s %p is pinned host memory (cudaHostAlloc / cudaHostRegister), not device memory: the kernels "
                  "read it on the GPU; pass a device (or managed) int32 array",
                  name, p);
    case cudaMemoryTypeUnregistered:
      return fail(ncclInvalidArgument,
                  "%s %p is host memory (malloc, the stack, a CPU tensor), not device memory: the kernels read it "
                  "on the GPU, where it would fault; pass a device (or managed) int32 array",
                  name, p);
  }
  return fail(ncclInvalidArgument, "%s %p is memory of unknown type %d, not device memory", name, p, (int)a.type);
}

}  // namespace

ncclResult_t checkDeviceArrays(const ncclDcpCallArgs_t* args, int cudaDev, PointerQuery query) {
  if (args == nullptr) return ncclSuccess;
  DCPCHECK(checkDeviceArray("args->rowCountsDevice", args->rowCountsDevice, cudaDev, query));
  DCPCHECK(checkDeviceArray("args->seqLens", args->seqLens, cudaDev, query));
  return checkDeviceArray("args->queryStartLoc", args->queryStartLoc, cudaDev, query);
}

ncclResult_t checkHostArrays(const ncclDcpCallArgs_t* args, PointerQuery query) {
  if (args == nullptr || args->rowCounts == nullptr) return ncclSuccess;
  const PointerAnswer a = query(args->rowCounts);
  if (a.error == cudaSuccess && a.type == cudaMemoryTypeDevice)
    return fail(ncclInvalidArgument,
                "args->rowCounts %p is device memory (of device %d): the host reads it at the call; pass host "
                "memory, or the device array as args->rowCountsDevice",
                (const void*)args->rowCounts, a.device);
  return ncclSuccess;
}

ncclResult_t checkCall(const Config& cfg, int nRanks, const CallBuffers& buf, int batch, const Strides& s,
                       const CallShape& shape, int outRows) {
  DCPCHECK(checkBatch(cfg, batch));
  if (batch == 0) return ncclSuccess;  // a no-op: buffers may be NULL, as in NCCL
  if (buf.partialOut == nullptr) return fail(ncclInvalidArgument, "partialOut is NULL");
  if (buf.partialLse == nullptr) return fail(ncclInvalidArgument, "partialLse is NULL");
  if (buf.out == nullptr && outRows != 0) return fail(ncclInvalidArgument, "out is NULL");
  DCPCHECK(checkAligned("partialOut", buf.partialOut, 16));
  DCPCHECK(checkAligned("partialLse", buf.partialLse, cfg.lseEltSize));
  DCPCHECK(checkAligned("out", buf.out, 16));
  if (buf.outLse) DCPCHECK(checkAligned("outLse", buf.outLse, 4));
  if (shape.numSeqs > 0 && (buf.seqLens == nullptr || buf.queryStartLoc == nullptr))
    return fail(ncclInvalidArgument, "args->seqLens and args->queryStartLoc must both be set with numSeqs %d",
                shape.numSeqs);

  const int64_t e = cfg.eltSize, l = cfg.lseEltSize, D = cfg.headDim, Hl = cfg.localHeads;
  const int64_t heads = headsPerRow(cfg, nRanks);
  // The kernels place a TOKEN rank's rows by counts the host cannot read:
  // its first row is all that can be checked.
  const int64_t rows = outRows < 0 ? 1 : outRows;
  Dim outDims[2] = {{"outRow", rows, s.outRow}, {"outHead", heads, s.outHead}};
  Dim outLseDims[2] = {{"outLseRow", rows, s.outLseRow}, {"outLseHead", heads, s.outLseHead}};

  Dim inDims[3] = {{"inRow", batch, s.inRow}, {"inPeer", nRanks, s.inPeer}, {"inHead", Hl, s.inHead}};
  Dim lseDims[3] = {{"lseRow", batch, s.lseRow}, {"lsePeer", nRanks, s.lsePeer}, {"lseHead", Hl, s.lseHead}};
  DCPCHECK(checkViewSize("partialOut", inDims, 3, D, e));
  DCPCHECK(checkViewSize("partialLse", lseDims, 3, 1, l));
  if (rows == 0) return ncclSuccess;  // TOKEN: no rows of out on this rank
  DCPCHECK(checkViewSize("out", outDims, 2, D, e));
  if (buf.outLse) DCPCHECK(checkViewSize("outLse", outLseDims, 2, 1, 4));
  DCPCHECK(checkNoSelfOverlap("out", outDims, 2, D));
  if (buf.outLse) DCPCHECK(checkNoSelfOverlap("outLse", outLseDims, 2, 1));
  Extent in = extentOf(buf.partialOut, inDims, 3, D, e);
  Extent lse = extentOf(buf.partialLse, lseDims, 3, 1, l);
  Extent out = extentOf(buf.out, outDims, 2, D, e);
  if (overlaps(out, in)) return fail(ncclInvalidArgument, "out overlaps partialOut");
  if (overlaps(out, lse)) return fail(ncclInvalidArgument, "out overlaps partialLse");
  const Extent outLse = buf.outLse ? extentOf(buf.outLse, outLseDims, 2, 1, 4) : Extent{0, 0};
  if (buf.outLse) {
    if (overlaps(outLse, in)) return fail(ncclInvalidArgument, "outLse overlaps partialOut");
    if (overlaps(outLse, lse)) return fail(ncclInvalidArgument, "outLse overlaps partialLse");
    if (overlaps(outLse, out)) return fail(ncclInvalidArgument, "outLse overlaps out");
  }
  // The int32 arrays the kernels read while they write out and outLse.
  const struct {
    const char* name;
    const int* p;
    int64_t count;
  } arrays[] = {{"args->seqLens", buf.seqLens, shape.numSeqs},
                {"args->queryStartLoc", buf.queryStartLoc, shape.numSeqs + 1},
                {"args->rowCountsDevice", shape.split.deviceCounts, nRanks}};
  for (const auto& a : arrays) {
    if (a.p == nullptr) continue;
    const Extent x = {(uintptr_t)a.p, (uintptr_t)a.p + (uintptr_t)(a.count * (int64_t)sizeof(int))};
    if (overlaps(out, x)) return fail(ncclInvalidArgument, "out overlaps %s", a.name);
    if (overlaps(outLse, x)) return fail(ncclInvalidArgument, "outLse overlaps %s", a.name);
  }
  return ncclSuccess;
}

ncclResult_t checkCall(const Config& cfg, int nRanks, const CallBuffers& buf, int batch, const Strides& s) {
  CallShape shape;
  DCPCHECK(resolveCallArgs(nullptr, cfg, nRanks, batch, &shape));
  return checkCall(cfg, nRanks, buf, batch, s, shape, outRowsOf(shape, 0));
}

namespace {

struct NcclVersion {
  int major, minor, patch;
};

NcclVersion splitVersion(int code) {
  if (code >= 20900)  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z from 2.9 on
    return {code / 10000, code % 10000 / 100, code % 100};
  return {code / 1000, code % 1000 / 100, code % 100};
}

}  // namespace

ncclResult_t checkNcclVersion(int runtimeCode, int buildCode) {
  const NcclVersion r = splitVersion(runtimeCode), b = splitVersion(buildCode);
  if (r.major != b.major || r.minor != b.minor)
    return fail(ncclInvalidUsage,
                "runtime NCCL %d.%d.%d (code %d) is not the NCCL %d.%d nccl-dcp was built against "
                "(%d.%d.%d, code %d): NCCL's device API differs between minor versions; load NCCL "
                "%d.%d's libnccl.so.2, or rebuild nccl-dcp against the NCCL the application loads "
                "(meson setup BUILD -Dnccl_home=PREFIX; scripts/fetch-nccl.sh %d.%d.%d prints one)",
                r.major, r.minor, r.patch, runtimeCode, b.major, b.minor, b.major, b.minor, b.patch,
                buildCode, b.major, b.minor, r.major, r.minor, r.patch);
  if (const char* why = ncclPatchMismatch(buildCode, runtimeCode))
    return fail(ncclInvalidUsage,
                "runtime NCCL %d.%d.%d (code %d) cannot serve nccl-dcp built against NCCL %d.%d.%d "
                "(code %d): %s; load NCCL %d.%d.%d's libnccl.so.2, or rebuild nccl-dcp against the NCCL "
                "the application loads (meson setup BUILD -Dnccl_home=PREFIX; scripts/fetch-nccl.sh "
                "%d.%d.%d prints one)",
                r.major, r.minor, r.patch, runtimeCode, b.major, b.minor, b.patch, buildCode, why, b.major,
                b.minor, b.patch, r.major, r.minor, r.patch);
  return ncclSuccess;
}

}  // namespace nccl_dcp
