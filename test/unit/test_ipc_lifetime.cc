// How long a cuda-ipc workspace lives (src/ipc_lifetime.h, issue 34 item 4),
// without a GPU: the frees go to a recorder instead of cudaFree. A
// workspace is freed with its last use -- its owner's and those of peer
// threads' contexts that address it -- never while a late peer thread may
// still write into it (the freed range could come back to the next create);
// peers in other processes cannot be counted: only their agreement that
// they closed it lets it go, and without it (an abort) it stays allocated
// for the process's life.
#include <gtest/gtest.h>

#include <vector>

#include "ipc_lifetime.h"

namespace nccl_dcp {
namespace {

struct Freed {
  int dev;
  void* ptr;
  FreeMode mode;
};
std::vector<Freed> freed;
void recordFree(int dev, void* ptr, FreeMode mode) { freed.push_back({dev, ptr, mode}); }

class IpcLifetime : public testing::Test {
 protected:
  void SetUp() override {
    freed.clear();
    setWorkspaceFreerForTesting(recordFree);
  }
  void TearDown() override {
    setWorkspaceFreerForTesting(nullptr);
    EXPECT_EQ(liveExportedWorkspaces(), 0u) << "a test left a workspace registered";
  }
  // A fake device address per test (never dereferenced).
  void* address(int i) { return (void*)(uintptr_t)(0x7f0000000000ull + 0x1000000ull * i); }
};

TEST_F(IpcLifetime, TheOwnerAloneFreesItAtItsDestroy) {
  ExportedWorkspace* w = exportWorkspace(address(1), 1 << 20, 0, 0);
  releaseUse(w, 0, FreeMode::Now);
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].ptr, address(1));
  EXPECT_EQ(freed[0].dev, 0);
  EXPECT_EQ(freed[0].mode, FreeMode::Now);
}

// Rank 0 aborts while rank 1 (a thread of this process, on GPU 1) still
// has its context: rank 0's workspace stays allocated -- the late rank's
// writes land in it, not in whatever the next create allocates -- until
// rank 1 gives its use back; then it is freed on GPU 0's next create or
// destroy (deferred: rank 1's thread never waits on GPU 0).
TEST_F(IpcLifetime, ALatePeerThreadKeepsItPastItsOwnersAbort) {
  ExportedWorkspace* w0 = exportWorkspace(address(2), 4096, 0, 0);
  ExportedWorkspace* w1 = exportWorkspace(address(3), 4096, 1, 1);
  ExportedWorkspace* use0 = useExportedWorkspace(address(2));  // rank 1 addresses rank 0's
  ExportedWorkspace* use1 = useExportedWorkspace(address(3));  // rank 0 addresses rank 1's
  ASSERT_EQ(use0, w0);
  ASSERT_EQ(use1, w1);
  // Rank 0 aborts: its own workspace and its use of rank 1's.
  releaseUse(use1, 0, FreeMode::Deferred);
  releaseUse(w0, 0, FreeMode::Deferred);
  EXPECT_TRUE(freed.empty()) << "freed while the late peer may still write into it";
  EXPECT_EQ(liveExportedWorkspaces(), 2u);
  // Rank 1, late, is destroyed (or aborted) later.
  releaseUse(use0, 1, FreeMode::Now);
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].ptr, address(2));
  EXPECT_EQ(freed[0].dev, 0);
  EXPECT_EQ(freed[0].mode, FreeMode::Deferred)
      << "an aborted owner's memory, given back from another device: deferred to its next create/destroy";
  releaseUse(w1, 1, FreeMode::Now);
  ASSERT_EQ(freed.size(), 2u);
  EXPECT_EQ(freed[1].ptr, address(3));
  EXPECT_EQ(freed[1].mode, FreeMode::Now);
}

// Destroy on both threads, in either order: the memory goes with the
// last, at once (the destroy is blocking; the owner's GPU is healthy).
TEST_F(IpcLifetime, DestroyOfTheOwnerFirstWaitsForThePeer) {
  ExportedWorkspace* w = exportWorkspace(address(4), 4096, 0, 0);
  ExportedWorkspace* use = useExportedWorkspace(address(4));
  releaseUse(w, 0, FreeMode::Now);
  EXPECT_TRUE(freed.empty());
  releaseUse(use, 1, FreeMode::Now);
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].dev, 0);
  EXPECT_EQ(freed[0].mode, FreeMode::Now);
}

TEST_F(IpcLifetime, AbortNeverFreesNow) {
  ExportedWorkspace* w = exportWorkspace(address(5), 4096, 0, 0);
  releaseUse(w, 0, FreeMode::Deferred);
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].mode, FreeMode::Deferred);
}

// Peers in other processes may map it: without their agreement (an abort,
// a failed agreement) it is kept for the process's life and counted.
TEST_F(IpcLifetime, RemoteImportersWithoutTheirAgreementKeepItForTheProcessLife) {
  size_t bytes0 = 0;
  const size_t kept0 = workspacesKeptForProcessLife(&bytes0);
  ExportedWorkspace* w = exportWorkspace(address(6), 3 << 20, 0, 0);
  markRemoteImporters(w);
  EXPECT_TRUE(hasRemoteImporters(w));
  releaseUse(w, 0, FreeMode::Deferred);
  EXPECT_TRUE(freed.empty()) << "freed while another process may still map it";
  size_t bytes = 0;
  EXPECT_EQ(workspacesKeptForProcessLife(&bytes), kept0 + 1);
  EXPECT_EQ(bytes, bytes0 + (3 << 20));
}

// Destroy: the peers closed and agreed (context.cc), then the owner frees.
TEST_F(IpcLifetime, RemoteImportersThatAgreedLetItGo) {
  ExportedWorkspace* w = exportWorkspace(address(7), 4096, 2, 0);
  markRemoteImporters(w);
  remoteClosed(w);
  releaseUse(w, 2, FreeMode::Now);
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].dev, 2);
  EXPECT_EQ(freed[0].mode, FreeMode::Now);
}

TEST_F(IpcLifetime, UnknownAddressesHaveNoUse) {
  EXPECT_EQ(useExportedWorkspace(address(8)), nullptr);
  ExportedWorkspace* w = exportWorkspace(address(9), 4096, 0, 0);
  releaseUse(w, 0, FreeMode::Now);
  EXPECT_EQ(useExportedWorkspace(address(9)), nullptr) << "a freed workspace is forgotten";
  releaseUse(nullptr, 0, FreeMode::Now);  // no use: a no-op
  EXPECT_EQ(freed.size(), 1u);
}

}  // namespace
}  // namespace nccl_dcp
