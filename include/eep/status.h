/*
 * eep/status.h - the one status type of ElasticEP.
 *
 * EEP_OK is 0, EEP_INPROGRESS is 1, every error is negative.  Errors are grouped in ranges by how
 * much they break, so a caller (elastic/ deciding whether to shrink or abort) can act on the class
 * alone: see eep_status_class().  Foreign codes (CUresult, nvrtcResult, ncclResult_t, errno, gRPC)
 * are translated once, at the call site that received them, and never cross a folder boundary.
 */
#ifndef EEP_STATUS_H
#define EEP_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    EEP_OK         = 0,
    EEP_INPROGRESS = 1,

    /* -1 .. -19: the caller's mistake; nothing is broken, fix the call. */
    EEP_ERR_INVALID_ARG      = -1,
    EEP_ERR_UNSUPPORTED      = -2,
    EEP_ERR_VERSION_MISMATCH = -3,
    EEP_ERR_BUSY             = -4,
    EEP_ERR_NOT_FOUND        = -5,
    EEP_ERR_EXISTS           = -6,
    EEP_ERR_STALE_EPOCH      = -7,

    /* -20 .. -39: a local resource ran out or failed; retry or free something. */
    EEP_ERR_NO_MEMORY   = -20,
    EEP_ERR_NO_RESOURCE = -21,
    EEP_ERR_IO          = -22,
    EEP_ERR_JIT         = -23,
    EEP_ERR_TIMEOUT     = -24,

    /* -40 .. -59: one peer is lost or unresponsive; survivors shrink and go on. */
    EEP_ERR_PEER_TIMEOUT = -40,
    EEP_ERR_PEER_LOST    = -41,

    /* -60 .. -79: the rank group is unusable; rebuild it from a new membership view. */
    EEP_ERR_GROUP_LOST = -60,
    EEP_ERR_ABORTED    = -61,
    EEP_ERR_FENCED     = -62, /* this rank is not in the membership view (removed or fenced) */

    /* -80 .. -99: this rank's own GPU or its libraries failed. */
    EEP_ERR_NO_DEVICE    = -80,
    EEP_ERR_CUDA         = -81,
    EEP_ERR_NCCL         = -82,
    EEP_ERR_DEVICE_FAULT = -83,

    /* -100 .. -119: the control plane (etcd, eepd, gRPC) cannot be reached or refused us. */
    EEP_ERR_CONTROL_UNAVAILABLE = -100,
    EEP_ERR_ETCD                = -101,
    EEP_ERR_RPC                 = -102,
    EEP_ERR_LEASE_LOST          = -103,
    EEP_ERR_NOT_LEADER          = -104,
    EEP_ERR_PERMISSION          = -105,

    /* -120: a bug in ElasticEP itself. */
    EEP_ERR_INTERNAL = -120,
} eep_status_t;

/* How much an error breaks; the ranges above. */
typedef enum {
    EEP_CLASS_OK,
    EEP_CLASS_INVALID_ARG,
    EEP_CLASS_RESOURCE,
    EEP_CLASS_PEER_LOST,
    EEP_CLASS_GROUP_LOST,
    EEP_CLASS_LOCAL_GPU,
    EEP_CLASS_CONTROL,
    EEP_CLASS_INTERNAL,
} eep_status_class_t;

/**
 * @param [in] status  any value, known or not.
 * @return a constant, never NULL, string; "unknown status" for values outside the enum.
 */
const char *eep_status_string(eep_status_t status);

/** @return the enum name ("EEP_ERR_PEER_TIMEOUT"), or "EEP_UNKNOWN". */
const char *eep_status_name(eep_status_t status);

/** @return the class of @p status (EEP_CLASS_OK for EEP_OK and EEP_INPROGRESS). */
eep_status_class_t eep_status_class(eep_status_t status);

/** @return the name of a class ("peer lost"). */
const char *eep_status_class_string(eep_status_class_t cls);

/**
 * Translate an errno value, logging @p what and strerror().
 * @param [in] err   the errno value (0 gives EEP_OK).
 * @param [in] what  the failed call, for the log ("open(/tmp/x)").
 * @return the matching status (ENOMEM -> EEP_ERR_NO_MEMORY, EINVAL -> EEP_ERR_INVALID_ARG, ...).
 */
eep_status_t eep_status_from_errno(int err, const char *what);

/**
 * The message of the last error the library reported on the calling thread (what its error log
 * line said, recorded whatever the log level), so that a binding can raise it with the status.
 * @return the message, or "" when none since the thread began or since eep_last_error_clear();
 *         valid until the thread's next error.
 */
const char *eep_last_error(void);

/** Forget the calling thread's last error message (eep_last_error() then gives ""). */
void eep_last_error_clear(void);

#ifdef __cplusplus
}
#endif

#endif /* EEP_STATUS_H */
