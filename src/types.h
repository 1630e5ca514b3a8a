/*************************************************************************
 * The host's core types: a resolved config and one rank's buffers of a
 * call. (Strides, LseBase and the other types the kernels read too live
 * in device/types.h.)
 ************************************************************************/
#ifndef NCCL_DCP_TYPES_H_
#define NCCL_DCP_TYPES_H_

#include <nccl.h>

#include "device/types.h"
#include "nccl_dcp.h"

namespace nccl_dcp {

// NONE's algorithm (NCCL_DCP_NONE_ALGO; the values parseEnv gives).
enum class NoneAlgo : int { Auto = 0, Direct = 1, TwoPhase = 2 };

// NONE's algorithm when NCCL_DCP_NONE_ALGO is unset: Auto (two phases from
// 3 ranks, noneRelays). Measured on one H200, loopback cp 8: two phases
// 1.07x faster than direct at one row and 3.2x at 1024 (docs/perf.md,
// 2026-12-03); at cp 2 the bytes are equal and direct saves a hop.
constexpr NoneAlgo kDefaultNoneAlgo = NoneAlgo::Auto;

// A config with every default applied and every field checked: the public
// config's fields, then the inputs that come from the environment alone.
// Everything here shapes the workspace, the protocol or the launches, so
// the ranks of a context agree on all of it at create (agreement.h).
struct Config {
  int headDim;
  int localHeads;
  ncclDataType_t dtype;
  int eltSize;
  LseBase lseBase;
  int maxBatch;                // config, else NCCL_DCP_MAX_BATCH, else kDefaultMaxBatch
  ncclDcpProtocol_t protocol;  // config, else NCCL_DCP_PROTO, else AUTO
  int timeoutMs;               // config, else NCCL_DCP_TIMEOUT_MS, else kDefaultTimeoutMs
  int simpleMinRows;           // NCCL_DCP_SIMPLE_MIN_ROWS: AUTO's SIMPLE crossover, 0 = never, -1 = the
                               // measured default of the links (protocol.h)
  bool pdl;                    // NCCL_DCP_PDL: programmatic dependent launch (default on)
  ncclDcpProvider_t provider;  // NCCL_DCP_PROVIDER (NCCL_DCP_FORCE_FALLBACK=1: Fallback), else Auto
  Scatter scatter;             // config, else HEAD
  ncclDataType_t lseDtype;     // config, else ncclFloat32
  int lseEltSize;
  NoneAlgo noneAlgo;           // NCCL_DCP_NONE_ALGO, else kDefaultNoneAlgo
  Wire wire;                   // config, else Native
};

// Heads of an out row in a mode: Hl or cp * Hl.
inline int headsPerRow(const Config& c, int nRanks) {
  return c.scatter == Scatter::Head ? c.localHeads : nRanks * c.localHeads;
}

// NONE runs two phases (DESIGN §14): a HEAD merge, then every rank's merged
// heads relayed to every peer: 2 (cp - 1) / cp of a row's units received instead of
// cp - 1. Auto: from 3 ranks (at 2 the bytes are equal and direct is one hop).
// fp8 on the wire: direct (the relay would round the merged heads again;
// validate.cc refuses two_phase with it).
inline bool noneRelays(const Config& c, int nRanks) {
  if (c.scatter != Scatter::None || nRanks < 2) return false;
  return c.noneAlgo == NoneAlgo::TwoPhase || (c.noneAlgo == NoneAlgo::Auto && nRanks > 2 && c.wire == Wire::Native);
}

// The mode axis of the dispatch table (kernel_table.h) for a config.
inline FusedMode fusedModeOf(const Config& c, int nRanks) {
  switch (c.scatter) {
    case Scatter::Head: return FusedMode::Head;
    case Scatter::Token: return FusedMode::Token;
    case Scatter::None: break;
  }
  return noneRelays(c, nRanks) ? FusedMode::NoneTwoPhase : FusedMode::NoneDirect;
}

// Heads of a workspace row: HEAD's Hl, the same for NONE in two phases
// (each half of its slots is HEAD-shaped), else every head of the row.
inline int workspaceHeadsPerRow(const Config& c, int nRanks) {
  return noneRelays(c, nRanks) ? c.localHeads : headsPerRow(c, nRanks);
}

constexpr int kDefaultMaxBatch = 256;
constexpr int kDefaultTimeoutMs = 60000;  // a healthy peer may be late by a compilation, a load, a GC pause

// One rank's buffers for a call; the empty-shard arrays (device int32,
// ncclDcpCallArgs_t) or NULL.
struct CallBuffers {
  const void* partialOut;
  const void* partialLse;  // of Config::lseDtype
  void* out;
  float* outLse;
  const int* seqLens = nullptr;
  const int* queryStartLoc = nullptr;
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_TYPES_H_
