#include "registry.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <stdexcept>

namespace nccl_dcp {
namespace plugin {

namespace {

constexpr std::memory_order relaxed = std::memory_order_relaxed;

std::string envOr(const char* name, const char* fallback) {
  const char* v = getenv(name);
  return v ? v : fallback;
}

uint64_t idOf(const void* p) { return (uint64_t)(uintptr_t)p; }

}  // namespace

bool parseBool(const char* value, bool* out) {
  static const char* const kTrue[] = {"1", "true", "yes", "on"};
  static const char* const kFalse[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    const bool yes = strcasecmp(value, kTrue[i]) == 0;
    if (yes || strcasecmp(value, kFalse[i]) == 0) {
      *out = yes;
      return true;
    }
  }
  return false;
}

namespace {

// A switch from the environment; unset or empty keeps `fallback`, a value
// that is no boolean keeps it too and is named in *refused.
bool envBool(const char* name, bool fallback, std::vector<std::string>* refused) {
  const char* v = getenv(name);
  bool out = fallback;
  if (v == nullptr || *v == '\0' || parseBool(v, &out)) return out;
  refused->push_back(std::string(name) + "=\"" + v + "\" is not a boolean (1/0, true/false, yes/no, on/off); using " +
                     (fallback ? "1" : "0"));
  return fallback;
}

}  // namespace

Settings Settings::fromEnv() {
  Settings s;
  s.profileFile = envOr("NCCL_DCP_PROFILE_FILE", "");
  s.calibration = envOr("NCCL_DCP_PROFILE_CALIBRATION", "");
  s.kernelTiming = envBool("NCCL_DCP_PROFILE_KERNEL", true, &s.refused);
  s.injectFault = envOr("NCCL_DCP_PROFILE_INJECT_FAULT", "");
  return s;
}

const std::vector<const char*>& pluginEnvNames() {
  static const std::vector<const char*> names = {"NCCL_DCP_PROFILE_FILE", "NCCL_DCP_PROFILE_CALIBRATION",
                                                 "NCCL_DCP_PROFILE_KERNEL", "NCCL_DCP_PROFILE_INJECT_FAULT"};
  return names;
}

struct Registry::DcpEntry {
  const void* context;
  const void* comm;
  int rank, nRanks, cudaDev, headDim, localHeads, eltSize, path, protocol;
  std::atomic<int> nvlink;
  std::atomic<uint64_t> rows{0};
  std::atomic<bool> listed{false};  // with a finished communicator (DcpSnapshot::listed)
  OpStats stats;
};

Registry& Registry::instance() {
  static Registry* r = new Registry();  // leaked on purpose (see the header)
  return *r;
}

void Registry::setLogger(ncclDebugLogger_t logger) {
  if (logger) logger_.store(logger, relaxed);
}

void Registry::log(ncclDebugLogLevel level, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (ncclDebugLogger_t logger = logger_.load(relaxed))
    logger(level, NCCL_LOG_SUBSYS_INIT, __FILE__, __LINE__, "NCCL-DCP profiler: %s", msg);
  else if (level == NCCL_LOG_WARN)
    fprintf(stderr, "NCCL-DCP profiler WARN %s\n", msg);
}

bool Registry::firstWarning(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::find(warned_.begin(), warned_.end(), what) != warned_.end()) return false;
  warned_.push_back(what);
  return true;
}

Settings Registry::settings() {
  Settings s = Settings::fromEnv();
  for (const std::string& why : s.refused)
    if (firstWarning(why)) log(NCCL_LOG_WARN, "%s", why.c_str());
  return s;
}

void Registry::disable(const std::string& why) {
  if (disabled_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    disabledWhy_ = why;
  }
  log(NCCL_LOG_WARN, "disabled after an internal failure (%s); NCCL goes on without it", why.c_str());
  writeDisabledReport();
}

// Once off, the plugin writes no report at finalize or at exit, so the
// reason goes into the file now: the finished communicators' elements
// under a head whose "disabled" names it (live ones are left out: their
// counts stop here). Runs in guarded's handler: nothing may escape.
void Registry::writeDisabledReport() {
  try {
    std::lock_guard<std::mutex> order(writeMutex_);
    writeJson(collect(false), finishedJson_);
  } catch (...) {
  }
}

CommProfile* Registry::addComm(const CommIdentity& id, bool kernelTiming) {
  std::unique_ptr<CommProfile> p = CommProfile::create(id, kernelTiming);
  if (!p) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  live_.push_back(std::move(p));
  commsPerKey_[{id.cudaDev, id.rank, id.nRanks}]++;
  return live_.back().get();
}

// Each finalize renders its own communicator's element once and writes it
// after those of the communicators finished before, kept as text, in
// place (writeJson): neither the formatting nor the I/O of a finalize
// grows with the job's communicators, and the file holds every finished
// one as soon as it finishes (a job killed later, when no exit handler
// runs, keeps them).
bool Registry::finalizeComm(CommProfile* p) {
  CommSnapshot done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(live_.begin(), live_.end(), [p](const std::unique_ptr<CommProfile>& q) { return q.get() == p; });
    if (it == live_.end()) return false;
    done = (*it)->finish(true);
    live_.erase(it);  // frees the profile: NCCL sends no event after finalize
  }
  if (!enabled()) return true;
  if (Settings::fromEnv().injectFault == "report") throw std::runtime_error("injected report fault");
  std::lock_guard<std::mutex> order(writeMutex_);
  const ReportInput in = collect(false);
  for (const std::string& line : reportTable(done, in)) log(NCCL_LOG_INFO, "%s", line.c_str());
  appendElement(&finishedJson_, reportComm(done, in));
  for (const DcpSnapshot* d : dcpOf(done, in)) markListed(*d);
  writeJson(in, finishedJson_);
  return true;
}

// Live communicators join the finished ones only here: rendering them at
// every finalize would cost each finalize all the live ones.
void Registry::writeAtExit() {
  // A finalize in flight on another thread writes its own report.
  std::unique_lock<std::mutex> order(writeMutex_, std::try_to_lock);
  if (!order.owns_lock() || !enabled()) return;
  const ReportInput in = collect(true);
  if (in.comms.empty()) return;
  std::string elements = finishedJson_;
  for (const CommSnapshot& c : in.comms) appendElement(&elements, reportComm(c, in));
  writeJson(in, elements);
}

ReportInput Registry::collect(bool withLive) {
  ReportInput in;
  in.host = shortHostName();
  in.pid = (int)getpid();
  const Settings settings = Settings::fromEnv();
  in.hasCalibration = !settings.calibration.empty();
  if (in.hasCalibration) in.calibration = loadCalibration(settings.calibration);
  for (const std::atomic<DcpEntry*>& slot : dcp_) {
    const DcpEntry* e = slot.load(std::memory_order_acquire);
    if (e == nullptr) continue;
    DcpSnapshot d;
    d.contextId = idOf(e->context);
    d.commId = idOf(e->comm);
    d.rank = e->rank;
    d.nRanks = e->nRanks;
    d.cudaDev = e->cudaDev;
    d.headDim = e->headDim;
    d.localHeads = e->localHeads;
    d.eltSize = e->eltSize;
    d.path = e->path;
    d.protocol = e->protocol;
    d.nvlink = e->nvlink.load(relaxed);
    d.rows = e->rows.load(relaxed);
    d.op = e->stats.snapshot(OpKind::DcpA2aLseReduce);
    d.listed = e->listed.load(relaxed);
    in.dcp.push_back(std::move(d));
  }
  in.dcpDropped = dcpDropped_.load(relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  if (withLive)  // the exit's report: the GPU time of their last plans folded in, as at finalize
    for (const auto& p : live_) in.comms.push_back(p->finish(false));
  in.disabled = disabledWhy_;
  for (DcpSnapshot& d : in.dcp) {
    auto it = commsPerKey_.find({d.cudaDev, d.rank, d.nRanks});
    d.commMatches = it == commsPerKey_.end() ? 0 : it->second;
  }
  return in;
}

// A context listed with a finished communicator is not listed again as
// unmatched when a later communicator of the same device, rank and size
// makes the match ambiguous.
void Registry::markListed(const DcpSnapshot& d) {
  for (const std::atomic<DcpEntry*>& slot : dcp_) {
    DcpEntry* e = slot.load(std::memory_order_acquire);
    if (e != nullptr && idOf(e->context) == d.contextId && idOf(e->comm) == d.commId) e->listed.store(true, relaxed);
  }
}

// One file per process (reportPath). The finished communicators' elements
// only grow, so a finalize rewrites the file's end in place (rewriteTail):
// its element and the tail over the old tail, bytes of its own plus a tail
// bounded by kDcpContexts, not a copy of the whole file (that was
// quadratic in the communicators: 3 MB per finalize after 3000). The first
// report, one after the path or the head changed (calibration, disabled),
// one after anything else touched the file, and the exit's (live
// communicators after the finished ones) replace it whole, atomically
// (replaceFile). No link is followed and no special file written either
// way; a file that cannot be written warns once.
void Registry::writeJson(const ReportInput& in, const std::string& elements) {
  const std::string pattern = Settings::fromEnv().profileFile;
  if (pattern.empty()) return;
  const std::string path = reportPath(pattern);
  const std::string head = reportHead(in), tail = reportTail(in);
  const bool finished = &elements == &finishedJson_;
  std::string why;
  const size_t kept = state_.elementsBytes;
  if (finished && path == state_.path && head == state_.head && kept != std::string::npos && kept <= elements.size()) {
    const std::string text = elements.substr(kept) + tail;
    WrittenFile now;
    if (rewriteTail(path, state_.file, (off_t)(head.size() + kept), text, &now, &why)) {
      state_.file = now;
      state_.elementsBytes = elements.size();
      log(NCCL_LOG_INFO, "report written to %s", path.c_str());
      return;
    }
  }
  WrittenFile whole;
  if (why.empty() && replaceFile(path, {&head, &elements, &tail}, &why, &whole)) {
    state_ = {path, head, whole, finished ? elements.size() : std::string::npos};
    log(NCCL_LOG_INFO, "report written to %s", path.c_str());
    return;
  }
  state_ = FileState();
  if (firstWarning(path)) log(NCCL_LOG_WARN, "cannot write NCCL_DCP_PROFILE_FILE %s: %s", path.c_str(), why.c_str());
}

// The entry of a (context, comm) pair: found lock-free; the first call of
// a context takes the lock once to create it.
Registry::DcpEntry* Registry::dcpEntry(const ncclDcpProfilerCall_v1_t& call) {
  const uint64_t key = idOf(call.context) * 0x9E3779B97F4A7C15ull ^ idOf(call.comm);
  const unsigned start = (unsigned)(key >> 32) % kDcpContexts;
  // The entry, or null with *freeIndex = the first empty slot (-1: full).
  auto probe = [&](int* freeIndex) -> DcpEntry* {
    *freeIndex = -1;
    for (int i = 0; i < kDcpContexts; i++) {
      const int at = (start + i) % kDcpContexts;
      DcpEntry* e = dcp_[at].load(std::memory_order_acquire);
      if (e == nullptr) {
        *freeIndex = at;
        return nullptr;
      }
      if (e->context == call.context && e->comm == call.comm) return e;
    }
    return nullptr;
  };
  int freeIndex = -1;
  if (DcpEntry* e = probe(&freeIndex)) return e;
  std::lock_guard<std::mutex> lock(mutex_);
  if (DcpEntry* e = probe(&freeIndex)) return e;  // created meanwhile
  if (freeIndex < 0) return nullptr;
  DcpEntry* e = new (std::nothrow) DcpEntry();
  if (e == nullptr) return nullptr;
  e->context = call.context;
  e->comm = call.comm;
  e->rank = call.rank;
  e->nRanks = call.nRanks;
  e->cudaDev = call.cudaDev;
  e->headDim = call.headDim;
  e->localHeads = call.localHeads;
  e->eltSize = call.eltSize;
  e->path = call.path;
  e->protocol = call.protocol;
  e->nvlink.store(call.nvlink, relaxed);
  dcp_[freeIndex].store(e, std::memory_order_release);
  return e;
}

void Registry::recordDcpCall(const ncclDcpProfilerCall_v1_t& call) {
  DcpEntry* e = dcpEntry(call);
  if (e == nullptr) {
    dcpDropped_.fetch_add(1, relaxed);
    return;
  }
  e->rows.fetch_add((uint64_t)call.rows, relaxed);
  e->nvlink.store(call.nvlink, relaxed);
  e->stats.addCalls(call.bytes, 1);
}

}  // namespace plugin
}  // namespace nccl_dcp
