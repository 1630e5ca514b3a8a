/*************************************************************************
 * The report: per communicator what NCCL ran (calls, sizes, GPU time), the
 * all-to-alls nccl-dcp's fused call would replace, whether the ranks lie in
 * one NVLink domain, and the fused path's expected time and saving from the
 * calibration table. A table for NCCL's log and a JSON document, built from
 * snapshots (no live state).
 ************************************************************************/
#ifndef NCCL_DCP_PLUGIN_REPORT_H_
#define NCCL_DCP_PLUGIN_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "calibration.h"
#include "comm_profile.h"

namespace nccl_dcp {
namespace plugin {

constexpr int kReportFormatVersion = 1;

// One nccl-dcp context, as the library hook reported its calls.
struct DcpSnapshot {
  uint64_t contextId = 0, commId = 0;  // the library's pointers, as numbers
  int rank = 0, nRanks = 0, cudaDev = -1;
  int headDim = 0, localHeads = 0, eltSize = 0, path = 0, protocol = 0, nvlink = -1;
  uint64_t rows = 0;
  OpSnapshot op;
  int commMatches = 0;  // communicators of the process (finished or live) of its device, rank and size
  bool listed = false;  // in the element of a finished communicator already
};

// What a report is rendered from. The registry renders a communicator's
// element of communicators[] once, when it finishes, and keeps the text;
// this holds what else the report needs.
struct ReportInput {
  std::string host;
  int pid = 0;
  std::vector<CommSnapshot> comms;  // live communicators (a report at exit)
  std::vector<DcpSnapshot> dcp;
  uint64_t dcpDropped = 0;
  bool hasCalibration = false;  // NCCL_DCP_PROFILE_CALIBRATION set
  Calibration calibration;
  std::string disabled;  // why the plugin turned itself off; empty if it did not
};

// Whether every rank of a communicator lies in one NVLink domain.
struct DomainVerdict {
  const char* verdict;  // "yes", "no" or "unknown"
  std::string source;   // what it rests on
};

// TOPOLOGY SEAM. What the plugin can know by itself is nNodes, which
// settles nothing (multi-node NVLink spans nodes; PCIe GPUs share one); a
// communicator with a nccl-dcp context takes the library's topology report
// (its hwloc/NVML model, src/topology.*). A communicator without one stays
// "unknown", one node or several, until the plugin can ask that model
// directly.
DomainVerdict nvlinkDomainOf(const CommSnapshot& comm, const std::vector<const DcpSnapshot*>& dcp);

// nccl-dcp contexts belonging to a communicator: same device, rank and size.
// NCCL gives a plugin no ncclComm_t, so this is the only link; a context
// matching several communicators is listed apart, unmatched.
std::vector<const DcpSnapshot*> dcpOf(const CommSnapshot& comm, const ReportInput& in);

struct AllToAllRow {
  uint64_t bytes = 0, calls = 0;
  double gpuUsPerCall = -1;     // -1: no GPU time collected for this size
  bool estimated = false;       // the fields below are set
  double fusedUs = 0, baseUs = 0, savingUsPerCall = 0;
};

struct AllToAllSummary {
  uint64_t calls = 0;
  double gpuUs = 0;             // GPU time of the timed calls
  uint64_t gpuCalls = 0;
  std::vector<AllToAllRow> sizes;
  std::string estimate;         // "ok" or why no saving is estimated
  double expectedSavingUs = 0;  // sum over estimated sizes of calls * saving
};

AllToAllSummary summarizeAllToAll(const CommSnapshot& comm, const DomainVerdict& domain, const ReportInput& in);

// The human table of one communicator, one line per log call.
std::vector<std::string> reportTable(const CommSnapshot& comm, const ReportInput& in);

// The process's JSON report in three parts: the head, up to
// "communicators": [; one element per communicator, joined by
// appendElement; the tail, from the closing ] (unmatched nccl-dcp
// contexts, counters). Head and tail cost the same whatever the number of
// communicators, so a finalize that renders one element stays linear.
std::string reportHead(const ReportInput& in);
std::string reportComm(const CommSnapshot& comm, const ReportInput& in);
void appendElement(std::string* elements, const std::string& element);
std::string reportTail(const ReportInput& in);
// Elements reportComm has rendered in this process (tests: one per finalize).
uint64_t commsRendered();

}  // namespace plugin
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PLUGIN_REPORT_H_
