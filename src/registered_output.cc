/*************************************************************************
 * Registered outputs: the host's tests and the per-round parameters
 * (registered_output.h).
 ************************************************************************/
#include "registered_output.h"

#include <stdint.h>
#include <stdio.h>

#include "error.h"

namespace nccl_dcp {

namespace {

// [at, at + bytes) inside r.
bool inside(const OutputRange& r, uintptr_t at, uintptr_t bytes) {
  const uintptr_t base = (uintptr_t)r.base;
  return r.bytes > 0 && at >= base && bytes <= r.bytes && at - base <= r.bytes - bytes;
}

}  // namespace

bool outputRecordsAgree(const OutputRecord* all, int nRanks, int rank, std::string* why) {
  const OutputRecord& first = all[0];
  for (int q = 0; q < nRanks; q++) {
    const OutputRecord& a = all[q];
    char line[512];
    if (!a.ok) {
      snprintf(line, sizeof(line), "rank %d refused its registration (its log says why)", q);
    } else if (a.hasLse != first.hasLse || a.outBytes != first.outBytes || a.lseBytes != first.lseBytes ||
               a.outOffset != first.outOffset || a.lseOffset != first.lseOffset) {
      snprintf(line, sizeof(line),
               "rank %d registers out %llu bytes at offset %llu of its allocation and outLse %llu at %llu, rank 0 "
               "%llu at %llu and %llu at %llu: every rank's must match (NCCL addresses a peer's window at this "
               "rank's offset)",
               q, (unsigned long long)a.outBytes, (unsigned long long)a.outOffset, (unsigned long long)a.lseBytes,
               (unsigned long long)a.lseOffset, (unsigned long long)first.outBytes,
               (unsigned long long)first.outOffset, (unsigned long long)first.lseBytes,
               (unsigned long long)first.lseOffset);
    } else {
      continue;
    }
    *why = "rank " + std::to_string(rank) + ": registered outputs refused on every rank: " + line;
    return false;
  }
  return true;
}

ncclResult_t checkOutputRanges(const void* out, size_t outBytes, const float* outLse, size_t lseBytes,
                               const char* where) {
  if (out == nullptr) return fail(ncclInvalidArgument, "%sout is NULL", where);
  if ((uintptr_t)out % 16 != 0) return fail(ncclInvalidArgument, "%sout %p is not 16-byte aligned", where, out);
  if (outBytes == 0) return fail(ncclInvalidArgument, "%soutBytes is 0", where);
  if ((uintptr_t)out + outBytes < (uintptr_t)out)
    return fail(ncclInvalidArgument, "%sout %p + outBytes %zu wraps around the address space", where, out,
                outBytes);
  if ((outLse == nullptr) != (lseBytes == 0))
    return fail(ncclInvalidArgument, "%soutLse %p and outLseBytes %zu: both or neither", where, (const void*)outLse,
                lseBytes);
  if (outLse == nullptr) return ncclSuccess;
  if ((uintptr_t)outLse % sizeof(float) != 0)
    return fail(ncclInvalidArgument, "%soutLse %p is not 4-byte aligned", where, (const void*)outLse);
  if ((uintptr_t)outLse + lseBytes < (uintptr_t)outLse)
    return fail(ncclInvalidArgument, "%soutLse %p + outLseBytes %zu wraps around the address space", where,
                (const void*)outLse, lseBytes);
  const uintptr_t o = (uintptr_t)out, l = (uintptr_t)outLse;
  if (o < l + lseBytes && l < o + outBytes)
    return fail(ncclInvalidArgument, "%sout [%p, +%zu) and outLse [%p, +%zu) overlap", where, out, outBytes,
                (const void*)outLse, lseBytes);
  return ncclSuccess;
}

bool directCallOf(const Config& cfg, int nRanks, const RegisteredOutput& reg, const CallBuffers& buf, int batch,
                  const Strides& s, DirectCall* call) {
  if (!reg.direct || batch <= 0 || !noneRelays(cfg, nRanks)) return false;
  // The last element each output reaches, from its row 0 (strides >= 0).
  const int64_t heads = headsPerRow(cfg, nRanks), last = (int64_t)(batch - 1);
  const int64_t outExtent = (last * s.outRow + (heads - 1) * s.outHead + cfg.headDim) * cfg.eltSize;
  if (!inside(reg.out, (uintptr_t)buf.out, (uintptr_t)outExtent)) return false;
  if (buf.outLse != nullptr) {
    const int64_t lseExtent = (last * s.outLseRow + (heads - 1) * s.outLseHead + 1) * (int64_t)sizeof(float);
    if (!inside(reg.outLse, (uintptr_t)buf.outLse, (uintptr_t)lseExtent)) return false;
  }
  call->bases = reg.bases;
  call->outOffset = (int64_t)((uintptr_t)buf.out - (uintptr_t)reg.out.base);
  call->lseOffset = buf.outLse ? (int64_t)(buf.outLse - (float*)reg.outLse.base) : 0;
  call->withLse = buf.outLse != nullptr;
  call->serial = reg.serial;
  return true;
}

uint32_t directTag(const DirectCall& call, const Strides& s) {
  const int64_t words[] = {call.serial, call.outOffset,  call.lseOffset, s.outRow,
                           s.outHead,   s.outLseRow,    s.outLseHead,   call.withLse ? 1 : 0};
  uint32_t h = 2166136261u;  // FNV-1a over the words' bytes
  for (int64_t w : words)
    for (int b = 0; b < 8; b++) h = (h ^ (uint32_t)((uint64_t)w >> (8 * b) & 0xff)) * 16777619u;
  h ^= h >> 16;
  return h != 0 ? h : 1;
}

DirectOutputs directOutputsOfRound(const DirectCall* call, const Config& cfg, const Strides& s, int row0,
                                   Proto proto) {
  DirectOutputs d = {};
  if (call == nullptr || proto != Proto::Simple) return d;  // the line protocols' relay stages (relay.h)
  d.bases = call->bases;
  d.outOffset = call->outOffset + (int64_t)row0 * s.outRow * cfg.eltSize;
  d.lseOffset = call->lseOffset + (int64_t)row0 * s.outLseRow;
  d.withLse = call->withLse;
  d.tag = directTag(*call, s);
  return d;
}

}  // namespace nccl_dcp
