#include "error.h"

#include <stdarg.h>
#include <stdio.h>

#include "log.h"

namespace nccl_dcp {

namespace {
thread_local char tlsLastError[1024] = "";
}  // namespace

const char* resultName(ncclResult_t code) {
  switch (code) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "unknown ncclResult_t";
  }
}

ncclResult_t fail(ncclResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tlsLastError, sizeof(tlsLastError), fmt, ap);
  va_end(ap);
  WARN("%s [%s]", tlsLastError, resultName(code));
  return code;
}

ncclResult_t record(ncclResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tlsLastError, sizeof(tlsLastError), fmt, ap);
  va_end(ap);
  return code;
}

void clearLastError() { tlsLastError[0] = '\0'; }

const char* lastError() { return tlsLastError; }

void restoreLastError(const char* message) { snprintf(tlsLastError, sizeof(tlsLastError), "%s", message); }

}  // namespace nccl_dcp
