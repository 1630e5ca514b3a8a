/*************************************************************************
 * The topology report (ncclDcpTopology_t): each rank's view of its peers,
 * the agreement on the policy's inputs, and the report as text.
 ************************************************************************/
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "log.h"
#include "topology.h"
#include "validate.h"

namespace nccl_dcp {

namespace {

template <size_t N>
void copyTruncated(char (&dst)[N], const std::string& src) {
  if (src.size() < N) {
    memcpy(dst, src.c_str(), src.size() + 1);
  } else {  // a long CPU list: keep its head, mark the cut
    memcpy(dst, src.c_str(), N - 4);
    memcpy(dst + N - 4, "...", 4);
  }
}

void setPeer(ncclDcpTopology_t* t, int r, const PeerLink& p, const GpuLocality& l) {
  t->link[r] = p.link;
  t->nvlinkGBps[r] = p.link == ncclDcpLinkNvlink ? p.nvlinkGBps : 0.f;
  t->pcie[r] = p.pcie;
  t->numaNode[r] = l.numaNode;
  copyTruncated(t->cpuset[r], l.cpus);
}

uint64_t fnv1a(uint64_t h, const char* s, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

}  // namespace

void describePeers(const Topology* topo, const char* noTopology, int lsaFirst, ncclDcpTopology_t* t) {
  t->source = topo ? topo->source() : ncclDcpTopoSourceNone;
  copyTruncated(t->sourceDetail, topo ? topo->sourceDetail() : std::string("no topology: ") + noTopology);
  const char* mine = t->busId[t->rank];
  for (int r = 0; r < t->nRanks && r < NCCL_DCP_MAX_RANKS; r++) {
    const bool inTeam = r >= lsaFirst && r < lsaFirst + t->lsaSize;
    PeerLink p;
    GpuLocality l;
    if (!inTeam) {
      p.link = ncclDcpLinkNetwork;  // another node, or not reachable by load/store
    } else if (topo) {
      p = topo->link(mine, t->busId[r]);
      l = topo->locality(t->busId[r]);
    }
    if (r == t->rank) p.link = ncclDcpLinkSelf;
    setPeer(t, r, p, l);
  }
}

LinkView linkViewOf(const ncclDcpTopology_t& t, uint64_t hostHash) {
  LinkView v = {hostHash, 1, 1};
  for (int r = 0; r < t.nRanks && r < NCCL_DCP_MAX_RANKS; r++) {
    const int link = t.link[r];
    if (r == t.rank || link == ncclDcpLinkNetwork) continue;  // outside the team: the path's concern
    if (link != ncclDcpLinkNvlink && link != ncclDcpLinkPcie) v.peersKnown = 0;
    if (link != ncclDcpLinkNvlink) v.peersNvlink = 0;
  }
  return v;
}

uint64_t thisHostHash() {
  char buf[512] = "";
  gethostname(buf, sizeof(buf) - 1);
  uint64_t h = fnv1a(1469598103934665603ull, buf, strlen(buf));
  if (FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r")) {
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    h = fnv1a(h, buf, n);
  }
  return h;
}

LinkSummary agreeOnLinks(const LinkView* views, bool oneLsaTeam, ncclDcpTopology_t* t) {
  LinkSummary s = {oneLsaTeam, true, true, false};
  bool oneHost = true;
  for (int r = 0; r < t->nRanks && r < NCCL_DCP_MAX_RANKS; r++) {
    s.classified = s.classified && views[r].peersKnown;
    s.allNvlink = s.allNvlink && views[r].peersNvlink;
    if (views[r].hostHash == views[t->rank].hostHash) continue;
    oneHost = false;
    // A team spanning hosts (multi-node NVLink): this host's model knows
    // nothing of that rank's GPU.
    if (t->link[r] != ncclDcpLinkNetwork) setPeer(t, r, PeerLink(), GpuLocality());
  }
  if (oneLsaTeam && !oneHost) s.classified = s.allNvlink = false;
  s.allNvlink = s.allNvlink && s.classified;
  t->classified = s.classified ? 1 : 0;
  return s;
}

ncclDcpTopology_t reportForGpus(const Topology* topo, const char* noTopology, const std::vector<std::string>& busIds,
                                int rank) {
  ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
  t.nRanks = (int)std::min(busIds.size(), (size_t)NCCL_DCP_MAX_RANKS);
  t.rank = rank;
  t.lsaSize = t.nRanks;
  t.path = ncclDcpPathFused;
  for (int r = 0; r < t.nRanks; r++) snprintf(t.busId[r], sizeof(t.busId[r]), "%s", busIds[r].c_str());
  // Every rank's view, as the all-gather at create brings them.
  std::vector<LinkView> views(t.nRanks);
  ncclDcpTopology_t other = t;
  for (int q = 0; q < t.nRanks; q++) {
    other.rank = q;
    describePeers(topo, noTopology, 0, &other);
    views[q] = linkViewOf(other, 0);
  }
  describePeers(topo, noTopology, 0, &t);
  const ProtocolPolicy p = chooseProtocols(ncclDcpProtoAuto, agreeOnLinks(views.data(), true, &t), env().simpleMinRows);
  t.protocol = (int)p.small;
  t.simpleMinRows = p.simpleForLarge ? p.simpleMinRows : 0;
  return t;
}

const char* linkName(int link) {
  switch (link) {
    case ncclDcpLinkSelf: return "self";
    case ncclDcpLinkNvlink: return "NVLink";
    case ncclDcpLinkPcie: return "PCIe";
    case ncclDcpLinkNetwork: return "network";
    default: return "unknown";
  }
}

const char* pcieName(int pcie) {
  switch (pcie) {
    case ncclDcpPcieSwitch: return "switch";
    case ncclDcpPcieRootComplex: return "root complex";
    case ncclDcpPcieCrossSocket: return "cross-socket";
    default: return "-";
  }
}

const char* topoSourceName(int source) {
  switch (source) {
    case ncclDcpTopoSourceHwloc: return "hwloc";
    case ncclDcpTopoSourceNvml: return "NVML";
    default: return "none";
  }
}

std::string formatTopology(const ncclDcpTopology_t& t, const char* linePrefix) {
  std::ostringstream o;
  char line[512];
  const int me = t.rank;
  const bool meOk = me >= 0 && me < NCCL_DCP_MAX_RANKS;
  snprintf(line, sizeof(line), "nccl-dcp topology: rank %d of %d, GPU %s, NUMA node %d, CPUs %s", me, t.nRanks,
           meOk ? t.busId[me] : "?", meOk ? t.numaNode[me] : -1, meOk && t.cpuset[me][0] ? t.cpuset[me] : "unknown");
  o << linePrefix << line << "\n";
  if (t.source == ncclDcpTopoSourceNone)
    snprintf(line, sizeof(line), "  NVLink: no NVLink information (%s)", t.sourceDetail);
  else
    snprintf(line, sizeof(line), "  NVLink: from %s (%s)", topoSourceName(t.source), t.sourceDetail);
  o << linePrefix << line << "\n";
  char simple[48] = "";
  if (t.simpleMinRows > 0) snprintf(simple, sizeof(simple), ", SIMPLE from %d rows", t.simpleMinRows);
  snprintf(line, sizeof(line), "  path %s, protocol %s%s, LSA team %d of %d, links %s",
           t.path == ncclDcpPathFused ? "fused" : "fallback", protocolName(t.protocol), simple, t.lsaSize, t.nRanks,
           t.classified ? "classified" : "not all classified");
  o << linePrefix << line << "\n";
  snprintf(line, sizeof(line), "  %5s  %-13s  %-8s %7s  %-12s  %4s  %s", "rank", "GPU", "link", "GB/s", "PCIe", "NUMA",
           "CPUs");
  o << linePrefix << line << "\n";
  for (int r = 0; r < t.nRanks && r < NCCL_DCP_MAX_RANKS; r++) {
    char gbps[16] = "-", numa[16] = "-";
    if (t.link[r] == ncclDcpLinkNvlink) snprintf(gbps, sizeof(gbps), "%.1f", t.nvlinkGBps[r]);
    if (t.numaNode[r] >= 0) snprintf(numa, sizeof(numa), "%d", t.numaNode[r]);
    snprintf(line, sizeof(line), "  %5d  %-13s  %-8s %7s  %-12s  %4s  %s", r, t.busId[r], linkName(t.link[r]), gbps,
             pcieName(t.pcie[r]), numa, t.cpuset[r][0] ? t.cpuset[r] : "-");
    o << linePrefix << line << "\n";
  }
  return o.str();
}

void logTopology(const ncclDcpTopology_t& t) {
  if (logLevel() < LogLevel::Info) return;
  std::istringstream lines(formatTopology(t));
  for (std::string l; std::getline(lines, l);) INFO("%s", l.c_str());
}

}  // namespace nccl_dcp
