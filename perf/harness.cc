#include "harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "enums.h"
#include "nccl_dcp.h"

namespace nccl_dcp {
namespace perf {

const char* baselineName(int baseline, int scatter) {
  if (baseline == kBaselineNativeWire) return "fused, native wire";
  const bool full = baseline == kBaselineFull;
  if (baseline != kBaselineFull && baseline != kBaselineAllToAll) return "none";
  switch (scatter) {
    case ncclDcpScatterToken: return full ? "token a2a + combine" : "token a2a alone";
    case ncclDcpScatterNone: return full ? "all-gather + combine" : "all-gather alone";
    default: return full ? "a2a + combine" : "a2a alone";
  }
}

bool hasBaseline2(const Args& a) { return a.scatter == ncclDcpScatterNone && a.baseline == kBaselineFull; }

const char* baseline2Name(const Args& a) {
  if (a.virtualRanks == 0) return "HEAD + all-gather of the merged heads";
  return a.stagedGather
             ? "HEAD + all-gather of the merged heads, staged (a copy into a staging buffer, then into every output)"
             : "HEAD + all-gather of the merged heads, direct (one copy into every output: loopback only)";
}

bool secondContextConfig(const Args& a, ncclDcpConfig_t* config) {
  *config = configOf(a);
  config->wire = ncclDcpWireNative;  // the baselines stay native (checked against the native reference)
  if (hasBaseline2(a)) {
    config->scatter = ncclDcpScatterHead;
    return true;
  }
  return a.baseline == kBaselineNativeWire;
}

int headsOf(int scatter, int nRanks, int localHeads) {
  return scatter == ncclDcpScatterHead ? localHeads : std::max(nRanks, 1) * localHeads;
}

int64_t tokenBlockRows(int nRanks, int64_t rows) {
  nRanks = std::max(nRanks, 1);
  return (rows + nRanks - 1) / nRanks;
}

int64_t maxOutRows(int scatter, int nRanks, int64_t rows) {
  return scatter == ncclDcpScatterToken ? tokenBlockRows(nRanks, rows) : rows;
}

// Heads of a row a rank sends each peer (see peerBytesPerRow).
int peerHeadsOf(int scatter, int nRanks, int localHeads, bool twoPhase) {
  if (scatter != ncclDcpScatterNone) return localHeads;
  return twoPhase ? 2 * localHeads : std::max(nRanks, 1) * localHeads;
}

int64_t peerBytesPerRow(int scatter, int nRanks, int localHeads, int headDim, int eltSize, bool twoPhase) {
  return (int64_t)peerHeadsOf(scatter, nRanks, localHeads, twoPhase) * headDim * eltSize;
}

int64_t receiveBytesPerRow(int scatter, int nRanks, int localHeads, int headDim, int eltSize, bool twoPhase) {
  return std::max(nRanks - 1, 0) * peerBytesPerRow(scatter, nRanks, localHeads, headDim, eltSize, twoPhase);
}

double idealBytes(int scatter, int nRanks, int64_t rows, int localHeads, int headDim, int eltSize, bool twoPhase,
                  bool fp8Wire) {
  const double unit = (double)headDim * eltSize + 4, b = (double)rows, cp = nRanks, hl = localHeads;
  const double wireUnit = fp8Wire ? (double)headDim + 8 : unit;
  // Units a rank sends to each peer per row, and (summed over the ranks)
  // the outputs per row: Hl, or H for NONE.
  const double peer = peerHeadsOf(scatter, nRanks, localHeads, twoPhase);
  const double out = scatter == ncclDcpScatterNone ? cp * hl : hl;
  return cp * b * cp * hl * unit + 2.0 * cp * (cp - 1) * b * peer * wireUnit + cp * b * out * unit;
}

bool stepsBy(const Args& a) { return a.step > 0 && !a.factorGiven; }

std::vector<int64_t> batchSweep(const Args& a) {
  std::vector<int64_t> sizes;
  int64_t b = a.minRows;
  while (b <= a.maxRows) {
    sizes.push_back(b);
    int64_t next = stepsBy(a) ? b + a.step : (int64_t)std::ceil(b * a.factor);
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
  c.scatter = a.scatter;
  c.wire = a.wire;
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
  r->speedup2 = r->fusedUs > 0 && r->base2Us > 0 ? r->base2Us / r->fusedUs : 0;
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
  r.base2Us = aggregate(a.aggregate, s.base2Us);
  r.fusedMedianUs = aggregate(a.aggregate, s.fusedMedianUs);
  r.baseMedianUs = aggregate(a.aggregate, s.baseMedianUs);
  r.base2MedianUs = aggregate(a.aggregate, s.base2MedianUs);
  r.fusedCpuUs = aggregate(a.aggregate, s.fusedCpuUs);
  r.baseCpuUs = aggregate(a.aggregate, s.baseCpuUs);
  r.base2CpuUs = aggregate(a.aggregate, s.base2CpuUs);
  r.fusedWrong = s.fusedWrong;
  r.baseWrong = s.baseWrong;
  r.base2Wrong = s.base2Wrong;
  r.idealUs = idealUs;
  fillBandwidths(&r, nRanks);
  return r;
}

Columns columnsOf(const Args& a, bool loopback, bool floorsMeasured) {
  Columns c;
  c.baseline = a.baseline != kBaselineOff;
  c.baseline2 = hasBaseline2(a);
  c.ideal = loopback;
  c.floor = floorsMeasured;
  c.cpuTime = a.cpuTime != 0;
  return c;
}

std::string tableHeader(const Args& a, int nRanks, const Columns& c) {
  char line[512];
  std::string h;
  // nccl-tests' settings line, sizes in bytes (rows beside them).
  const int64_t perRow = bytesPerRow(a, nRanks);
  char step[64];
  if (stepsBy(a)) snprintf(step, sizeof(step), "%lld(bytes)", (long long)(a.step * perRow));
  else snprintf(step, sizeof(step), "%g(factor)", a.factor);
  snprintf(line, sizeof(line),
           "# nThread %d nGpus %d minBytes %lld maxBytes %lld step: %s warmup iters: %d iters: %d agg iters: %d "
           "validation: %d graph: %d\n",
           a.threads, a.gpusPerThread, (long long)(a.minRows * perRow), (long long)(a.maxRows * perRow), step, a.warmup,
           a.iters, a.aggIters, a.check, a.graphLaunches);
  h += line;
  snprintf(line, sizeof(line),
           "#  dtype %s  D %d  Hl %d  scatter %s  protocol %s  LSE base %s  rows %lld..%lld  baseline %s%s%s\n",
           dtypeName(a.dtype), a.headDim, a.localHeads, scatterName(a.scatter), protocolName(a.protocol),
           a.lseBase ? "e" : "2", (long long)a.minRows, (long long)a.maxRows, baselineName(a.baseline, a.scatter),
           c.baseline2 ? "  baseline 2 " : "", c.baseline2 ? baseline2Name(a) : "");
  h += line;
  if (c.cpuTime)
    snprintf(line, sizeof(line), "#  cputime: the host's time to issue one call (-C 1); median: the GPU's time per call "
             "in the median of the %d iterations; bandwidths from the GPU's mean\n", a.iters);
  else
    snprintf(line, sizeof(line), "#  time: the mean per call over %d iterations, each timed by CUDA events (nccl-tests: "
             "the host's clock over all of them); median: per call in the median iteration\n", a.iters);
  h += line;
  const std::string base = std::string("baseline (") +
                           baselineName(a.baseline == kBaselineOff ? kBaselineFull : a.baseline, a.scatter) + ")";
  // NONE's second baseline: its time, #wrong and the speed-up against it.
  const char* base2 = c.baseline2 ? "   baseline 2 (HEAD + all-gather)" : "";
  snprintf(line, sizeof(line), "#%10s %12s   %38s %7s   %38s %8s%s\n", "", "", "fused (nccl-dcp)", "", base.c_str(),
           "", base2);
  h += line;
  const char* time = c.cpuTime ? "cputime" : "time";
  const char* ideal = c.ideal ? "   xIdeal" : "";
  const char* floor = c.floor ? "   xFloor" : "";
  char names2[64] = "", units2[64] = "";
  if (c.baseline2) {
    snprintf(names2, sizeof(names2), " %9s %7s %8s", time, "#wrong", "speedup");
    snprintf(units2, sizeof(units2), " %9s %7s %8s", "(us)", "", "(x)");
  }
  snprintf(line, sizeof(line), "#%10s %12s %9s %9s %8s %8s %7s %9s %9s %8s %8s %7s %8s%s%s%s %13s\n", "rows", "size",
           time, "median", "algbw", "busbw", "#wrong", time, "median", "algbw", "busbw", "#wrong", "speedup", names2,
           ideal, floor, "protocol");
  h += line;
  snprintf(line, sizeof(line), "#%10s %12s %9s %9s %8s %8s %7s %9s %9s %8s %8s %7s %8s%s%s%s %13s\n", "", "(B)", "(us)",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(GB/s)", "(GB/s)", "", "(x)", units2,
           c.ideal ? "      (x)" : "", c.floor ? "      (x)" : "", "(fused)");
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
  // -C 1: the time columns are the host's, the bandwidths stay the GPU's (as nccl-tests).
  const double fused = c.cpuTime ? r.fusedCpuUs : r.fusedUs, base = c.cpuTime ? r.baseCpuUs : r.baseUs;
  char base2[64] = "";
  if (c.baseline2) {
    char wrong2[24];
    wrong(wrong2, r.base2Wrong);
    snprintf(base2, sizeof(base2), " %9.2f %7s %8.2f", c.cpuTime ? r.base2CpuUs : r.base2Us, wrong2, r.speedup2);
  }
  char ideal[32] = "", floor[32] = "";
  if (c.ideal) snprintf(ideal, sizeof(ideal), " %8.2f", r.idealUs > 0 ? r.fusedUs / r.idealUs : 0.0);
  if (c.floor) snprintf(floor, sizeof(floor), " %8.2f", r.xFloor);
  const char* proto = r.protocol.empty() ? "-" : r.protocol.c_str();
  if (c.baseline)
    snprintf(line, sizeof(line),
             " %10lld %12lld %9.2f %9.2f %8.2f %8.2f %7s %9.2f %9.2f %8.2f %8.2f %7s %8.2f%s%s%s %13s\n",
             (long long)r.rows, (long long)r.bytes, fused, r.fusedMedianUs, r.fusedAlgBw, r.fusedBusBw, wrongF, base,
             r.baseMedianUs, r.baseAlgBw, r.baseBusBw, wrongB, r.speedup, base2, ideal, floor, proto);
  else
    snprintf(line, sizeof(line),
             " %10lld %12lld %9.2f %9.2f %8.2f %8.2f %7s %9s %9s %8s %8s %7s %8s%s%s%s %13s\n", (long long)r.rows,
             (long long)r.bytes, fused, r.fusedMedianUs, r.fusedAlgBw, r.fusedBusBw, wrongF, "-", "-", "-", "-", "-",
             "-", base2, ideal, floor, proto);
  return line;
}

Summary summarize(const std::vector<Row>& rows) {
  Summary s;
  double logSum = 0, logSum2 = 0;
  int both = 0, both2 = 0;
  for (const Row& r : rows) {
    s.wrong += std::max<int64_t>(r.fusedWrong, 0) + std::max<int64_t>(r.baseWrong, 0) +
               std::max<int64_t>(r.base2Wrong, 0);
    if (r.speedup2 > 0 && std::isfinite(r.speedup2)) logSum2 += std::log(r.speedup2), both2++;
    if (r.fusedUs > 0 && std::isfinite(r.fusedBusBw)) s.busBw += r.fusedBusBw, s.sizes++;
    if (r.baseUs > 0 && std::isfinite(r.baseBusBw)) s.baseBusBw += r.baseBusBw, s.baseSizes++;
    if (r.speedup > 0 && std::isfinite(r.speedup)) logSum += std::log(r.speedup), both++;
  }
  s.busBw = s.sizes ? s.busBw / s.sizes : 0;
  s.baseBusBw = s.baseSizes ? s.baseBusBw / s.baseSizes : 0;
  s.speedup = both ? std::exp(logSum / both) : 0;
  s.speedup2 = both2 ? std::exp(logSum2 / both2) : 0;
  return s;
}

std::string tableFooter(const std::vector<Row>& rows, bool baseline, const char* baseline2) {
  const Summary s = summarize(rows);
  char line[256];
  std::string f;
  snprintf(line, sizeof(line), "# %-20s : %lld %s\n", "Out of bounds values", (long long)s.wrong, s.wrong ? "FAILED" : "OK");
  f += line;
  snprintf(line, sizeof(line), "# %-20s : %g \n", "Avg bus bandwidth", s.busBw);
  f += line;
  if (baseline) {
    // Not "Avg bus bandwidth": scripts written for nccl-tests grep that
    // and expect one line, the tested call's.
    snprintf(line, sizeof(line), "# %-20s : %g\n", "Baseline avg busbw", s.baseBusBw);
    f += line;
    snprintf(line, sizeof(line), "# %-20s : %g (geometric mean)\n", "Speed-up", s.speedup);
    f += line;
  }
  if (baseline2) {
    snprintf(line, sizeof(line), "# %-20s : %g (geometric mean, against baseline 2: %s)\n", "Speed-up", s.speedup2,
             baseline2);
    f += line;
  }
  f += "#\n# Collective test concluded: dcp_a2a_lse_reduce_perf\n";
  return f;
}

std::string protocolsOfBatch(int64_t rows, int capacity, const std::function<int(int64_t)>& protocolOfRound) {
  if (rows <= 0) return "-";
  capacity = std::max(capacity, 1);
  // Every round but the last has `capacity` rows.
  const int64_t full = std::min<int64_t>(rows, capacity), last = rows % capacity ? rows % capacity : full;
  const int a = protocolOfRound(full), b = protocolOfRound(last);
  if (a == b) return protocolName(a);
  return std::string(protocolName(a)) + "+" + protocolName(b);
}

std::string protocolsOfBatch(int64_t rows, int capacity, int small, int simpleMinRows, int llMaxRows) {
  return protocolsOfBatch(rows, capacity, [&](int64_t roundRows) {
    if (roundRows <= llMaxRows) return (int)ncclDcpProtoLL;
    return simpleMinRows > 0 && roundRows >= simpleMinRows ? (int)ncclDcpProtoSimple : small;
  });
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

}  // namespace perf
}  // namespace nccl_dcp
