// The record all-gathers of create and destroy (exchange.h). Built twice,
// like context.cc: into the library, and with the failure injection of
// testing.h into its test build.
#include "exchange.h"

#include <string.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "error.h"
#include "log.h"
#include "testing.h"

namespace nccl_dcp {

namespace {

constexpr size_t kSlotAlign = 16;
// The largest slot any exchange uses: the reserve holds that many.
constexpr size_t kMaxRecordBytes = sizeof(RankRecord);

size_t slotBytesOf(size_t recordBytes) {
  return (sizeof(RecordSeal) + recordBytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
}
size_t scratchBytesOf(int nRanks, size_t recordBytes) { return (size_t)(nRanks + 1) * slotBytesOf(recordBytes); }

// One spare scratch per device, for a create whose own cudaMalloc failed.
struct Reserve {
  void* ptr = nullptr;
  bool busy = false;
};
std::mutex reserveMutex;
std::map<int, Reserve> reserves;

// Made at the first open on dev (a failure: no spare, nothing else).
void ensureReserve(int dev) {
  std::lock_guard<std::mutex> lock(reserveMutex);
  Reserve& r = reserves[dev];
  if (r.ptr != nullptr || r.busy) return;
  if (cudaMalloc(&r.ptr, scratchBytesOf(NCCL_DCP_MAX_RANKS, kMaxRecordBytes)) != cudaSuccess) {
    cudaGetLastError();
    r.ptr = nullptr;
  }
}

void* takeReserve(int dev, size_t bytes) {
  std::lock_guard<std::mutex> lock(reserveMutex);
  Reserve& r = reserves[dev];
  if (r.ptr == nullptr || r.busy || bytes > scratchBytesOf(NCCL_DCP_MAX_RANKS, kMaxRecordBytes)) return nullptr;
  r.busy = true;
  return r.ptr;
}

// keep: the reserve stays with a queued all-gather: the device gets a new one.
void giveBackReserve(int dev, bool keep) {
  std::lock_guard<std::mutex> lock(reserveMutex);
  Reserve& r = reserves[dev];
  r.busy = false;
  if (keep) r.ptr = nullptr;
}

// Parked scratch and streams: still referenced, for the process's life.
std::mutex parkedMutex;
std::vector<std::pair<void*, cudaStream_t>> parked;

}  // namespace

ncclResult_t Exchange::open(ncclComm_t comm, int rank, int nRanks, int dev, size_t recordBytes, const char* what) {
  comm_ = comm;
  rank_ = rank;
  nRanks_ = nRanks;
  dev_ = dev;
  recordBytes_ = recordBytes;
  slotBytes_ = slotBytesOf(recordBytes);
  host_.assign(slotBytes_ * (nRanks + 1), 0);
  FirstError first;
  if (cudaSetDevice(dev) != cudaSuccess) {
    cudaGetLastError();
    return fail(ncclUnhandledCudaError, "%s: cudaSetDevice(%d) failed", what, dev);
  }
  ensureReserve(dev);

  ncclResult_t inj = injectedAt(CreatePoint::ExchangeStream, CreateStep::Arguments, rank);
  cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (e == cudaSuccess && inj == ncclSuccess) {
    ownsStream_ = true;
  } else {
    if (e == cudaSuccess) cudaStreamDestroy(stream_);
    else cudaGetLastError();
    stream_ = cudaStreamPerThread;  // always there: the exchange runs on it
    ownsStream_ = false;
    first.keep(inj != ncclSuccess ? inj
                                  : fail(ncclUnhandledCudaError, "%s: cudaStreamCreateWithFlags failed: %s", what,
                                         cudaGetErrorString(e)));
  }

  const size_t bytes = scratchBytesOf(nRanks, recordBytes);
  inj = injectedAt(CreatePoint::ExchangeScratch, CreateStep::Arguments, rank);
  e = cudaMalloc(&scratch_, bytes);
  if (e != cudaSuccess || inj != ncclSuccess) {
    if (e != cudaSuccess) cudaGetLastError();
    if (e == cudaSuccess) cudaFree(scratch_);
    scratch_ = takeReserve(dev, bytes);
    reserve_ = scratch_ != nullptr;
    first.keep(inj != ncclSuccess
                   ? inj
                   : fail(ncclSystemError, "%s: cudaMalloc of a %zu-byte scratch failed: %s%s", what, bytes,
                          cudaGetErrorString(e),
                          reserve_ ? "" : "; no reserve either: this rank cannot take part in the "
                                          "exchange, its peers wait in ncclAllGather for it"));
  }
  if (scratch_ != nullptr) {
    e = cudaMemsetAsync(scratch_, 0, bytes, stream_);
    if (e != cudaSuccess) {
      cudaGetLastError();
      first.keep(fail(ncclUnhandledCudaError, "%s: zeroing its scratch failed: %s", what, cudaGetErrorString(e)));
    }
  }
  return first.result();
}

ncclResult_t Exchange::post(const void* record, bool sameGather) {
  if (!sameGather) sequence_++;
  unsigned char* slot = host_.data() + (size_t)nRanks_ * slotBytes_;
  memset(slot, 0, slotBytes_);
  const RecordSeal seal = {kRecordMagic, sequence_, rank_};
  memcpy(slot, &seal, sizeof(seal));
  memcpy(slot + sizeof(seal), record, recordBytes_);
  posted_ = false;
  DCPCHECK(injectedAt(CreatePoint::RecordToDevice, step, rank_));
  const cudaError_t e = cudaMemcpyAsync((char*)scratch_ + (size_t)nRanks_ * slotBytes_, slot, slotBytes_,
                                        cudaMemcpyHostToDevice, stream_);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(ncclUnhandledCudaError, "copying rank %d's record to the device failed: %s", rank_,
                cudaGetErrorString(e));
  }
  posted_ = true;
  return ncclSuccess;
}

ncclResult_t Exchange::allGather() {
  queued_ = true;
  const ncclResult_t r = ncclAllGather((char*)scratch_ + (size_t)nRanks_ * slotBytes_, scratch_, slotBytes_,
                                       ncclUint8, comm_, stream_);
  if (r != ncclSuccess && r != ncclInProgress)
    return fail(r, "ncclAllGather of %zu-byte records failed: %s (%s)", slotBytes_, ncclGetErrorString(r),
                ncclGetLastError(comm_));
  return ncclSuccess;
}

ncclResult_t Exchange::collect(void* out, const char* what, int timeoutMs, bool* noneArrived) {
  *noneArrived = false;
  // The all-gather first: bounded when asked.
  if (timeoutMs >= 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) {
        cudaGetLastError();
        return fail(ncclUnhandledCudaError, "%s failed on rank %d: its all-gather failed: %s", what, rank_,
                    cudaGetErrorString(q));
      }
      if (std::chrono::steady_clock::now() >= deadline)
        return fail(ncclRemoteError,
                    "%s failed on rank %d: its all-gather did not complete within %d ms: a peer has not taken part "
                    "(it aborted, failed, or has not got there yet)",
                    what, rank_, timeoutMs);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  const size_t bytes = (size_t)nRanks_ * slotBytes_;
  cudaError_t e = injectedAt(CreatePoint::RecordsToHost, step, rank_) != ncclSuccess
                      ? cudaErrorUnknown
                      : cudaMemcpyAsync(host_.data(), scratch_, bytes, cudaMemcpyDeviceToHost, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) {
    // Once more, synchronously: a rank that returned here alone would leave
    // its peers in the next collective step.
    cudaGetLastError();
    WARN("rank %d: %s: copying the gathered records back failed (%s); retrying", rank_, what, cudaGetErrorString(e));
    e = cudaStreamSynchronize(stream_);
    if (e == cudaSuccess) e = cudaMemcpy(host_.data(), scratch_, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return fail(ncclUnhandledCudaError,
                  "%s failed on rank %d: the gathered records cannot be read back (%s): this rank returns alone, "
                  "its peers may wait for it in the next collective step until the communicator is aborted",
                  what, rank_, cudaGetErrorString(e));
    }
  }
  std::vector<RecordSeal> seals(nRanks_);
  for (int r = 0; r < nRanks_; r++) memcpy(&seals[r], host_.data() + (size_t)r * slotBytes_, sizeof(RecordSeal));
  const ncclResult_t arrived = checkArrivals(what, seals.data(), nRanks_, sequence_, rank_, posted_, noneArrived);
  queued_ = *noneArrived;  // NCCL still holds it (the caller's group), or it ran
  DCPCHECK(arrived);
  for (int r = 0; r < nRanks_; r++)
    memcpy((char*)out + (size_t)r * recordBytes_, host_.data() + (size_t)r * slotBytes_ + sizeof(RecordSeal),
           recordBytes_);
  return ncclSuccess;
}

void Exchange::close() {
  if (stream_ == nullptr && scratch_ == nullptr) return;
  bool failed = dev_ >= 0 && cudaSetDevice(dev_) != cudaSuccess;
  if (queued_) {
    WARN("rank %d: an all-gather of nccl-dcp's may still be queued on the communicator (NCCL runs one deferred by "
         "ncclGroupStart at the caller's ncclGroupEnd): its %zu-byte scratch and its stream stay allocated for the "
         "process's life",
         rank_, scratchBytesOf(nRanks_, recordBytes_));
    std::lock_guard<std::mutex> lock(parkedMutex);
    parked.push_back({scratch_, ownsStream_ ? stream_ : nullptr});
    if (reserve_) giveBackReserve(dev_, true);
  } else {
    if (ownsStream_) failed |= cudaStreamDestroy(stream_) != cudaSuccess;
    if (reserve_) giveBackReserve(dev_, false);
    else if (scratch_) failed |= cudaFree(scratch_) != cudaSuccess;
  }
  // A failure here is ours, with nothing to report it to: cleared. Never
  // otherwise: the error would be the application's, left pending.
  if (failed) cudaGetLastError();
  stream_ = nullptr;
  scratch_ = nullptr;
  ownsStream_ = reserve_ = queued_ = false;
}

}  // namespace nccl_dcp
