/*
 * eep/bootstrap_ops.h - the provider interface of the rank bootstrap (eep_bootstrap_t): an ops
 * table that a backend outside libeep implements (the control plane's etcd bootstrap,
 * control/agent/agent_bootstrap.h) and wraps with eep_bootstrap_create_ops().
 *
 * A backend supplies one collective, allgather, plus destroy; bcast and barrier are built on it.
 */
#ifndef EEP_BOOTSTRAP_OPS_H
#define EEP_BOOTSTRAP_OPS_H

#include <stddef.h>

#include "eep/eep.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eep_bootstrap_ops {
    const char *name;
    /* Gather @p len bytes of every rank into @p all (rank order).  Rounds are numbered by
       eep_bootstrap_t.round, which the caller advances after each successful call. */
    eep_status_t (*allgather)(eep_bootstrap_t *bs, const void *mine, void *all, size_t len);
    /* Free the backend's state (impl). */
    void (*destroy)(eep_bootstrap_t *bs);
} eep_bootstrap_ops_t;

struct eep_bootstrap {
    const eep_bootstrap_ops_t *ops;
    void                      *impl;
    int                        rank;
    int                        nranks;
    int                        timeout_ms;
    unsigned long              round; /* completed all-gathers */
};

/** Wrap a backend: @p impl is owned by the result and freed by ops->destroy. */
eep_status_t eep_bootstrap_create_ops(const eep_bootstrap_ops_t *ops, void *impl, int rank,
                                      int nranks, int timeout_ms, eep_bootstrap_t **bs_p);

/**
 * The deadline a bootstrap backend gives each of its waits.
 * @param [in] requested  the caller's, in ms; 0 or less: the EEP_BOOTSTRAP_TIMEOUT_MS knob.
 * @return the deadline in ms.
 */
int eep_bootstrap_timeout_ms(int requested);

#ifdef __cplusplus
}
#endif

#endif /* EEP_BOOTSTRAP_OPS_H */
