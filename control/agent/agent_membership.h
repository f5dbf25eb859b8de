/*
 * agent_membership.h - the agent as libeep's membership provider (include/eep/membership.h).
 *
 * Views come from the agent's feed (eepd publishes them in etcd); a communicator's unique id is
 * published by the view's root under the view's key,
 *
 *   /eep/<job>/views/<epoch>/uid/<attempt>        (epoch 20 digits, attempt 2)
 *
 * written once (a Txn that refuses to overwrite) under the root member's lease, the value tagged
 * with the writer's member id so that only the view's root can feed it; the others poll it
 * (bounded).  Faults go to eepd through eep_agent_report_fault with the suspect's member id.
 * This header pulls in no CUDA or NCCL header; libeep never links it (the application hands the
 * eep_membership_t to eep_runtime_create).
 */
#ifndef EEP_AGENT_MEMBERSHIP_H
#define EEP_AGENT_MEMBERSHIP_H

#include <stddef.h>

#include "control/agent/agent.h"
#include "eep/membership.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t       size;  /* sizeof(eep_agent_membership_params_t) */
    eep_agent_t *agent; /* the member; must outlive the provider */
    const char  *job;   /* NULL: EEP_JOB (must be the agent's job) */
} eep_agent_membership_params_t;

/**
 * Make the provider.  Makes no etcd call yet.
 * @param [out] ms_p  ops and context, written on success only; free with
 *                    eep_agent_membership_destroy().
 * @return EEP_OK; EEP_ERR_INVALID_ARG naming the bad field; etcd client errors.
 */
eep_status_t eep_agent_membership_create(const eep_agent_membership_params_t *params,
                                         eep_membership_t                    *ms_p);

/** Free the provider (a view still held is released).  A zeroed @p ms is a no-op. */
void eep_agent_membership_destroy(eep_membership_t *ms);

#ifdef __cplusplus
}
#endif

#endif /* EEP_AGENT_MEMBERSHIP_H */
