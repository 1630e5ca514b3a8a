#include "report.h"

#include <stdarg.h>
#include <stdio.h>

#include <atomic>
#include <locale>
#include <sstream>

#include "json.h"

namespace nccl_dcp {
namespace plugin {

namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

std::string hex(uint64_t v) { return format("0x%016llx", (unsigned long long)v); }

const OpSnapshot* findOp(const CommSnapshot& c, OpKind kind) {
  for (const OpSnapshot& op : c.ops)
    if (op.kind == kind) return &op;
  return nullptr;
}

const char* nvlinkName(int v) { return v > 0 ? "yes" : v == 0 ? "no" : "unknown"; }

// JSON: a number, or null for "not measured" (json::number also writes
// null for a value that is not finite).
std::string numberOrNull(double v, bool present) { return present ? json::number(v) : "null"; }

}  // namespace

// The library's verdict when a context of the communicator reported one;
// else "unknown" whatever nNodes says: one node need not be one NVLink
// domain (PCIe GPUs), and several nodes can be (multi-node NVLink), so the
// plugin's node count alone decides neither way.
DomainVerdict nvlinkDomainOf(const CommSnapshot& comm, const std::vector<const DcpSnapshot*>& dcp) {
  for (const DcpSnapshot* d : dcp)
    if (d->nvlink >= 0) return {nvlinkName(d->nvlink), "nccl-dcp context topology"};
  if (comm.id.nNodes > 1)
    return {"unknown", format("ranks span %d nodes (NCCL's nNodes); one NVLink domain only with multi-node NVLink, "
                              "not verified", comm.id.nNodes)};
  if (comm.id.nNodes == 1) return {"unknown", "one node (nNodes == 1); NVLink between its GPUs not verified"};
  return {"unknown", "NCCL gave no node count"};
}

std::vector<const DcpSnapshot*> dcpOf(const CommSnapshot& comm, const ReportInput& in) {
  std::vector<const DcpSnapshot*> out;
  for (const DcpSnapshot& d : in.dcp)
    if (comm.id.cudaDev == d.cudaDev && comm.id.rank == d.rank && comm.id.nRanks == d.nRanks && d.commMatches == 1)
      out.push_back(&d);
  return out;
}

// Why the fused path's saving cannot be estimated for this communicator;
// empty when it can.
static std::string estimateBlocker(const CommSnapshot& comm, const DomainVerdict& domain, const ReportInput& in) {
  if (!in.hasCalibration) return "no calibration: set NCCL_DCP_PROFILE_CALIBRATION to a dcp_a2a_lse_reduce_perf -J file";
  if (!in.calibration.usable()) return "calibration " + in.calibration.path + " unusable: " + in.calibration.error;
  if (in.calibration.nRanks != comm.id.nRanks)
    return format("calibration measured %d ranks, the communicator has %d", in.calibration.nRanks, comm.id.nRanks);
  if (std::string(domain.verdict) == "no") return "fused path not applicable: " + domain.source;
  return "";
}

AllToAllSummary summarizeAllToAll(const CommSnapshot& comm, const DomainVerdict& domain, const ReportInput& in) {
  AllToAllSummary s;
  const OpSnapshot* op = findOp(comm, OpKind::AlltoAll);
  if (op == nullptr) {
    s.estimate = "no all-to-all seen";
    return s;
  }
  s.calls = op->calls;
  s.gpuUs = op->gpuNs * 1e-3;
  s.gpuCalls = op->gpuCalls;
  const std::string blocker = estimateBlocker(comm, domain, in);
  s.estimate = blocker.empty() ? "ok" : blocker;
  for (const SizeSnapshot& z : op->sizes) {
    AllToAllRow r;
    r.bytes = z.bytes;
    r.calls = z.calls;
    if (z.gpuCalls > 0) r.gpuUsPerCall = z.gpuNs * 1e-3 / z.gpuCalls;
    if (blocker.empty() && in.calibration.at((double)z.bytes, &r.fusedUs, &r.baseUs)) {
      r.estimated = true;
      r.savingUsPerCall = r.baseUs - r.fusedUs;
      s.expectedSavingUs += r.savingUsPerCall * r.calls;
    }
    s.sizes.push_back(r);
  }
  return s;
}

std::vector<std::string> reportTable(const CommSnapshot& c, const ReportInput& in) {
  std::vector<std::string> lines;
  const std::vector<const DcpSnapshot*> dcp = dcpOf(c, in);
  const DomainVerdict domain = nvlinkDomainOf(c, dcp);
  lines.push_back(format("comm \"%s\" %s rank %d/%d nodes %d dev %d: %llu plans, GPU time %s", c.id.name.c_str(),
                         hex(c.id.commHash).c_str(), c.id.rank, c.id.nRanks, c.id.nNodes, c.id.cudaDev,
                         (unsigned long long)c.counters.plans,
                         c.kernelTiming ? "from kernel events" : "off (NCCL_DCP_PROFILE_KERNEL=0)"));
  lines.push_back(format("  %-16s %10s %16s %12s", "op", "calls", "bytes", "GPU us/call"));
  for (const OpSnapshot& op : c.ops)
    lines.push_back(format("  %-16s %10llu %16llu %12s", opKindName(op.kind), (unsigned long long)op.calls,
                           (unsigned long long)op.bytes,
                           op.gpuCalls ? format("%.2f", op.gpuNs * 1e-3 / op.gpuCalls).c_str() : "-"));
  for (const DcpSnapshot* d : dcp)
    lines.push_back(format("  %-16s %10llu %16llu %12s  (nccl-dcp, %llu rows)", "DcpA2aLseReduce",
                           (unsigned long long)d->op.calls, (unsigned long long)d->op.bytes, "-",
                           (unsigned long long)d->rows));
  const AllToAllSummary a2a = summarizeAllToAll(c, domain, in);
  if (a2a.calls == 0) return lines;
  lines.push_back(format("  all-to-all sizes (one NVLink domain: %s, %s)", domain.verdict, domain.source.c_str()));
  lines.push_back(format("  %14s %10s %12s %10s %10s %10s", "bytes", "calls", "GPU us/call", "base us", "fused us",
                         "saving us"));
  for (const AllToAllRow& r : a2a.sizes) {
    const std::string gpu = r.gpuUsPerCall >= 0 ? format("%.2f", r.gpuUsPerCall) : "-";
    if (r.estimated)
      lines.push_back(format("  %14llu %10llu %12s %10.2f %10.2f %10.2f", (unsigned long long)r.bytes,
                             (unsigned long long)r.calls, gpu.c_str(), r.baseUs, r.fusedUs, r.savingUsPerCall));
    else
      lines.push_back(format("  %14llu %10llu %12s %10s %10s %10s", (unsigned long long)r.bytes,
                             (unsigned long long)r.calls, gpu.c_str(), "-", "-", "-"));
  }
  if (a2a.estimate == "ok")
    lines.push_back(format("  expected saving with the fused path: %.1f us over %llu all-to-alls (calibration %s)",
                           a2a.expectedSavingUs, (unsigned long long)a2a.calls, in.calibration.path.c_str()));
  else
    lines.push_back("  no saving estimated: " + a2a.estimate);
  return lines;
}

namespace {

void writeOp(std::ostringstream& o, const OpSnapshot& op, const char* indent) {
  o << indent << "{\"kind\": " << json::quote(opKindName(op.kind)) << ", \"calls\": " << op.calls
    << ", \"bytes\": " << op.bytes << ", \"gpuUs\": " << json::number(op.gpuNs * 1e-3)
    << ", \"gpuCalls\": " << op.gpuCalls
    << ", \"otherSizeCalls\": " << op.otherSizeCalls << ",\n"
    << indent << " \"histogram\": [";
  bool first = true;
  for (int b = 0; b < (int)op.log2Calls.size(); b++) {
    if (op.log2Calls[b] == 0) continue;
    const unsigned long long minBytes = b == 0 ? 0ull : 1ull << (b - 1);
    o << (first ? "" : ", ") << "{\"minBytes\": " << minBytes << ", \"calls\": " << op.log2Calls[b] << "}";
    first = false;
  }
  o << "],\n" << indent << " \"sizes\": [";
  for (size_t i = 0; i < op.sizes.size(); i++) {
    const SizeSnapshot& z = op.sizes[i];
    o << (i ? ", " : "") << "{\"bytes\": " << z.bytes << ", \"calls\": " << z.calls
      << ", \"gpuUs\": " << json::number(z.gpuNs * 1e-3) << ", \"gpuCalls\": " << z.gpuCalls << "}";
  }
  o << "]}";
}

void writeDcp(std::ostringstream& o, const DcpSnapshot& d, const char* indent) {
  o << indent << "{\"context\": " << json::quote(hex(d.contextId)) << ", \"comm\": " << json::quote(hex(d.commId))
    << ", \"rank\": " << d.rank << ", \"nRanks\": " << d.nRanks << ", \"cudaDev\": " << d.cudaDev
    << ", \"headDim\": " << d.headDim << ", \"localHeads\": " << d.localHeads << ", \"eltSize\": " << d.eltSize
    << ", \"path\": " << json::quote(d.path == 0 ? "fused" : "fallback") << ", \"protocol\": " << d.protocol
    << ", \"nvlink\": " << json::quote(nvlinkName(d.nvlink)) << ", \"rows\": " << d.rows << ",\n"
    << indent << " \"op\":\n";
  writeOp(o, d.op, (std::string(indent) + "  ").c_str());
  o << "}";
}

void writeAllToAll(std::ostringstream& o, const AllToAllSummary& a, const DomainVerdict& domain) {
  o << "      \"alltoall\": {\"calls\": " << a.calls << ", \"gpuUs\": " << json::number(a.gpuUs)
    << ", \"gpuCalls\": " << a.gpuCalls
    << ", \"estimate\": " << json::quote(a.estimate)
    << ", \"assumesNvlink\": " << (std::string(domain.verdict) == "unknown" ? "true" : "false")
    << ", \"expectedSavingUs\": " << numberOrNull(a.expectedSavingUs, a.estimate == "ok") << ",\n        \"sizes\": [";
  for (size_t i = 0; i < a.sizes.size(); i++) {
    const AllToAllRow& r = a.sizes[i];
    o << (i ? "," : "") << "\n          {\"bytes\": " << r.bytes << ", \"calls\": " << r.calls
      << ", \"gpuUsPerCall\": " << numberOrNull(r.gpuUsPerCall, r.gpuUsPerCall >= 0)
      << ", \"baseUs\": " << numberOrNull(r.baseUs, r.estimated) << ", \"fusedUs\": " << numberOrNull(r.fusedUs, r.estimated)
      << ", \"savingUsPerCall\": " << numberOrNull(r.savingUsPerCall, r.estimated) << "}";
  }
  o << "]}";
}

void writeComm(std::ostringstream& o, const CommSnapshot& c, const ReportInput& in) {
  const std::vector<const DcpSnapshot*> dcp = dcpOf(c, in);
  const DomainVerdict domain = nvlinkDomainOf(c, dcp);
  const CommCounters& n = c.counters;
  o << "    {\"commHash\": " << json::quote(hex(c.id.commHash)) << ", \"name\": " << json::quote(c.id.name)
    << ", \"rank\": " << c.id.rank << ", \"nRanks\": " << c.id.nRanks << ", \"nNodes\": " << c.id.nNodes
    << ", \"cudaDev\": " << c.id.cudaDev << ", \"finalized\": " << (c.finalized ? "true" : "false")
    << ", \"kernelTiming\": " << (c.kernelTiming ? "true" : "false") << ", \"plans\": " << n.plans << ",\n"
    << "      \"nvlinkDomain\": {\"verdict\": " << json::quote(domain.verdict)
    << ", \"source\": " << json::quote(domain.source) << "},\n"
    << "      \"anomalies\": {\"tasksWithoutGroup\": " << n.tasksWithoutGroup << ", \"lateKernelEvents\": "
    << n.lateKernelEvents << ", \"unmatchedEvents\": " << n.unmatchedEvents << ", \"unknownDatatype\": "
    << n.unknownDatatype << ", \"mixedPlans\": " << n.mixedPlans
    << ", \"mixedPlanGpuUs\": " << json::number(n.mixedPlanGpuNs * 1e-3)
    << "},\n      \"ops\": [";
  for (size_t i = 0; i < c.ops.size(); i++) {
    o << (i ? "," : "") << "\n";
    writeOp(o, c.ops[i], "        ");
  }
  o << "],\n";
  writeAllToAll(o, summarizeAllToAll(c, domain, in), domain);
  o << ",\n      \"dcp\": [";
  for (size_t i = 0; i < dcp.size(); i++) {
    o << (i ? "," : "") << "\n";
    writeDcp(o, *dcp[i], "        ");
  }
  o << "]}";
}

void writeCalibration(std::ostringstream& o, const ReportInput& in) {
  if (!in.hasCalibration) {
    o << "null";
    return;
  }
  const Calibration& c = in.calibration;
  o << "{\"path\": " << json::quote(c.path) << ", \"error\": " << (c.error.empty() ? "null" : json::quote(c.error))
    << ", \"mode\": " << json::quote(c.mode) << ", \"device\": " << json::quote(c.device)
    << ", \"nRanks\": " << c.nRanks << ", \"dtype\": " << json::quote(c.dtype) << ", \"headDim\": " << c.headDim
    << ", \"localHeads\": " << c.localHeads << ", \"protocol\": " << json::quote(c.protocol)
    << ", \"points\": " << c.points.size() << "}";
}

std::atomic<uint64_t> gCommsRendered{0};

}  // namespace

std::string reportHead(const ReportInput& in) {
  std::ostringstream o;
  o.imbue(std::locale::classic());  // the host program's locale could group digits
  o << "{\n  \"tool\": \"nccl-dcp profiler plugin\",\n  \"format\": " << kReportFormatVersion
    << ",\n  \"host\": " << json::quote(in.host) << ",\n  \"pid\": " << in.pid
    << ",\n  \"disabled\": " << (in.disabled.empty() ? "null" : json::quote(in.disabled)) << ",\n  \"calibration\": ";
  writeCalibration(o, in);
  o << ",\n  \"communicators\": [";
  return o.str();
}

std::string reportComm(const CommSnapshot& c, const ReportInput& in) {
  gCommsRendered.fetch_add(1, std::memory_order_relaxed);
  std::ostringstream o;
  o.imbue(std::locale::classic());
  writeComm(o, c, in);
  return o.str();
}

void appendElement(std::string* elements, const std::string& element) {
  *elements += elements->empty() ? "\n" : ",\n";
  *elements += element;
}

std::string reportTail(const ReportInput& in) {
  std::ostringstream o;
  o.imbue(std::locale::classic());
  o << "],\n  \"dcpUnmatched\": [";
  bool first = true;
  for (const DcpSnapshot& d : in.dcp) {
    if (d.commMatches == 1 || d.listed) continue;
    o << (first ? "" : ",") << "\n";
    writeDcp(o, d, "    ");
    first = false;
  }
  o << "],\n  \"dcpDropped\": " << in.dcpDropped << "\n}\n";
  return o.str();
}

uint64_t commsRendered() { return gCommsRendered.load(std::memory_order_relaxed); }

}  // namespace plugin
}  // namespace nccl_dcp
