/*************************************************************************
 * Every difference between the NCCL releases nccl-dcp builds against,
 * 2.28 through 2.32, in one place, behind NCCL_VERSION_CODE of the nccl.h
 * being compiled; code that differs by NCCL version includes this.
 *
 * Checked against the headers of nvidia-nccl-cu13 2.28.3/7/9, 2.29.2/3/7,
 * 2.30.3/4/7, 2.31.2 and 2.32.3. What nccl-dcp uses and did not change:
 * ncclMemAlloc/Free, ncclCommWindowRegister/Deregister, NCCL_WIN_DEFAULT,
 * NCCL_WIN_REQUIRED_ALIGNMENT (4096), ncclDevCommCreate/Destroy,
 * ncclDevComm's lsaRank/lsaSize, ncclAlltoAll, ncclAllGather, and the
 * device-side ncclGetLocalPointer/ncclGetLsaPointer (same signatures; they
 * read the same ncclWindow_vidmem fields in every release). Not used:
 * NCCL_WIN_STRICT_ORDERING (2.29.7; network registrations only), the
 * barrier overloads with timeouts (2.30), ncclCommQueryProperties (2.29).
 *
 * The layouts behind the device API (ncclDevComm, ncclWindow_vidmem) are
 * compiled into our kernels and change between minor releases, so a build
 * runs only on the major.minor of its headers (validate.cc refuses others).
 ************************************************************************/
#ifndef NCCL_DCP_NCCL_COMPAT_H_
#define NCCL_DCP_NCCL_COMPAT_H_

#include <cuda_runtime_api.h>  // before nccl_device.h, which uses CUDA types
#include <nccl.h>
#include <nccl_device.h>

#include <string.h>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 28, 0)
#error "nccl-dcp needs NCCL 2.28 or newer (the device API): configure with -Dnccl_home= pointing at one"
#endif

namespace nccl_dcp {

// Requirements of our device communicator: LSA pointers into our window
// only, so no barriers, LL all-to-all resources, GIN or multimem.
// 2.29 gave the struct a size/magic/version header that ncclDevCommCreate
// checks (a zeroed one is refused with ncclInvalidUsage) and non-zero
// defaults; 2.28 has no initializer and takes zeros.
inline ncclDevCommRequirements devCommRequirements() {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
  ncclDevCommRequirements reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else
  ncclDevCommRequirements reqs;
  memset(&reqs, 0, sizeof(reqs));
#endif
  return reqs;
}

// From 2.29 on, ncclDevCommCreate refuses requirements whose version (the
// headers nccl-dcp was compiled with) is newer than the library running,
// patch level included ("NCCL library is too old"). 2.28 does not check.
constexpr bool ncclRefusesOlderRuntime(int buildCode) { return buildCode >= NCCL_VERSION(2, 29, 0); }

}  // namespace nccl_dcp

#endif  // NCCL_DCP_NCCL_COMPAT_H_
