/*************************************************************************
 * NCCL_DEBUG-style logging: NCCL_DCP_DEBUG=VERSION|WARN|INFO|TRACE,
 * NCCL_DCP_DEBUG_FILE=path (%h host, %p pid). Lines read
 *   host:pid:tid [dev] NCCL-DCP INFO message
 ************************************************************************/
#ifndef NCCL_DCP_LOG_H_
#define NCCL_DCP_LOG_H_

#include "env.h"

namespace nccl_dcp {

// Level in force (from the environment, read once). The first call prints
// the environment's warnings (logEnvWarnings).
LogLevel logLevel();
// envWarnings() as WARN lines, once per process (later calls, and the
// logger's own calls while it prints them, do nothing): with the level and
// file the environment sets, as every other line.
void logEnvWarnings();
void logMessage(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace nccl_dcp

#define NCCL_DCP_LOG(level, ...)                                               \
  do {                                                                         \
    if (::nccl_dcp::logLevel() >= (level))                                     \
      ::nccl_dcp::logMessage((level), __FILE__, __LINE__, __VA_ARGS__);        \
  } while (0)
#define WARN(...) NCCL_DCP_LOG(::nccl_dcp::LogLevel::Warn, __VA_ARGS__)
#define INFO(...) NCCL_DCP_LOG(::nccl_dcp::LogLevel::Info, __VA_ARGS__)
#define TRACE(...) NCCL_DCP_LOG(::nccl_dcp::LogLevel::Trace, __VA_ARGS__)

#endif  // NCCL_DCP_LOG_H_
