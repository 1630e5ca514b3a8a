#include "sweep.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "checks.h"
#include "floors.h"
#include "launch.h"

namespace nccl_dcp {
namespace perf {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

// c once on every rank, outside any capture, and every rank waits for all:
// NCCL connects its peers lazily at the first call of a kind and size and
// cannot do so inside a stream capture (issue 9); the barrier keeps every
// rank out of capture until every rank has warmed up.
void warmUp(Team& team, int thread, Mode& m, Call c, int64_t rows) {
  m.enqueue(c, rows);
  m.syncSlots();
  team.barrier(thread);
}

// What enqueueAll() enqueues on the slots' streams, captured into one graph
// per slot, every slot's capture open at once (the calls of several GPUs
// are grouped, as in nccl-tests).
template <typename EnqueueAll>
std::vector<cudaGraphExec_t> capture(Mode& m, EnqueueAll enqueueAll) {
  for (const Slot& s : m.slots()) {
    CUDA_OR_DIE(cudaSetDevice(s.dev));
    CUDA_OR_DIE(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  }
  enqueueAll();
  // Every capture ends before any graph is instantiated: instantiating is
  // not permitted while a capture of this thread is open (-g 2).
  std::vector<cudaGraph_t> graphs;
  for (const Slot& s : m.slots()) {
    CUDA_OR_DIE(cudaSetDevice(s.dev));
    cudaGraph_t g;
    CUDA_OR_DIE(cudaStreamEndCapture(s.stream, &g));
    graphs.push_back(g);
  }
  std::vector<cudaGraphExec_t> execs;
  for (size_t i = 0; i < graphs.size(); i++) {
    CUDA_OR_DIE(cudaSetDevice(m.slots()[i].dev));
    cudaGraphExec_t e;
    CUDA_OR_DIE(cudaGraphInstantiate(&e, graphs[i], 0));
    CUDA_OR_DIE(cudaGraphDestroy(graphs[i]));
    execs.push_back(e);
  }
  return execs;
}

// One sample: -G launches of the graphs (each -m calls), or (-G 0) -m eager calls.
void launch(const Args& a, const std::vector<cudaGraphExec_t>& execs, Mode& m, Call c, int64_t rows) {
  if (execs.empty()) {
    for (int i = 0; i < a.aggIters; i++) m.enqueue(c, rows);
    return;
  }
  for (int l = 0; l < a.graphLaunches; l++)
    for (size_t i = 0; i < execs.size(); i++) {
      CUDA_OR_DIE(cudaSetDevice(m.slots()[i].dev));
      CUDA_OR_DIE(cudaGraphLaunch(execs[i], m.slots()[i].stream));
    }
}

// The time per call of c on each slot, from -n iterations after -w, each
// -m calls x -G graph launches (-G 0: -m eager calls): their mean, as
// nccl-tests reports, and their median. The iterations are queued back to
// back, an event pair around each, and the host waits only after the last
// (as nccl-tests' -G does): an iteration's time is then the GPU's, not the
// host's latency to start a graph on an idle GPU nor one GPU waiting for
// the next one's launch (-g 2). The host's own time per call (-C) is that
// of issuing the -n iterations, before the wait.
std::vector<Timing> timeCall(const Args& a, Team& team, int thread, Mode& m, Call c, int64_t rows) {
  warmUp(team, thread, m, c, rows);
  const std::vector<cudaGraphExec_t> execs =
      a.graphLaunches > 0 ? capture(m, [&] {
        for (int i = 0; i < a.aggIters; i++) m.enqueue(c, rows);
      })
                       : std::vector<cudaGraphExec_t>();
  const std::vector<Slot>& slots = m.slots();
  std::vector<std::vector<cudaEvent_t>> start(slots.size()), stop(slots.size());
  for (size_t i = 0; i < slots.size(); i++) {
    CUDA_OR_DIE(cudaSetDevice(slots[i].dev));
    start[i].resize(a.iters);
    stop[i].resize(a.iters);
    for (int it = 0; it < a.iters; it++) {
      CUDA_OR_DIE(cudaEventCreate(&start[i][it]));
      CUDA_OR_DIE(cudaEventCreate(&stop[i][it]));
    }
  }
  for (int w = 0; w < a.warmup; w++) launch(a, execs, m, c, rows);
  const double callsPerIteration = (double)a.aggIters * std::max(a.graphLaunches, 1);
  const auto issued = std::chrono::steady_clock::now();
  for (int it = 0; it < a.iters; it++) {
    for (size_t i = 0; i < slots.size(); i++) {
      CUDA_OR_DIE(cudaSetDevice(slots[i].dev));
      CUDA_OR_DIE(cudaEventRecord(start[i][it], slots[i].stream));
    }
    launch(a, execs, m, c, rows);
    for (size_t i = 0; i < slots.size(); i++) {
      CUDA_OR_DIE(cudaSetDevice(slots[i].dev));
      CUDA_OR_DIE(cudaEventRecord(stop[i][it], slots[i].stream));
    }
  }
  const double hostUs =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - issued).count() /
      (a.iters * callsPerIteration);
  std::vector<Timing> times;
  for (size_t i = 0; i < slots.size(); i++) {
    CUDA_OR_DIE(cudaSetDevice(slots[i].dev));
    CUDA_OR_DIE(cudaEventSynchronize(stop[i][a.iters - 1]));
    std::vector<double> samples;
    for (int it = 0; it < a.iters; it++) {
      float ms = 0;
      CUDA_OR_DIE(cudaEventElapsedTime(&ms, start[i][it], stop[i][it]));
      samples.push_back(ms * 1e3 / callsPerIteration);
      CUDA_OR_DIE(cudaEventDestroy(start[i][it]));
      CUDA_OR_DIE(cudaEventDestroy(stop[i][it]));
    }
    times.push_back({mean(samples), median(samples), hostUs});
    if (i < execs.size()) CUDA_OR_DIE(cudaGraphExecDestroy(execs[i]));
  }
  return times;
}

// Every rank's times of c, in rank order: the means, the medians, the host's.
struct RankTimes {
  std::vector<double> mean, median, cpu;
};

RankTimes timeEveryRank(const Args& a, Team& team, int thread, Mode& m, Call c, int64_t rows) {
  const std::vector<Timing> mine = timeCall(a, team, thread, m, c, rows);
  std::vector<double> flat;
  for (const Timing& t : mine) flat.insert(flat.end(), {t.meanUs, t.medianUs, t.cpuUs});
  const std::vector<double> all = team.allGather(thread, flat);
  RankTimes r;
  for (size_t k = 0; k + 2 < all.size(); k += 3) {
    r.mean.push_back(all[k]);
    r.median.push_back(all[k + 1]);
    r.cpu.push_back(all[k + 2]);
  }
  return r;
}

// The wrong elements of -c checked calls of c, summed over every rank. The
// inputs' signs flip before each checked call (and back after an odd
// number), so that no call's data is the call's before it, timed or
// checked: a kernel that reads an earlier call's data from its workspace
// shows as wrong elements, where the same inputs every time would hide it.
int64_t checkEveryRank(const Args& a, Team& team, int thread, Mode& m, Call c, int64_t rows) {
  int64_t wrong = 0;
  for (int pass = 0; pass < a.check; pass++) {
    m.flipInputSigns();
    wrong += m.countWrong(c, rows, pass % 2 == 0);
  }
  if (a.check % 2 == 1) m.flipInputSigns();
  return team.sum(thread, wrong);
}

// The floors at every size of the sweep (into samples) and the round trip,
// or why they were not measured.
Floors measureFloors(const Args& a, Team& team, int thread, Mode& m, const std::vector<int64_t>& sizes,
                     std::vector<Samples>* samples) {
  Floors f = m.floors();
  if (!a.floors) {
    f = Floors();
    f.why = "-F 0";
  }
  if (team.sum(thread, f.measured ? 0 : 1) > 0) {
    f.measured = false;
    if (f.why.empty()) f.why = "not every rank can measure them";
    return f;
  }
  for (size_t k = 0; k < sizes.size(); k++) {
    (*samples)[k].peerWriteUs = timeEveryRank(a, team, thread, m, Call::PeerWrite, sizes[k]).mean;
    (*samples)[k].copyEngineUs = timeEveryRank(a, team, thread, m, Call::CopyEngine, sizes[k]).mean;
  }
  f.roundTripUs =
      aggregate(a.aggregate, timeEveryRank(a, team, thread, m, Call::RoundTrip, 0).mean) / kRoundTripsPerLaunch;
  if (team.sum(thread, m.roundTripTimedOut() ? 1 : 0) > 0) {
    f.roundTripUs = -1;
    f.roundTrip += " (timed out: a partner never answered)";
  }
  return f;
}

// Lines of every thread, printed by the leader in rank order.
void printLines(Team& team, int thread, const std::vector<std::string>& mine) {
  constexpr size_t kLine = 256;
  std::vector<char> block(mine.size() * kLine, 0), all(block.size() * team.threads() * team.group().processes);
  for (size_t i = 0; i < mine.size(); i++) strncpy(&block[i * kLine], mine[i].c_str(), kLine - 1);
  team.allGather(thread, block.data(), block.size(), all.data());
  if (team.leader(thread))
    for (size_t off = 0; off < all.size(); off += kLine)
      if (all[off]) printf("%s\n", &all[off]);
}

// --timeline: the in-kernel timeline of one fused call of `rows` rows, run right
// after an untimed one in the same graph, so that the ranks enter it
// together (the first call ends on every rank within a flag's crossing, and
// no host launch comes between). Per rank, each stage's spread over the
// blocks: first..last block, microseconds from the rank's first block's
// launch. Ranks are not compared: the %globaltimer of two GPUs of one host
// disagree by hundreds of microseconds (2 x H200: ~230 us).
std::vector<std::string> timelineLines(Mode& m, int64_t rows) {
  const std::vector<cudaGraphExec_t> execs = capture(m, [&] {
    m.enqueue(Call::Fused, rows);
    for (const Slot& s : m.slots()) {
      CUDA_OR_DIE(cudaSetDevice(s.dev));
      NCCL_OR_DIE(timelineReset(s.stream));
    }
    m.enqueue(Call::Fused, rows);
  });
  for (size_t i = 0; i < execs.size(); i++) {
    CUDA_OR_DIE(cudaSetDevice(m.slots()[i].dev));
    CUDA_OR_DIE(cudaGraphLaunch(execs[i], m.slots()[i].stream));
  }
  m.syncSlots();
  for (size_t i = 0; i < execs.size(); i++) {
    CUDA_OR_DIE(cudaSetDevice(m.slots()[i].dev));
    CUDA_OR_DIE(cudaGraphExecDestroy(execs[i]));
  }
  static const char* const kNames[kTimelineStages] = {"launch", "round", "first send", "sends issued", "flags seen",
                                                      "done"};
  std::vector<std::string> lines;
  std::vector<uint64_t> t((size_t)kTimelineBlocks * kTimelineSlots);
  for (const Slot& s : m.slots()) {
    CUDA_OR_DIE(cudaSetDevice(s.dev));
    NCCL_OR_DIE(timelineRead(t.data()));
    for (int rank = 0; rank < NCCL_DCP_MAX_RANKS; rank++) {
      uint64_t first[kTimelineStages], last[kTimelineStages];
      for (int k = 0; k < kTimelineStages; k++) first[k] = UINT64_MAX, last[k] = 0;
      for (int b = 0; b < kTimelineBlocks; b++) {
        const uint64_t* block = &t[(size_t)b * kTimelineSlots];
        if (block[kTimelineStages] != (uint64_t)rank + 1) continue;
        for (int k = 0; k < kTimelineStages; k++) {
          const uint64_t at = timelineKeepsFirst(k) ? ~block[k] : block[k];
          if (block[k]) first[k] = std::min(first[k], at), last[k] = std::max(last[k], at);
        }
      }
      if (first[kStageLaunch] == UINT64_MAX) continue;
      auto us = [&](uint64_t at) { return at && at != UINT64_MAX ? (at - first[kStageLaunch]) / 1e3 : -1.0; };
      std::string line = "#  timeline rows " + std::to_string(rows) + " rank " + std::to_string(rank) + ":";
      for (int k = 0; k < kTimelineStages; k++) {
        char part[64];
        snprintf(part, sizeof(part), " %s %.2f..%.2f%s", kNames[k], us(first[k]), us(last[k]),
                 k + 1 < kTimelineStages ? "," : "");
        line += part;
      }
      lines.push_back(line);
    }
  }
  return lines;
}

// Every rank's GPU, in rank order (the JSON's config.devices).
std::vector<DeviceInfo> gatherDevices(Team& team, int thread, const Mode& m) {
  const std::vector<DeviceInfo> mine = m.devices();
  std::vector<DeviceInfo> all(mine.size() * team.threads() * team.group().processes);
  team.allGather(thread, mine.data(), mine.size() * sizeof(DeviceInfo), all.data());
  return all;
}

void writeJson(const Args& a, const Mode& m, RunInfo run, const Floors& f, const std::vector<Row>& rows) {
  FILE* file = fopen(a.json.c_str(), "w");
  if (!file) {
    fprintf(stderr, "nccl-dcp perf: -J %s: cannot open for writing\n", a.json.c_str());
    abortRun(kExitFailed);
  }
  const RunInfo mode = m.runInfo();
  run.mode = mode.mode;
  run.device = mode.device;
  run.nRanks = mode.nRanks;
  run.placement = mode.placement;
  run.copyGBps = mode.copyGBps;
  run.ncclVersion = mode.ncclVersion;
  run.provider = mode.provider;
  run.noneAlgo = mode.noneAlgo;
  run.endTime = nowString();
  run.env = relevantEnvironment(environ);
  char host[64] = "";
  gethostname(host, sizeof(host) - 1);
  run.host = host;
  NCCL_OR_DIE(ncclDcpGetVersion(&run.dcpVersion));
  fputs(jsonReport(a, run, f, rows).c_str(), file);
  if (fclose(file) != 0) {
    fprintf(stderr, "nccl-dcp perf: -J %s: write failed\n", a.json.c_str());
    abortRun(kExitFailed);
  }
  printf("# JSON written to %s\n", a.json.c_str());
}

}  // namespace

int runSweep(const Args& a, Team& team, int thread, Mode& m) {
  const bool leader = team.leader(thread);
  const std::vector<int64_t> sizes = batchSweep(a);
  RunInfo run;  // the JSON's
  run.startTime = nowString();
  if (leader) printf("%s\n%s", m.title().c_str(), sizeNote(a, m.nRanks()).c_str());
  printLines(team, thread, m.rankLines());
  if (a.timeline && leader) {
    uint64_t step = 0;
    CUDA_OR_DIE(cudaSetDevice(m.slots()[0].dev));
    CUDA_OR_DIE(globalTimerStepNs(&step));
    printf("# timeline (--timeline): %%globaltimer steps by %llu ns here\n", (unsigned long long)step);
  }

  std::vector<Samples> samples(sizes.size());
  const Floors floors = measureFloors(a, team, thread, m, sizes, &samples);
  std::vector<Row> rows;
  for (size_t k = 0; k < sizes.size(); k++)  // the floors alone, for the header
    rows.push_back(makeRow(a, sizes[k], m.bytesOf(sizes[k]), m.nRanks(), samples[k], 0));
  const Columns columns = columnsOf(a, m.runInfo().mode == "loopback", floors.measured);
  if (leader) printf("%s%s", floorHeader(floors, rows, m.nRanks()).c_str(), tableHeader(a, m.nRanks(), columns).c_str());

  bool anyWrong = false;
  for (size_t k = 0; k < sizes.size(); k++) {
    const int64_t b = sizes[k];
    Samples& s = samples[k];
    m.prepare(b);
    const RankTimes fused = timeEveryRank(a, team, thread, m, Call::Fused, b);
    s.fusedUs = fused.mean, s.fusedMedianUs = fused.median, s.fusedCpuUs = fused.cpu;
    if (a.baseline != kBaselineOff) {
      const RankTimes base = timeEveryRank(
          a, team, thread, m, a.baseline == kBaselineAllToAll ? Call::BaselineAllToAll : Call::Baseline, b);
      s.baseUs = base.mean, s.baseMedianUs = base.median, s.baseCpuUs = base.cpu;
    }
    if (hasBaseline2(a)) {
      const RankTimes base2 = timeEveryRank(a, team, thread, m, Call::Baseline2, b);
      s.base2Us = base2.mean, s.base2MedianUs = base2.median, s.base2CpuUs = base2.cpu;
    }
    if (a.check > 0 && b > 0) {
      s.fusedWrong = checkEveryRank(a, team, thread, m, Call::Fused, b);
      if (a.baseline != kBaselineOff) s.baseWrong = checkEveryRank(a, team, thread, m, Call::Baseline, b);
      if (hasBaseline2(a)) s.base2Wrong = checkEveryRank(a, team, thread, m, Call::Baseline2, b);
    }
    if (a.timeline) {
      team.barrier(thread);
      printLines(team, thread, timelineLines(m, b));
    }
    rows[k] = makeRow(a, b, m.bytesOf(b), m.nRanks(), s, m.idealUs(b));
    rows[k].protocol = m.protocolOf(b);
    anyWrong = anyWrong || rows[k].fusedWrong > 0 || rows[k].baseWrong > 0 || rows[k].base2Wrong > 0;
    if (leader) {
      printf("%s", formatRow(rows[k], columns).c_str());
      fflush(stdout);
    }
  }
  m.checkAsyncErrors();
  const char* base2 = hasBaseline2(a) ? baseline2Name(a) : nullptr;
  if (leader) printf("%s", tableFooter(rows, a.baseline != kBaselineOff, base2).c_str());
  if (!a.json.empty()) run.devices = gatherDevices(team, thread, m);
  if (leader && !a.json.empty()) writeJson(a, m, run, floors, rows);
  team.barrier(thread);
  return anyWrong ? kExitWrong : kExitOk;
}

}  // namespace perf
}  // namespace nccl_dcp
