/*************************************************************************
 * The plugin's process-wide state: the live and finished communicator
 * profiles, nccl-dcp's calls (through the library hook), NCCL's logger,
 * and the switch that turns the whole plugin off after an internal failure
 * (one warning; NCCL's job goes on without it).
 *
 * Locks only where NCCL creates or destroys a communicator and where the
 * library's first call of a context registers it; events never lock.
 ************************************************************************/
#ifndef NCCL_DCP_PLUGIN_REGISTRY_H_
#define NCCL_DCP_PLUGIN_REGISTRY_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "comm_profile.h"
#include "dcp_hook.h"
#include "nccl_profiler_abi.h"
#include "report.h"
#include "report_file.h"

namespace nccl_dcp {
namespace plugin {

constexpr int kDcpContexts = 256;  // nccl-dcp contexts per process; more are counted as dropped

// The plugin's environment, read when it is needed (tests change it).
struct Settings {
  std::string profileFile;  // NCCL_DCP_PROFILE_FILE (%h host, %p pid); empty: no JSON
  std::string calibration;  // NCCL_DCP_PROFILE_CALIBRATION: a perf -J file
  bool kernelTiming = true; // NCCL_DCP_PROFILE_KERNEL=0: no KernelCh events (no GPU time)
  std::string injectFault;  // NCCL_DCP_PROFILE_INJECT_FAULT=init|report: tests of the failure path
  // A value the plugin refused (kept at its default), one line per variable.
  std::vector<std::string> refused;
  static Settings fromEnv();
};
// A switch's value: 1/0, true/false, yes/no, on/off in any case; false
// (and *out untouched) for anything else.
bool parseBool(const char* value, bool* out);
// The plugin's variables, for the README test.
const std::vector<const char*>& pluginEnvNames();

class Registry {
 public:
  static Registry& instance();  // never destroyed: NCCL's threads may outlive static destructors

  bool enabled() const { return !disabled_.load(std::memory_order_relaxed); }
  // Turns the plugin off; the first call warns and writes the reason into
  // the report (its "disabled" field; nothing is written after that).
  // Never called with writeMutex_ held (guarded calls it after unwinding).
  void disable(const std::string& why);

  void setLogger(ncclDebugLogger_t logger);
  void log(ncclDebugLogLevel level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
  // Settings::fromEnv(), each refused value warned once per process.
  Settings settings();

  // A profile for a new communicator (null when out of memory).
  CommProfile* addComm(const CommIdentity& id, bool kernelTiming);
  // Retires a live profile, writes the reports (its table to the log, the
  // JSON of every finished communicator to the file: its own element
  // appended in place, see writeJson); false when `p` is not one
  // (finalized already, or never created).
  bool finalizeComm(CommProfile* p);
  // Rewrites the JSON with the live communicators too (process exit
  // without finalize), the GPU time of their last plans folded in as at
  // finalize; nothing when none is live or the plugin is off.
  void writeAtExit();

  void recordDcpCall(const ncclDcpProfilerCall_v1_t& call);

 private:
  Registry() = default;
  struct DcpEntry;
  DcpEntry* dcpEntry(const ncclDcpProfilerCall_v1_t& call);
  ReportInput collect(bool withLive);
  void writeDisabledReport();
  void markListed(const DcpSnapshot& d);
  // The report: head, `elements` (of which the file already holds the
  // first `state_.elementsBytes` when they are the finished ones), tail.
  void writeJson(const ReportInput& in, const std::string& elements);
  // True the first time `what` is asked about.
  bool firstWarning(const std::string& what);

  std::atomic<bool> disabled_{false};
  std::string disabledWhy_;
  std::atomic<ncclDebugLogger_t> logger_{nullptr};

  // Held from a report's collect() to its write (rename or tail rewrite):
  // the file always ends with the newest state, whichever thread finalizes
  // last.
  std::mutex writeMutex_;
  std::string finishedJson_;  // (writeMutex_) the finished communicators' elements, rendered once each
  // (writeMutex_) The report file as written last: a finalize appends its
  // element there in place (the old tail overwritten by the element and
  // the new tail) while the file is still that one, with the same path and
  // head; otherwise it is replaced whole.
  struct FileState {
    std::string path, head;
    WrittenFile file;
    size_t elementsBytes = 0;  // of the elements written, a prefix of finishedJson_ (npos: not)
  } state_;

  std::mutex mutex_;  // the state below
  std::vector<std::unique_ptr<CommProfile>> live_;
  // Communicators ever profiled per (device, rank, size): what links a
  // nccl-dcp context to one (report.h dcpOf), without keeping them.
  std::map<std::tuple<int, int, int>, int> commsPerKey_;
  std::vector<std::string> warned_;  // what was warned once: files that cannot be written, refused values

  std::atomic<DcpEntry*> dcp_[kDcpContexts] = {};
  std::atomic<uint64_t> dcpDropped_{0};
};

}  // namespace plugin
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PLUGIN_REGISTRY_H_
