#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <string>


namespace nccl_dcp {

namespace {

std::mutex logMutex;
FILE* logFile = nullptr;
char hostName[64] = "";

// NCCL_DCP_DEBUG_FILE with %h -> host name and %p -> pid, as NCCL does.
std::string expandLogPath(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); i++) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'h') { out += hostName; continue; }
      if (c == 'p') { out += std::to_string(getpid()); continue; }
      out += '%';
      out += c;
      continue;
    }
    out += pattern[i];
  }
  return out;
}

void openLog() {
  gethostname(hostName, sizeof(hostName) - 1);
  if (char* dot = strchr(hostName, '.')) *dot = '\0';
  logFile = stdout;
  const std::string& path = env().debugFile;
  if (!path.empty()) {
    if (FILE* f = fopen(expandLogPath(path).c_str(), "w")) logFile = f;
  }
}

}  // namespace

LogLevel logLevel() {
  const LogLevel level = env().debug;
  logEnvWarnings();
  return level;
}

void logEnvWarnings() {
  static std::atomic<bool> printed{false};
  if (printed.load(std::memory_order_acquire) || printed.exchange(true)) return;
  for (const std::string& w : envWarnings()) WARN("%s", w.c_str());
}

void logMessage(LogLevel level, const char* file, int line, const char* fmt, ...) {
  static std::once_flag once;
  std::call_once(once, openLog);
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    dev = -1;
    cudaGetLastError();  // no driver here: not an error of the caller's
  }
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char* base = strrchr(file, '/');
  std::lock_guard<std::mutex> lock(logMutex);
  if (level == LogLevel::Trace)
    fprintf(logFile, "%s:%d:%ld [%d] NCCL-DCP TRACE %s:%d %s\n", hostName, getpid(),
            (long)syscall(SYS_gettid), dev, base ? base + 1 : file, line, msg);
  else
    fprintf(logFile, "%s:%d:%ld [%d] NCCL-DCP %s %s\n", hostName, getpid(),
            (long)syscall(SYS_gettid), dev, logLevelName(level), msg);
  fflush(logFile);
}

}  // namespace nccl_dcp
