/*
 * nccl_util.h - NCCL version guard and the ncclResult_t translation.
 *
 * The device API is header-only and NCCL fills its structs with the layout the kernels were
 * compiled against, so headers and the loaded library must be the same release (2.28.3 and 2.28.9
 * differ: see shared/reference/nccl-2.28.9-device-api.md section 5).  This header refuses to
 * compile against anything but 2.28.x with the device API; eep_nccl_check_version() refuses to run
 * against a library other than the one compiled against.
 */
#ifndef EEP_NCCL_UTIL_H
#define EEP_NCCL_UTIL_H

#include <nccl.h>

#include "eep/status.h"

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < 22800 || NCCL_VERSION_CODE >= 22900
#error "ElasticEP needs NCCL 2.28.x headers (2.28.9 tested): set NCCL_HOME to that NCCL"
#endif
#if defined(__has_include)
#if !__has_include(<nccl_device.h>)
#error "the NCCL headers under NCCL_HOME lack the device API (nccl_device.h): need NCCL 2.28.9"
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Check that the loaded libnccl is the release the headers came from.
 * @param [out] path_p  the loaded library's path (may be NULL).
 * @return EEP_OK, or EEP_ERR_VERSION_MISMATCH with a log naming both versions and the path.
 */
eep_status_t eep_nccl_check_version(const char **path_p);

/**
 * Translate an NCCL result, logging @p what, NCCL's string and ncclGetLastError(@p comm).
 * ncclInProgress gives EEP_INPROGRESS; ncclRemoteError gives EEP_ERR_PEER_LOST.
 */
eep_status_t eep_status_from_nccl(ncclResult_t res, ncclComm_t comm, const char *what);

#ifdef __cplusplus
}
#endif

#endif /* EEP_NCCL_UTIL_H */
