#include "env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <mutex>

#include "enums.h"
#include "nccl_dcp.h"

namespace nccl_dcp {

namespace {

const char* const kLogLevelNames[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
const LogLevel kLogLevels[] = {LogLevel::None, LogLevel::Version, LogLevel::Warn, LogLevel::Info,
                               LogLevel::Trace};

bool parseInt(const char* s, long lo, long hi, int* out) {
  if (s == nullptr || *s == '\0') return false;
  char* end = nullptr;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

template <typename T>
bool parseName(const char* s, const char* const* names, const T* values, int n, T* out) {
  for (int i = 0; i < n; i++) {
    if (strcasecmp(s, names[i]) == 0) {
      *out = values[i];
      return true;
    }
  }
  return false;
}

void warnBad(std::vector<std::string>* warnings, const char* name, const char* value,
             const char* expected) {
  if (warnings)
    warnings->push_back(std::string(name) + "=" + value + " ignored: expected " + expected);
}

}  // namespace

const char* logLevelName(LogLevel level) {
  const int i = (int)level;
  return i >= 0 && i < 5 ? kLogLevelNames[i] : "";
}

Env parseEnv(EnvGetter get, std::vector<std::string>* warnings) {
  Env e;
  if (const char* s = get("NCCL_DCP_DEBUG")) {
    if (!parseName(s, kLogLevelNames, kLogLevels, 5, &e.debug))
      warnBad(warnings, "NCCL_DCP_DEBUG", s, "NONE, VERSION, WARN, INFO or TRACE");
  }
  if (const char* s = get("NCCL_DCP_DEBUG_FILE")) e.debugFile = s;
  if (const char* s = get("NCCL_DCP_PROTO")) {
    if (!parseProtocol(s, &e.protocol)) warnBad(warnings, "NCCL_DCP_PROTO", s, "AUTO, LL, LL128 or SIMPLE");
  }
  if (const char* s = get("NCCL_DCP_TIMEOUT_MS")) {
    if (!parseInt(s, 0, 24L * 3600 * 1000, &e.timeoutMs)) {
      e.timeoutMs = kEnvUnset;
      warnBad(warnings, "NCCL_DCP_TIMEOUT_MS", s, "milliseconds in [0, 86400000], 0 = forever");
    }
  }
  if (const char* s = get("NCCL_DCP_MAX_BATCH")) {
    if (!parseInt(s, 1, NCCL_DCP_MAX_BATCH_CAPACITY, &e.maxBatch)) {
      e.maxBatch = kEnvUnset;
      warnBad(warnings, "NCCL_DCP_MAX_BATCH", s, "rows in [1, 1048576]");
    }
  }
  if (const char* s = get("NCCL_DCP_SIMPLE_MIN_ROWS")) {
    if (!parseInt(s, 0, NCCL_DCP_MAX_BATCH_CAPACITY, &e.simpleMinRows)) {
      e.simpleMinRows = kEnvUnset;
      warnBad(warnings, "NCCL_DCP_SIMPLE_MIN_ROWS", s, "rows in [0, 1048576], 0 = never");
    }
  }
  if (const char* s = get("NCCL_DCP_FORCE_FALLBACK")) {
    int v = 0;
    if (parseInt(s, 0, 1, &v)) e.forceFallback = v == 1;
    else warnBad(warnings, "NCCL_DCP_FORCE_FALLBACK", s, "0 or 1");
  }
  if (const char* s = get("NCCL_DCP_PROVIDER")) {
    if (!parseProvider(s, &e.provider))
      warnBad(warnings, "NCCL_DCP_PROVIDER", s, "auto, nccl-window, cuda-ipc or fallback");
  }
  if (const char* s = get("NCCL_DCP_SIMPLE_SEND_WARPS")) {
    if (!parseInt(s, 1, 7, &e.simpleSendWarps)) {
      e.simpleSendWarps = kEnvUnset;
      warnBad(warnings, "NCCL_DCP_SIMPLE_SEND_WARPS", s, "warps in [1, 7]");
    }
  }
  if (const char* s = get("NCCL_DCP_NONE_ALGO")) {
    if (!parseNoneAlgo(s, &e.noneAlgo)) warnBad(warnings, "NCCL_DCP_NONE_ALGO", s, "auto, direct or two_phase");
  }
  if (const char* s = get("NCCL_DCP_PDL")) {
    if (!parseInt(s, 0, 1, &e.pdl)) {
      e.pdl = kEnvUnset;
      warnBad(warnings, "NCCL_DCP_PDL", s, "0 or 1");
    }
  }
  return e;
}

namespace {
const Env* envOverride = nullptr;
thread_local const Env* threadEnvOverride = nullptr;
}  // namespace

void setEnvForTesting(const Env* e) { envOverride = e; }
void setThreadEnvForTesting(const Env* e) { threadEnvOverride = e; }

namespace {

// The process's environment, parsed once, and what the parse refused (the
// logger prints those: logEnvWarnings, one layer up).
struct ProcessEnv {
  Env env;
  std::vector<std::string> warnings;
};

const ProcessEnv& processEnv() {
  static ProcessEnv p;
  static std::once_flag once;
  std::call_once(once, [] { p.env = parseEnv([](const char* n) -> const char* { return getenv(n); }, &p.warnings); });
  return p;
}

}  // namespace

const Env& env() {
  if (threadEnvOverride) return *threadEnvOverride;
  if (envOverride) return *envOverride;
  return processEnv().env;
}

const std::vector<std::string>& envWarnings() { return processEnv().warnings; }

std::vector<std::string> unknownVariables(const char* const* environ) {
  std::vector<std::string> unknown;
  for (const char* const* e = environ; e && *e; e++) {
    const char* eq = strchr(*e, '=');
    const std::string name(*e, eq ? (size_t)(eq - *e) : strlen(*e));
    if (name.compare(0, 9, "NCCL_DCP_") != 0) continue;
    bool known = false;
    for (const char* n : envVariableNames()) known = known || name == n;
    for (const char* n : otherVariableNames()) known = known || name == n;
    if (!known) unknown.push_back(name);
  }
  return unknown;
}

const std::vector<const char*>& envVariableNames() {
  static const std::vector<const char*> names = {
      "NCCL_DCP_DEBUG",          "NCCL_DCP_DEBUG_FILE", "NCCL_DCP_PROTO",
      "NCCL_DCP_TIMEOUT_MS",     "NCCL_DCP_MAX_BATCH",  "NCCL_DCP_SIMPLE_MIN_ROWS",
      "NCCL_DCP_FORCE_FALLBACK", "NCCL_DCP_PDL",        "NCCL_DCP_REQUIRE_GPU",
      "NCCL_DCP_SOURCE_ROOT",    "NCCL_DCP_SIMPLE_SEND_WARPS", "NCCL_DCP_PROVIDER",
      "NCCL_DCP_NONE_ALGO"};
  return names;
}

const std::vector<const char*>& otherVariableNames() {
  static const std::vector<const char*> names = {"NCCL_DCP_PROFILE_FILE", "NCCL_DCP_PROFILE_CALIBRATION",
                                                 "NCCL_DCP_PROFILE_KERNEL", "NCCL_DCP_PROFILE_INJECT_FAULT",
                                                 "NCCL_DCP_LIB", "NCCL_DCP_HEADER"};
  return names;
}

}  // namespace nccl_dcp
