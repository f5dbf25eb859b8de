/* nccl_util.c - run-time NCCL version check and ncclResult_t translation. */
#include "elastic/gpu/nccl_util.h"

#include <dlfcn.h>

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
