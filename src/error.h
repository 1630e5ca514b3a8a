/*************************************************************************
 * Errors: every failure sets the calling thread's last-error message
 * (ncclDcpGetLastError), logs it at WARN and returns an ncclResult_t.
 ************************************************************************/
#ifndef NCCL_DCP_ERROR_H_
#define NCCL_DCP_ERROR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

namespace nccl_dcp {

// Sets the last error to the formatted message and returns code.
ncclResult_t fail(ncclResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// fail without the WARN: for an error that is reported again and again
// (a poisoned context's), logged once by its owner.
ncclResult_t record(ncclResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// "ncclRemoteError" for ncclRemoteError, as WARN lines name results.
const char* resultName(ncclResult_t code);
void clearLastError();
const char* lastError();
// Puts back a message saved from lastError() (no log): an unwind that
// failed on its own must not replace the error it is unwinding from.
void restoreLastError(const char* message);

// The first failure of steps that all run whatever fails (every call of a
// group, every step of an unwind): its code and message are what the
// caller gets; the later ones only logged.
class FirstError {
 public:
  void keep(ncclResult_t r) {
    if (r == ncclSuccess || first_ != ncclSuccess) return;
    first_ = r;
    message_ = lastError();
  }
  bool failed() const { return first_ != ncclSuccess; }
  const char* message() const { return message_.c_str(); }
  // The first failure's code, its message the last error again.
  ncclResult_t result() const {
    if (failed()) restoreLastError(message_.c_str());
    return first_;
  }

 private:
  ncclResult_t first_ = ncclSuccess;
  std::string message_;
};

}  // namespace nccl_dcp

#define CUDACHECK(cmd)                                                                     \
  do {                                                                                     \
    cudaError_t e_ = (cmd);                                                                \
    if (e_ != cudaSuccess)                                                                 \
      return ::nccl_dcp::fail(ncclUnhandledCudaError, "%s:%d: %s failed: %s (%s)",         \
                              __FILE__, __LINE__, #cmd, cudaGetErrorString(e_),            \
                              cudaGetErrorName(e_));                                       \
  } while (0)

#define NCCLCHECK(cmd)                                                                     \
  do {                                                                                     \
    ncclResult_t r_ = (cmd);                                                               \
    if (r_ != ncclSuccess && r_ != ncclInProgress)                                         \
      return ::nccl_dcp::fail(r_, "%s:%d: %s failed: %s (%s)", __FILE__, __LINE__, #cmd,   \
                              ncclGetErrorString(r_), ncclGetLastError(nullptr));          \
  } while (0)

// Propagates an nccl-dcp result whose message is already set.
#define DCPCHECK(cmd)                      \
  do {                                     \
    ncclResult_t r_ = (cmd);               \
    if (r_ != ncclSuccess) return r_;      \
  } while (0)

// NCCL's one unwind per function: res takes the result, a failure jumps to
// the function's one fail: label.
#define DCPCHECKGOTO(cmd, res, label)      \
  do {                                     \
    (res) = (cmd);                         \
    if ((res) != ncclSuccess) goto label;  \
  } while (0)

#endif  // NCCL_DCP_ERROR_H_
