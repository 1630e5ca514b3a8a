/*************************************************************************
 * Every NCCL_DCP_* variable, parsed in one place (listed in docs/environment.md).
 * The bottom of the host layers: includes nothing of ours, so logging
 * (log.h) sits on top of it and never the other way round.
 ************************************************************************/
#ifndef NCCL_DCP_ENV_H_
#define NCCL_DCP_ENV_H_

#include <string>
#include <vector>

namespace nccl_dcp {

// NCCL_DEBUG-style levels (NCCL_DCP_DEBUG); log.h prints at them.
enum class LogLevel : int { None = 0, Version = 1, Warn = 2, Info = 3, Trace = 4 };
const char* logLevelName(LogLevel level);

constexpr int kEnvUnset = -1;

struct Env {
  LogLevel debug = LogLevel::Warn;  // NCCL_DCP_DEBUG: WARN unless set (a slower path is never silent)
  std::string debugFile;            // NCCL_DCP_DEBUG_FILE
  int protocol = kEnvUnset;         // NCCL_DCP_PROTO: AUTO|LL|LL128|SIMPLE
  int timeoutMs = kEnvUnset;        // NCCL_DCP_TIMEOUT_MS (0 = wait forever)
  int maxBatch = kEnvUnset;         // NCCL_DCP_MAX_BATCH: default capacity (rows)
  int simpleMinRows = kEnvUnset;    // NCCL_DCP_SIMPLE_MIN_ROWS: AUTO's LL128 -> SIMPLE crossover
  bool forceFallback = false;       // NCCL_DCP_FORCE_FALLBACK=1: NCCL_DCP_PROVIDER=fallback
  int provider = kEnvUnset;         // NCCL_DCP_PROVIDER: ncclDcpProvider_t (auto, nccl-window, cuda-ipc, fallback)
  int pdl = kEnvUnset;              // NCCL_DCP_PDL=0|1: programmatic dependent launch
  int simpleSendWarps = kEnvUnset;  // NCCL_DCP_SIMPLE_SEND_WARPS: SIMPLE's writing warps per block
  int noneAlgo = kEnvUnset;         // NCCL_DCP_NONE_ALGO: auto|direct|two_phase (NoneAlgo, types.h)
};

using EnvGetter = const char* (*)(const char* name);

// Parses the variables through get (getenv in production, a table in tests).
// Unparsable values keep their default and add a message to warnings.
Env parseEnv(EnvGetter get, std::vector<std::string>* warnings);

// The process environment, parsed once (thread-safe).
const Env& env();

// Tests only: env() returns *e until called again with nullptr. Not
// thread-safe against concurrent library calls.
void setEnvForTesting(const Env* e);
// Tests only: env() returns *e on the calling thread (over the process-wide
// override) until called again with nullptr: one thread per rank, each
// with its own environment, as separate processes would have.
void setThreadEnvForTesting(const Env* e);

// What parsing the process's environment refused (a malformed value: the
// default stands), one line each; parses it first if need be. The logger
// prints them once (log.h: logEnvWarnings).
const std::vector<std::string>& envWarnings();

// Names of every variable the library or its tests read, for the test that
// docs/environment.md lists them.
const std::vector<const char*>& envVariableNames();
// The NCCL_DCP_* names read outside the library: by the profiler plugin,
// the Python package and the tools (listed in docs/environment.md too).
const std::vector<const char*>& otherVariableNames();

// The NCCL_DCP_* names in `environ` (NAME=value entries, NULL-terminated)
// that nothing of nccl-dcp reads (the library, its plugin, its tools): a
// misspelt variable is otherwise ignored without a word.
std::vector<std::string> unknownVariables(const char* const* environ);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_ENV_H_
