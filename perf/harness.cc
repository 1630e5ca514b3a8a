#include "harness.h"

#include <strings.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>

#include "enums.h"
#include "nccl_dcp.h"

namespace nccl_dcp {
namespace perf {

const char* dtypeFlag(ncclDataType_t d) {
  switch (d) {
    case ncclBfloat16: return "bf16";
    case ncclFloat16: return "fp16";
    case ncclFloat32: return "fp32";
    default: return "?";
  }
}

const char* protocolFlag(int p) {
  switch (p) {
    case ncclDcpProtoLL: return "LL";
    case ncclDcpProtoLL128: return "LL128";
    case ncclDcpProtoSimple: return "SIMPLE";
    default: return "AUTO";
  }
}

const char* baselineName(int baseline) {
  switch (baseline) {
    case kBaselineFull: return "a2a + combine";
    case kBaselineAllToAll: return "a2a alone";
    default: return "none";
  }
}

std::string usage(const char* program) {
  std::ostringstream o;
  o << "USAGE: " << program << " [flags]\n"
    << "       mpirun -np <processes> " << program << " [flags]   (built with MPI: meson -Dmpi)\n"
    << "  nccl-tests flags (batch rows play the role of sizes):\n"
    << "  -b <rows>      minimum batch (default 1)\n"
    << "  -e <rows>      maximum batch (default 1024)\n"
    << "  -f <factor>    multiply the batch by this between sizes (default 2)\n"
    << "  -i <rows>      add this to the batch between sizes instead (default 0: use -f)\n"
    << "  -g <gpus>      GPUs per thread (default 1)\n"
    << "  -t <threads>   threads per process (default 1); ranks = processes x threads x gpus\n"
    << "  -n <iters>     timed graph launches per size (default 20; the median is reported)\n"
    << "  -w <iters>     warm-up launches per size (default 5)\n"
    << "  -c <0|n>       check n calls per size against the CPU reference (default 1)\n"
    << "  -G <calls>     calls captured per CUDA graph (default 10; 0 = eager launches)\n"
    << "  -a <0-3>       aggregate across ranks: 0 rank 0, 1 average, 2 min, 3 max (default 1)\n"
    << "  -d <type>      bf16 | fp16 | fp32 (default bf16)\n"
    << "  nccl-dcp flags:\n"
    << "  -D <dim>       head dim (default 512)\n"
    << "  -H <heads>     local heads per rank (default 16)\n"
    << "  -P <proto>     AUTO | LL | LL128 | SIMPLE (default AUTO)\n"
    << "  -L <2|e>       LSE base (default 2)\n"
    << "  -V <n>         loopback: n virtual ranks on one GPU, one thread, one process (default 0: real ranks)\n"
    << "  -m <rows>      workspace capacity in rows (default: -e)\n"
    << "  -B <0|1|2>     baseline in the same run: 0 none, 1 ncclAlltoAll + combine, 2 the partials' all-to-all\n"
    << "                 alone, to compare with nccl-tests' alltoall_perf (default 1)\n"
    << "  -F <0|1>       floors in the same run: peer-write kernel, copy engine, flag round trip (default 1)\n"
    << "  -T <0|1>       the fused kernel's in-kernel timeline per size, one call, per rank\n"
    << "                 (a build with meson -Dtimeline=true; default 0)\n"
    << "  -J <file>      write the results as JSON\n"
    << "  --provider <p> the fused path's workspace: auto | nccl-window | cuda-ipc | fallback (sets\n"
    << "                 NCCL_DCP_PROVIDER; default: as the environment says, else auto)\n"
    << "  -h             this help\n"
    << "Exit codes: 0 ok, 2 bad arguments, 3 no GPU, 4 wrong results, 5 a call failed.\n";
  return o.str();
}

namespace {

bool toInt(const char* s, int64_t lo, int64_t hi, int64_t* out) {
  char* end = nullptr;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// The integer flags: range and where the value goes.
struct IntFlag {
  char flag;
  int64_t lo, hi;
  std::function<void(Args*, int64_t)> set;
};

const std::vector<IntFlag>& intFlags() {
  static const std::vector<IntFlag> flags = {
      {'b', 0, NCCL_DCP_MAX_BATCH_CAPACITY * 64LL, [](Args* a, int64_t v) { a->minRows = v; }},
      {'e', 0, NCCL_DCP_MAX_BATCH_CAPACITY * 64LL, [](Args* a, int64_t v) { a->maxRows = v; }},
      {'i', 0, NCCL_DCP_MAX_BATCH_CAPACITY, [](Args* a, int64_t v) { a->step = v; }},
      {'g', 1, 64, [](Args* a, int64_t v) { a->gpusPerThread = (int)v; }},
      {'t', 1, 64, [](Args* a, int64_t v) { a->threads = (int)v; }},
      {'n', 1, 1000000, [](Args* a, int64_t v) { a->iters = (int)v; }},
      {'w', 0, 1000000, [](Args* a, int64_t v) { a->warmup = (int)v; }},
      {'c', 0, 1000, [](Args* a, int64_t v) { a->check = (int)v; }},
      {'G', 0, 10000, [](Args* a, int64_t v) { a->graphCalls = (int)v; }},
      {'a', 0, 3, [](Args* a, int64_t v) { a->aggregate = (int)v; }},
      {'D', 1, NCCL_DCP_MAX_HEAD_DIM, [](Args* a, int64_t v) { a->headDim = (int)v; }},
      {'H', 1, NCCL_DCP_MAX_LOCAL_HEADS, [](Args* a, int64_t v) { a->localHeads = (int)v; }},
      {'V', 0, 16, [](Args* a, int64_t v) { a->virtualRanks = (int)v; }},
      {'m', 0, NCCL_DCP_MAX_BATCH_CAPACITY, [](Args* a, int64_t v) { a->maxBatch = (int)v; }},
      {'B', 0, 2, [](Args* a, int64_t v) { a->baseline = (int)v; }},
      {'F', 0, 1, [](Args* a, int64_t v) { a->floors = (int)v; }},
      {'T', 0, 1, [](Args* a, int64_t v) { a->timeline = (int)v; }},
  };
  return flags;
}

// The flags whose value is a word: false (with *error) when it is none of
// the accepted ones.
bool parseWordFlag(char flag, const char* v, Args* a, std::string* error) {
  auto bad = [&](const char* accepted) {
    *error = std::string("flag -") + flag + ": '" + v + "' is not " + accepted;
    return false;
  };
  switch (flag) {
    case 'f': {
      char* end = nullptr;
      a->factor = strtod(v, &end);
      if (end == v || *end != '\0' || !(a->factor > 1.0)) return bad("a factor > 1");
      return true;
    }
    case 'd':
      if (!strcasecmp(v, "bf16") || !strcasecmp(v, "bfloat16")) a->dtype = ncclBfloat16;
      else if (!strcasecmp(v, "fp16") || !strcasecmp(v, "half")) a->dtype = ncclFloat16;
      else if (!strcasecmp(v, "fp32") || !strcasecmp(v, "float")) a->dtype = ncclFloat32;
      else return bad("bf16, fp16 or fp32");
      return true;
    case 'P':
      if (!strcasecmp(v, "AUTO")) a->protocol = ncclDcpProtoAuto;
      else if (!strcasecmp(v, "LL")) a->protocol = ncclDcpProtoLL;
      else if (!strcasecmp(v, "LL128")) a->protocol = ncclDcpProtoLL128;
      else if (!strcasecmp(v, "SIMPLE")) a->protocol = ncclDcpProtoSimple;
      else return bad("AUTO, LL, LL128 or SIMPLE");
      return true;
    case 'L':
      if (!strcmp(v, "2")) a->lseBase = ncclDcpLseBase2;
      else if (!strcasecmp(v, "e")) a->lseBase = ncclDcpLseBaseE;
      else return bad("2 or e");
      return true;
    case 'J':
      a->json = v;
      return true;
    default:
      *error = std::string("unknown flag -") + flag;
      return false;
  }
}

// Combinations no single flag can judge.
bool checkCombination(const Args& a, std::string* error) {
  if (a.minRows > a.maxRows) {
    *error = "-b " + std::to_string(a.minRows) + " is larger than -e " + std::to_string(a.maxRows);
    return false;
  }
  if (a.virtualRanks > 0 && (a.threads > 1 || a.gpusPerThread > 1)) {
    *error = "-V " + std::to_string(a.virtualRanks) +
             " runs every virtual rank on one GPU from one thread: drop -t and -g (or drop -V for real ranks)";
    return false;
  }
  return true;
}

}  // namespace

ParseResult parseArgs(int argc, char** argv, Args* a, std::string* error) {
  for (int i = 1; i < argc; i++) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") return ParseResult::Help;
    if (flag == "--provider") {
      int p = 0;
      if (i + 1 >= argc || !parseProvider(argv[i + 1], &p)) {
        *error = "--provider needs auto, nccl-window, cuda-ipc or fallback";
        return ParseResult::Error;
      }
      a->provider = argv[++i];
      continue;
    }
    if (flag.size() != 2 || flag[0] != '-') {
      *error = "unknown argument '" + flag + "'";
      return ParseResult::Error;
    }
    if (std::string("befigtnwcGadDHPLVmBFTJ").find(flag[1]) == std::string::npos) {
      *error = "unknown flag " + flag;
      return ParseResult::Error;
    }
    if (i + 1 >= argc) {
      *error = "flag " + flag + " needs a value";
      return ParseResult::Error;
    }
    const char* v = argv[++i];
    const auto& ints = intFlags();
    auto it = std::find_if(ints.begin(), ints.end(), [&](const IntFlag& f) { return f.flag == flag[1]; });
    if (it == ints.end()) {
      if (!parseWordFlag(flag[1], v, a, error)) return ParseResult::Error;
      continue;
    }
    int64_t n = 0;
    if (!toInt(v, it->lo, it->hi, &n)) {
      *error = "flag " + flag + ": '" + v + "' is not an integer in [" + std::to_string(it->lo) + ", " +
               std::to_string(it->hi) + "]";
      return ParseResult::Error;
    }
    it->set(a, n);
  }
  return checkCombination(*a, error) ? ParseResult::Ok : ParseResult::Error;
}

std::vector<int64_t> batchSweep(const Args& a) {
  std::vector<int64_t> sizes;
  int64_t b = a.minRows;
  while (b <= a.maxRows) {
    sizes.push_back(b);
    int64_t next = a.step > 0 ? b + a.step : (int64_t)std::ceil(b * a.factor);
    if (next <= b) next = b + 1;  // -b 0 with a factor still advances
    b = next;
  }
  return sizes;
}

int capacityOf(const Args& a) {
  return a.maxBatch > 0 ? a.maxBatch : (int)std::max<int64_t>(std::min<int64_t>(a.maxRows, NCCL_DCP_MAX_BATCH_CAPACITY), 1);
}

ncclDcpConfig_t configOf(const Args& a) {
  ncclDcpConfig_t c = NCCL_DCP_CONFIG_INITIALIZER;
  c.headDim = a.headDim;
  c.localHeads = a.localHeads;
  c.dtype = a.dtype;
  c.lseBase = a.lseBase;
  c.maxBatch = capacityOf(a);
  c.protocol = a.protocol;
  return c;
}

double aggregate(int how, const std::vector<double>& v) {
  if (v.empty()) return 0;
  switch (how) {
    case 0: return v[0];
    case 2: return *std::min_element(v.begin(), v.end());
    case 3: return *std::max_element(v.begin(), v.end());
    default: {
      double s = 0;
      for (double x : v) s += x;
      return s / v.size();
    }
  }
}

void fillBandwidths(Row* r, int nRanks) {
  const double busFactor = nRanks > 1 ? (double)(nRanks - 1) / nRanks : 1.0;
  auto bw = [&](double us) { return us > 0 ? r->bytes / (us * 1e3) : 0.0; };  // GB/s
  r->fusedAlgBw = bw(r->fusedUs);
  r->fusedBusBw = r->fusedAlgBw * busFactor;
  r->baseAlgBw = bw(r->baseUs);
  r->baseBusBw = r->baseAlgBw * busFactor;
  r->speedup = r->fusedUs > 0 && r->baseUs > 0 ? r->baseUs / r->fusedUs : 0;
  const double floors[] = {r->peerWriteUs, r->copyEngineUs};
  r->floorUs = 0;
  for (double f : floors)
    if (f > 0 && (r->floorUs == 0 || f < r->floorUs)) r->floorUs = f;
  r->xFloor = r->fusedUs > 0 && r->floorUs > 0 ? r->fusedUs / r->floorUs : 0;
}

Row makeRow(const Args& a, int64_t rows, int64_t bytes, int nRanks, const Samples& s, double idealUs) {
  Row r;
  r.rows = rows;
  r.bytes = bytes;
  r.fusedUs = aggregate(a.aggregate, s.fusedUs);
  r.baseUs = aggregate(a.aggregate, s.baseUs);
  r.peerWriteUs = aggregate(a.aggregate, s.peerWriteUs);
  r.copyEngineUs = aggregate(a.aggregate, s.copyEngineUs);
  r.fusedWrong = s.fusedWrong;
  r.baseWrong = s.baseWrong;
  r.idealUs = idealUs;
  fillBandwidths(&r, nRanks);
  return r;
}

Columns columnsOf(const Args& a, bool loopback, bool floorsMeasured) {
  Columns c;
  c.baseline = a.baseline != kBaselineOff;
  c.ideal = loopback;
  c.floor = floorsMeasured;
  return c;
}

std::string tableHeader(const Args& a, const Columns& c) {
  char line[512];
  std::string h;
  snprintf(line, sizeof(line), "#  dtype %s  D %d  Hl %d  protocol %s  LSE base %s  graph calls %d  iters %d  baseline %s\n",
           dtypeFlag(a.dtype), a.headDim, a.localHeads, protocolFlag(a.protocol), a.lseBase ? "e" : "2",
           a.graphCalls, a.iters, baselineName(a.baseline));
  h += line;
  const std::string base = std::string("baseline (") + baselineName(a.baseline == kBaselineOff ? kBaselineFull : a.baseline) + ")";
  snprintf(line, sizeof(line), "#%10s %12s   %28s %7s   %28s\n", "", "", "fused (nccl-dcp)", "", base.c_str());
  h += line;
  const char* ideal = c.ideal ? "   xIdeal" : "";
  const char* floor = c.floor ? "   xFloor" : "";
  snprintf(line, sizeof(line), "#%10s %12s %9s %8s %8s %7s %9s %8s %8s %7s %8s%s%s\n", "rows", "bytes", "time", "algbw",
           "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "speedup", ideal, floor);
  h += line;
  snprintf(line, sizeof(line), "#%10s %12s %9s %8s %8s %7s %9s %8s %8s %7s %8s%s%s\n", "", "(B)", "(us)", "(GB/s)",
           "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(x)", c.ideal ? "      (x)" : "", c.floor ? "      (x)" : "");
  h += line;
  return h;
}

std::string formatRow(const Row& r, const Columns& c) {
  char wrongF[24], wrongB[24], line[512];
  auto wrong = [](char* buf, int64_t w) {
    if (w < 0) snprintf(buf, 24, "%s", "N/A");
    else snprintf(buf, 24, "%lld", (long long)w);
  };
  wrong(wrongF, r.fusedWrong);
  wrong(wrongB, r.baseWrong);
  char ideal[32] = "", floor[32] = "";
  if (c.ideal) snprintf(ideal, sizeof(ideal), " %8.2f", r.idealUs > 0 ? r.fusedUs / r.idealUs : 0.0);
  if (c.floor) snprintf(floor, sizeof(floor), " %8.2f", r.xFloor);
  if (c.baseline)
    snprintf(line, sizeof(line), " %10lld %12lld %9.2f %8.2f %8.2f %7s %9.2f %8.2f %8.2f %7s %8.2f%s%s\n",
             (long long)r.rows, (long long)r.bytes, r.fusedUs, r.fusedAlgBw, r.fusedBusBw, wrongF, r.baseUs,
             r.baseAlgBw, r.baseBusBw, wrongB, r.speedup, ideal, floor);
  else
    snprintf(line, sizeof(line), " %10lld %12lld %9.2f %8.2f %8.2f %7s %9s %8s %8s %7s %8s%s%s\n", (long long)r.rows,
             (long long)r.bytes, r.fusedUs, r.fusedAlgBw, r.fusedBusBw, wrongF, "-", "-", "-", "-", "-", ideal, floor);
  return line;
}

namespace {

// "2.10 us at 1 rows (32768 B) .. 401.2 GB/s busbw at 1024 rows (33554432 B)"
std::string floorSpan(const std::vector<Row>& rows, double Row::*us, int nRanks) {
  if (rows.empty() || rows.front().*us <= 0) return "not measured";
  Row last = rows.back();
  last.fusedUs = last.*us;
  fillBandwidths(&last, nRanks);
  char s[192];
  snprintf(s, sizeof(s), "%.2f us at %lld rows (%lld B) .. %.1f GB/s busbw at %lld rows (%lld B)",
           rows.front().*us, (long long)rows.front().rows, (long long)rows.front().bytes, last.fusedBusBw,
           (long long)last.rows, (long long)last.bytes);
  return s;
}

}  // namespace

std::string floorHeader(const Floors& f, const std::vector<Row>& rows, int nRanks) {
  if (!f.measured) return "# floors: not measured (" + f.why + ")\n";
  std::ostringstream o;
  char rt[64] = "not measured";
  if (f.roundTripUs >= 0) snprintf(rt, sizeof(rt), "%.2f us", f.roundTripUs);
  o << "# floors, same ranks and bytes (xFloor = fused time / the faster of (a) and (b))"
    << (f.local ? "; local copies: no link to measure with one rank / loopback" : "") << ":\n"
    << "#   (a) peer-write kernel, " << f.sms << " SMs, 16-byte stores " << f.where << ": "
    << floorSpan(rows, &Row::peerWriteUs, nRanks) << "\n"
    << "#   (b) copy engine, cudaMemcpyAsync " << f.where << ": " << floorSpan(rows, &Row::copyEngineUs, nRanks) << "\n"
    << "#   (c) flag round trip " << f.roundTrip << ": " << rt << "\n";
  return o.str();
}

namespace {

std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') q += '\\';
    if ((unsigned char)ch >= 0x20) q += ch;
  }
  return q + "\"";
}

}  // namespace

std::string jsonReport(const Args& a, const RunInfo& run, const Floors& f, const std::vector<Row>& rows) {
  std::ostringstream o;
  o << "{\n  \"tool\": \"dcp_a2a_lse_reduce_perf\",\n  \"version\": " << NCCL_DCP_VERSION_CODE
    << ",\n  \"ncclVersion\": " << run.ncclVersion << ",\n  \"mode\": " << quoted(run.mode)
    << ",\n  \"device\": " << quoted(run.device) << ",\n  \"nRanks\": " << run.nRanks
    << ",\n  \"processes\": " << run.placement.processes << ",\n  \"threads\": " << run.placement.threads
    << ",\n  \"gpusPerThread\": " << run.placement.gpusPerThread << ",\n  \"dtype\": \"" << dtypeFlag(a.dtype)
    << "\",\n  \"headDim\": " << a.headDim << ",\n  \"localHeads\": " << a.localHeads
    << ",\n  \"protocol\": \"" << protocolFlag(a.protocol) << "\",\n  \"provider\": " << quoted(run.provider)
    << ",\n  \"lseBase\": \"" << (a.lseBase ? "e" : "2")
    << "\",\n  \"graphCalls\": " << a.graphCalls << ",\n  \"iters\": " << a.iters << ",\n  \"aggregate\": "
    << a.aggregate << ",\n  \"baseline\": " << quoted(baselineName(a.baseline)) << ",\n  \"copyGBps\": " << run.copyGBps
    << ",\n  \"floors\": {\"measured\": " << (f.measured ? "true" : "false") << ", \"why\": " << quoted(f.why)
    << ", \"where\": " << quoted(f.where) << ", \"local\": " << (f.local ? "true" : "false") << ", \"sms\": " << f.sms
    << ", \"roundTripUs\": " << f.roundTripUs << ", \"roundTrip\": " << quoted(f.roundTrip) << "},\n  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); i++) {
    const Row& r = rows[i];
    o << "    {\"rows\": " << r.rows << ", \"bytes\": " << r.bytes << ", \"fusedUs\": " << r.fusedUs
      << ", \"fusedAlgBw\": " << r.fusedAlgBw << ", \"fusedBusBw\": " << r.fusedBusBw
      << ", \"fusedWrong\": " << r.fusedWrong << ", \"baseUs\": " << r.baseUs << ", \"baseAlgBw\": " << r.baseAlgBw
      << ", \"baseBusBw\": " << r.baseBusBw << ", \"baseWrong\": " << r.baseWrong << ", \"speedup\": " << r.speedup
      << ", \"idealUs\": " << r.idealUs << ", \"peerWriteUs\": " << r.peerWriteUs
      << ", \"copyEngineUs\": " << r.copyEngineUs << ", \"floorUs\": " << r.floorUs << ", \"xFloor\": " << r.xFloor
      << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  o << "  ]\n}\n";
  return o.str();
}

}  // namespace perf
}  // namespace nccl_dcp
