/*************************************************************************
 * nccl-dcp: fused all-to-all + LSE-weighted reduce for decode context
 * parallelism (DCP) of MLA attention, on NCCL symmetric windows.
 *
 * This header is the contract. C ABI, NCCL conventions: every call returns
 * ncclResult_t; versioned structs carry a size/magic/version header and must
 * be initialised with their ..._INITIALIZER macro.
 *
 * Environment: the library reads its NCCL_DCP_* variables ONCE PER
 * PROCESS, at the first call that needs one (the first create or
 * ncclDcpWorkspaceSize, or the first log line), and keeps those values for
 * the process's life: setting, changing or unsetting one afterwards
 * (setenv, os.environ) changes nothing, for later contexts too. Set them
 * before the process's first nccl-dcp call; a config field is the per-
 * context way (maxBatch, protocol, timeoutMs). The one variable read at
 * each create is NCCL's NCCL_CUMEM_ENABLE (getenv, only to explain a
 * missing symmetric memory in the topology report's pathNote). The
 * profiler plugin's NCCL_DCP_PROFILE_* are the plugin's, read each time
 * they are used: KERNEL at each communicator's init, FILE and CALIBRATION
 * at each report (a communicator's finalize, the process's exit).
 *
 * The operation (one DCP group = the ranks of one communicator, cp = nRanks):
 *   every rank holds, for all H = cp * localHeads heads, a partial attention
 *   output partialOut[B][H][D] and its log-sum-exp partialLse[B][H]. The
 *   merge of (row b, head h) over the cp sources s = 0..cp-1 is
 *     l_s = lse_s[b][h] with NaN and +inf read as -inf
 *           (and -inf where row b is empty on rank s: ncclDcpCallArgs_t)
 *     m   = max_s l_s (0 if all are -inf),  w_s = base^(l_s - m)
 *     merged[b][h][:] = sum_s (w_s / sum_k w_k) * o_s[b][h][:]  (0 if sum is 0)
 *     mergedLse[b][h] = m + log_base(sum_k w_k)                (-inf if sum is 0)
 *   accumulated in fp32 in the fixed source order s = 0..cp-1; a source with
 *   w_s = 0 is skipped by a select, so NaN payloads behind an LSE of -inf
 *   never leak. Where the merges go is the context's scatter mode:
 *     HEAD  (default) rank r ends with its heads h = r*Hl + j of every row:
 *           out[b][j] = merged[b][r*Hl+j], out [B][Hl][D];
 *     TOKEN rank r ends with every head of its own rows, a contiguous slice
 *           [start_r, start_r + n_r) of the batch (n_r: even split, or the
 *           call's counts): out[i][h] = merged[start_r+i][h], out [n_r][H][D];
 *     NONE  every rank ends with everything: out [B][H][D]. Direct (every
 *           partial to every peer), or with NCCL_DCP_NONE_ALGO=two_phase
 *           (or auto: from 3 ranks) HEAD's merge then every rank's merged
 *           heads to every peer: 2(cp-1)/cp of a row's units received
 *           instead of cp-1. The bits are the same either way.
 *   Batch invariance: the bits of merged[b][h] depend only on the cp inputs
 *   of (b, h) -- not on the batch, its chunking (maxBatch), the protocol, the
 *   path (fused or fallback), the scatter mode or the split. With fp8 on the
 *   wire they depend on the merging rank too, whose own share stays exact:
 *   NONE's ranks then hold the same merges to e4m3's rounding, not
 *   bitwise.
 ************************************************************************/
#ifndef NCCL_DCP_H_
#define NCCL_DCP_H_

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_DCP_MAJOR 0
#define NCCL_DCP_MINOR 5
#define NCCL_DCP_PATCH 0
#define NCCL_DCP_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
#define NCCL_DCP_VERSION_CODE NCCL_DCP_VERSION(NCCL_DCP_MAJOR, NCCL_DCP_MINOR, NCCL_DCP_PATCH)

/* Limits checked by every entry point. */
#define NCCL_DCP_MAX_RANKS 64        /* ranks of one DCP group (cp) */
#define NCCL_DCP_MAX_HEAD_DIM 4096   /* D */
#define NCCL_DCP_MAX_LOCAL_HEADS 1024 /* Hl */
#define NCCL_DCP_MAX_BATCH_CAPACITY (1 << 20) /* rows per chunk */

typedef struct ncclDcpContext* ncclDcpContext_t;

/* Base of the log-sum-exp values (partialLse in, outLse out). */
typedef enum {
  ncclDcpLseBase2 = 0, /* lse = log2(sum 2^s): FlashInfer, FlashMLA */
  ncclDcpLseBaseE = 1, /* lse = ln(sum e^s):   vLLM, SGLang merge_state */
  ncclDcpNumLseBases = 2
} ncclDcpLseBase_t;

/* Wire protocol of the fused path (DESIGN §4). */
typedef enum {
  ncclDcpProtoAuto = 0,   /* policy: topology + bytes per call */
  ncclDcpProtoLL = 1,     /* 16-byte lines {data32, flag32, data32, flag32}: any P2P path */
  ncclDcpProtoLL128 = 2,  /* 128-byte lines, 15 data words + 1 flag word: NVLink only */
  ncclDcpProtoSimple = 3, /* bulk stores + one release flag per (source, chunk): large batches */
  ncclDcpNumProtocols = 4
} ncclDcpProtocol_t;

/* Where the merged heads go (see the top of this header). */
typedef enum {
  ncclDcpScatterHead = 0,  /* rank r: its Hl heads of every row */
  ncclDcpScatterToken = 1, /* rank r: every head of its slice of rows */
  ncclDcpScatterNone = 2,  /* every rank: every head of every row */
  ncclDcpNumScatters = 3
} ncclDcpScatter_t;

/* What crosses the link between ranks (DESIGN §15). The merge is fp32 either
 * way and the LSEs never narrow; only the remote partials do. */
typedef enum {
  ncclDcpWireNative = 0,  /* the partials as dtype holds them: exact */
  ncclDcpWireFp8E4m3 = 1, /* e4m3 elements + one fp32 scale (amax / 448) per
                             (row, head) and source: about half the bytes, ~2%
                             relative RMS error (DESIGN §15); a rank's own
                             share and every LSE stay exact. dtype bf16 or
                             fp16, headDim % 16 == 0, every scatter mode (NONE
                             runs its direct algorithm). Opt-in. Any other
                             value: ncclInvalidArgument naming config->wire */
  ncclDcpNumWires = 2
} ncclDcpWire_t;

/* Context configuration. Fields left at NCCL_CONFIG_UNDEF_INT take their
 * default (documented per field); headDim, localHeads, dtype and lseBase have
 * no default and must be set. */
typedef struct ncclDcpConfig_v1 {
  /* header: set by NCCL_DCP_CONFIG_INITIALIZER, never by hand */
  size_t size;
  unsigned int magic;
  unsigned int version;
  /* the operation */
  int headDim;            /* D, elements per head; D * sizeof(dtype) % 16 == 0 */
  int localHeads;         /* Hl, heads owned by each rank (H = cp * Hl) */
  ncclDataType_t dtype;   /* ncclBfloat16, ncclFloat16 or ncclFloat32 */
  int lseBase;            /* ncclDcpLseBase_t */
  /* resources and policy */
  int maxBatch;           /* rows per chunk held by the workspace; larger batches
                             run in chunks inside one call. Default:
                             NCCL_DCP_MAX_BATCH, else 256 */
  int protocol;           /* ncclDcpProtocol_t. Default: NCCL_DCP_PROTO, else AUTO */
  int timeoutMs;          /* bound on every device-side wait, 0 = forever.
                             Default: NCCL_DCP_TIMEOUT_MS, else 60000: long
                             enough for a healthy peer that is merely late (a
                             compilation, a checkpoint load, a GC pause). At
                             the bound the context is poisoned (see
                             ncclDcpA2aLseReduce). Also bounds the host's
                             waits on a nonblocking communicator's
                             ncclInProgress (create, the fallback's exchange,
                             destroy): past it ncclRemoteError, and the
                             communicator must be aborted (create's wait for
                             a communicator still initialising, before the
                             config is read, takes NCCL_DCP_TIMEOUT_MS or
                             60000) */
  /* appended in 0.3 (a 0.2 caller's shorter struct takes the defaults) */
  int scatter;            /* ncclDcpScatter_t. Default HEAD. TOKEN's and
                             NONE's workspaces hold all H heads of maxBatch
                             rows per source (cp times HEAD's); NONE in two
                             phases (NCCL_DCP_NONE_ALGO) twice HEAD's */
  ncclDataType_t lseDtype; /* of partialLse: ncclFloat32 (default),
                             ncclBfloat16 or ncclFloat16; outLse is fp32 */
  /* appended in 0.4 (an older caller's shorter struct takes native) */
  int reserved0;          /* overlays 0.3's tail padding, never read: a 0.3
                             caller's struct (sizeof 56) and this one (64)
                             then differ in size. Set to 0 by the initializer */
  int wire;               /* ncclDcpWire_t. Default native. fp8 narrows the
                             units that cross the link, on every protocol and
                             path (the fallback path's units cross as D e4m3
                             bytes, ncclUint8); the workspace shrinks
                             with the units. Refused by create and
                             ncclDcpWorkspaceSize (ncclInvalidArgument naming
                             config->wire): a value that is no ncclDcpWire_t
                             (negative or >= ncclDcpNumWires;
                             NCCL_CONFIG_UNDEF_INT is the default), and fp8
                             with dtype fp32 or headDim % 16 != 0; fp8 with
                             scatter NONE and NCCL_DCP_NONE_ALGO=two_phase
                             (NONE runs direct with fp8). A 0.3 caller's
                             struct (no wire) is native */
} ncclDcpConfig_t;

#define NCCL_DCP_CONFIG_MAGIC 0xdc9c0f16u

#define NCCL_DCP_CONFIG_INITIALIZER {                              \
  sizeof(ncclDcpConfig_t),               /* size */                \
  NCCL_DCP_CONFIG_MAGIC,                 /* magic */               \
  NCCL_DCP_VERSION_CODE,                 /* version */             \
  NCCL_CONFIG_UNDEF_INT,                 /* headDim */             \
  NCCL_CONFIG_UNDEF_INT,                 /* localHeads */          \
  (ncclDataType_t)NCCL_CONFIG_UNDEF_INT, /* dtype */               \
  NCCL_CONFIG_UNDEF_INT,                 /* lseBase */             \
  NCCL_CONFIG_UNDEF_INT,                 /* maxBatch */            \
  NCCL_CONFIG_UNDEF_INT,                 /* protocol */            \
  NCCL_CONFIG_UNDEF_INT,                 /* timeoutMs */           \
  NCCL_CONFIG_UNDEF_INT,                 /* scatter */             \
  (ncclDataType_t)NCCL_CONFIG_UNDEF_INT, /* lseDtype */            \
  0,                                     /* reserved0 */           \
  NCCL_CONFIG_UNDEF_INT,                 /* wire */                \
}

/* Strides of the call's tensors, in elements (of dtype for partialOut / out,
 * of lseDtype for partialLse, of float for outLse). The last dimension (D)
 * is always contiguous. A stride of 0 means "packed": partialOut
 * [B][cp][Hl][D], partialLse [B][cp][Hl], out [rows][heads][D], outLse
 * [rows][heads], where out's rows and heads are the scatter mode's (HEAD:
 * B and Hl; TOKEN: n_r and H; NONE: B and H; outHead steps over them,
 * outRow over rows). The transposed view
 * [B][Hl][cp][D] that attention kernels produce is inPeer = D,
 * inHead = cp * D, inRow = Hl * cp * D. Strides must be >= 0; strides of
 * partialOut and out must be multiples of 16 bytes. */
typedef struct ncclDcpStrides_v1 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int64_t inRow, inPeer, inHead;     /* partialOut */
  int64_t lseRow, lsePeer, lseHead;  /* partialLse */
  int64_t outRow, outHead;           /* out */
  int64_t outLseRow, outLseHead;     /* outLse */
} ncclDcpStrides_t;

#define NCCL_DCP_STRIDES_MAGIC 0xdc95721du

#define NCCL_DCP_STRIDES_INITIALIZER {                             \
  sizeof(ncclDcpStrides_t), NCCL_DCP_STRIDES_MAGIC, NCCL_DCP_VERSION_CODE, \
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0                                     \
}

/* How a peer is reached (DESIGN §5). */
typedef enum {
  ncclDcpLinkUnknown = 0, /* not classified (no topology information) */
  ncclDcpLinkSelf = 1,
  ncclDcpLinkNvlink = 2,  /* direct or through NVSwitch */
  ncclDcpLinkPcie = 3,
  ncclDcpLinkNetwork = 4  /* another node: outside the LSA team */
} ncclDcpLink_t;

/* Path a context runs its calls on. */
typedef enum {
  ncclDcpPathFused = 0,    /* one kernel over the peers' workspaces (load/store pointers) */
  ncclDcpPathFallback = 1  /* ncclAlltoAll of the partials + a combine kernel */
} ncclDcpPath_t;

/* Where the fused path's workspace and its peer pointers come from, chosen
 * at create (agreed by every rank) in this order of preference:
 *  - nccl-window: ncclMemAlloc + ncclCommWindowRegister + a device
 *    communicator (NCCL's symmetric memory, LSA pointers); the only provider
 *    that spans a multi-node NVLink domain;
 *  - cuda-ipc: when NCCL has no symmetric memory (NCCL_CUMEM_ENABLE=0, as
 *    vLLM sets it; NCCL without cuMem) and every rank is on one host with
 *    P2P to every other: cudaMalloc memory, handles exchanged through an
 *    ncclAllGather on the communicator, opened with cudaIpcOpenMemHandle
 *    (ranks in other processes) or by peer access (threads of one process).
 *    Same kernels, protocols and AUTO policy;
 *  - fallback: no workspace; ncclAlltoAll + combine (ncclDcpPathFallback).
 * NCCL_DCP_PROVIDER=nccl-window|cuda-ipc|fallback forces one (create fails
 * on every rank when the forced one is not available). */
typedef enum {
  ncclDcpProviderAuto = 0,       /* a request only: the first available above */
  ncclDcpProviderNcclWindow = 1,
  ncclDcpProviderCudaIpc = 2,
  ncclDcpProviderFallback = 3,
  ncclDcpNumProviders = 4
} ncclDcpProvider_t;

/* Where the NVLink information of a topology report came from. */
typedef enum {
  ncclDcpTopoSourceNone = 0,  /* no NVLink information (no NVML, or NVML answered
                                 "Not Supported"): links inside the node are Unknown */
  ncclDcpTopoSourceHwloc = 1, /* hwloc's NVLinkBandwidth matrix (hwloc built with NVML) */
  ncclDcpTopoSourceNvml = 2   /* NVML, read by nccl-dcp and added to hwloc's model */
} ncclDcpTopoSource_t;

/* PCIe path between two GPUs of a node (whatever link carries the traffic). */
typedef enum {
  ncclDcpPcieUnknown = 0,     /* self, another node, or not in the topology */
  ncclDcpPcieSwitch = 1,      /* below one PCIe switch */
  ncclDcpPcieRootComplex = 2, /* through one CPU socket's root complex */
  ncclDcpPcieCrossSocket = 3  /* through the link between CPU sockets */
} ncclDcpPcie_t;

#define NCCL_DCP_CPUSET_CHARS 128

typedef struct ncclDcpTopology_v1 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int nRanks, rank;
  int lsaSize;                /* ranks reachable by load/store: NCCL's LSA team (nccl-window),
                                 every rank (cuda-ipc) */
  int path;                   /* ncclDcpPath_t */
  int protocol;               /* ncclDcpProtocol_t for small batches (AUTO resolved) */
  int classified;             /* 1 when every rank knows its link to every rank of the
                                 LSA team (NVLink or PCIe): what AUTO decided on */
  int link[NCCL_DCP_MAX_RANKS];          /* ncclDcpLink_t per rank, seen from this rank */
  float nvlinkGBps[NCCL_DCP_MAX_RANKS];  /* per direction; 0 unless link is NVLink */
  char busId[NCCL_DCP_MAX_RANKS][16];    /* "0000:00:00.0" per rank */
  /* the topology model (hwloc, DESIGN §5) */
  int source;                            /* ncclDcpTopoSource_t */
  char sourceDetail[128];                /* how the NVLink information was found, or why not */
  int pcie[NCCL_DCP_MAX_RANKS];          /* ncclDcpPcie_t per rank, from this rank's GPU */
  int numaNode[NCCL_DCP_MAX_RANKS];      /* NUMA node nearest each rank's GPU; -1 unknown */
  char cpuset[NCCL_DCP_MAX_RANKS][NCCL_DCP_CPUSET_CHARS]; /* CPUs nearest each rank's GPU,
                                            list format "0-55,112-167"; "" unknown */
  int simpleMinRows;                     /* AUTO: rounds of >= this many rows use SIMPLE; 0 never */
  /* appended in 0.2 */
  int provider;                          /* ncclDcpProvider_t of the workspace (Fallback: none) */
  char pathNote[256];                    /* why the context is not on the fastest path its
                                            GPUs could take, and the remedy; "" when it is */
} ncclDcpTopology_t;

#define NCCL_DCP_TOPOLOGY_MAGIC 0xdc970901u
#define NCCL_DCP_TOPOLOGY_INITIALIZER {                                   \
  sizeof(ncclDcpTopology_t), NCCL_DCP_TOPOLOGY_MAGIC, NCCL_DCP_VERSION_CODE, \
  0, 0, 0, 0, 0, 0, {0}, {0}, {{0}},                                       \
  0, {0}, {0}, {0}, {{0}}, 0, 0, {0}                                       \
}

/* Library version (NCCL_DCP_VERSION_CODE of the loaded library).
 * Thread-safe. */
ncclResult_t ncclDcpGetVersion(int* version);

/* Bytes of symmetric workspace one rank needs for cfg in a group of nRanks
 * (what ncclDcpContextCreate allocates, and the least a window region given to
 * ncclDcpContextCreateInWindow must hold). Local, no GPU needed, thread-safe. */
ncclResult_t ncclDcpWorkspaceSize(const ncclDcpConfig_t* cfg, int nRanks, size_t* bytes);

/* Creates a context on the caller's communicator. COLLECTIVE: every rank of
 * comm calls it with an equal config; the ranks agree through NCCL itself
 * (all-gathers). Every input that shapes the workspace, the protocol or the
 * launches is agreed, whatever its source (config, NCCL_DCP_* variables,
 * build options): a mismatch fails every rank alike, naming the input and
 * the first rank that differs. (NCCL_DCP_SIMPLE_SEND_WARPS aside: it
 * divides a rank's own sends among its warps, which no peer sees.) A failure of any rank at any step (a bad
 * argument, memory, a registration) is returned by every rank with the same
 * code and message, naming that rank and step, and every rank releases what
 * it had created; no rank is left waiting in a collective step: a local
 * failure before one (the communicator's state, the exchange's stream or
 * scratch, a record's copy to the device) reaches every rank through the
 * next all-gather. Only a rank that cannot take part in an all-gather at
 * all returns alone (no device memory for its exchange, about 40 KB, at
 * its first create on a GPU; a device in a sticky error), and its peers
 * wait in NCCL until the communicator is aborted. A NULL comm is refused
 * at once (there is nobody to tell).
 * Allocates the workspace with ncclMemAlloc, registers it as a window,
 * creates a device communicator; falls back to ncclAlltoAll + combine when
 * the ranks are not all in one LSA team. Blocking; not capturable. Must not
 * be called inside ncclGroupStart/End: to create contexts for several GPUs
 * driven by one thread use ncclDcpContextCreateGroup. Inside one, NCCL
 * defers create's all-gather to the caller's ncclGroupEnd: create sees no
 * record arrive and fails with ncclInvalidUsage ("called inside
 * ncclGroupStart/End?"), on every rank that called it so; the scratch
 * (a few KB) and the stream the queued all-gather uses are left allocated
 * for the process's life (a WARN), so that the caller's ncclGroupEnd runs
 * it into live memory. Thread-safe for distinct communicators. */
ncclResult_t ncclDcpContextCreate(ncclComm_t comm, const ncclDcpConfig_t* cfg,
                                  ncclDcpContext_t* ctx);

/* ncclDcpContextCreate for nComms communicators driven by the calling thread
 * (one per GPU, e.g. from ncclCommInitAll): the collective steps are grouped
 * with ncclGroupStart/End internally. ctxs[i] belongs to comms[i]. */
ncclResult_t ncclDcpContextCreateGroup(int nComms, const ncclComm_t* comms,
                                       const ncclDcpConfig_t* cfg, ncclDcpContext_t* ctxs);

/* Like ncclDcpContextCreate, but the workspace is carved from a window the
 * application already registered on comm: [offset, offset + bytes) of win.
 * offset must be a multiple of 4096, bytes at least ncclDcpWorkspaceSize,
 * and offset + bytes must not overflow (checked). NCCL does not tell the
 * library a window's size: that [offset, offset + bytes) lies inside win is
 * the caller's. Nothing is allocated or registered; the window must outlive
 * the context. The provider is nccl-window (the window is NCCL's).
 * COLLECTIVE, same rules as ncclDcpContextCreate; a NULL win is invalid. */
ncclResult_t ncclDcpContextCreateInWindow(ncclComm_t comm, ncclWindow_t win, size_t offset,
                                          size_t bytes, const ncclDcpConfig_t* cfg,
                                          ncclDcpContext_t* ctx);

/* Destroys a context: device communicator, window registration and memory
 * it owns. Every rank destroys its context after its last call. Blocking:
 * waits for all work on the context's GPU (calls in flight) to finish; it
 * exchanges nothing with the peers (cuda-ipc across processes aside,
 * below). After a peer failed (a call timed out, ncclDcpGetAsyncError),
 * use ncclDcpContextAbort instead: on the fallback path a dead peer leaves
 * NCCL's all-to-all waiting (its bound is NCCL's own: ncclCommAbort), and
 * destroy would wait for it.
 * cuda-ipc: a rank's workspace is freed only once no peer can write into
 * it any more. Ranks that are threads of one process: with the last of
 * their contexts that addresses it (destroyed or aborted), so a late
 * rank's writes land in memory still allocated, never in a workspace a
 * later create got. Ranks in several processes: destroy is COLLECTIVE --
 * each rank closes its mappings of its peers' workspaces
 * (cudaIpcCloseMemHandle), the ranks agree on it through the communicator
 * (one ncclAllGather per context; destroy the contexts of one communicator
 * in the same order on every rank), and only then does each free its own
 * (CUDA's IPC rules forbid freeing first). The agreement waits at most the
 * context's timeoutMs (0: for ever); past it (a peer aborted or died)
 * destroy returns ncclRemoteError, the workspace stays allocated for the
 * process's life (a WARN), and the communicator holds an all-gather no
 * peer may join: abort it (ncclCommAbort).
 * NULL: a no-op. */
ncclResult_t ncclDcpContextDestroy(ncclDcpContext_t ctx);

/* Abandons a context after a peer failed, for instance when a call timed out
 * (ncclDcpGetAsyncError returns ncclRemoteError) or the application knows a
 * rank died. LOCAL and non-collective; never waits on a peer and returns in
 * well under a second:
 *  - every device-side wait of the context's kernels is stopped (a context
 *    in an application's window: its kernels stop at their timeout);
 *  - it waits at most 500 ms for the context's last call to finish (the
 *    stream it was made on may be gone), then deregisters the window and
 *    destroys the device communicator (both local), and frees the host
 *    state; its device memory is freed by the next create or destroy on the
 *    same GPU (freeing now could wait for NCCL kernels stuck on the dead
 *    peer). If that work does not finish (an ncclAlltoAll of the fallback
 *    path stuck on the peer, or anything the application queued behind the
 *    call), the device memory and the window registration are left for
 *    ncclCommAbort and the process exit, and a WARN says so;
 *  - cuda-ipc: the workspace its peers write into stays allocated while a
 *    peer thread's context still addresses it (it is freed with that
 *    context, at the GPU's next create or destroy), and for the process's
 *    life when peers in other processes may map it: nothing tells when they
 *    closed it, and freeing it first is undefined. A WARN names it: one
 *    workspace per such abort (ncclDcpWorkspaceSize bytes).
 * The NCCL communicator is left to the application: call ncclCommAbort on it
 * after this (never before: this still deregisters the window on it).
 * ctx is invalid afterwards; NULL is a no-op.
 * Handles: every function taking a context is defined on every handle the
 * library ever returned. One that was destroyed or aborted (a second abort,
 * destroy after abort, the same context twice in ncclDcpContextDestroyGroup)
 * gets ncclInvalidArgument and a message, never a crash. Abort may be called
 * from another thread (a watchdog) while a call on ctx is being enqueued:
 * it stops the kernels first, then waits for that call's host side
 * (microseconds; a launch blocked behind the stuck kernels returns once
 * they stop), and later calls are refused as stale. */
ncclResult_t ncclDcpContextAbort(ncclDcpContext_t ctx);

/* ncclDcpContextDestroy for contexts of several GPUs driven by the calling
 * thread (the collective steps, cuda-ipc's agreement across processes, are
 * grouped internally), e.g. those made by ncclDcpContextCreateGroup. NULL
 * entries are skipped. Every entry is
 * checked before any is touched: one that is not live (destroyed,
 * aborted, never returned) or one that repeats an earlier entry fails the
 * whole call with ncclInvalidArgument naming the entries, and destroys
 * NOTHING -- every other context of the array stays live and ctxs is left
 * as it was (fix the array and call again). On success every entry of
 * ctxs is set to NULL. */
ncclResult_t ncclDcpContextDestroyGroup(int nCtxs, ncclDcpContext_t* ctxs);

/* The fused collective (see the top of this header), on the context's
 * scatter mode and lseDtype (partialLse is of lseDtype: float* for the
 * default fp32). Enqueued on stream,
 * asynchronous, capturable in a CUDA graph (replays advance the device-side
 * call counter, so a replayed graph stays correct). Every rank must call it
 * with the same batch, in the same order relative to its other calls on ctx.
 *  - partialOut: B x H x D of dtype, 16-byte aligned; partialLse: B x H of
 *    lseDtype.
 *  - out: rows x heads x D of dtype (HEAD: B x Hl; TOKEN: n_r x H; NONE:
 *    B x H), 16-byte aligned; outLse: rows x heads fp32 or NULL.
 *  - strides: NULL = packed (see ncclDcpStrides_t).
 *  - 0 <= batch <= INT_MAX - maxBatch; 0 is a no-op; batch > maxBatch runs
 *    in chunks.
 *  - Outputs must not overlap inputs.
 * Streams, as NCCL orders a communicator's operations: any stream will do,
 * and the library orders a call after the previous call on ctx with CUDA
 * events, eagerly and under stream capture (the first call captured in a
 * graph waits, at each replay, for whatever call on ctx was launched before
 * the replay: an eager call or another graph's replay; each replay then
 * counts as ctx's last call). So PyTorch's recipe -- an eager call, a
 * capture on a side stream, replays on a third -- and micro-batches
 * alternating between streams need nothing of the caller. The caller's:
 * the order of the data (the inputs written before the call, the outputs
 * read after it, on whatever stream), calls on one ctx from several threads
 * at once (not thread-safe on one context), and launching a graph while
 * another thread calls on the same ctx. Contexts are independent: two
 * contexts (e.g. two micro-batches) run concurrently on two streams; their
 * kernels wait on peers, so two calls in flight at once must both fit on
 * the GPUs of every rank (small decode batches do; a call of many rows can
 * fill a GPU).
 * Arguments are checked on the host before anything is enqueued.
 * A poisoned context (a device-side wait timed out: a peer did not take
 * part; or, on the fallback path, NCCL's asynchronous error) never hides
 * it: every later call writes NaN into every out row and outLse entry it
 * owns, at once and without waiting on peers -- on the fused path eager or
 * replayed from a graph, on the fallback path eager (a replayed graph runs
 * NCCL's all-to-all, which the communicator's error governs: abort it) --
 * and the eager call returns the async error (ncclRemoteError for a
 * timeout). Engines that only replay graphs call ncclDcpGetAsyncError.
 * On the fallback path a context poisoned by its own device counts still
 * takes part in NCCL's exchange (its peers would wait in it for ever),
 * sending units that merge to NaN on every peer. A call on that path whose
 * own launch fails (a CUDA error before its exchange) returns the error
 * without joining the exchange, as an NCCL collective that fails to
 * enqueue does: its peers wait in NCCL, bounded only on a nonblocking
 * communicator (abort the communicator).
 * Inside ncclDcpGroupStart/End the call is checked now and enqueued at
 * ncclDcpGroupEnd. Never call it inside the application's
 * ncclGroupStart/End: the fallback path's all-to-all would be deferred past
 * the combine that reads it; one thread driving several GPUs groups its
 * calls with ncclDcpGroupStart/End instead. */
ncclResult_t ncclDcpA2aLseReduce(ncclDcpContext_t ctx, const void* partialOut,
                                 const float* partialLse, void* out, float* outLse, int batch,
                                 const ncclDcpStrides_t* strides, cudaStream_t stream);

/* What a call may add to its buffers (ncclDcpA2aLseReduceEx); NULL or a
 * field left 0/NULL: none of it. Initialise with
 * NCCL_DCP_CALL_ARGS_INITIALIZER.
 * TOKEN split: rank p owns rows [start_p, start_p + n_p) of the batch,
 * start_p = n_0 + ... + n_{p-1}. Without counts the split is even: the
 * first batch % cp ranks take one row more. Counts come in one of two forms:
 *  - rowCounts: host int[cp], read and checked at the call (n_p >= 0, sum
 *    = batch); a captured call keeps the values it was captured with.
 *    Device memory there is refused (ncclInvalidArgument naming it: the
 *    host would fault reading it); that is rowCountsDevice's form;
 *  - rowCountsDevice: device int32[cp], read by the kernels when they run,
 *    so each replay of a captured graph may use new counts. Checked there:
 *    counts that are negative or do not sum to batch poison the context
 *    (ncclDcpGetAsyncError: ncclInvalidArgument). Such counts give no
 *    rows, so the call that finds them, and every later call while they
 *    stay invalid, writes NaN over the rows of the last split the kernels
 *    accepted on this context -- what the previous replay wrote -- cut at
 *    this call's batch (never past it), and nothing before the first
 *    accepted one. The host cannot know n_r: out must hold the rows the
 *    counts give this rank.
 *  Every rank passes the same counts. Counts that differ between ranks
 *  (or valid on some ranks only) never mix the splits on the fused path:
 *  TOKEN's flags carry a tag of each rank's split, so every protocol's
 *  waits time out alike (ncclRemoteError on the ranks involved, the
 *  context poisoned). The fallback path has no such check: there each
 *  rank merges the rows its own counts give it, and rows may be merged
 *  twice or by no rank, without an error.
 *  Only a TOKEN context takes counts.
 * Empty shards (vLLM's seq_lens / query_start_loc), any scatter mode:
 *  - seqLens: device int32[numSeqs], this rank's local KV length of each
 *    sequence; queryStartLoc: device int32[numSeqs + 1], non-decreasing,
 *    the rows of sequence i are [queryStartLoc[i], queryStartLoc[i+1]).
 *    Rows of a sequence whose local length is 0 (or negative), and rows
 *    outside [queryStartLoc[0], queryStartLoc[numSeqs]) (padding), are
 *    empty on this rank whatever partialLse and partialOut
 *    hold (attention leaves them undefined): their LSE reads as -inf. A row
 *    empty on every rank merges to out 0 and outLse -inf. Read by the
 *    kernels when they run (graph-safe); both or neither, numSeqs >= 1.
 * The device arrays (rowCountsDevice, seqLens, queryStartLoc) must be
 * memory of the context's GPU or managed memory: each call asks
 * cudaPointerGetAttributes (a host-side query, legal under stream capture;
 * about a microsecond each) and refuses host memory, pinned or not,
 * another GPU's memory and a pointer the runtime cannot place with
 * ncclInvalidArgument naming the argument, before anything is enqueued
 * (a host pointer would fault the kernel and end the CUDA context); out
 * and outLse must not overlap them either (ncclInvalidArgument naming
 * both). Their contents are not read on the host; numSeqs <= 2^20. */
typedef struct ncclDcpCallArgs_v1 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  const int* rowCounts;        /* TOKEN: host int[cp], or NULL */
  const int* rowCountsDevice;  /* TOKEN: device int32[cp], or NULL */
  const int* seqLens;          /* device int32[numSeqs], or NULL */
  const int* queryStartLoc;    /* device int32[numSeqs + 1], or NULL */
  int numSeqs;
} ncclDcpCallArgs_t;

#define NCCL_DCP_CALL_ARGS_MAGIC 0xdc9ca115u
#define NCCL_DCP_CALL_ARGS_INITIALIZER {                           \
  sizeof(ncclDcpCallArgs_t), NCCL_DCP_CALL_ARGS_MAGIC, NCCL_DCP_VERSION_CODE, \
  NULL, NULL, NULL, NULL, 0                                        \
}

/* ncclDcpA2aLseReduce with the call's additions (args, may be NULL) and a
 * partialLse of the context's lseDtype. ncclDcpA2aLseReduce(...) is
 * ncclDcpA2aLseReduceEx(..., NULL, stream). */
ncclResult_t ncclDcpA2aLseReduceEx(ncclDcpContext_t ctx, const void* partialOut, const void* partialLse,
                                   void* out, float* outLse, int batch, const ncclDcpStrides_t* strides,
                                   const ncclDcpCallArgs_t* args, cudaStream_t stream);

/* Registered outputs: NONE's phase 2 straight into the peers' buffers.
 * NONE in two phases merges each rank's heads there, then sends every
 * merged head to every peer. Into unregistered outputs it crosses twice:
 * into the peer's workspace, then the peer copies it into its out. Into
 * outputs registered here it crosses once: the owner stores it straight
 * into the peer's out and outLse, as NCCL writes a registered symmetric
 * buffer (a loopback A/B of this kernel change on one H100: 0.66-0.70x the
 * staged time from 64 rows at cp 8; docs/perf-history.md).
 * ncclDcpOutputRegister registers out [out, out + outBytes) and outLse
 * [outLse, outLse + outLseBytes) (NULL and 0: none) on ctx. COLLECTIVE: every
 * rank registers, in the same order relative to its calls on ctx, ranges
 * of the same sizes. out 16-byte aligned, outLse 4-byte aligned, neither
 * empty, neither wrapping, not overlapping (ncclInvalidArgument naming
 * the argument). A call then takes the direct path when
 *  - ctx runs NONE in two phases (NCCL_DCP_NONE_ALGO two_phase, or auto
 *    from 3 ranks), on the fused path with the nccl-window provider;
 *  - every element the call writes lies inside one registration: out,
 *    and outLse if the call passes one;
 *  - every rank passes out and outLse at the same offsets of its
 *    registration, with the same strides (NCCL's rule for symmetric
 *    buffers);
 * and only for its rounds on the SIMPLE protocol (the line protocols of
 * the smallest batches stage: their flags ride in the payload). Other
 * calls, other modes, the fallback path and the cuda-ipc provider stage,
 * as before: registering there is accepted, holds no resource beyond the
 * record, and an INFO line says why. nccl-window: both ranges are
 * registered as NCCL windows (ncclCommWindowRegister), which NCCL maps for
 * its peers at this rank's offset into its own allocation: each range must
 * lie in memory from ncclMemAlloc (PyTorch: a MemPool on NCCL's
 * allocator), at an offset into its allocation that is a multiple of 4096
 * and the same on every rank, with the same sizes. Registration checks
 * that with one all-gather before any window is made: if any rank's ranges
 * fail, every rank returns ncclInvalidArgument (the rank at fault names
 * why) and nothing is registered. NCCL's own failure to register, after
 * that, is returned with its message on the ranks where it failed.
 * A call that breaks the same-offset rule is not silent: phase 2's flags
 * carry a 32-bit tag of the registration, the offsets and the strides, so
 * the ranks that disagree, or a rank that stages while its peers do not,
 * wait out the context's timeout (ncclRemoteError, the context poisoned,
 * NaN over the heads they did not get); a peer may by then have written
 * its merged heads into this rank's registered memory at its own offset.
 * As with any registered buffer, after a peer failed a late peer may still
 * write into it, over those NaN too, until ncclDcpContextAbort and
 * ncclCommAbort have run.
 * Blocking; not capturable; calls captured in a graph keep the path they
 * were captured with: deregister only once no graph replays them.
 * handle: set on success. */
typedef struct ncclDcpOutput* ncclDcpOutput_t;
ncclResult_t ncclDcpOutputRegister(ncclDcpContext_t ctx, void* out, size_t outBytes, float* outLse,
                                   size_t outLseBytes, ncclDcpOutput_t* handle);

/* ncclDcpOutputRegister for nCtxs contexts driven by the calling thread
 * (one per GPU, e.g. from ncclDcpContextCreateGroup): entry i registers
 * outs[i] / outLses[i] on ctxs[i], the collective steps of all of them in
 * one NCCL group. outLses and outLseBytes: both NULL (no outLse anywhere)
 * or both arrays (an entry NULL and 0: none). All or nothing: a refused
 * entry (named) or a failed registration leaves none registered. */
ncclResult_t ncclDcpOutputRegisterGroup(int nCtxs, const ncclDcpContext_t* ctxs, void* const* outs,
                                        const size_t* outBytes, float* const* outLses,
                                        const size_t* outLseBytes, ncclDcpOutput_t* handles);

/* Undoes ncclDcpOutputRegister: waits for the context's last call to
 * finish (no peer writes into this rank's outputs once it has: each
 * waits for its owners' flags), then deregisters the windows. COLLECTIVE
 * in the sense of register: every rank deregisters between the same two
 * calls on ctx. A handle that is not registered on ctx (deregistered, or
 * another context's) gets ncclInvalidArgument. Destroy and abort release
 * what is still registered. NULL: a no-op. */
ncclResult_t ncclDcpOutputDeregister(ncclDcpContext_t ctx, ncclDcpOutput_t handle);

/* Kept for source compatibility with 0.1, when a context was bound to one
 * stream: calls may now come on any stream (see ncclDcpA2aLseReduce), so
 * this only checks ctx. Local. */
ncclResult_t ncclDcpContextBindStream(ncclDcpContext_t ctx, cudaStream_t stream);

/* Groups the calls of a thread that drives several GPUs (one context per
 * GPU, e.g. made by ncclDcpContextCreateGroup), as ncclGroupStart/End
 * groups NCCL's collectives: ncclDcpA2aLseReduce between them is checked at
 * once and enqueued by the outermost ncclDcpGroupEnd, the fallback path's
 * all-to-alls of every context in one ncclGroupStart/End (without it one
 * thread cannot drive the ranks of a communicator on the fallback path).
 * At most one call per context in a group (ncclInvalidUsage for a second).
 * Nestable, thread-local; capturable like the calls themselves. As NCCL's
 * group error fails ncclGroupEnd, a call refused inside the group (its
 * error returned at once) fails the outermost ncclDcpGroupEnd with the
 * same error, its message naming the refusal, and nothing of the group
 * enqueued; so does a context destroyed before the end. Otherwise every
 * call is enqueued, a poisoned context's included (NaN into its outputs),
 * and ncclDcpGroupEnd returns the first error. */
ncclResult_t ncclDcpGroupStart(void);
ncclResult_t ncclDcpGroupEnd(void);

/* Topology report of the context (peers, links, path, protocol, and where
 * each rank's GPU sits: PCIe path, NUMA node, CPUs). Local. */
ncclResult_t ncclDcpGetTopology(ncclDcpContext_t ctx, ncclDcpTopology_t* topo);

/* Asynchronous error of the context: ncclSuccess, or the error a device-side
 * wait recorded (ncclRemoteError on a timeout: a peer did not take part),
 * or on the fallback path the communicator's (ncclCommGetAsyncError).
 * Reads host-mapped memory; does not synchronize. Thread-safe. */
ncclResult_t ncclDcpGetAsyncError(ncclDcpContext_t ctx, ncclResult_t* asyncError);

/* Message of the last error returned to the calling thread by any nccl-dcp
 * function; "" if none. Thread-local, valid until the thread's next call. */
const char* ncclDcpGetLastError(void);

#ifdef __cplusplus
}
#endif

#endif /* NCCL_DCP_H_ */
