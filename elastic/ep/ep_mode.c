/*
 * ep_mode.c - direct or hybrid dispatch/combine from a runtime's teams and EEP_EP_MODE: the rule
 * in one pure function, so a forced mode the runtime cannot run is an error that says why, never
 * a silent fallback.
 */
#include "elastic/ep/ep_mode.h"

#include <string.h>

#include "kernels/ep/ep_params.h"
#include "util/log.h"

eep_status_t eep_ep_mode_choose(const eep_ep_topology_t *t, const char *knob, int *hybrid_p)
{
    int all_lsa, hybrid;

    if (t == NULL || knob == NULL || hybrid_p == NULL || t->nranks < 1 || t->lsa_size < 1) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch/combine mode: invalid argument (topology %p, "
                  "knob %p)",
                  (const void *)t, (const void *)knob);
        return EEP_ERR_INVALID_ARG;
    }
    all_lsa = t->lsa_size == t->nranks;
    if (strcmp(knob, "auto") == 0) {
        hybrid = !all_lsa;
    } else if (strcmp(knob, "direct") == 0) {
        hybrid = 0;
    } else if (strcmp(knob, "hybrid") == 0) {
        hybrid = 1;
    } else {
        eep_error(EEP_SUBSYS_KERNEL, "EEP_EP_MODE '%s' is not one of auto, direct, hybrid", knob);
        return EEP_ERR_INVALID_ARG;
    }
    if (t->nranks > EEP_EPK_MAX_WORLD) {
        eep_error(EEP_SUBSYS_KERNEL, "dispatch/combine: at most %d ranks (this runtime: %d)",
                  EEP_EPK_MAX_WORLD, t->nranks);
        return EEP_ERR_UNSUPPORTED;
    }
    if (!hybrid && !all_lsa) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch/combine: direct mode (EEP_EP_MODE=%s) needs every rank an NVLink "
                  "(LSA) peer; this runtime has %d ranks in LSA teams of %d: use "
                  "EEP_EP_MODE=auto or hybrid",
                  knob, t->nranks, t->lsa_size);
        return EEP_ERR_UNSUPPORTED;
    }
    if (hybrid && (!t->gin || t->nranks % t->lsa_size != 0)) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch/combine: hybrid mode (EEP_EP_MODE=%s) needs GIN between the %d "
                  "nodes and whole LSA teams (this runtime: gin %s, %d ranks, LSA teams of %d); "
                  "EEP_GIN=require says why GIN is missing",
                  knob, t->rail_size, t->gin ? "on" : "off", t->nranks, t->lsa_size);
        return EEP_ERR_UNSUPPORTED;
    }
    eep_info(EEP_SUBSYS_KERNEL, "dispatch/combine: %s mode (%d nodes x %d GPUs, EEP_EP_MODE=%s)%s",
             hybrid ? "hybrid" : "direct", t->nranks / t->lsa_size, t->lsa_size, knob,
             hybrid ? ": peers of other nodes over GIN put + signal, of this node over NVLink"
                    : ": every peer over NVLink");
    *hybrid_p = hybrid;
    return EEP_OK;
}

unsigned int eep_ep_gin_mask(int nranks, int rank, int lsa_rank, int lsa_size)
{
    const int    base = rank - lsa_rank;
    unsigned int all, lsa;

    if (nranks < 1 || nranks > 32 || lsa_size < 1 || base < 0 || base + lsa_size > nranks) {
        return 0;
    }
    all = nranks == 32 ? ~0u : (1u << nranks) - 1u;
    lsa = (lsa_size == 32 ? ~0u : (1u << lsa_size) - 1u) << base;
    return all & ~lsa;
}
