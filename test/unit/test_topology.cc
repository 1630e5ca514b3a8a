// The topology model (src/topology.h) and the AUTO policy (src/protocol.h)
// on hwloc XML fixtures (test/data, written by make_fixtures.py), with NVML
// replaced by a stand-in machine: classification of every GPU pair, the PCIe
// path, NUMA node and CPUs, where the NVLink information came from, the
// protocol each box gets, the agreement across ranks, bad XML, the report
// text, thread pinning. ThisMachine.* prints the dump of the machine it runs
// on (the GPU machines' check).
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "error.h"
#include "protocol.h"
#include "test_util.h"
#include "topology.h"

#ifndef NCCL_DCP_TEST_DATA
#error "NCCL_DCP_TEST_DATA (the fixtures' directory) is set by test/meson.build"
#endif

namespace nccl_dcp {
namespace {

std::string fixture(const char* name) { return std::string(NCCL_DCP_TEST_DATA) + "/" + name; }

// ---- A stand-in NVML: a machine described by bus ids and links; every
// function of the table reads gFake.

struct FakeLink {
  std::string remote;             // bus id at the other end
  int type = nvml::kRemoteGpu;    // what NVML says is there
  unsigned mbps = 25000;          // NVML_FI_DEV_NVLINK_GET_SPEED
  bool active = true;
};

struct FakeGpu {
  std::string busId;
  std::vector<FakeLink> links;
  nvml::Return linkAnswer = nvml::kSuccess;  // kErrorNotSupported: no NVLink queries answered
  bool stateOnlyAsField = false;             // nvmlDeviceGetNvLinkState refused, the state field answers
};

struct FakeNvml {
  nvml::Return initAnswer = nvml::kSuccess;
  std::vector<FakeGpu> gpus;
  int inits = 0;
};

FakeNvml* gFake = nullptr;

constexpr nvml::Return kInvalidArgument = 2, kDriverNotLoaded = 9;

void parsePci(const std::string& busId, nvml::PciInfo* pci) {
  unsigned fn = 0;
  sscanf(busId.c_str(), "%x:%x:%x.%x", &pci->domain, &pci->bus, &pci->device, &fn);
  snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
}

FakeGpu* gpuOf(nvml::Device d) {
  const size_t i = (size_t)(uintptr_t)d - 1;
  return i < gFake->gpus.size() ? &gFake->gpus[i] : nullptr;
}

const FakeLink* linkOf(nvml::Device d, unsigned link) {
  FakeGpu* g = gpuOf(d);
  return g && link < g->links.size() ? &g->links[link] : nullptr;
}

// What a driver of this generation offers: withRemoteType / withFields off
// models an older one (no remote device type, no speed fields).
NvmlApi fakeNvml(bool withRemoteType = true, bool withFields = true) {
  NvmlApi a = {};
  a.init = [] {
    gFake->inits++;
    return gFake->initAnswer;
  };
  a.shutdown = [] { return nvml::kSuccess; };
  a.errorString = [](nvml::Return r) -> const char* {
    return r == nvml::kErrorNotSupported ? "Not Supported" : r == kDriverNotLoaded ? "Driver Not Loaded" : "Unknown Error";
  };
  a.deviceGetCount = [](unsigned* n) {
    *n = (unsigned)gFake->gpus.size();
    return nvml::kSuccess;
  };
  a.deviceGetHandleByIndex = [](unsigned i, nvml::Device* d) {
    if (i >= gFake->gpus.size()) return kInvalidArgument;
    *d = (nvml::Device)(uintptr_t)(i + 1);
    return nvml::kSuccess;
  };
  a.deviceGetPciInfo = [](nvml::Device d, nvml::PciInfo* pci) {
    if (gpuOf(d) == nullptr) return kInvalidArgument;
    parsePci(gpuOf(d)->busId, pci);
    return nvml::kSuccess;
  };
  a.deviceGetNvLinkState = [](nvml::Device d, unsigned link, int* active) {
    FakeGpu* g = gpuOf(d);
    if (g == nullptr) return kInvalidArgument;
    if (g->linkAnswer != nvml::kSuccess) return g->linkAnswer;
    if (g->stateOnlyAsField) return nvml::kErrorNotSupported;
    if (link >= g->links.size()) return kInvalidArgument;
    *active = g->links[link].active ? nvml::kFeatureEnabled : 0;
    return nvml::kSuccess;
  };
  a.deviceGetNvLinkRemotePciInfo = [](nvml::Device d, unsigned link, nvml::PciInfo* pci) {
    const FakeLink* l = linkOf(d, link);
    if (l == nullptr) return kInvalidArgument;
    parsePci(l->remote, pci);
    return nvml::kSuccess;
  };
  if (withRemoteType)
    a.deviceGetNvLinkRemoteDeviceType = [](nvml::Device d, unsigned link, int* type) {
      const FakeLink* l = linkOf(d, link);
      if (l == nullptr) return kInvalidArgument;
      *type = l->type;
      return nvml::kSuccess;
    };
  if (withFields)
    a.deviceGetFieldValues = [](nvml::Device d, int n, nvml::FieldValue* v) {
      for (int i = 0; i < n; i++) {
        const FakeLink* l = linkOf(d, v[i].scopeId);
        v[i].nvmlReturn = nvml::kErrorNotSupported;
        if (l && v[i].fieldId == nvml::kFieldNvlinkSpeedMBps) {
          v[i].nvmlReturn = nvml::kSuccess;
          v[i].valueType = nvml::kValueUInt;
          v[i].value.uiVal = l->mbps;
        }
        if (l && v[i].fieldId == nvml::kFieldNvlinkState && gpuOf(d)->stateOnlyAsField) {
          v[i].nvmlReturn = nvml::kSuccess;
          v[i].valueType = nvml::kValueULongLong;
          v[i].value.ullVal = l->active ? nvml::kFeatureEnabled : 0;
        }
      }
      return nvml::kSuccess;
    };
  a.deviceGetNvLinkVersion = [](nvml::Device d, unsigned link, unsigned* version) {
    if (linkOf(d, link) == nullptr) return kInvalidArgument;
    *version = 6;  // NVLink 4.0 (Hopper): 25000 MB/s in hwloc's table
    return nvml::kSuccess;
  };
  return a;
}

// `count` links from GPU a to GPU b and back.
void nvlinkPair(FakeNvml* m, int a, int b, int count, unsigned mbps) {
  for (int i = 0; i < count; i++) {
    m->gpus[a].links.push_back({m->gpus[b].busId, nvml::kRemoteGpu, mbps, true});
    m->gpus[b].links.push_back({m->gpus[a].busId, nvml::kRemoteGpu, mbps, true});
  }
}

FakeNvml machine(const std::vector<std::string>& busIds) {
  FakeNvml m;
  for (const std::string& b : busIds) m.gpus.push_back({b, {}, nvml::kSuccess});
  return m;
}

// The GPUs of the fixtures (see make_fixtures.py).
const std::vector<std::string> kNvswitchGpus = {"0000:13:00.0", "0000:14:00.0", "0000:53:00.0", "0000:54:00.0",
                                                "0000:93:00.0", "0000:94:00.0", "0000:d3:00.0", "0000:d4:00.0"};
const std::vector<std::string> kPcieGpus = {"0000:13:00.0", "0000:14:00.0", "0000:81:00.0", "0000:91:00.0"};
const std::vector<std::string> kPairGpus = {"0000:13:00.0", "0000:14:00.0", "0000:43:00.0", "0000:44:00.0"};

class TopologyTest : public ::testing::Test {
 protected:
  // The policy's defaults, whatever NCCL_DCP_* the shell has.
  void SetUp() override { setEnvForTesting(&defaults_); }
  void TearDown() override {
    gFake = nullptr;
    setEnvForTesting(nullptr);
  }

  // Loads a fixture with `fake` as NVML (nullptr: no NVML at all).
  std::unique_ptr<Topology> load(const char* name, FakeNvml* fake, const NvmlApi& api = fakeNvml()) {
    gFake = fake;
    std::unique_ptr<Topology> t;
    const ncclResult_t r = Topology::fromXml(fixture(name).c_str(), fake ? &api : nullptr, &t);
    EXPECT_EQ(r, ncclSuccess) << name << ": " << lastError();
    return t;
  }

  // Every pair of gpus has `link`, and NVLink pairs `gbps` per direction.
  static void expectAllPairs(const Topology& t, const std::vector<std::string>& gpus, ncclDcpLink_t link,
                             float gbps = 0.f) {
    for (const std::string& a : gpus)
      for (const std::string& b : gpus) {
        const PeerLink p = t.link(a.c_str(), b.c_str());
        SCOPED_TRACE(a + " -> " + b);
        if (a == b) {
          EXPECT_EQ(p.link, ncclDcpLinkSelf);
          continue;
        }
        EXPECT_EQ(p.link, link) << linkName(p.link);
        if (link == ncclDcpLinkNvlink) {
          EXPECT_NEAR(p.nvlinkGBps, gbps, 0.01);
        }
      }
  }

  Env defaults_;
};

// ---- Classification per fixture

TEST_F(TopologyTest, NvswitchBoxReadsHwlocsMatrixAndLeavesNvmlAlone) {
  FakeNvml fake = machine(kNvswitchGpus);
  auto t = load("nvswitch8.xml", &fake);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->source(), ncclDcpTopoSourceHwloc) << t->sourceDetail();
  EXPECT_EQ(fake.inits, 0) << "hwloc had the matrix: NVML must not be asked";
  EXPECT_EQ(t->nvidiaGpus(), kNvswitchGpus);
  // Every GPU reaches the NVSwitches with 5 + 4 + 4 + 5 links of 25 GB/s.
  expectAllPairs(*t, kNvswitchGpus, ncclDcpLinkNvlink, 450.f);
}

TEST_F(TopologyTest, PciePathAndLocalityFromThePciTree) {
  auto t = load("nvswitch8.xml", nullptr);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->link("0000:13:00.0", "0000:14:00.0").pcie, ncclDcpPcieSwitch);
  EXPECT_EQ(t->link("0000:13:00.0", "0000:53:00.0").pcie, ncclDcpPcieRootComplex);  // two host bridges, one socket
  EXPECT_EQ(t->link("0000:13:00.0", "0000:93:00.0").pcie, ncclDcpPcieCrossSocket);
  EXPECT_EQ(t->link("0000:d4:00.0", "0000:13:00.0").pcie, ncclDcpPcieCrossSocket);
  const GpuLocality g0 = t->locality("0000:13:00.0"), g7 = t->locality("0000:D4:00.0");  // any case
  EXPECT_TRUE(g0.found);
  EXPECT_EQ(g0.numaNode, 0);
  EXPECT_EQ(g0.cpus, "0-3");
  EXPECT_EQ(g7.numaNode, 1);
  EXPECT_EQ(g7.cpus, "4-7");
  EXPECT_FALSE(t->locality("0000:77:00.0").found);
  EXPECT_EQ(t->link("0000:13:00.0", "0000:77:00.0").link, ncclDcpLinkUnknown) << "a GPU not in the topology";
}

TEST_F(TopologyTest, PcieBoxWithNvmlAnsweringIsProvenPcie) {
  FakeNvml fake = machine(kPcieGpus);
  for (FakeGpu& g : fake.gpus) g.links.assign(4, FakeLink{"0000:00:00.0", nvml::kRemoteGpu, 25000, false});
  auto t = load("pcie4_2sockets.xml", &fake);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->source(), ncclDcpTopoSourceNvml) << t->sourceDetail();
  expectAllPairs(*t, kPcieGpus, ncclDcpLinkPcie);
  EXPECT_EQ(t->link("0000:13:00.0", "0000:14:00.0").pcie, ncclDcpPcieSwitch);
  EXPECT_EQ(t->link("0000:81:00.0", "0000:91:00.0").pcie, ncclDcpPcieRootComplex);
  EXPECT_EQ(t->link("0000:14:00.0", "0000:91:00.0").pcie, ncclDcpPcieCrossSocket);
  // The matrix now lives in hwloc itself: one model.
  unsigned nr = 1;
  hwloc_distances_s* d = nullptr;
  ASSERT_EQ(hwloc_distances_get_by_name(t->hwloc(), "NVLinkBandwidth", &nr, &d, 0), 0);
  ASSERT_EQ(nr, 1u);
  EXPECT_EQ(d->nbobjs, 4u);
  EXPECT_EQ(d->values[1], 0u);
  hwloc_distances_release(t->hwloc(), d);
}

TEST_F(TopologyTest, WithoutNvmlLinksAreUnknownButThePciePathIsKept) {
  auto t = load("pcie4_2sockets.xml", nullptr);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->source(), ncclDcpTopoSourceNone);
  EXPECT_EQ(t->sourceDetail(), "NVML not used");
  expectAllPairs(*t, kPcieGpus, ncclDcpLinkUnknown);
  EXPECT_EQ(t->link("0000:13:00.0", "0000:14:00.0").pcie, ncclDcpPcieSwitch);
}

TEST_F(TopologyTest, NvmlNotSupportedMeansNoNvlinkInformationNotAnError) {
  FakeNvml fake = machine(kPcieGpus);
  for (FakeGpu& g : fake.gpus) g.linkAnswer = nvml::kErrorNotSupported;
  auto t = load("pcie4_2sockets.xml", &fake);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->source(), ncclDcpTopoSourceNone);
  EXPECT_NE(t->sourceDetail().find("\"Not Supported\""), std::string::npos) << t->sourceDetail();
  expectAllPairs(*t, kPcieGpus, ncclDcpLinkUnknown);
}

TEST_F(TopologyTest, NvmlThatCannotStartMeansNoNvlinkInformation) {
  FakeNvml fake = machine(kPcieGpus);
  fake.initAnswer = kDriverNotLoaded;
  auto t = load("pcie4_2sockets.xml", &fake);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->source(), ncclDcpTopoSourceNone);
  EXPECT_NE(t->sourceDetail().find("Driver Not Loaded"), std::string::npos) << t->sourceDetail();
  expectAllPairs(*t, kPcieGpus, ncclDcpLinkUnknown);
}

TEST_F(TopologyTest, NvlinkPairsFromNvmlAndFromHwlocAgree) {
  FakeNvml fake = machine(kPairGpus);
  nvlinkPair(&fake, 0, 1, 4, 25000);
  nvlinkPair(&fake, 2, 3, 4, 25000);
  auto fromNvml = load("nvlink_pairs.xml", &fake);
  FakeNvml untouched = machine(kPairGpus);
  auto fromHwloc = load("nvlink_pairs_hwloc_nvml.xml", &untouched);
  ASSERT_TRUE(fromNvml && fromHwloc);
  EXPECT_EQ(fromNvml->source(), ncclDcpTopoSourceNvml) << fromNvml->sourceDetail();
  EXPECT_EQ(fromHwloc->source(), ncclDcpTopoSourceHwloc) << fromHwloc->sourceDetail();
  EXPECT_EQ(untouched.inits, 0);
  for (const Topology* t : {fromNvml.get(), fromHwloc.get()}) {
    expectAllPairs(*t, {kPairGpus[0], kPairGpus[1]}, ncclDcpLinkNvlink, 100.f);
    expectAllPairs(*t, {kPairGpus[2], kPairGpus[3]}, ncclDcpLinkNvlink, 100.f);
    for (int a : {0, 1})
      for (int b : {2, 3}) {
        const PeerLink p = t->link(kPairGpus[a].c_str(), kPairGpus[b].c_str());
        EXPECT_EQ(p.link, ncclDcpLinkPcie);
        EXPECT_EQ(p.pcie, ncclDcpPcieRootComplex);
      }
  }
}

// The 2xH200 machine: NV18, 18 links x 26.562 GB/s = 478.116 GB/s per direction.
TEST_F(TopologyTest, TwoH200WithNv18TakeNvmlsLinkSpeed) {
  FakeNvml fake = machine({kPairGpus[0], kPairGpus[1]});
  nvlinkPair(&fake, 0, 1, 18, 26562);
  auto t = load("nvlink_pairs.xml", &fake);
  ASSERT_TRUE(t);
  expectAllPairs(*t, {kPairGpus[0], kPairGpus[1]}, ncclDcpLinkNvlink, 478.116f);
  // A driver without speed fields: the nominal rate of the link's version.
  auto older = load("nvlink_pairs.xml", &fake, fakeNvml(true, false));
  ASSERT_TRUE(older);
  expectAllPairs(*older, {kPairGpus[0], kPairGpus[1]}, ncclDcpLinkNvlink, 450.f);
}

// NCCL reads the link state as a field on Hopper: so do we when the call is refused.
TEST_F(TopologyTest, LinkStateFromTheFieldWhenTheCallIsRefused) {
  FakeNvml fake = machine({kPairGpus[0], kPairGpus[1]});
  nvlinkPair(&fake, 0, 1, 18, 26562);
  fake.gpus[0].links[3].active = false;
  for (FakeGpu& g : fake.gpus) g.stateOnlyAsField = true;
  auto t = load("nvlink_pairs.xml", &fake);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->source(), ncclDcpTopoSourceNvml) << t->sourceDetail();
  EXPECT_NEAR(t->link(kPairGpus[0].c_str(), kPairGpus[1].c_str()).nvlinkGBps, 17 * 26.562f, 0.01);
  EXPECT_NEAR(t->link(kPairGpus[1].c_str(), kPairGpus[0].c_str()).nvlinkGBps, 18 * 26.562f, 0.01);
}

// GPUs behind NVSwitches reach each other through them, whether NVML names
// the remote end a switch or (older driver) it is simply no GPU it lists;
// at the lesser of the two GPUs' bandwidths into the switches.
TEST_F(TopologyTest, NvswitchThroughNvml) {
  for (bool withRemoteType : {true, false}) {
    SCOPED_TRACE(withRemoteType ? "remote device type known" : "remote device type unknown");
    FakeNvml fake = machine(kPcieGpus);
    for (size_t g = 0; g < fake.gpus.size(); g++) {
      const int links = g == 3 ? 12 : 18;  // one GPU with links down
      for (int l = 0; l < links; l++)
        fake.gpus[g].links.push_back({"0000:f3:00.0", nvml::kRemoteSwitch, 26562, true});
    }
    auto t = load("pcie4_2sockets.xml", &fake, fakeNvml(withRemoteType, true));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->source(), ncclDcpTopoSourceNvml);
    expectAllPairs(*t, {kPcieGpus[0], kPcieGpus[1], kPcieGpus[2]}, ncclDcpLinkNvlink, 478.116f);
    EXPECT_NEAR(t->link(kPcieGpus[0].c_str(), kPcieGpus[3].c_str()).nvlinkGBps, 12 * 26.562f, 0.01);
  }
}

TEST_F(TopologyTest, GpusNvmlDoesNotAnswerForStayUnknown) {
  FakeNvml fake = machine(kPairGpus);
  nvlinkPair(&fake, 0, 1, 4, 25000);
  fake.gpus[2].links.assign(4, FakeLink{"0000:00:00.0", nvml::kRemoteGpu, 25000, false});  // no bridge fitted
  fake.gpus[3].linkAnswer = nvml::kErrorNotSupported;
  auto t = load("nvlink_pairs.xml", &fake);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->source(), ncclDcpTopoSourceNvml);
  EXPECT_EQ(t->link(kPairGpus[0].c_str(), kPairGpus[1].c_str()).link, ncclDcpLinkNvlink);
  EXPECT_EQ(t->link(kPairGpus[0].c_str(), kPairGpus[2].c_str()).link, ncclDcpLinkPcie);
  EXPECT_EQ(t->link(kPairGpus[0].c_str(), kPairGpus[3].c_str()).link, ncclDcpLinkUnknown);
}

TEST_F(TopologyTest, BoxWithoutGpus) {
  FakeNvml fake = machine(kPcieGpus);  // NVML's GPUs are not in this box's hwloc
  auto t = load("no_gpu.xml", &fake);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->nvidiaGpus().empty());
  EXPECT_EQ(t->source(), ncclDcpTopoSourceNone);
  EXPECT_EQ(t->link(kPcieGpus[0].c_str(), kPcieGpus[1].c_str()).link, ncclDcpLinkUnknown);
  EXPECT_FALSE(t->locality(kPcieGpus[0].c_str()).found);
  const ncclDcpTopology_t r = reportForGpus(t.get(), "", {kPcieGpus[0], kPcieGpus[1]}, 0);
  EXPECT_EQ(r.link[0], ncclDcpLinkSelf);
  EXPECT_EQ(r.link[1], ncclDcpLinkUnknown);
  EXPECT_EQ(r.protocol, ncclDcpProtoLL);
}

// ---- Bad input: a clear error naming the file, no crash.

class BadXml : public ::testing::TestWithParam<std::pair<const char*, std::string>> {};

TEST_P(BadXml, IsAClearError) {
  const std::string path = ::testing::TempDir() + "nccl_dcp_bad_" + GetParam().first + ".xml";
  {
    std::ofstream f(path);
    f << GetParam().second;
  }
  std::unique_ptr<Topology> t;
  EXPECT_EQ(Topology::fromXml(path.c_str(), nullptr, &t), ncclInvalidArgument);
  EXPECT_FALSE(t);
  EXPECT_NE(std::string(lastError()).find(path + " is not a valid hwloc 2.x topology export"), std::string::npos)
      << lastError();
  unlink(path.c_str());
}

std::string truncatedFixture() {
  std::ifstream in(fixture("nvswitch8.xml"));
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s.substr(0, s.size() / 2);
}

INSTANTIATE_TEST_SUITE_P(
    Topology, BadXml,
    ::testing::Values(std::make_pair("empty", std::string()), std::make_pair("text", std::string("not xml at all\n")),
                      std::make_pair("truncated", truncatedFixture()),
                      std::make_pair("other_root", std::string("<?xml version=\"1.0\"?>\n<nccl/>\n"))),
    [](const ::testing::TestParamInfo<std::pair<const char*, std::string>>& i) { return std::string(i.param.first); });

TEST(TopologyXml, MissingFileAndNullPathAreClearErrors) {
  std::unique_ptr<Topology> t;
  EXPECT_EQ(Topology::fromXml("/nonexistent/box.xml", nullptr, &t), ncclInvalidArgument);
  EXPECT_NE(std::string(lastError()).find("/nonexistent/box.xml cannot be read"), std::string::npos) << lastError();
  EXPECT_EQ(Topology::fromXml(nullptr, nullptr, &t), ncclInvalidArgument);
  EXPECT_FALSE(t);
}

// ---- The AUTO policy

LinkSummary summary(bool oneLsaTeam, bool classified, bool allNvlink, bool oneGpu = false) {
  return LinkSummary{oneLsaTeam, classified, allNvlink, oneGpu};
}

TEST(Policy, AutoPicksLl128OnlyOnProvenNvlink) {
  const Env e;
  const ProtocolPolicy nvlink = chooseProtocols(ncclDcpProtoAuto, summary(true, true, true), e.simpleMinRows);
  EXPECT_EQ(nvlink.small, Proto::LL128);
  EXPECT_EQ(nvlink.simpleMinRows, kLl128SimpleMinRows);
  EXPECT_EQ(chooseProtocols(ncclDcpProtoAuto, summary(true, false, false, true), e.simpleMinRows).small, Proto::LL128);  // one GPU
  const ProtocolPolicy pcie = chooseProtocols(ncclDcpProtoAuto, summary(true, true, false), e.simpleMinRows);
  EXPECT_EQ(pcie.small, Proto::LL);
  EXPECT_EQ(pcie.simpleForLarge, kLlSimpleMinRows > 0);
  EXPECT_EQ(protocolForRound(pcie, kLlSimpleMinRows - 1), Proto::LL);
  EXPECT_EQ(protocolForRound(pcie, kLlSimpleMinRows), kLlSimpleMinRows > 0 ? Proto::Simple : Proto::LL);
  EXPECT_EQ(chooseProtocols(ncclDcpProtoAuto, summary(true, false, false), e.simpleMinRows).small, Proto::LL);  // unknown
  // allNvlink without classified cannot happen from agreeOnLinks; stay safe anyway.
  EXPECT_EQ(chooseProtocols(ncclDcpProtoAuto, summary(true, false, true), e.simpleMinRows).small, Proto::LL);
}

TEST(Policy, SimpleMinRowsFromTheEnvironmentOverridesBothCrossovers) {
  Env e;
  e.simpleMinRows = 96;
  for (bool nvlink : {true, false}) {
    const ProtocolPolicy p = chooseProtocols(ncclDcpProtoAuto, summary(true, true, nvlink), e.simpleMinRows);
    EXPECT_TRUE(p.simpleForLarge);
    EXPECT_EQ(protocolForRound(p, 95), nvlink ? Proto::LL128 : Proto::LL);
    EXPECT_EQ(protocolForRound(p, 96), Proto::Simple);
  }
  e.simpleMinRows = 0;
  EXPECT_FALSE(chooseProtocols(ncclDcpProtoAuto, summary(true, true, false), e.simpleMinRows).simpleForLarge);
}

// Logs written while f runs, at NCCL_DCP_DEBUG=WARN.
template <typename F>
std::string warningsOf(F f) {
  Env e;
  e.debug = LogLevel::Warn;
  setEnvForTesting(&e);
  ::testing::internal::CaptureStdout();
  f();
  std::string out = ::testing::internal::GetCapturedStdout();
  setEnvForTesting(nullptr);
  return out;
}

TEST(Policy, ForcedProtocolIsUsedAndLl128WithoutNvlinkWarns) {
  const Env e;
  for (ncclDcpProtocol_t p : {ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple}) {
    const ProtocolPolicy pol = chooseProtocols(p, summary(true, true, false), e.simpleMinRows);
    EXPECT_EQ((int)pol.small, p == ncclDcpProtoLL128 ? (int)Proto::LL : (int)p) << "LL128 over PCIe runs as LL";
    EXPECT_FALSE(pol.simpleForLarge);
  }
  const std::string pcie = warningsOf([] { chooseProtocols(ncclDcpProtoLL128, summary(true, true, false), kEnvUnset); });
  EXPECT_NE(pcie.find("WARN protocol LL128 forced"), std::string::npos) << pcie;
  EXPECT_NE(pcie.find("PCIe"), std::string::npos) << pcie;
  EXPECT_NE(pcie.find("LL is used instead"), std::string::npos) << pcie;
  const std::string unknown =
      warningsOf([] { chooseProtocols(ncclDcpProtoLL128, summary(true, false, false), kEnvUnset); });
  EXPECT_NE(unknown.find("some link is unknown"), std::string::npos) << unknown;
  EXPECT_EQ(warningsOf([] { chooseProtocols(ncclDcpProtoLL128, summary(true, true, true), kEnvUnset); }), "");
  EXPECT_EQ(warningsOf([] { chooseProtocols(ncclDcpProtoLL128, summary(true, false, false, true), kEnvUnset); }), "");
  EXPECT_EQ(warningsOf([] { chooseProtocols(ncclDcpProtoLL, summary(true, false, false), kEnvUnset); }), "");
  // The fallback path runs no LL128: nothing to warn about.
  EXPECT_EQ(warningsOf([] { chooseProtocols(ncclDcpProtoLL128, summary(false, false, false), kEnvUnset); }), "");
}

// ---- Per box: what create would report and choose (every GPU a rank).

struct BoxCase {
  const char* name;
  const char* xml;
  std::vector<std::string> gpus;  // the ranks
  bool nvml;                      // NVML answers (links from nvmlLinks)
  int protocol;                   // AUTO's choice
  int classified;
  ncclDcpTopoSource_t source;
};

void PrintTo(const BoxCase& c, std::ostream* os) { *os << c.name; }

class Box : public TopologyTest, public ::testing::WithParamInterface<BoxCase> {};

TEST_P(Box, ReportAndProtocol) {
  const BoxCase& c = GetParam();
  FakeNvml fake = machine(kPairGpus);
  nvlinkPair(&fake, 0, 1, 4, 25000);
  nvlinkPair(&fake, 2, 3, 4, 25000);
  auto t = load(c.xml, c.nvml ? &fake : nullptr);
  ASSERT_TRUE(t);
  for (int rank = 0; rank < (int)c.gpus.size(); rank++) {
    const ncclDcpTopology_t r = reportForGpus(t.get(), "", c.gpus, rank);
    SCOPED_TRACE(formatTopology(r));
    EXPECT_EQ(r.protocol, c.protocol) << protocolName(r.protocol);
    EXPECT_EQ(r.classified, c.classified);
    EXPECT_EQ(r.source, c.source);
    EXPECT_EQ(r.link[rank], ncclDcpLinkSelf);
    EXPECT_EQ(r.simpleMinRows, c.protocol == ncclDcpProtoLL ? kLlSimpleMinRows : kLl128SimpleMinRows);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Topology, Box,
    ::testing::Values(
        BoxCase{"nvswitch8", "nvswitch8.xml", kNvswitchGpus, false, ncclDcpProtoLL128, 1, ncclDcpTopoSourceHwloc},
        BoxCase{"nvswitch8_two", "nvswitch8.xml", {kNvswitchGpus[1], kNvswitchGpus[6]}, false, ncclDcpProtoLL128, 1,
                ncclDcpTopoSourceHwloc},
        BoxCase{"pcie4_no_nvml", "pcie4_2sockets.xml", kPcieGpus, false, ncclDcpProtoLL, 0, ncclDcpTopoSourceNone},
        BoxCase{"pairs_all_four", "nvlink_pairs.xml", kPairGpus, true, ncclDcpProtoLL, 1, ncclDcpTopoSourceNvml},
        BoxCase{"pairs_one_pair", "nvlink_pairs.xml", {kPairGpus[2], kPairGpus[3]}, true, ncclDcpProtoLL128, 1,
                ncclDcpTopoSourceNvml},
        BoxCase{"pairs_across", "nvlink_pairs.xml", {kPairGpus[0], kPairGpus[2]}, true, ncclDcpProtoLL, 1,
                ncclDcpTopoSourceNvml},
        BoxCase{"pairs_hwloc", "nvlink_pairs_hwloc_nvml.xml", {kPairGpus[0], kPairGpus[1]}, false, ncclDcpProtoLL128, 1,
                ncclDcpTopoSourceHwloc},
        BoxCase{"one_gpu", "nvlink_pairs.xml", {kPairGpus[0]}, false, ncclDcpProtoLL128, 1, ncclDcpTopoSourceNone},
        BoxCase{"no_gpu", "no_gpu.xml", {"0000:13:00.0", "0000:14:00.0"}, true, ncclDcpProtoLL, 0,
                ncclDcpTopoSourceNone}),
    [](const ::testing::TestParamInfo<BoxCase>& i) { return std::string(i.param.name); });

// ---- Agreement across ranks

// A report of n ranks all NVLink from `rank`'s side, one LSA team.
ncclDcpTopology_t nvlinkReport(int n, int rank) {
  ncclDcpTopology_t t = NCCL_DCP_TOPOLOGY_INITIALIZER;
  t.nRanks = t.lsaSize = n;
  t.rank = rank;
  for (int r = 0; r < n; r++) {
    t.link[r] = r == rank ? ncclDcpLinkSelf : ncclDcpLinkNvlink;
    t.nvlinkGBps[r] = r == rank ? 0.f : 450.f;
    t.numaNode[r] = 0;
  }
  return t;
}

TEST(Agreement, OneRanksDoubtIsEveryRanksDoubt) {
  std::vector<LinkView> views;
  for (int r = 0; r < 4; r++) views.push_back(linkViewOf(nvlinkReport(4, r), 7));
  ncclDcpTopology_t t = nvlinkReport(4, 0);
  LinkSummary s = agreeOnLinks(views.data(), true, &t);
  EXPECT_TRUE(s.classified && s.allNvlink);
  EXPECT_EQ(t.classified, 1);
  // Rank 2 sees rank 3 over PCIe: nobody may pick LL128.
  ncclDcpTopology_t t2 = nvlinkReport(4, 2);
  t2.link[3] = ncclDcpLinkPcie;
  views[2] = linkViewOf(t2, 7);
  EXPECT_EQ(views[2].peersKnown, 1);
  EXPECT_EQ(views[2].peersNvlink, 0);
  for (int r = 0; r < 4; r++) {
    ncclDcpTopology_t tr = nvlinkReport(4, r);
    s = agreeOnLinks(views.data(), true, &tr);
    EXPECT_TRUE(s.classified);
    EXPECT_FALSE(s.allNvlink);
  }
  // Rank 1 does not know its link to rank 0.
  ncclDcpTopology_t t1 = nvlinkReport(4, 1);
  t1.link[0] = ncclDcpLinkUnknown;
  views[1] = linkViewOf(t1, 7);
  s = agreeOnLinks(views.data(), true, &t);
  EXPECT_FALSE(s.classified);
  EXPECT_EQ(t.classified, 0);
}

TEST(Agreement, AnLsaTeamOnSeveralHostsProvesNothing) {
  std::vector<LinkView> views;
  for (int r = 0; r < 4; r++) views.push_back(linkViewOf(nvlinkReport(4, r), r < 2 ? 1 : 2));
  ncclDcpTopology_t t = nvlinkReport(4, 0);
  const LinkSummary s = agreeOnLinks(views.data(), true, &t);
  EXPECT_FALSE(s.classified);
  EXPECT_FALSE(s.allNvlink);
  EXPECT_EQ(t.link[1], ncclDcpLinkNvlink) << "same host: kept";
  EXPECT_EQ(t.link[2], ncclDcpLinkUnknown) << "another host's bus id means nothing here";
  EXPECT_EQ(t.numaNode[3], -1);
}

TEST(Agreement, RanksOutsideTheLsaTeamAreNetworkAndLeftToThePath) {
  auto t = std::unique_ptr<Topology>();
  ASSERT_EQ(Topology::fromXml(fixture("nvswitch8.xml").c_str(), nullptr, &t), ncclSuccess) << lastError();
  // 4 ranks, two nodes of 2 (same bus ids on both): rank 1's team is {0, 1}.
  ncclDcpTopology_t r = NCCL_DCP_TOPOLOGY_INITIALIZER;
  r.nRanks = 4;
  r.rank = 1;
  r.lsaSize = 2;
  const char* ids[] = {"0000:13:00.0", "0000:14:00.0", "0000:13:00.0", "0000:14:00.0"};
  for (int i = 0; i < 4; i++) snprintf(r.busId[i], sizeof(r.busId[i]), "%s", ids[i]);
  describePeers(t.get(), "", 0, &r);
  EXPECT_EQ(r.link[0], ncclDcpLinkNvlink);
  EXPECT_EQ(r.link[1], ncclDcpLinkSelf);
  EXPECT_EQ(r.link[2], ncclDcpLinkNetwork);
  EXPECT_EQ(r.link[3], ncclDcpLinkNetwork);
  EXPECT_EQ(r.pcie[2], ncclDcpPcieUnknown);
  const LinkView v = linkViewOf(r, 1);
  EXPECT_EQ(v.peersKnown, 1);
  EXPECT_EQ(v.peersNvlink, 1);
  std::vector<LinkView> views = {v, v, linkViewOf(r, 2), linkViewOf(r, 2)};
  const LinkSummary s = agreeOnLinks(views.data(), false, &r);
  EXPECT_FALSE(s.oneLsaTeam);
  EXPECT_EQ(r.link[2], ncclDcpLinkNetwork);
}

TEST(Agreement, WithoutATopologyOnlySelfAndTheTeamAreKnown) {
  ncclDcpTopology_t r = NCCL_DCP_TOPOLOGY_INITIALIZER;
  r.nRanks = 3;
  r.rank = 0;
  r.lsaSize = 2;
  describePeers(nullptr, "hwloc could not load", 0, &r);
  EXPECT_EQ(r.link[0], ncclDcpLinkSelf);
  EXPECT_EQ(r.link[1], ncclDcpLinkUnknown);
  EXPECT_EQ(r.link[2], ncclDcpLinkNetwork);
  EXPECT_EQ(r.source, ncclDcpTopoSourceNone);
  EXPECT_NE(std::string(r.sourceDetail).find("hwloc could not load"), std::string::npos);
}

TEST(Agreement, HostHashIsStable) { EXPECT_EQ(thisHostHash(), thisHostHash()); }

// ---- The report as text

TEST_F(TopologyTest, DumpShowsEveryPeer) {
  FakeNvml fake = machine({kPairGpus[0], kPairGpus[1]});
  nvlinkPair(&fake, 0, 1, 18, 26562);
  auto t = load("nvlink_pairs.xml", &fake);
  ASSERT_TRUE(t);
  const std::string s = formatTopology(reportForGpus(t.get(), "", {kPairGpus[0], kPairGpus[1]}, 1), "# ");
  printf("%s", s.c_str());
  for (const char* want : {"# nccl-dcp topology: rank 1 of 2, GPU 0000:14:00.0, NUMA node 0, CPUs 0-7",
                           "#   NVLink: from NVML (2 GPUs, 36 active NVLinks of 26.562 GB/s;", "protocol LL128", "links classified",
                           "NVLink     478.1  switch",
                           "self"})
    EXPECT_NE(s.find(want), std::string::npos) << "missing \"" << want << "\"";
  const std::string none = formatTopology(reportForGpus(nullptr, "no hwloc", {kPairGpus[0]}, 0));
  EXPECT_NE(none.find("no NVLink information"), std::string::npos) << none;
}

TEST(TopologyReport, LongCpuListsAreCutVisibly) {
  auto t = std::unique_ptr<Topology>();
  ASSERT_EQ(Topology::fromXml(fixture("nvswitch8.xml").c_str(), nullptr, &t), ncclSuccess) << lastError();
  ncclDcpTopology_t r = reportForGpus(t.get(), "", {kNvswitchGpus[0]}, 0);
  EXPECT_STREQ(r.cpuset[0], "0-3");
  EXPECT_EQ(r.numaNode[0], 0);
  EXPECT_LT(strlen(r.cpuset[0]), sizeof(r.cpuset[0]));
}

// ---- Pinning

struct AffinityGuard {
  cpu_set_t saved;
  AffinityGuard() { sched_getaffinity(0, sizeof(saved), &saved); }
  ~AffinityGuard() { sched_setaffinity(0, sizeof(saved), &saved); }
};

// Intersection of CPUs [first, first + n) with the thread's affinity, as a list.
std::string allowedOf(int first, int n) {
  cpu_set_t s;
  sched_getaffinity(0, sizeof(s), &s);
  std::string out;
  for (int c = first; c < first + n; c++) {
    if (!CPU_ISSET(c, &s)) continue;
    int end = c;
    while (end + 1 < first + n && CPU_ISSET(end + 1, &s)) end++;
    out += (out.empty() ? "" : ",") + std::to_string(c) + (end > c ? "-" + std::to_string(end) : "");
    c = end;
  }
  return out;
}

TEST(Pinning, ThreadGoesToTheCpusNearItsGpuWithinItsAffinity) {
  AffinityGuard guard;
  std::unique_ptr<Topology> t;
  // The fixture as this machine, so hwloc binds with it: socket 0 is CPUs
  // 0-3, socket 1 CPUs 4-7 (those this machine lacks are outside the
  // thread's affinity).
  ASSERT_EQ(Topology::fromXml(fixture("nvswitch8.xml").c_str(), nullptr, &t, true), ncclSuccess) << lastError();
  for (auto [gpu, first] : {std::pair{"0000:13:00.0", 0}, std::pair{"0000:93:00.0", 4}}) {
    const std::string want = allowedOf(first, 4);
    std::string what;
    t->bindThreadNear(gpu, &what);
    SCOPED_TRACE(what);
    if (want.empty()) {
      EXPECT_EQ(what.rfind("not pinned: the CPUs near GPU", 0), 0u);
    } else {
      EXPECT_EQ(what.rfind("pinned to CPUs " + want + " (NUMA node " + std::to_string(first / 4) + ")", 0), 0u);
      EXPECT_EQ(allowedOf(0, CPU_SETSIZE), want) << "the thread's affinity is the GPU's CPUs";
    }
    sched_setaffinity(0, sizeof(guard.saved), &guard.saved);
  }
  std::string what;
  t->bindThreadNear("0000:77:00.0", &what);
  EXPECT_EQ(what, "not pinned: GPU 0000:77:00.0 is not in this machine's topology");
}

TEST(Pinning, PinThreadToGpuSaysWhatItDid) {
  DCP_REQUIRE_GPUS(1);
  AffinityGuard guard;
  std::string what;
  ASSERT_EQ(pinThreadToGpu(0, &what), ncclSuccess) << lastError();
  printf("GPU 0: %s\n", what.c_str());
  EXPECT_NE(what.find("pinned"), std::string::npos) << what;
  EXPECT_EQ(pinThreadToGpu(0, nullptr), ncclInvalidArgument);
}

// ---- This machine: the dump the GPU machines' check quotes. Every NVIDIA
// GPU hwloc finds is one rank; NVML is the system's.

TEST(ThisMachine, PrintsTheTopologyOfEveryGpu) {
  std::string why;
  const Topology* topo = systemTopology(&why);
  if (topo == nullptr) printf("this machine's topology did not load: %s\n", why.c_str());
  const std::vector<std::string> gpus = topo ? topo->nvidiaGpus() : std::vector<std::string>();
  printf("this machine: %zu NVIDIA GPU(s) in hwloc; NVLink source %s: %s\n", gpus.size(),
         topo ? topoSourceName(topo->source()) : "-", topo ? topo->sourceDetail().c_str() : why.c_str());
  for (int rank = 0; rank < (int)gpus.size(); rank++)
    printf("%s", formatTopology(reportForGpus(topo, why.c_str(), gpus, rank), "# ").c_str());
  int n = 0;
  std::string bad;
  ASSERT_TRUE(test::parseRequiredGpus(getenv("NCCL_DCP_REQUIRE_GPU"), &n, &bad)) << bad;
  if (n > 0) {
    ASSERT_TRUE(topo) << why;
    EXPECT_GE((int)gpus.size(), n) << "NCCL_DCP_REQUIRE_GPU=" << n << " but hwloc sees " << gpus.size();
  }
}

}  // namespace
}  // namespace nccl_dcp
