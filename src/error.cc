#include "error.h"

#include <stdarg.h>
#include <stdio.h>

#include "log.h"

namespace nccl_dcp {

namespace {
thread_local char tlsLastError[1024] = "";
}

ncclResult_t fail(ncclResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tlsLastError, sizeof(tlsLastError), fmt, ap);
  va_end(ap);
  WARN("%s (%s)", tlsLastError, ncclGetErrorString(code));
  return code;
}

void clearLastError() { tlsLastError[0] = '\0'; }

const char* lastError() { return tlsLastError; }

}  // namespace nccl_dcp
