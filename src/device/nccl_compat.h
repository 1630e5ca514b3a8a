/*************************************************************************
 * Every difference between the NCCL releases nccl-dcp builds against (the
 * lowest layer: host and device code include it),
 * 2.28 through 2.32, in one place, behind NCCL_VERSION_CODE of the nccl.h
 * being compiled. Include this, not <nccl_device.h>.
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
 * The device API's structs (ncclDevComm, ncclDevCommRequirements,
 * ncclWindow_vidmem) are compiled in and change between minor releases,
 * and within 2.28, so a build runs only on the major.minor of its headers
 * and a patch level ncclPatchMismatch() accepts (validate.cc checks both).
 ************************************************************************/
#ifndef NCCL_DCP_NCCL_COMPAT_H_
#define NCCL_DCP_NCCL_COMPAT_H_

#include <cuda_runtime_api.h>  // before nccl_device.h, which uses CUDA types
#include <nccl.h>
// 2.28.7's device headers include doca_gpunetio/ headers that its package
// (wheel or make install) lacks; 2.28.9 ships them. nccl-dcp uses no GIN:
// leave GDAKI's device code out.
#if NCCL_VERSION_CODE == NCCL_VERSION(2, 28, 7) && !defined(NCCL_GIN_GDAKI_ENABLE)
#define NCCL_GIN_GDAKI_ENABLE 0
#endif
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

// Why the NCCL library `runtimeCode` cannot serve code compiled against the
// headers `buildCode` of the same major.minor, or nullptr when it can.
// sizeof(ncclDevComm) / sizeof(ncclDevCommRequirements) by release:
// 2.28.3 88/24, 2.28.7-9 200/56, 2.29.2-3 200/72, 2.29.7 224/88,
// 2.30.x 240/96, 2.31.2-2.32.3 248/120. 2.28's structs are unversioned:
// NCCL 2.28.7+ would write a 200-byte ncclDevComm into a 2.28.3 build's 88.
// From 2.29 NCCL versions them and converts older ones, but refuses newer
// ones ("NCCL library is too old"). The window fields our kernels read
// (lsaFlatBase, lsaRank, stride4G) sit at the same offsets in every release.
inline const char* ncclPatchMismatch(int buildCode, int runtimeCode) {
  if (buildCode >= NCCL_VERSION(2, 29, 0))
    return runtimeCode < buildCode ? "NCCL refuses device communicators from headers newer than itself" : nullptr;
  if (buildCode < NCCL_VERSION(2, 28, 7) && runtimeCode >= NCCL_VERSION(2, 28, 7))
    return "2.28.7 grew ncclDevComm and ncclDevCommRequirements, unversioned in 2.28";
  return nullptr;
}

}  // namespace nccl_dcp

#endif  // NCCL_DCP_NCCL_COMPAT_H_
