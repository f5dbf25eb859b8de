/* nccl_util.c - run-time NCCL version check, ncclResult_t translation, bounded waits. */
#include "elastic/gpu/nccl_util.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

#include "util/clock.h"
#include "util/log.h"

eep_status_t eep_nccl_check_version(const char **path_p)
{
    const char  *path = "(unknown)";
    Dl_info      info;
    int          version = 0;
    ncclResult_t res;

    if (dladdr((void *)ncclGetVersion, &info) != 0 && info.dli_fname != NULL) {
        path = info.dli_fname;
    }
    if (path_p != NULL) {
        *path_p = path;
    }
    res = ncclGetVersion(&version);
    if (res != ncclSuccess) {
        return eep_status_from_nccl(res, NULL, "ncclGetVersion");
    }
    if (version != NCCL_VERSION_CODE) {
        eep_error(EEP_SUBSYS_CORE,
                  "loaded NCCL %d (%s) but compiled against NCCL %d: the device "
                  "API needs the same release; put the matching libnccl.so.2 first (rebuild with "
                  "NCCL_HOME pointing at it)",
                  version, path, NCCL_VERSION_CODE);
        return EEP_ERR_VERSION_MISMATCH;
    }
    return EEP_OK;
}

eep_status_t eep_status_from_nccl(ncclResult_t res, ncclComm_t comm, const char *what)
{
    eep_status_t status;

    switch (res) {
    case ncclSuccess:
        return EEP_OK;
    case ncclInProgress:
        return EEP_INPROGRESS;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        status = EEP_ERR_INVALID_ARG;
        break;
    case ncclRemoteError:
        status = EEP_ERR_PEER_LOST;
        break;
    case ncclSystemError:
        status = EEP_ERR_IO;
        break;
    case ncclUnhandledCudaError:
        status = EEP_ERR_CUDA;
        break;
    default:
        status = EEP_ERR_NCCL;
        break;
    }
    eep_error(EEP_SUBSYS_RUNTIME, "%s failed: %s (nccl %d): %s", what, ncclGetErrorString(res),
              (int)res, ncclGetLastError(comm));
    return status;
}

eep_status_t eep_nccl_wait_until(ncclComm_t comm, ncclResult_t res, double deadline_ms,
                                 const char *what, eep_nccl_abandon_t abandon, void *arg)
{
    struct timespec pause = { 0, 50000 };
    ncclResult_t    async = ncclSuccess;
    double          start = eep_clock_ms();

    if (res != ncclSuccess && res != ncclInProgress) {
        return eep_status_from_nccl(res, comm, what);
    }
    for (;;) {
        res = ncclCommGetAsyncError(comm, &async);
        if (res != ncclSuccess) {
            return eep_status_from_nccl(res, comm, "ncclCommGetAsyncError");
        }
        if (async != ncclInProgress) {
            return eep_status_from_nccl(async, comm, what);
        }
        if (eep_clock_ms() > deadline_ms) {
            eep_error(EEP_SUBSYS_RUNTIME, "%s did not finish within its deadline (%.0f ms)", what,
                      eep_clock_ms() - start);
            return EEP_ERR_TIMEOUT;
        }
        if (abandon != NULL && abandon(arg, eep_clock_ms() - start)) {
            eep_warn(EEP_SUBSYS_RUNTIME, "%s given up after %.0f ms: a newer view is waiting", what,
                     eep_clock_ms() - start);
            return EEP_ERR_STALE_EPOCH;
        }
        nanosleep(&pause, NULL);
    }
}

eep_status_t eep_nccl_wait(ncclComm_t comm, ncclResult_t res, double deadline_ms, const char *what)
{
    return eep_nccl_wait_until(comm, res, deadline_ms, what, NULL, NULL);
}

eep_status_t eep_nccl_wait_child(ncclComm_t parent, eep_nccl_make_child_t make, void *arg,
                                 double deadline_ms, const char *what, eep_nccl_abandon_t abandon,
                                 void *abandon_arg, ncclComm_t *child_p)
{
    struct timespec pause = { 0, 50000 };
    ncclComm_t     *slot;
    ncclComm_t      child = NULL;
    ncclResult_t    res, async = ncclInProgress;
    eep_status_t    status;
    double          start = eep_clock_ms();

    if (child_p == NULL || make == NULL || parent == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "%s: %s is NULL", what,
                  child_p == NULL ? "child_p"
                  : make == NULL  ? "make"
                                  : "parent");
        return EEP_ERR_INVALID_ARG;
    }
    *child_p = NULL;
    slot     = (ncclComm_t *)calloc(1, sizeof(*slot));
    if (slot == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    res = make(parent, slot, arg);
    if (res != ncclSuccess && res != ncclInProgress) {
        child  = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        status = eep_status_from_nccl(res, parent, what);
        goto done;
    }
    for (;;) {
        res = ncclCommGetAsyncError(parent, &async);
        if (res != ncclSuccess) {
            async = res;
        }
        if (async != ncclInProgress) {
            break; /* NCCL wrote the slot before it settled the parent */
        }
        if (eep_clock_ms() > deadline_ms) {
            eep_error(EEP_SUBSYS_RUNTIME, "%s did not finish before EEP_INIT_TIMEOUT_MS", what);
            return EEP_ERR_TIMEOUT; /* the slot stays NCCL's */
        }
        if (abandon != NULL && abandon(abandon_arg, eep_clock_ms() - start)) {
            eep_warn(EEP_SUBSYS_RUNTIME, "%s given up after %.0f ms: a newer view is waiting", what,
                     eep_clock_ms() - start);
            return EEP_ERR_STALE_EPOCH; /* the slot stays NCCL's */
        }
        nanosleep(&pause, NULL);
    }
    child = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (child == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "%s made no communicator (the parent reads %s)", what,
                  ncclGetErrorString(async));
        status = eep_status_from_nccl(async != ncclSuccess ? async : ncclInternalError, parent,
                                      what);
        goto done;
    }
    /* the child's own state decides: the parent may carry a fault of the view being left */
    status = eep_nccl_wait_until(child, ncclSuccess, deadline_ms, what, abandon, abandon_arg);
done:
    free(slot);
    if (status != EEP_OK) {
        if (child != NULL) {
            (void)ncclCommAbort(child);
        }
        return status;
    }
    *child_p = child;
    return EEP_OK;
}
