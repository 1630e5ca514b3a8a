// The output bits of a fixed matrix of loopback calls, one line per case
// (its name and an FNV-1a hash of every rank's out and outLse bytes), into
// the file $DCP_BITDUMP_FILE: two builds' files differ exactly where their
// kernels' outputs do (scripts/gpu-check.sh's bitwise stage diffs this
// build's against 0.4's). Fixed seeds, the native wire, the NONE algorithm
// of the environment (NCCL_DCP_NONE_ALGO). A tool, not a test of the suite:
// it checks nothing but that every call succeeds.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "device_problem.h"
#include "enums.h"
#include "loopback.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

uint64_t fnv1a(const std::vector<RankTensors>& outs) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t*)p)[i]) * 1099511628211ull;
  };
  for (const RankTensors& t : outs) {
    mix(t.out.data(), t.out.size());
    mix(t.outLse.data(), t.outLse.size() * sizeof(float));
  }
  return h;
}

TEST(BitDump, FixedMatrix) {
  const char* path = getenv("DCP_BITDUMP_FILE");
  if (path == nullptr) GTEST_SKIP() << "DCP_BITDUMP_FILE is not set";
  DCP_REQUIRE_GPUS(1);
  FILE* f = fopen(path, "w");
  ASSERT_NE(f, nullptr) << path;
  uint64_t seed = 38;
  for (int proto : {ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple, ncclDcpProtoAuto})
    for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16, ncclFloat32})
      for (int scatter : {ncclDcpScatterHead, ncclDcpScatterToken, ncclDcpScatterNone})
        for (int cp : {2, 3, 8})
          for (int batch : {1, 7, 37}) {
            const int base = (cp + batch) % 2;
            const ncclDcpConfig_t c =
                withScatter(makeConfig(128, 4, dtype, base, /*maxBatch=*/16, proto), scatter, ncclFloat32);
            const Config cfg = resolved(c);
            auto lb = makeLoopback(c, cp);
            ASSERT_TRUE(lb);
            DeviceProblem p(cfg, cp, batch, LseMix::Special, seed++, CallSpec{});
            const std::vector<CallBuffers> b = p.allBuffers();
            DCP_ASSERT(lb->call(b.data(), batch, nullptr, nullptr, p.args(0)));
            CUDA_ASSERT(cudaDeviceSynchronize());
            DCP_ASSERT(lb->asyncError());
            std::vector<RankTensors> outs;
            for (int r = 0; r < cp; r++) outs.push_back(p.outputs(r));
            fprintf(f, "%s %s %s cp%d b%d base%d %016llx\n", protocolName(proto), dtypeName(dtype),
                    scatterName(scatter), cp, batch, base, (unsigned long long)fnv1a(outs));
          }
  fclose(f);
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
