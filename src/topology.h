/*************************************************************************
 * The topology model (DESIGN §5): hwloc, with I/O objects kept, holds the
 * PCI tree, each GPU's NUMA node and CPU set, and the NVLink matrix
 * `NVLinkBandwidth` (MB/s per direction). hwloc builds that matrix itself
 * only when compiled with its NVML component, which stock Debian/Ubuntu
 * builds lack; then it is filled here from NVML and added to the same hwloc
 * topology, so every question below reads one model.
 *
 * At context creation each rank classifies every peer from its own GPU
 * (Self / NVLink / PCIe / Unknown, Network outside the LSA team), the ranks
 * all-gather a LinkView each and derive the same LinkSummary, the input of
 * the AUTO policy (protocol.h).
 ************************************************************************/
#ifndef NCCL_DCP_TOPOLOGY_H_
#define NCCL_DCP_TOPOLOGY_H_

#include <hwloc.h>
#include <stdint.h>

#include <memory>
#include <string>
#include <vector>

#include "nccl_dcp.h"
#include "nvml.h"
#include "protocol.h"

namespace nccl_dcp {

// Where a GPU sits.
struct GpuLocality {
  bool found = false;  // the GPU's PCI device is in the topology
  int numaNode = -1;   // the one NUMA node nearest the GPU; -1: unknown or several
  std::string cpus;    // CPUs nearest the GPU, hwloc list format ("0-55,112-167")
};

// How one GPU reaches another.
struct PeerLink {
  ncclDcpLink_t link = ncclDcpLinkUnknown;  // Self, Nvlink, Pcie or Unknown
  float nvlinkGBps = 0.f;                   // per direction, when Nvlink
  ncclDcpPcie_t pcie = ncclDcpPcieUnknown;  // the PCIe path between them, even under NVLink
};

class Topology {
 public:
  // This machine (HWLOC_XMLFILE, hwloc's own variable, substitutes an XML
  // export). nvml fills the NVLink matrix when hwloc has none; null: no
  // NVML, noNvml says why.
  static ncclResult_t fromSystem(const NvmlApi* nvml, std::unique_ptr<Topology>* out,
                                 const char* noNvml = nullptr);
  // An hwloc 2.x XML export. thisSystem: the file describes this machine
  // (hwloc then allows binding threads with it; tests only).
  static ncclResult_t fromXml(const char* path, const NvmlApi* nvml, std::unique_ptr<Topology>* out,
                              bool thisSystem = false);
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  GpuLocality locality(const char* busId) const;
  PeerLink link(const char* fromBusId, const char* toBusId) const;
  // Bus ids of the NVIDIA GPUs (PCI class 03xx, vendor 10de), in PCI order.
  std::vector<std::string> nvidiaGpus() const;

  ncclDcpTopoSource_t source() const { return source_; }
  const std::string& sourceDetail() const { return sourceDetail_; }
  hwloc_topology_t hwloc() const { return topo_; }

  // Binds the calling thread to the CPUs near the GPU, within the thread's
  // current affinity (as NCCL binds its own threads); *what says what was
  // done, or why nothing was. Not being able to bind is not an error.
  void bindThreadNear(const char* busId, std::string* what) const;

 private:
  Topology() = default;
  static ncclResult_t load(const char* xmlPath, const NvmlApi* nvml, const char* noNvml, bool thisSystem,
                           std::unique_ptr<Topology>* out);
  void findNvlinks(const NvmlApi* nvml, const char* noNvml);
  bool readNvlinkMatrix();
  int matrixIndex(hwloc_obj_t pciDev) const;

  hwloc_topology_t topo_ = nullptr;
  ncclDcpTopoSource_t source_ = ncclDcpTopoSourceNone;
  std::string sourceDetail_;
  // NVLinkBandwidth read back from hwloc: GPUs (PCI devices), MB/s per
  // direction GPU to GPU, and each GPU's MB/s into NVSwitches.
  std::vector<hwloc_obj_t> nvlinkGpus_;
  std::vector<uint64_t> nvlinkDirect_, nvlinkToSwitches_;
};

// This process's machine, loaded on first use with the system's NVML
// (thread-safe); nullptr when hwloc could not load it, the reason in *why.
const Topology* systemTopology(std::string* why);

// Fills the topology part of a report whose nRanks, rank, lsaSize and busId
// are set: each rank's link, PCIe path, NUMA node and CPUs as seen from this
// rank; ranks outside the LSA team [lsaFirst, lsaFirst + lsaSize) are
// Network. topo null: nothing is known but the team (noTopology says why).
void describePeers(const Topology* topo, const char* noTopology, int lsaFirst, ncclDcpTopology_t* t);

// What each rank contributes to the agreement on the policy's inputs.
struct LinkView {
  uint64_t hostHash;    // ranks of one LSA team on several hosts: nothing is proven
  int32_t peersKnown;   // every peer of the LSA team has a known link
  int32_t peersNvlink;  // ... and it is NVLink
};
LinkView linkViewOf(const ncclDcpTopology_t& t, uint64_t hostHash);
// Identity of this host (host name and boot id), as NCCL's host hash.
uint64_t thisHostHash();
// The summary every rank derives from the same all-gathered views (one per
// rank); also marks Unknown the report's peers found on another host, whose
// bus ids mean nothing here.
LinkSummary agreeOnLinks(const LinkView* views, bool oneLsaTeam, ncclDcpTopology_t* t);

// A report for GPUs of this machine as if each were a rank of one LSA team
// (what create would find, without NCCL): tests, and a dump of a machine.
ncclDcpTopology_t reportForGpus(const Topology* topo, const char* noTopology, const std::vector<std::string>& busIds,
                                int rank);

// The report as text, one line each for the header and every rank, each
// line starting with linePrefix ("# " in the perf binary's header).
std::string formatTopology(const ncclDcpTopology_t& t, const char* linePrefix = "");
// formatTopology at NCCL_DCP_DEBUG=INFO.
void logTopology(const ncclDcpTopology_t& t);

// Binds the calling thread to the CPUs near CUDA device cudaDev (see
// Topology::bindThreadNear), on this machine's topology; *what says what
// was done. Errors only for a bad argument or a failing CUDA call.
ncclResult_t pinThreadToGpu(int cudaDev, std::string* what);

const char* linkName(int link);
const char* pcieName(int pcie);
const char* topoSourceName(int source);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_TOPOLOGY_H_
