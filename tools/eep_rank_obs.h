/*
 * eep_rank_obs.h - what eep-rank shows of itself: its metrics endpoint (control/rank/), the
 * counters it fills from its steps and its runtime, and the EEP_RANK_SLOW_MS delay that makes it
 * the rank its peers wait for.  Kept apart from eep_rank.c, which calls it at four points: before
 * joining (the endpoint's URL goes into the member key), before each dispatch (or barrier), after
 * each step, and at exit.
 */
#ifndef EEP_TOOLS_RANK_OBS_H
#define EEP_TOOLS_RANK_OBS_H

#include <stdint.h>

#include "control/agent/agent.h"
#include "control/rank/rank_knobs.h"
#include "control/rank/rank_metrics.h"
#include "eep/eep.h"

typedef struct {
    eep_rank_config_t    cfg;
    eep_rank_metrics_t  *metrics; /* NULL: EEP_RANK_METRICS_ADDR is off */
    eep_rank_stats_t     stats;
    eep_runtime_stats_t *rts, *base; /* the runtime's, now and when this epoch was first seen */
    uint64_t             base_epoch;
} eep_rank_obs_t;

/* One step as eep-rank saw it. */
typedef struct {
    uint64_t     step, epoch;
    int          rank, world;
    eep_status_t status;
    double       dispatch_us, combine_us; /* 0: the phase did not run */
    uint64_t     bytes;                   /* token bytes of one dispatch (and of its combine) */
} eep_rank_obs_step_t;

/**
 * Read the knobs and start the endpoint; its URL becomes @p ap->endpoint (the member key's).
 * @return EEP_OK, EEP_ERR_INVALID_ARG for a bad knob, EEP_ERR_IO when the address cannot be bound.
 */
eep_status_t eep_rank_obs_start(eep_rank_obs_t *obs, eep_agent_params_t *ap);

/** EEP_RANK_SLOW_MS: sleep before a dispatch (or a barrier), so that the peers wait for us. */
void eep_rank_obs_slow(const eep_rank_obs_t *obs);

/** Count @p s (and what the runtime @p rt counted, when it can say) and publish. */
void eep_rank_obs_step(eep_rank_obs_t *obs, eep_runtime_t *rt, const eep_rank_obs_step_t *s);

/** Stop the endpoint. */
void eep_rank_obs_stop(eep_rank_obs_t *obs);

#endif
