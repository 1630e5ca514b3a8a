/*************************************************************************
 * One rank's side of the record all-gathers of create and destroy
 * (context.cc): fixed-size records, all-gathered over the user's
 * communicator (NCCL's bootstrap is the only channel), each behind a seal
 * (agreement.h) so that a record that did not arrive -- a rank's copy to
 * the device failed, or NCCL deferred the all-gather because the caller
 * is inside ncclGroupStart/End -- is seen by every rank as such, never
 * read as uninitialised memory.
 *
 * Layout of the scratch: nRanks received slots, then this rank's own
 * slot (the all-gather's send buffer), each a seal and a record; zeroed
 * when opened.
 *
 * Local failures never keep a rank out of a gather its peers wait in
 * (issue 34, item 6): open() falls back to the per-thread default stream
 * when no stream can be created and to the device's reserve scratch (one
 * per device, made at the first open on it and kept for the process's
 * life, about 40 KB) when none can be allocated; post() leaves a stale
 * slot that the seals expose; collect() retries a failed copy back once,
 * synchronously. What is left is a rank that has neither scratch nor
 * reserve (its first create on a GPU out of memory) or a device that
 * cannot copy at all (a sticky error: its NCCL kernels cannot run
 * either): it fails alone, and its peers wait in NCCL until the
 * communicator is aborted.
 *
 * An all-gather that may still be queued when the exchange closes (inside
 * the caller's ncclGroupStart/End; destroy's that timed out) keeps its
 * scratch and stream: they are left allocated for the process's life,
 * with a WARN, rather than freed under NCCL.
 ************************************************************************/
#ifndef NCCL_DCP_EXCHANGE_H_
#define NCCL_DCP_EXCHANGE_H_

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include <utility>
#include <vector>

#include "agreement.h"

namespace nccl_dcp {

class Exchange {
 public:
  Exchange() = default;
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  // Moved before it opens (a vector of them growing): the moved-from one
  // holds nothing.
  Exchange(Exchange&& o) noexcept { swap(o); }
  Exchange& operator=(Exchange&& o) noexcept {
    swap(o);
    return *this;
  }
  ~Exchange() { close(); }

  // On device dev (made current): the stream and the zeroed scratch for
  // records of recordBytes. A failure is returned with its message; the
  // exchange may still be usable() through a fallback. `what` names the
  // exchange in messages ("create's exchange").
  ncclResult_t open(ncclComm_t comm, int rank, int nRanks, int dev, size_t recordBytes, const char* what);
  bool usable() const { return scratch_ != nullptr; }
  cudaStream_t stream() const { return stream_; }

  // Which create step the next gather ends (fault injection; Count: destroy).
  CreateStep step = CreateStep::Count;

  // This rank's record for the next gather (or, with sameGather, again for
  // the current one) into its own slot. A failure leaves the slot as it was.
  ncclResult_t post(const void* record, bool sameGather = false);
  // Enqueues the all-gather (grouped by the caller with the exchanges of
  // the other communicators this thread drives).
  ncclResult_t allGather();
  // Waits for it (timeoutMs < 0: for ever; else ncclRemoteError past it),
  // then reads every slot: the records into out (nRanks * recordBytes)
  // when every seal is of this gather, else the error of checkArrivals
  // ("<what> failed on rank R"), *noneArrived as it says.
  ncclResult_t collect(void* out, const char* what, int timeoutMs, bool* noneArrived);

  // Frees the scratch and the stream, or parks them while an all-gather
  // may still be queued on them. Idempotent.
  void close();

 private:
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, nRanks_ = 0, dev_ = -1;
  size_t recordBytes_ = 0, slotBytes_ = 0;
  cudaStream_t stream_ = nullptr;
  bool ownsStream_ = false;
  void* scratch_ = nullptr;
  bool reserve_ = false;  // scratch_ is the device's reserve
  uint32_t sequence_ = 0;  // gathers posted
  bool queued_ = false;    // an all-gather may still be pending on stream_ / scratch_
  bool posted_ = false;    // the last post reached the device
  std::vector<unsigned char> host_;  // staging for post / collect

  void swap(Exchange& o) noexcept {
    std::swap(step, o.step);
    std::swap(comm_, o.comm_);
    std::swap(rank_, o.rank_);
    std::swap(nRanks_, o.nRanks_);
    std::swap(dev_, o.dev_);
    std::swap(recordBytes_, o.recordBytes_);
    std::swap(slotBytes_, o.slotBytes_);
    std::swap(stream_, o.stream_);
    std::swap(ownsStream_, o.ownsStream_);
    std::swap(scratch_, o.scratch_);
    std::swap(reserve_, o.reserve_);
    std::swap(sequence_, o.sequence_);
    std::swap(queued_, o.queued_);
    std::swap(posted_, o.posted_);
    host_.swap(o.host_);
  }
};

}  // namespace nccl_dcp

#endif  // NCCL_DCP_EXCHANGE_H_
