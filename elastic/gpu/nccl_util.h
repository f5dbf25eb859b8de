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

/** Does a wait still make sense?  Asked between polls with the time waited; 1: give it up. */
typedef int (*eep_nccl_abandon_t)(void *arg, double waited_ms);

/**
 * Wait for a non-blocking NCCL operation on @p comm, which returned @p res, to leave
 * ncclInProgress (its async error), until @p deadline_ms (eep_clock_ms() time).
 * @param abandon  asked between polls (may be NULL); when it says 1: EEP_ERR_STALE_EPOCH.
 * @return EEP_OK, the operation's error translated, EEP_ERR_TIMEOUT (logged, naming @p what).
 */
eep_status_t eep_nccl_wait_until(ncclComm_t comm, ncclResult_t res, double deadline_ms,
                                 const char *what, eep_nccl_abandon_t abandon, void *arg);

/** eep_nccl_wait_until() without an abandon callback. */
eep_status_t eep_nccl_wait(ncclComm_t comm, ncclResult_t res, double deadline_ms, const char *what);

/** Makes a child of @p parent (ncclCommSplit, ncclCommShrink), NCCL writing it to @p slot. */
typedef ncclResult_t (*eep_nccl_make_child_t)(ncclComm_t parent, ncclComm_t *slot, void *arg);

/**
 * Make a child communicator of the non-blocking @p parent with @p make and wait for it.
 *
 * NCCL 2.28.9 makes a non-blocking parent's child on a thread of its own: ncclCommSplit and
 * ncclCommShrink return ncclSuccess with the child still NULL, the parent's async error reads
 * ncclInProgress until the child is made, and NCCL writes the child at the end, made or failed.
 * So this waits on the parent, takes the child, then waits on the child.  A wait given up early
 * (@p deadline_ms, @p abandon) leaves NCCL's thread the heap slot it writes to (8 bytes lost).
 * @param [out] child_p  the child, ready; NULL on failure (a failed child is aborted).
 * @return EEP_OK, EEP_ERR_TIMEOUT, EEP_ERR_STALE_EPOCH, or NCCL's error translated (the
 *         parent's, when no child was made).
 */
eep_status_t eep_nccl_wait_child(ncclComm_t parent, eep_nccl_make_child_t make, void *arg,
                                 double deadline_ms, const char *what, eep_nccl_abandon_t abandon,
                                 void *abandon_arg, ncclComm_t *child_p);

#ifdef __cplusplus
}
#endif

#endif /* EEP_NCCL_UTIL_H */
