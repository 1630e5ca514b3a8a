/*************************************************************************
 * The topology model (see topology.h): load hwloc with I/O objects, find
 * the NVLink matrix (hwloc's, else filled from NVML and added to hwloc),
 * answer where a GPU sits and how two GPUs reach each other.
 ************************************************************************/
#include "topology.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>

#include "error.h"
#include "log.h"

namespace nccl_dcp {

namespace {

constexpr const char* kMatrixName = "NVLinkBandwidth";  // hwloc's name (hwloc >= 2.5)
constexpr uint64_t kDiagonalMBps = 1000000;             // hwloc's value on the diagonal (never read)
constexpr unsigned kNvidiaVendor = 0x10de;

struct PciId {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
};

// "0000:18:00.0" (CUDA) or "00000000:18:00.0" (NVML), any case.
bool parseBusId(const char* s, PciId* id) {
  return s != nullptr && sscanf(s, "%x:%x:%x.%x", &id->domain, &id->bus, &id->device, &id->function) == 4;
}

bool samePci(const PciId& a, const PciId& b) {
  return a.domain == b.domain && a.bus == b.bus && a.device == b.device && a.function == b.function;
}

// ---- hwloc objects

hwloc_obj_t pciDevByBusId(hwloc_topology_t topo, const char* busId) {
  PciId id;
  if (!parseBusId(busId, &id)) return nullptr;
  return hwloc_get_pcidev_by_busid(topo, id.domain, id.bus, id.device, id.function);
}

// The PCI device an object of a distances matrix stands for: itself, or the
// parent of an OS device such as hwloc's "nvml0".
hwloc_obj_t pciDevOf(hwloc_obj_t o) {
  while (o && o->type == HWLOC_OBJ_OS_DEVICE) o = o->parent;
  return o && o->type == HWLOC_OBJ_PCI_DEVICE ? o : nullptr;
}

bool isGpu(hwloc_obj_t pci) { return pci && (pci->attr->pcidev.class_id >> 8) == 0x03; }

// NVSwitches show as NVIDIA PCI bridges of class 0680 (hwloc also marks them
// with subtype "NVSwitch").
bool isNvswitch(hwloc_obj_t pci) {
  if (pci == nullptr) return false;
  if (pci->subtype && strcmp(pci->subtype, "NVSwitch") == 0) return true;
  return pci->attr->pcidev.vendor_id == kNvidiaVendor && (pci->attr->pcidev.class_id >> 8) == 0x06;
}

// hwloc_get_common_ancestor_obj compares depths, which are negative and not
// ordered for I/O objects: walk the parents instead.
hwloc_obj_t commonAncestor(hwloc_obj_t a, hwloc_obj_t b) {
  for (hwloc_obj_t x = a; x; x = x->parent)
    for (hwloc_obj_t y = b; y; y = y->parent)
      if (x == y) return x;
  return nullptr;
}

hwloc_obj_t packageOf(hwloc_obj_t o) {
  while (o && o->type != HWLOC_OBJ_PACKAGE) o = o->parent;
  return o;
}

ncclDcpPcie_t pciePath(hwloc_topology_t topo, hwloc_obj_t a, hwloc_obj_t b) {
  hwloc_obj_t common = commonAncestor(a, b);
  if (common == nullptr) return ncclDcpPcieUnknown;
  if (common->type == HWLOC_OBJ_BRIDGE)
    return common->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST ? ncclDcpPcieRootComplex : ncclDcpPcieSwitch;
  if (hwloc_obj_type_is_io(common->type)) return ncclDcpPcieSwitch;
  hwloc_obj_t pa = packageOf(hwloc_get_non_io_ancestor_obj(topo, a));
  hwloc_obj_t pb = packageOf(hwloc_get_non_io_ancestor_obj(topo, b));
  if (pa && pb) return pa == pb ? ncclDcpPcieRootComplex : ncclDcpPcieCrossSocket;
  // Locality unknown (devices attached to the machine): one socket or not.
  return hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE) > 1 ? ncclDcpPcieCrossSocket : ncclDcpPcieRootComplex;
}

std::string cpuList(hwloc_const_bitmap_t set) {
  if (set == nullptr) return "";
  char buf[1024];
  hwloc_bitmap_list_snprintf(buf, sizeof(buf), set);
  return buf;
}

struct Bitmap {
  hwloc_bitmap_t set;
  explicit Bitmap(hwloc_bitmap_t s) : set(s) {}
  ~Bitmap() { hwloc_bitmap_free(set); }
  Bitmap(const Bitmap&) = delete;
  Bitmap& operator=(const Bitmap&) = delete;
};

// ---- NVML

// NVLink as NVML reports it, per NVML GPU.
struct NvmlGpu {
  PciId pci;
  bool answered = false;  // NVML answered the NVLink state query
  int activeLinks = 0;
  uint64_t toSwitchesMBps = 0;
  std::vector<uint64_t> toGpuMBps;  // by NVML index
};

struct NvmlScan {
  std::vector<NvmlGpu> gpus;
  std::string firstRefusal;  // NVML's answer when a GPU's NVLink query failed
  uint64_t minLinkMBps = 0, maxLinkMBps = 0;  // over the active links
};

// One field of one link (scopeId = link); false when NVML has no answer.
bool linkField(const NvmlApi& api, nvml::Device dev, unsigned field, unsigned link, nvml::FieldValue* v) {
  if (api.deviceGetFieldValues == nullptr) return false;
  memset(v, 0, sizeof(*v));
  v->fieldId = field;
  v->scopeId = link;
  return api.deviceGetFieldValues(dev, 1, v) == nvml::kSuccess && v->nvmlReturn == nvml::kSuccess;
}

uint64_t fieldAsU64(const nvml::FieldValue& v) {
  switch (v.valueType) {
    case nvml::kValueDouble: return v.value.dVal > 0 ? (uint64_t)v.value.dVal : 0;
    case nvml::kValueUInt: return v.value.uiVal;
    case nvml::kValueULong: return v.value.ulVal;
    case nvml::kValueULongLong: return v.value.ullVal;
    case nvml::kValueSLongLong: return v.value.sllVal > 0 ? (uint64_t)v.value.sllVal : 0;
    case nvml::kValueSInt: return v.value.siVal > 0 ? (uint64_t)v.value.siVal : 0;
    case nvml::kValueUShort: return v.value.usVal;
    default: return 0;
  }
}

// MB/s per direction of one link: NVML's speed field, else the nominal rate
// of its NVLink version (hwloc's table), else 1 (the link exists; its speed
// is unknown).
uint64_t linkSpeedMBps(const NvmlApi& api, nvml::Device dev, unsigned link) {
  for (unsigned field : {nvml::kFieldNvlinkSpeedMBps, nvml::kFieldNvlinkSpeedCommonMBps}) {
    nvml::FieldValue v;
    if (linkField(api, dev, field, link, &v))
      if (uint64_t mbps = fieldAsU64(v)) return mbps;
  }
  unsigned version = 0;
  if (api.deviceGetNvLinkVersion && api.deviceGetNvLinkVersion(dev, link, &version) == nvml::kSuccess) {
    if (version == 1) return 20000;
    if (version >= 2 && version <= 6) return 25000;
    if (version == 7) return 50000;
  }
  return 1;
}

int nvmlIndexOf(const NvmlScan& scan, const nvml::PciInfo& pci) {
  for (size_t i = 0; i < scan.gpus.size(); i++) {
    const PciId& g = scan.gpus[i].pci;
    if (g.domain == pci.domain && g.bus == pci.bus && g.device == pci.device) return (int)i;
  }
  return -1;
}

// Whether a link is up: nvmlDeviceGetNvLinkState, else the state field
// (NCCL reads the field on Hopper and newer).
nvml::Return linkState(const NvmlApi& api, nvml::Device dev, unsigned link, int* active) {
  const nvml::Return r = api.deviceGetNvLinkState(dev, link, active);
  nvml::FieldValue v;
  if (r == nvml::kSuccess || !linkField(api, dev, nvml::kFieldNvlinkState, link, &v)) return r;
  *active = (int)fieldAsU64(v);
  return nvml::kSuccess;
}

// Walks one GPU's links until NVML refuses one (past the last link, or no
// NVLink at all: "Not Supported").
void scanLinks(const NvmlApi& api, nvml::Device dev, NvmlScan* scan, int self) {
  NvmlGpu& g = scan->gpus[self];
  for (unsigned link = 0; link < (unsigned)nvml::kMaxLinks; link++) {
    int active = 0;
    nvml::Return r = linkState(api, dev, link, &active);
    if (r != nvml::kSuccess) {
      if (link == 0 && scan->firstRefusal.empty()) scan->firstRefusal = nvmlErrorName(api, r);
      return;
    }
    g.answered = true;
    if (active != nvml::kFeatureEnabled) continue;
    nvml::PciInfo remote;
    memset(&remote, 0, sizeof(remote));
    if (api.deviceGetNvLinkRemotePciInfo(dev, link, &remote) != nvml::kSuccess) continue;
    const int peer = nvmlIndexOf(*scan, remote);
    int type = nvml::kRemoteUnknown;
    if (api.deviceGetNvLinkRemoteDeviceType == nullptr ||
        api.deviceGetNvLinkRemoteDeviceType(dev, link, &type) != nvml::kSuccess)
      type = nvml::kRemoteUnknown;
    // A remote end that is no GPU NVML lists is an NVSwitch (NCCL assumes the
    // same when the switch is hidden from the host, e.g. in a VM).
    if (type == nvml::kRemoteUnknown) type = peer >= 0 ? nvml::kRemoteGpu : nvml::kRemoteSwitch;
    if (type == nvml::kRemoteGpu && peer < 0) continue;  // a GPU hidden from NVML
    if (type != nvml::kRemoteGpu && type != nvml::kRemoteSwitch) continue;  // a CPU (POWER)
    const uint64_t mbps = linkSpeedMBps(api, dev, link);
    if (type == nvml::kRemoteGpu) g.toGpuMBps[peer] += mbps;
    else g.toSwitchesMBps += mbps;
    g.activeLinks++;
    scan->minLinkMBps = scan->minLinkMBps ? std::min(scan->minLinkMBps, mbps) : mbps;
    scan->maxLinkMBps = std::max(scan->maxLinkMBps, mbps);
  }
}

// NVML's view of every GPU it lists; false (reason in *why) when NVML could
// not be asked at all.
bool scanNvml(const NvmlApi& api, NvmlScan* scan, std::string* why) {
  nvml::Return r = api.init();
  if (r != nvml::kSuccess) {
    *why = "nvmlInit: " + nvmlErrorName(api, r);
    return false;
  }
  unsigned count = 0;
  r = api.deviceGetCount(&count);
  std::vector<nvml::Device> devs;
  if (r == nvml::kSuccess) {
    for (unsigned i = 0; i < count; i++) {
      nvml::Device d = nullptr;
      nvml::PciInfo pci;
      memset(&pci, 0, sizeof(pci));
      if (api.deviceGetHandleByIndex(i, &d) != nvml::kSuccess || api.deviceGetPciInfo(d, &pci) != nvml::kSuccess)
        continue;  // a GPU NVML cannot describe: its links stay unknown
      NvmlGpu g;
      g.pci.domain = pci.domain;
      g.pci.bus = pci.bus;
      g.pci.device = pci.device;
      scan->gpus.push_back(g);
      devs.push_back(d);
    }
    for (NvmlGpu& g : scan->gpus) g.toGpuMBps.assign(scan->gpus.size(), 0);
    for (size_t i = 0; i < devs.size(); i++) scanLinks(api, devs[i], scan, (int)i);
  }
  api.shutdown();
  if (r != nvml::kSuccess) {
    *why = "nvmlDeviceGetCount: " + nvmlErrorName(api, r);
    return false;
  }
  return true;
}

// " of 26.562 GB/s" (or " of 25.000-26.562 GB/s"): what NVML said a link
// carries per direction, to compare with `nvidia-smi nvlink -s`.
std::string speedRange(uint64_t minMBps, uint64_t maxMBps) {
  if (maxMBps == 0) return "";
  char buf[64];
  if (minMBps == maxMBps) snprintf(buf, sizeof(buf), " of %.3f GB/s", minMBps / 1000.0);
  else snprintf(buf, sizeof(buf), " of %.3f-%.3f GB/s", minMBps / 1000.0, maxMBps / 1000.0);
  return buf;
}

bool addMatrix(hwloc_topology_t topo, std::vector<hwloc_obj_t>& objs, std::vector<uint64_t>& mbps,
               std::string* why) {
  hwloc_distances_add_handle_t h = hwloc_distances_add_create(
      topo, kMatrixName, HWLOC_DISTANCES_KIND_FROM_USER | HWLOC_DISTANCES_KIND_MEANS_BANDWIDTH, 0);
  if (h == nullptr || hwloc_distances_add_values(topo, h, (unsigned)objs.size(), objs.data(), mbps.data(), 0) < 0 ||
      hwloc_distances_add_commit(topo, h, 0) < 0) {
    *why = std::string("hwloc_distances_add failed: ") + strerror(errno);
    return false;
  }
  return true;
}

}  // namespace

// ---- Topology

Topology::~Topology() {
  if (topo_) hwloc_topology_destroy(topo_);
}

ncclResult_t Topology::fromSystem(const NvmlApi* nvml, std::unique_ptr<Topology>* out, const char* noNvml) {
  return load(nullptr, nvml, noNvml, false, out);
}

ncclResult_t Topology::fromXml(const char* path, const NvmlApi* nvml, std::unique_ptr<Topology>* out,
                               bool thisSystem) {
  if (path == nullptr) return fail(ncclInvalidArgument, "hwloc XML path is NULL");
  if (access(path, R_OK) != 0)
    return fail(ncclInvalidArgument, "hwloc XML %s cannot be read: %s", path, strerror(errno));
  return load(path, nvml, nullptr, thisSystem, out);
}

ncclResult_t Topology::load(const char* xmlPath, const NvmlApi* nvml, const char* noNvml, bool thisSystem,
                            std::unique_ptr<Topology>* out) {
  std::unique_ptr<Topology> t(new Topology());
  if (hwloc_topology_init(&t->topo_) != 0) {
    t->topo_ = nullptr;
    return fail(ncclSystemError, "hwloc_topology_init failed: %s", strerror(errno));
  }
  // I/O objects are filtered out by default: without them no GPU, no PCI
  // tree, no NVLink matrix.
  hwloc_topology_set_io_types_filter(t->topo_, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (thisSystem) hwloc_topology_set_flags(t->topo_, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM);
  // hwloc parses the file in set_xml already, and checks it in load.
  const char* step = "hwloc_topology_set_xml";
  if (xmlPath == nullptr || hwloc_topology_set_xml(t->topo_, xmlPath) == 0) {
    step = "hwloc_topology_load";
    if (hwloc_topology_load(t->topo_) == 0) step = nullptr;
  }
  if (step && xmlPath)
    return fail(ncclInvalidArgument, "hwloc XML %s is not a valid hwloc 2.x topology export (%s: %s)", xmlPath, step,
                strerror(errno));
  if (step) return fail(ncclSystemError, "hwloc could not load this machine's topology (%s: %s)", step, strerror(errno));
  t->findNvlinks(nvml, noNvml ? noNvml : "NVML not used");
  *out = std::move(t);
  return ncclSuccess;
}

void Topology::findNvlinks(const NvmlApi* nvml, const char* noNvml) {
  if (readNvlinkMatrix()) {
    source_ = ncclDcpTopoSourceHwloc;
    sourceDetail_ = "hwloc's " + std::string(kMatrixName) + " matrix, " + std::to_string(nvlinkGpus_.size()) + " GPUs";
    return;
  }
  // Without a source, sourceDetail_ says why (the report prints "no NVLink
  // information (<why>)").
  if (nvml == nullptr) {
    sourceDetail_ = noNvml;
    return;
  }
  NvmlScan scan;
  std::string why;
  if (!scanNvml(*nvml, &scan, &why)) {
    sourceDetail_ = why;
    return;
  }
  // The GPUs NVML answered for and hwloc knows, as hwloc PCI devices.
  std::vector<hwloc_obj_t> objs;
  std::vector<int> nvmlIndex;
  int links = 0;
  for (size_t i = 0; i < scan.gpus.size(); i++) {
    const NvmlGpu& g = scan.gpus[i];
    hwloc_obj_t pci = hwloc_get_pcidev_by_busid(topo_, g.pci.domain, g.pci.bus, g.pci.device, 0);
    if (!g.answered || pci == nullptr) continue;
    objs.push_back(pci);
    nvmlIndex.push_back((int)i);
    links += g.activeLinks;
  }
  if (objs.size() < 2) {
    sourceDetail_ = scan.firstRefusal.empty()
                        ? "NVML answered for " + std::to_string(objs.size()) + " GPU(s) hwloc knows: no pair to link"
                        : "NVML answered \"" + scan.firstRefusal + "\" to NVLink queries";
    return;
  }
  // GPUs behind NVSwitches reach each other through the switches, at the
  // lesser of their bandwidths into the switches.
  const size_t n = objs.size();
  std::vector<uint64_t> mbps(n * n, 0);
  for (size_t a = 0; a < n; a++)
    for (size_t b = 0; b < n; b++) {
      const NvmlGpu& ga = scan.gpus[nvmlIndex[a]];
      const NvmlGpu& gb = scan.gpus[nvmlIndex[b]];
      uint64_t v = a == b ? kDiagonalMBps : ga.toGpuMBps[nvmlIndex[b]];
      if (a != b && ga.toSwitchesMBps && gb.toSwitchesMBps) v += std::min(ga.toSwitchesMBps, gb.toSwitchesMBps);
      mbps[a * n + b] = v;
    }
  if (!addMatrix(topo_, objs, mbps, &why) || !readNvlinkMatrix()) {
    sourceDetail_ = "NVML's links could not be added to hwloc: " + why;
    return;
  }
  source_ = ncclDcpTopoSourceNvml;
  sourceDetail_ = std::to_string(n) + " GPUs, " + std::to_string(links) + " active NVLinks" +
                  speedRange(scan.minLinkMBps, scan.maxLinkMBps) + "; hwloc has no " + kMatrixName + " matrix";
}

bool Topology::readNvlinkMatrix() {
  unsigned nr = 1;
  hwloc_distances_s* d = nullptr;
  if (hwloc_distances_get_by_name(topo_, kMatrixName, &nr, &d, 0) != 0 || nr == 0 || d == nullptr) return false;
  // GPUs and NVSwitches among the matrix's objects; anything else (a CPU
  // on POWER) carries no GPU-to-GPU traffic.
  const unsigned m = d->nbobjs;
  std::vector<int> gpuAt(m, -1);
  std::vector<bool> switchAt(m, false);
  nvlinkGpus_.clear();
  for (unsigned k = 0; k < m; k++) {
    hwloc_obj_t pci = pciDevOf(d->objs[k]);
    if (isGpu(pci)) {
      gpuAt[k] = (int)nvlinkGpus_.size();
      nvlinkGpus_.push_back(pci);
    } else {
      switchAt[k] = isNvswitch(pci);
    }
  }
  const size_t n = nvlinkGpus_.size();
  nvlinkDirect_.assign(n * n, 0);
  nvlinkToSwitches_.assign(n, 0);
  for (unsigned a = 0; a < m; a++) {
    if (gpuAt[a] < 0) continue;
    for (unsigned b = 0; b < m; b++) {
      const uint64_t v = d->values[a * m + b];
      if (gpuAt[b] >= 0 && a != b) nvlinkDirect_[gpuAt[a] * n + gpuAt[b]] = v;
      else if (switchAt[b]) nvlinkToSwitches_[gpuAt[a]] += v;
    }
  }
  hwloc_distances_release(topo_, d);
  return n > 0;
}

int Topology::matrixIndex(hwloc_obj_t pciDev) const {
  for (size_t i = 0; i < nvlinkGpus_.size(); i++)
    if (nvlinkGpus_[i] == pciDev) return (int)i;
  return -1;
}

GpuLocality Topology::locality(const char* busId) const {
  GpuLocality l;
  hwloc_obj_t pci = pciDevByBusId(topo_, busId);
  if (pci == nullptr) return l;
  l.found = true;
  hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(topo_, pci);
  if (near->nodeset && hwloc_bitmap_weight(near->nodeset) == 1) l.numaNode = hwloc_bitmap_first(near->nodeset);
  l.cpus = cpuList(near->cpuset);
  return l;
}

PeerLink Topology::link(const char* fromBusId, const char* toBusId) const {
  PeerLink p;
  PciId from, to;
  if (parseBusId(fromBusId, &from) && parseBusId(toBusId, &to) && samePci(from, to)) {
    p.link = ncclDcpLinkSelf;
    return p;
  }
  hwloc_obj_t a = pciDevByBusId(topo_, fromBusId), b = pciDevByBusId(topo_, toBusId);
  if (a == nullptr || b == nullptr) return p;
  p.pcie = pciePath(topo_, a, b);
  const int ia = matrixIndex(a), ib = matrixIndex(b);
  if (ia < 0 || ib < 0) return p;  // no NVLink information for one of them
  const size_t n = nvlinkGpus_.size();
  uint64_t mbps = nvlinkDirect_[ia * n + ib];
  if (nvlinkToSwitches_[ia] && nvlinkToSwitches_[ib]) mbps += std::min(nvlinkToSwitches_[ia], nvlinkToSwitches_[ib]);
  p.link = mbps ? ncclDcpLinkNvlink : ncclDcpLinkPcie;
  p.nvlinkGBps = (float)mbps / 1000.f;
  return p;
}

std::vector<std::string> Topology::nvidiaGpus() const {
  std::vector<std::string> ids;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo_, nullptr); o; o = hwloc_get_next_pcidev(topo_, o)) {
    if (!isGpu(o) || o->attr->pcidev.vendor_id != kNvidiaVendor) continue;
    char id[32];
    snprintf(id, sizeof(id), "%04x:%02x:%02x.%x", o->attr->pcidev.domain, o->attr->pcidev.bus, o->attr->pcidev.dev,
             o->attr->pcidev.func);
    ids.push_back(id);
  }
  return ids;
}

void Topology::bindThreadNear(const char* busId, std::string* what) const {
  hwloc_obj_t pci = pciDevByBusId(topo_, busId);
  if (pci == nullptr) {
    *what = std::string("not pinned: GPU ") + (busId ? busId : "(null)") + " is not in this machine's topology";
    return;
  }
  hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(topo_, pci);
  Bitmap target(hwloc_bitmap_dup(near->cpuset)), current(hwloc_bitmap_alloc());
  // Stay inside what the thread may use (taskset, cgroups, MPI binding).
  if (hwloc_get_cpubind(topo_, current.set, HWLOC_CPUBIND_THREAD) == 0) {
    hwloc_bitmap_and(target.set, target.set, current.set);
    if (hwloc_bitmap_iszero(target.set)) {
      *what = "not pinned: the CPUs near GPU " + std::string(busId) + " (" + cpuList(near->cpuset) +
              ") are outside this thread's affinity (" + cpuList(current.set) + ")";
      return;
    }
  }
  if (hwloc_set_cpubind(topo_, target.set, HWLOC_CPUBIND_THREAD) != 0) {
    *what = "not pinned: binding to CPUs " + cpuList(target.set) + " failed: " + strerror(errno);
    return;
  }
  const GpuLocality l = locality(busId);
  *what = "pinned to CPUs " + cpuList(target.set) +
          (l.numaNode >= 0 ? " (NUMA node " + std::to_string(l.numaNode) + ")" : std::string()) + ", near GPU " +
          busId;
}

const Topology* systemTopology(std::string* why) {
  static std::unique_ptr<Topology> topo;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string noNvml;
    const NvmlApi* nvml = systemNvml(&noNvml);
    if (Topology::fromSystem(nvml, &topo, noNvml.c_str()) != ncclSuccess) {
      error = lastError();
      clearLastError();  // not an error of the caller's: the report says what is unknown
    }
  });
  if (topo == nullptr && why) *why = error;
  return topo.get();
}

ncclResult_t pinThreadToGpu(int cudaDev, std::string* what) {
  if (what == nullptr) return fail(ncclInvalidArgument, "what is NULL");
  char busId[32];
  CUDACHECK(cudaDeviceGetPCIBusId(busId, sizeof(busId), cudaDev));
  std::string why;
  const Topology* topo = systemTopology(&why);
  if (topo == nullptr) {
    *what = "not pinned: " + why;
    return ncclSuccess;
  }
  topo->bindThreadNear(busId, what);
  return ncclSuccess;
}

}  // namespace nccl_dcp
