/*************************************************************************
 * Peer addressing policies of the fused kernel: one kernel body serves
 * NCCL's symmetric window (production) and loopback (cp virtual ranks on
 * one GPU, one cooperative launch, block index -> virtual rank). Addressing
 * only: what is exchanged is the mode's (modes.h).
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PEERS_H_
#define NCCL_DCP_DEVICE_PEERS_H_

#include "layout.h"
#include "params.h"

namespace nccl_dcp {

// NCCL: every rank's workspace as this rank addresses it, resolved once at
// create from the context's window (ncclGetLsaPointer, resolveLsaPointers
// in launch.h) and carried in the launch parameters: a kernel reaches a
// peer with no load of NCCL's window struct first. rank == LSA rank (the
// fused path needs every rank in one LSA team).
struct LsaPeers {
  static constexpr bool kLoopback = false;
  static constexpr int kIoSlots = 1;  // this rank's tensors
  char* base[NCCL_DCP_MAX_RANKS];
  int rank;

  __device__ int rankOfBlock(int /*blocksPerRank*/, int* localBlock) const {
    *localBlock = blockIdx.x;
    return rank;
  }
  __device__ char* workspace(int /*self*/) const { return base[rank]; }
  __device__ char* peerWorkspace(int peer) const { return base[peer]; }
  // The status word every wait of this rank's launch shares.
  __device__ uint32_t* status(int self) const { return &((Control*)workspace(self))->status; }
};

struct LoopbackPeers {
  static constexpr bool kLoopback = true;
  static constexpr int kIoSlots = kMaxLoopbackRanks;  // every virtual rank's tensors
  char* base;
  size_t rankBytes;

  __device__ int rankOfBlock(int blocksPerRank, int* localBlock) const {
    *localBlock = blockIdx.x % blocksPerRank;
    return blockIdx.x / blocksPerRank;
  }
  __device__ char* workspace(int self) const { return base + (size_t)self * rankBytes; }
  __device__ char* peerWorkspace(int peer) const { return base + (size_t)peer * rankBytes; }
  // All virtual ranks live in one launch: one failure stops them all.
  __device__ uint32_t* status(int) const { return &((Control*)base)->status; }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PEERS_H_
