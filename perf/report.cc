/*************************************************************************
 * The perf binary's JSON report (-J): nccl-tests' fields (its src/util.cu
 * writer, JSON_FILE_VERSION 3) and ours beside them, every key snake_case
 * as nccl-tests' are; a figure nccl-tests has is written once, under its
 * name. Strings and numbers go through plugin/json.h, so the file is valid
 * JSON whatever it holds: a NaN or an infinity is written null.
 ************************************************************************/
#include <time.h>

#include <algorithm>
#include <cstring>

#include "enums.h"
#include "harness.h"
#include "json.h"
#include "nccl_dcp.h"
#include "source_commit.h"

namespace nccl_dcp {
namespace perf {

namespace {

namespace json = nccl_dcp::plugin::json;

// A JSON document written in order: objects and arrays, each either one
// item per line (indented) or all on one line; strings quoted and numbers
// written by plugin/json.h (non-finite numbers as null).
class JsonWriter {
 public:
  JsonWriter& key(const std::string& k) {
    item();
    out_ += json::quote(k) + ": ";
    keyed_ = true;
    return *this;
  }
  JsonWriter& open(char bracket, bool oneLine = false) {
    item();
    out_ += bracket;
    stack_.push_back({bracket == '{' ? '}' : ']', oneLine, true});
    return *this;
  }
  JsonWriter& close() {
    const Level l = stack_.back();
    stack_.pop_back();
    if (!l.oneLine && !l.empty) newline();
    out_ += l.closer;
    return *this;
  }
  JsonWriter& str(const std::string& v) { return raw(json::quote(v)); }
  JsonWriter& num(double v) { return raw(json::number(v)); }
  JsonWriter& integer(int64_t v) { return raw(std::to_string(v)); }
  JsonWriter& boolean(bool v) { return raw(v ? "true" : "false"); }
  JsonWriter& null() { return raw("null"); }
  std::string text() const { return out_ + "\n"; }

 private:
  struct Level {
    char closer;
    bool oneLine, empty;
  };
  JsonWriter& raw(const std::string& v) {
    item();
    out_ += v;
    return *this;
  }
  // Before a value or a key: the separator its container needs (none
  // right after a key).
  void item() {
    if (keyed_) {
      keyed_ = false;
      return;
    }
    if (stack_.empty()) return;
    Level& l = stack_.back();
    if (!l.empty) out_ += l.oneLine ? ", " : ",";
    if (!l.oneLine) newline();
    l.empty = false;
  }
  void newline() { out_ += "\n" + std::string(2 * stack_.size(), ' '); }

  std::string out_;
  std::vector<Level> stack_;
  bool keyed_ = false;
};

// nccl-tests' {time, alg_bw, bus_bw, nwrong} of one call (nwrong null:
// not checked), our median and host time beside them.
void writeTiming(JsonWriter& w, double us, double medianUs, double cpuUs, double algBw, double busBw,
                 int64_t wrong) {
  w.open('{', true);
  w.key("time").num(us);
  w.key("alg_bw").num(algBw);
  w.key("bus_bw").num(busBw);
  w.key("nwrong");
  if (wrong >= 0) w.num((double)wrong);
  else w.null();
  w.key("median_time").num(medianUs);
  w.key("cpu_time").num(cpuUs);
  w.close();
}

// One results[] entry: nccl-tests' fields (the fused call is the
// out-of-place operation; there is no in-place one), then ours.
void writeResult(JsonWriter& w, const Args& a, const Row& r, int nRanks) {
  const int elt = a.dtype == ncclFloat32 ? 4 : 2;
  w.open('{', true);
  w.key("size").integer(r.bytes);
  w.key("count").integer(r.bytes / elt);
  w.key("type").str(dtypeNcclTestsName(a.dtype));
  w.key("redop").str("lse");
  w.key("root").str("-1");
  w.key("out_of_place");
  writeTiming(w, r.fusedUs, r.fusedMedianUs, r.fusedCpuUs, r.fusedAlgBw, r.fusedBusBw, r.fusedWrong);
  w.key("in_place").null();
  w.key("actual_iterations").integer(a.iters);
  w.key("experiment_name").str("fused");
  w.key("rows").integer(r.rows);
  w.key("protocol").str(r.protocol);
  w.key("baseline");
  if (a.baseline != kBaselineOff)
    writeTiming(w, r.baseUs, r.baseMedianUs, r.baseCpuUs, r.baseAlgBw, r.baseBusBw, r.baseWrong);
  else
    w.null();
  w.key("speedup").num(r.speedup);
  w.key("baseline2");  // NONE's HEAD + all-gather (same size: bandwidths as the others')
  if (hasBaseline2(a)) {
    Row b2 = r;
    b2.fusedUs = r.base2Us;
    fillBandwidths(&b2, nRanks);
    writeTiming(w, r.base2Us, r.base2MedianUs, r.base2CpuUs, b2.fusedAlgBw, b2.fusedBusBw, r.base2Wrong);
  } else {
    w.null();
  }
  w.key("speedup2").num(r.speedup2);
  w.key("ideal_time").num(r.idealUs);
  w.key("peer_write_time").num(r.peerWriteUs);
  w.key("copy_engine_time").num(r.copyEngineUs);
  w.key("floor_time").num(r.floorUs);
  w.key("x_floor").num(r.xFloor);
  w.close();
}

}  // namespace

std::string nowString() {
  char buf[64];
  const time_t now = time(nullptr);
  struct tm local;
  localtime_r(&now, &local);
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

std::vector<std::string> relevantEnvironment(char** envp) {
  static const char* const kPrefixes[] = {"NCCL_", "CUDA_", "NVIDIA_", "OMPI_", "PMIX_", "PMI_", "SLURM_", "UCX_",
                                          "LD_LIBRARY_PATH=", "LD_PRELOAD=", "TORCH_SYMM_MEM_", "NVSHMEM_"};
  std::vector<std::string> env;
  for (char** e = envp; e && *e; e++)
    for (const char* p : kPrefixes)
      if (!strncmp(*e, p, strlen(p))) {
        env.push_back(*e);
        break;
      }
  std::sort(env.begin(), env.end());
  return env;
}

namespace {

// nccl-tests' "config" object (its -J writer), in its order.
void writeTestsConfig(JsonWriter& w, const Args& a, const RunInfo& run, int64_t perRow) {
  w.key("config").open('{');
  w.key("nthreads").integer(a.threads);
  w.key("ngpus").integer(a.gpusPerThread);
  w.key("minimum_bytes").integer(a.minRows * perRow);
  w.key("maximum_bytes").integer(a.maxRows * perRow);
  if (stepsBy(a)) w.key("step_bytes").integer(a.step * perRow);
  else w.key("step_factor").num(a.factor);
  w.key("warmup_iters").integer(a.warmup);
  w.key("iterations").integer(a.iters);
  w.key("aggregated_iterations").integer(a.aggIters);
  w.key("validation").integer(a.check);
  w.key("graph").integer(a.graphLaunches);
  w.key("blocking_collectives").boolean(false);
  w.key("per_iter_timing").boolean(false);
  w.key("per_iter_skip").integer(0);
  w.key("parallel_init").boolean(a.parallelInit != 0);
  w.key("report_cputime").boolean(a.cpuTime != 0);
  w.key("average").integer(a.aggregate);
  w.key("devices").open('[');
  for (const DeviceInfo& d : run.devices) {
    w.open('{', true);
    w.key("rank").integer(d.rank);
    w.key("group").integer(0);
    w.key("pid").integer(d.pid);
    w.key("hostname").str(d.hostname);
    w.key("device").integer(d.device);
    w.key("device_hex").str(d.busId);
    w.key("device_info").str(d.name);
    w.close();
  }
  w.close();
  w.close();  // config
}

// nccl-tests' fields up to its end_time (JSON_FILE_VERSION 3), in its order.
void writeTestsFields(JsonWriter& w, const Args& a, const RunInfo& run, const std::vector<Row>& rows,
                      const Summary& sum, int64_t perRow) {
  w.key("version").integer(3);
  w.key("start_time").str(run.startTime);
  w.key("args").open('[', true);
  for (const std::string& s : a.argv) w.str(s);
  w.close();
  w.key("env").open('[');
  for (const std::string& s : run.env) w.str(s);
  w.close();
  w.key("nccl_version").integer(run.ncclVersion);
  writeTestsConfig(w, a, run, perRow);
  w.key("results").open('[');
  for (const Row& r : rows) writeResult(w, a, r, run.nRanks);
  w.close();
  w.key("out_of_bounds").open('{', true);
  w.key("count").integer(sum.wrong);
  w.key("okay").boolean(sum.wrong == 0);
  w.close();
  w.key("average_bus_bandwidth").open('{', true);
  w.key("bandwidth").num(sum.busBw);
  w.key("okay").str("unchecked");
  w.key("baseline").num(sum.baseBusBw);
  w.close();
  // nccl-tests' list of the errors NCCL reported (ncclGetLastError): a
  // failed call ends this binary before the file is written, so empty.
  w.key("errors").open('[', true);
  w.close();
}

// What built and ran: our commit and versions, NCCL's, the machine.
void writeBuild(JsonWriter& w, const RunInfo& run) {
  const int dcpVersion = run.dcpVersion ? run.dcpVersion : NCCL_DCP_VERSION_CODE;
  w.key("tool").str("dcp_a2a_lse_reduce_perf");
  w.key("commit").str(NCCL_DCP_SOURCE_COMMIT);
  w.key("nccl_dcp_version").integer(dcpVersion);
  w.key("nccl_dcp_version_string").str(versionString(dcpVersion));
  w.key("nccl_dcp_headers_version_string").str(versionString(NCCL_DCP_VERSION_CODE));
  w.key("nccl_version_string").str(versionString(run.ncclVersion));
  w.key("nccl_headers_version_string").str(versionString(NCCL_VERSION_CODE));
  w.key("host").str(run.host);
  w.key("mode").str(run.mode);
  w.key("device").str(run.device);
}

// The operation swept: ranks, mode, wire, shape, protocol, and what it is
// measured against.
void writeOperation(JsonWriter& w, const Args& a, const RunInfo& run, int64_t perRow) {
  w.key("n_ranks").integer(run.nRanks);
  w.key("processes").integer(run.placement.processes);
  w.key("virtual_ranks").integer(a.virtualRanks);
  w.key("scatter").str(scatterName(a.scatter));
  w.key("none_algo");  // NONE's algorithm (NCCL_DCP_NONE_ALGO, src/types.h noneRelays)
  if (run.noneAlgo.empty()) w.null();
  else w.str(run.noneAlgo);
  w.key("wire").str(wireName(a.wire));
  w.key("staged_gather").boolean(a.stagedGather != 0);
  w.key("registered_out").boolean(a.registeredOut != 0);
  w.key("dtype").str(dtypeName(a.dtype));
  w.key("head_dim").integer(a.headDim);
  w.key("local_heads").integer(a.localHeads);
  w.key("bytes_per_row").integer(perRow);
  w.key("min_rows").integer(a.minRows);
  w.key("max_rows").integer(a.maxRows);
  w.key("protocol").str(protocolName(a.protocol));
  w.key("provider").str(run.provider);
  w.key("lse_base").str(a.lseBase ? "e" : "2");
  w.key("max_batch").integer(capacityOf(a));
  w.key("time_statistic").str("mean");  // results[].*.time; median_time beside it
  w.key("timeout_s");
  if (a.timeoutS >= 0) w.integer(a.timeoutS);
  else w.null();
  w.key("baseline").str(baselineName(a.baseline, a.scatter));
  w.key("baseline2");
  if (hasBaseline2(a)) w.str(baseline2Name(a));
  else w.null();
}

void writeFloors(JsonWriter& w, const Floors& f) {
  w.key("floors").open('{', true);
  w.key("measured").boolean(f.measured);
  w.key("why").str(f.why);
  w.key("where").str(f.where);
  w.key("local").boolean(f.local);
  w.key("sms").integer(f.sms);
  w.key("round_trip_time").num(f.roundTripUs);
  w.key("round_trip").str(f.roundTrip);
  w.close();
}

}  // namespace

// nccl-tests' -J document with our fields after its own, end_time last
// as it writes it.
std::string jsonReport(const Args& a, const RunInfo& run, const Floors& f, const std::vector<Row>& rows) {
  const int64_t perRow = bytesPerRow(a, run.nRanks);
  const Summary sum = summarize(rows);
  JsonWriter w;
  w.open('{');
  writeTestsFields(w, a, run, rows, sum, perRow);
  writeBuild(w, run);
  writeOperation(w, a, run, perRow);
  w.key("copy_bandwidth").num(run.copyGBps);
  w.key("speedup_geomean").num(sum.speedup);
  w.key("speedup2_geomean").num(sum.speedup2);
  writeFloors(w, f);
  w.key("end_time").str(run.endTime);
  w.close();
  return w.text();
}

}  // namespace perf
}  // namespace nccl_dcp
