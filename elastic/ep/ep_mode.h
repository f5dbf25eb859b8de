/*
 * ep_mode.h - which transport dispatch/combine use on a runtime: direct (every peer an NVLink/LSA
 * peer) or hybrid (peers of other nodes over GIN, kernels/ep/ep_gin.cuh), from the dev comm's
 * teams and EEP_EP_MODE; and the mask of GIN peers the hybrid kernels get.  Pure functions of the
 * topology, so that the rule is tested without a GPU (tests/elastic/ep/test_ep_mode.c).
 */
#ifndef EEP_EP_MODE_H
#define EEP_EP_MODE_H

#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the choice depends on (elastic/runtime/runtime.h has it all). */
typedef struct {
    int nranks;    /* world */
    int lsa_size;  /* NVLink (LSA) team size: consecutive ranks of one node */
    int rail_size; /* nodes: the rail team's size */
    int gin;       /* the runtime's dev comm has GIN (and the EP's signals and counters) */
} eep_ep_topology_t;

/**
 * Direct or hybrid.  @p knob (EEP_EP_MODE): "auto" is direct when the LSA team is the world,
 * hybrid otherwise; "direct" and "hybrid" force one.  Hybrid needs GIN and a world that is a
 * whole number of LSA teams; direct needs every rank an LSA peer; both at most 32 ranks (32-bit
 * destination masks).  Logs its choice (info) or why none can run (error).
 * @param [out] hybrid_p  1 for hybrid, 0 for direct (written only on success).
 * @return EEP_OK; EEP_ERR_INVALID_ARG for an unknown @p knob; EEP_ERR_UNSUPPORTED when the
 *         mode asked for (or, with auto, the mode the topology needs) cannot run here.
 */
eep_status_t eep_ep_mode_choose(const eep_ep_topology_t *topo, const char *knob, int *hybrid_p);

/**
 * @return the ranks a hybrid rank reaches over GIN: bit d set for every world rank d outside its
 * own LSA team (ranks [rank - lsa_rank, rank - lsa_rank + lsa_size)); 0 for a world of one node.
 */
unsigned int eep_ep_gin_mask(int nranks, int rank, int lsa_rank, int lsa_size);

#ifdef __cplusplus
}
#endif

#endif /* EEP_EP_MODE_H */
