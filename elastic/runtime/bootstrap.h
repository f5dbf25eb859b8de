/*
 * bootstrap.h - the bootstrap backend interface (ops table) behind eep_bootstrap_t.
 *
 * A backend supplies one collective, allgather, plus destroy; bcast and barrier are built on it.
 * Backends: file (bootstrap_file.c), TCP rendezvous on rank 0 (bootstrap_tcp.c); the control
 * plane adds etcd with eep_bootstrap_create_ops().
 */
#ifndef EEP_BOOTSTRAP_H
#define EEP_BOOTSTRAP_H

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

/* Backend constructors: fill bs->ops and bs->impl of an already filled eep_bootstrap_t. */
eep_status_t eep_bootstrap_file_init(eep_bootstrap_t *bs, const char *dir);
eep_status_t eep_bootstrap_tcp_init(eep_bootstrap_t *bs, const char *address);

#ifdef __cplusplus
}
#endif

#endif /* EEP_BOOTSTRAP_H */
