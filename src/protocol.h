/*************************************************************************
 * The one place that picks a wire protocol (DESIGN §4, §5), from what
 * the ranks agreed about their links (topology.h). Peers outside the LSA
 * team take the fallback path (ncclAlltoAll + combine, chosen at create);
 * inside it:
 *   - every peer proven NVLink: LL128, SIMPLE for rounds of at least
 *     kLl128SimpleMinRows rows;
 *   - one GPU (loopback): by the bytes a virtual rank merges a round, LL
 *     up to kOneGpuLlMaxBytes (where LL pays, below), SIMPLE from
 *     kOneGpuSimpleMinBytes, LL128 between;
 *   - P2P over PCIe, or links not proven: LL, SIMPLE for rounds of at least
 *     kLlSimpleMinRows rows (LL128 needs 128-byte stores arriving whole,
 *     which NVLink gives and PCIe does not);
 *   - a protocol forced by the config or NCCL_DCP_PROTO is used as is,
 *     but LL128 forced over a link proven PCIe runs as LL (a WARN says
 *     so); LL128 forced where a link is unknown runs with a WARN.
 ************************************************************************/
#ifndef NCCL_DCP_PROTOCOL_H_
#define NCCL_DCP_PROTOCOL_H_

#include "device/types.h"
#include "nccl_dcp.h"

namespace nccl_dcp {

// What the ranks agreed about the paths between them (the same on every rank).
struct LinkSummary {
  bool oneLsaTeam;   // every rank reachable by load/store (NCCL's LSA team)
  bool classified;   // every rank knows its link to every peer (NVLink or PCIe)
  bool allNvlink;    // ... and every one is NVLink (direct or NVSwitch)
  bool oneGpu;       // loopback: all ranks on one GPU
};

struct ProtocolPolicy {
  Proto small;          // protocol of rounds below simpleMinRows
  bool simpleForLarge;  // AUTO: rounds of >= simpleMinRows rows use SIMPLE
  int simpleMinRows;
  int llMaxRows = 0;    // one GPU under AUTO: rounds of at most this many rows use LL (0: none)
};

// AUTO's switch to SIMPLE, in rows per round (0: never), measured at the
// reference shape (bf16, D 512, Hl 16: 16 KiB per row and peer);
// NCCL_DCP_SIMPLE_MIN_ROWS overrides them. Set from the sweeps in docs/perf.md and
// docs/perf-history.md (v8: one GPU).
// NVLink (and one GPU): LL128 -> SIMPLE. v10, 2 x H200 (cp 2): LL128 is
// faster up to 64 rows (10.2 vs 11.3 us at 64), SIMPLE from 128 (with
// 4 KiB chunks and one send step per block there; docs/perf.md).
constexpr int kLl128SimpleMinRows = 128;
// One GPU (loopback): no link to cross; the tiers follow the bytes a
// virtual rank merges a round as they cross the workspace (rows x cp
// sources x Hl x D x the wire's element: e4m3 one byte), whatever cp
// (docs/perf.md "AUTO on one GPU"; Hl 16, D 512, bf16 and e4m3, cp 2-16).
// SIMPLE's bulk copies win from about kOneGpuSimpleMinBytes (bf16: LL128
// up to 8 / 4 rows at cp 4 / 8, SIMPLE from 16 / 8; at cp 2 LL128 is 4%
// faster at 32 rows; e4m3 counted by its own bytes: at most 8% off the
// best protocol at cp 2-16, where counting bf16's lost up to 41%).
constexpr long kOneGpuSimpleMinBytes = 1l << 20;
// LL wins the smallest rounds, up to kOneGpuLlMaxBytes (bf16 cp 8: 7.44
// vs 7.79 us at one row, even at two; e4m3: 13-25% at cp 2-16), where an
// LL128 lane would merge at least kOneGpuLlMinLaneElements of a group (cp
// sources x its 16 wire bytes: bf16 from cp 4 -- at cp 2 LL128 is 5%
// faster --, e4m3 from cp 2): an LL lane merges half as many. HEAD-shaped
// rounds only (HEAD, NONE in two phases: 8% faster at cp 8): TOKEN's owner
// merges a row's every head from every rank (12% slower over LL at cp 8),
// NONE direct was not measured.
constexpr long kOneGpuLlMaxBytes = 256l << 10;
constexpr int kOneGpuLlMinLaneElements = 32;
// The SIMPLE crossover at the reference shape and cp 8 (v8: 14.6 vs 17.9
// us at 8 rows, 13.7 vs 10.1 at 4): the default where no shape is given.
constexpr int kOneGpuSimpleMinRows = 8;
// PCIe or unproven links: LL -> SIMPLE. Not measured (no PCIe machine here);
// an estimate: LL moves half the bytes per store, SIMPLE pays one flag round
// trip per chunk (~2 us over PCIe), so SIMPLE wins once a peer's share
// exceeds ~25 GB/s * 2 us = 50 KB, about 4 rows of 16 KiB.
constexpr int kLlSimpleMinRows = 4;

// AUTO's one-GPU tiers in rows: LL up to llMaxRows (0: none), SIMPLE from
// simpleMinRows (at least one), for nRanks virtual ranks, rowWireBytes (Hl
// x D x wireElt, the bytes of the wire's element) per source and row, and whether the rounds
// are HEAD-shaped (every rank merges Hl heads of every row: HEAD, NONE's
// first phase; the LL tier was measured on those alone).
struct OneGpuTiers {
  int llMaxRows;
  int simpleMinRows;
};
OneGpuTiers oneGpuTiers(int nRanks, long rowWireBytes, int wireElt, bool headShaped);

// Every input is agreed by the ranks (the requested protocol and
// simpleMinRows are fields of the resolved Config; the links are agreed from
// every rank's view), so every rank picks the same policy. simpleMinRows:
// NCCL_DCP_SIMPLE_MIN_ROWS, or negative for the measured default of the links
// (on one GPU: oneGpu's, from oneGpuTiers for the config's shape). One
// GPU's LL tier stays below SIMPLE's, whichever sets it.
ProtocolPolicy chooseProtocols(ncclDcpProtocol_t requested, const LinkSummary& links, int simpleMinRows,
                               OneGpuTiers oneGpu = {0, kOneGpuSimpleMinRows});

Proto protocolForRound(const ProtocolPolicy& policy, int rows);

// LL128 is safe: every peer is proven NVLink, or all ranks share one GPU.
bool ll128Proven(const LinkSummary& links);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_PROTOCOL_H_
