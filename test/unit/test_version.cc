// The NCCL this binary loads at run time is the one it was compiled against
// (a wrong rpath once picked up an older system NCCL), and the library
// refuses a runtime NCCL of another major.minor.
#include <nccl.h>

#include "device/nccl_compat.h"
#include "test_util.h"
#include "validate.h"

namespace nccl_dcp {
namespace {

TEST(NcclVersion, RuntimeIsTheOneWeWereBuiltWith) {
  int v = 0;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE) << "loaded NCCL " << v << ", built against " << NCCL_VERSION_CODE;
}

TEST(NcclVersion, SameMajorMinorAccepted) {
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(2, 28, 3), NCCL_VERSION(2, 28, 9)), ncclSuccess);
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(2, 28, 9), NCCL_VERSION(2, 28, 9)), ncclSuccess);
}

TEST(NcclVersion, OtherMinorRefusedWithMessage) {
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(2, 29, 1), NCCL_VERSION(2, 28, 9)), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("2.29"), std::string::npos) << ncclDcpGetLastError();
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("2.28"), std::string::npos) << ncclDcpGetLastError();
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("-Dnccl_home="), std::string::npos) << ncclDcpGetLastError();
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(2, 27, 7), NCCL_VERSION(2, 28, 9)), ncclInvalidUsage);
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(3, 28, 0), NCCL_VERSION(2, 28, 9)), ncclInvalidUsage);
}

// From 2.29 NCCL's own ncclDevCommCreate refuses headers newer than the
// library; we refuse first, with the versions and the way out.
TEST(NcclVersion, OlderPatchRefusedFrom229) {
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(2, 30, 7), NCCL_VERSION(2, 30, 4)), ncclSuccess);
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(2, 30, 4), NCCL_VERSION(2, 30, 7)), ncclInvalidUsage);
  const std::string msg = ncclDcpGetLastError();
  EXPECT_NE(msg.find("2.30.4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2.30.7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-Dnccl_home="), std::string::npos) << msg;
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(2, 29, 2), NCCL_VERSION(2, 29, 3)), ncclInvalidUsage);
}

// 2.28's device structs are unversioned and grew in 2.28.7: NCCL 2.28.7+
// would write past a 2.28.3 build's ncclDevComm. The other way is safe.
TEST(NcclVersion, Build2283RefusedOnLater228) {
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(2, 28, 9), NCCL_VERSION(2, 28, 3)), ncclInvalidUsage);
  const std::string msg = ncclDcpGetLastError();
  EXPECT_NE(msg.find("2.28.9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2.28.3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ncclDevComm"), std::string::npos) << msg;
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(2, 28, 7), NCCL_VERSION(2, 28, 3)), ncclInvalidUsage);
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(2, 28, 3), NCCL_VERSION(2, 28, 3)), ncclSuccess);
  EXPECT_EQ(checkNcclVersion(NCCL_VERSION(2, 28, 9), NCCL_VERSION(2, 28, 7)), ncclSuccess);
}

TEST(NcclVersion, OldEncodingDecoded) {
  // NCCL_VERSION(2,8,4) = 2804 in the pre-2.9 encoding.
  EXPECT_EQ(checkNcclVersion(2804, NCCL_VERSION(2, 28, 9)), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("2.8"), std::string::npos) << ncclDcpGetLastError();
}

// ncclDevCommCreate from 2.29 refuses requirements without the header the
// initializer writes; 2.28's have no header and must be all zeros.
TEST(NcclCompat, DevCommRequirementsAsThisNcclWantsThem) {
  const ncclDevCommRequirements reqs = devCommRequirements();
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
  EXPECT_EQ(reqs.size, sizeof(ncclDevCommRequirements));
  EXPECT_EQ(reqs.magic, (unsigned)NCCL_API_MAGIC);
  EXPECT_EQ(reqs.version, (unsigned)NCCL_VERSION_CODE);
#else
  const char zero[sizeof(reqs)] = {};
  EXPECT_EQ(memcmp(&reqs, zero, sizeof(reqs)), 0);
#endif
  EXPECT_EQ(reqs.resourceRequirementsList, nullptr);
  EXPECT_EQ(reqs.teamRequirementsList, nullptr);
  EXPECT_FALSE(reqs.lsaMultimem);
  EXPECT_EQ(reqs.lsaBarrierCount, 0);
}

TEST(LibraryVersion, GetVersion) {
  int v = 0;
  ASSERT_EQ(ncclDcpGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_DCP_VERSION_CODE);
  EXPECT_EQ(ncclDcpGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("version"), std::string::npos);
}

}  // namespace
}  // namespace nccl_dcp
