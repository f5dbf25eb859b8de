/*
 * status.c - names, strings and classes of eep_status_t, and the errno translation.
 *
 * One table, indexed by nothing but searched linearly: it is small, and a switch would have to be
 * kept in step with the strings by hand.
 */
#include "eep/status.h"

#include <errno.h>
#include <string.h>

#include "util/log.h"

typedef struct {
    eep_status_t status;
    const char  *name;
    const char  *text;
} eep_status_info_t;

/* clang-format off */
#define EEP_STATUS_ROW(_code, _text) { _code, #_code, _text }
/* clang-format on */

static const eep_status_info_t eep_status_table[] = {
    EEP_STATUS_ROW(EEP_OK, "success"),
    EEP_STATUS_ROW(EEP_INPROGRESS, "operation in progress"),
    EEP_STATUS_ROW(EEP_ERR_INVALID_ARG, "invalid argument"),
    EEP_STATUS_ROW(EEP_ERR_UNSUPPORTED, "operation not supported"),
    EEP_STATUS_ROW(EEP_ERR_VERSION_MISMATCH, "library version mismatch"),
    EEP_STATUS_ROW(EEP_ERR_BUSY, "object still has live children or users"),
    EEP_STATUS_ROW(EEP_ERR_NOT_FOUND, "not found"),
    EEP_STATUS_ROW(EEP_ERR_EXISTS, "already exists"),
    EEP_STATUS_ROW(EEP_ERR_STALE_EPOCH, "handle belongs to an older membership epoch"),
    EEP_STATUS_ROW(EEP_ERR_NO_MEMORY, "out of memory"),
    EEP_STATUS_ROW(EEP_ERR_NO_RESOURCE, "out of resources"),
    EEP_STATUS_ROW(EEP_ERR_IO, "input/output error"),
    EEP_STATUS_ROW(EEP_ERR_JIT, "kernel compilation failed"),
    EEP_STATUS_ROW(EEP_ERR_TIMEOUT, "local operation timed out"),
    EEP_STATUS_ROW(EEP_ERR_PEER_TIMEOUT, "peer did not respond before the deadline"),
    EEP_STATUS_ROW(EEP_ERR_PEER_LOST, "peer lost"),
    EEP_STATUS_ROW(EEP_ERR_GROUP_LOST, "rank group lost"),
    EEP_STATUS_ROW(EEP_ERR_ABORTED, "operation aborted"),
    EEP_STATUS_ROW(EEP_ERR_FENCED, "this rank is not in the membership view"),
    EEP_STATUS_ROW(EEP_ERR_NO_DEVICE, "no usable GPU or GPU driver"),
    EEP_STATUS_ROW(EEP_ERR_CUDA, "CUDA error"),
    EEP_STATUS_ROW(EEP_ERR_NCCL, "NCCL error"),
    EEP_STATUS_ROW(EEP_ERR_DEVICE_FAULT, "fault reported by a device kernel"),
    EEP_STATUS_ROW(EEP_ERR_CONTROL_UNAVAILABLE, "control plane unavailable"),
    EEP_STATUS_ROW(EEP_ERR_ETCD, "etcd error"),
    EEP_STATUS_ROW(EEP_ERR_RPC, "RPC failed"),
    EEP_STATUS_ROW(EEP_ERR_LEASE_LOST, "membership lease lost"),
    EEP_STATUS_ROW(EEP_ERR_NOT_LEADER, "not the leader"),
    EEP_STATUS_ROW(EEP_ERR_PERMISSION, "permission denied"),
    EEP_STATUS_ROW(EEP_ERR_INTERNAL, "internal error"),
};

static const eep_status_info_t *eep_status_find(eep_status_t status)
{
    size_t i;

    for (i = 0; i < sizeof(eep_status_table) / sizeof(eep_status_table[0]); i++) {
        if (eep_status_table[i].status == status) {
            return &eep_status_table[i];
        }
    }
    return NULL;
}

const char *eep_status_string(eep_status_t status)
{
    const eep_status_info_t *info = eep_status_find(status);

    return info != NULL ? info->text : "unknown status";
}

const char *eep_status_name(eep_status_t status)
{
    const eep_status_info_t *info = eep_status_find(status);

    return info != NULL ? info->name : "EEP_UNKNOWN";
}

eep_status_class_t eep_status_class(eep_status_t status)
{
    int code = (int)status;

    if (code >= 0) {
        return EEP_CLASS_OK;
    } else if (code > -20) {
        return EEP_CLASS_INVALID_ARG;
    } else if (code > -40) {
        return EEP_CLASS_RESOURCE;
    } else if (code > -60) {
        return EEP_CLASS_PEER_LOST;
    } else if (code > -80) {
        return EEP_CLASS_GROUP_LOST;
    } else if (code > -100) {
        return EEP_CLASS_LOCAL_GPU;
    } else if (code > -120) {
        return EEP_CLASS_CONTROL;
    }
    return EEP_CLASS_INTERNAL;
}

const char *eep_status_class_string(eep_status_class_t cls)
{
    switch (cls) {
    case EEP_CLASS_OK:
        return "ok";
    case EEP_CLASS_INVALID_ARG:
        return "invalid argument";
    case EEP_CLASS_RESOURCE:
        return "resource";
    case EEP_CLASS_PEER_LOST:
        return "peer lost";
    case EEP_CLASS_GROUP_LOST:
        return "group lost";
    case EEP_CLASS_LOCAL_GPU:
        return "local GPU fault";
    case EEP_CLASS_CONTROL:
        return "control plane unavailable";
    case EEP_CLASS_INTERNAL:
        return "internal";
    }
    return "unknown class";
}

eep_status_t eep_status_from_errno(int err, const char *what)
{
    eep_status_t status;

    if (err == 0) {
        return EEP_OK;
    }
    switch (err) {
    case ENOMEM:
        status = EEP_ERR_NO_MEMORY;
        break;
    case EINVAL:
    case EBADF:
    case ENAMETOOLONG:
        status = EEP_ERR_INVALID_ARG;
        break;
    case ENOENT:
        status = EEP_ERR_NOT_FOUND;
        break;
    case EEXIST:
        status = EEP_ERR_EXISTS;
        break;
    case EBUSY:
        status = EEP_ERR_BUSY;
        break;
    case ETIMEDOUT:
        status = EEP_ERR_TIMEOUT;
        break;
    case EACCES:
    case EPERM:
        status = EEP_ERR_PERMISSION;
        break;
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case EAGAIN:
        status = EEP_ERR_NO_RESOURCE;
        break;
    case ECONNREFUSED:
    case ECONNRESET:
    case EHOSTUNREACH:
    case ENETUNREACH:
        status = EEP_ERR_CONTROL_UNAVAILABLE;
        break;
    default:
        status = EEP_ERR_IO;
        break;
    }
    eep_error(EEP_SUBSYS_CORE, "%s failed: %s (errno %d)", what != NULL ? what : "call",
              strerror(err), err);
    return status;
}
