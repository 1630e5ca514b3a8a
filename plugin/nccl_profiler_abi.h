/*************************************************************************
 * NCCL's profiler plugin ABI, declared here from NCCL's documented structs
 * (NCCL does not install its plugin headers; plugins carry their own copy,
 * as NCCL's ext-profiler README advises). Only what this plugin uses.
 *
 *   ncclProfiler_v5   NCCL 2.28 (src/include/plugin/profiler/profiler_v5.h)
 *   ncclProfiler_v6   NCCL 2.29 and 2.30 (profiler_v6.h): the v5 events
 *                     plus copy-engine collectives; same layout up to the
 *                     union, whose v6 members are larger.
 *
 * NCCL looks the symbols up by name, newest first, and refuses a library
 * that exports none it knows: the version lives in the symbol name, so a
 * struct of another layout is never called.
 ************************************************************************/
#ifndef NCCL_DCP_PLUGIN_NCCL_PROFILER_ABI_H_
#define NCCL_DCP_PLUGIN_NCCL_PROFILER_ABI_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifndef NCCL_H_
// nccl.h's definition (identical values); not included so that the plugin
// needs no CUDA headers.
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;
#endif

// NCCL's logger (ext-profiler/example/nccl/common.h).
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;
enum { NCCL_LOG_SUBSYS_INIT = 1 };  // NCCL_INIT: shown by NCCL_DEBUG=INFO's default subsystems
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

// Event types (nccl_profiler.h); a plugin sets the ones it wants in init's mask.
enum {
  ncclProfileGroup = (1 << 0),         // one kernel plan of a communicator
  ncclProfileColl = (1 << 1),          // collective task of a plan
  ncclProfileP2p = (1 << 2),           // send or receive task of a plan
  ncclProfileProxyOp = (1 << 3),
  ncclProfileProxyStep = (1 << 4),
  ncclProfileProxyCtrl = (1 << 5),
  ncclProfileKernelCh = (1 << 6),      // one channel of a task's kernel, GPU timestamps
  ncclProfileNetPlugin = (1 << 7),
  ncclProfileGroupApi = (1 << 8),
  ncclProfileCollApi = (1 << 9),
  ncclProfileP2pApi = (1 << 10),
  ncclProfileKernelLaunch = (1 << 11),
  ncclProfileCeColl = (1 << 12),       // v6: collective run by copy engines
  ncclProfileCeSync = (1 << 13),       // v6
  ncclProfileCeBatch = (1 << 14),      // v6
};

// Event states (one enum for every version); only the kernel stop matters here.
typedef enum {
  ncclProfilerKernelChStop = 22,
} ncclProfilerEventState_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v5_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v6_t;

// The members of the descriptor union that v5 and v6 share, at the same
// offsets in both.
#define NCCL_DCP_PROFILER_DESCR_V5_MEMBERS \
  struct {                                 \
    bool graphCaptured;                    \
    int groupDepth;                        \
  } groupApi;                              \
  struct {                                 \
    const char* func;                      \
    size_t count;                          \
    const char* datatype;                  \
    int root;                              \
    void* stream;                          \
    bool graphCaptured;                    \
  } collApi;                               \
  struct {                                 \
    const char* func;                      \
    size_t count;                          \
    const char* datatype;                  \
    void* stream;                          \
    bool graphCaptured;                    \
  } p2pApi;                                \
  struct {                                 \
    void* stream;                          \
  } kernelLaunch;                          \
  struct {                                 \
    uint64_t seqNumber;                    \
    const char* func;                      \
    void const* sendBuff;                  \
    void* recvBuff;                        \
    size_t count;                          \
    int root;                              \
    const char* datatype;                  \
    uint8_t nChannels;                     \
    uint8_t nWarps;                        \
    const char* algo;                      \
    const char* proto;                     \
    void* parentGroup;                     \
  } coll;                                  \
  struct {                                 \
    const char* func;                      \
    void* buff;                            \
    const char* datatype;                  \
    size_t count;                          \
    int peer;                              \
    uint8_t nChannels;                     \
    void* parentGroup;                     \
  } p2p;                                   \
  struct {                                 \
    pid_t pid;                             \
    uint8_t channelId;                     \
    int peer;                              \
    int nSteps;                            \
    int chunkSize;                         \
    int isSend;                            \
  } proxyOp;                               \
  struct {                                 \
    int step;                              \
  } proxyStep;                             \
  struct {                                 \
    uint8_t channelId;                     \
    uint64_t pTimer; /* GPU globaltimer, ns */ \
  } kernelCh;                              \
  struct {                                 \
    int64_t id;                            \
    void* data;                            \
  } netPlugin;

typedef struct {
  uint64_t type;    // one ncclProfile* bit
  void* parentObj;  // handle of the parent event (Coll/P2p: API event; KernelCh: the task)
  int rank;
  union {
    NCCL_DCP_PROFILER_DESCR_V5_MEMBERS
  };
} ncclProfilerEventDescr_v5_t;

typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    NCCL_DCP_PROFILER_DESCR_V5_MEMBERS
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      const char* syncStrategy;
      bool intraBatchSync;
      uint32_t batchSize;
      uint32_t numBatches;
      uint32_t ceSeqNum;
      void* stream;
    } ceColl;
    struct {
      bool isComplete;
      int nRanks;
    } ceCollSync;
    struct {
      int numOps;
      size_t totalBytes;
      bool useIntraSync;
    } ceCollBatch;
  };
} ncclProfilerEventDescr_v6_t;

#undef NCCL_DCP_PROFILER_DESCR_V5_MEMBERS

typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;  // GPU globaltimer at the channel's end, ns
  } kernelCh;
} ncclProfilerEventStateArgs_v5_t;
typedef ncclProfilerEventStateArgs_v5_t ncclProfilerEventStateArgs_v6_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v5_t eState,
                                   ncclProfilerEventStateArgs_v5_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v6_t eState,
                                   ncclProfilerEventStateArgs_v6_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v6_t;

#endif  // NCCL_DCP_PLUGIN_NCCL_PROFILER_ABI_H_
