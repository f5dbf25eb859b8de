/*
 * agent_bootstrap.h - the etcd backend of the data plane's bootstrap (libeep_agent).
 *
 * The ranks of one view exchange their start-up data (the NCCL unique id, the GIN probe
 * agreement, whatever the runtime's all-gather carries) through keys under that view:
 *
 *   /eep/<job>/views/<epoch>/boot/<round>/<rank>   (epoch 20 digits, round 10, rank 6)
 *
 * each written once (a Txn that refuses to overwrite) under the member's lease, so that the keys
 * vanish with the member.  The result is an ordinary eep_bootstrap_t (elastic/runtime/bootstrap.h): pass
 * it to eep_runtime_create().  One bootstrap per view epoch: a group that failed is rebuilt for a
 * newer view, never again for the same epoch.  Every wait is bounded by the bootstrap timeout.
 *
 * This header pulls in no CUDA or NCCL header.
 */
#ifndef EEP_AGENT_BOOTSTRAP_H
#define EEP_AGENT_BOOTSTRAP_H

#include <stddef.h>

#include "control/agent/agent.h"
#include "eep/bootstrap_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t                  size;       /* sizeof(eep_agent_bootstrap_params_t) */
    eep_agent_t            *agent;      /* this member: its id and lease */
    const eep_agent_view_t *view;       /* the view to bootstrap; it must hold this member */
    const char             *job;        /* NULL: EEP_JOB (must be the agent's job) */
    int                     timeout_ms; /* each exchange; 0: EEP_BOOTSTRAP_TIMEOUT_MS */
} eep_agent_bootstrap_params_t;

/**
 * Make a bootstrap group of the view's ranks over etcd: rank = view->my_rank, nranks =
 * view->n_ranks.  Makes no etcd call yet (the first all-gather does).
 * @param [out] bs_p  written on success only; free with eep_bootstrap_destroy().
 * @return EEP_OK; EEP_ERR_INVALID_ARG naming the bad field, or when the view does not hold this
 *         member (my_rank -1, or its id at my_rank is not the agent's current id: a lost lease);
 *         EEP_ERR_BUSY while the agent is registering again; etcd client errors.
 */
eep_status_t eep_agent_bootstrap_create(const eep_agent_bootstrap_params_t *params,
                                        eep_bootstrap_t                   **bs_p);

/**
 * After an all-gather failed with EEP_ERR_TIMEOUT: the lowest rank whose key of that round never
 * appeared (the one to suspect).
 * @return EEP_OK with *rank_p; EEP_ERR_NOT_FOUND when no exchange timed out; EEP_ERR_INVALID_ARG
 *         when @p bs is not an etcd bootstrap.
 */
eep_status_t eep_agent_bootstrap_missing(const eep_bootstrap_t *bs, int *rank_p);

/**
 * The lease a member id was registered under: its last '-' field, in hex
 * (<host>-<pid>-<lease>, control/README.md).
 * @return 0 with *lease_p; -1 when @p id does not end in a lease id.
 */
int eep_agent_lease_of(const char *id, int64_t *lease_p);

#ifdef __cplusplus
}
#endif

#endif /* EEP_AGENT_BOOTSTRAP_H */
