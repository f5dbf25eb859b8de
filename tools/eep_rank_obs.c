/*
 * eep_rank_obs.c - eep-rank's metrics and its slow knob (tools/eep_rank_obs.h).
 *
 * Everything runs on eep-rank's loop thread between calls: the step's host-measured durations go
 * into the histograms, and the text is rendered once per step (the endpoint's thread only copies
 * it).  The wait counters come from the runtime (eep_runtime_stats: the kernels' own accounting,
 * cumulative) and are shown per view: a peer label is a world rank of the view in use, so they
 * restart from 0 when the epoch changes (a counter reset, as Prometheus reads one), counted from
 * what the last step of the old view read.
 */
#include "tools/eep_rank_obs.h"

#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/log.h"

eep_status_t eep_rank_obs_start(eep_rank_obs_t *obs, eep_agent_params_t *ap)
{
    eep_rank_metrics_params_t mp;
    eep_status_t              status;

    memset(obs, 0, sizeof(*obs));
    obs->stats.rank = -1;
    status          = eep_config_load(&eep_rank_knob_table, &obs->cfg);
    if (status != EEP_OK) {
        return status;
    }
    memset(&mp, 0, sizeof(mp));
    mp.size = sizeof(mp);
    mp.addr = obs->cfg.metrics_addr;
    status  = eep_rank_metrics_create(&mp, &obs->metrics);
    if (status != EEP_OK) {
        return status;
    }
    if (obs->metrics != NULL) {
        ap->endpoint = eep_rank_metrics_url(obs->metrics);
        eep_rank_metrics_publish(obs->metrics, &obs->stats);
    }
    if (obs->cfg.slow_ms > 0) {
        eep_warn(EEP_SUBSYS_TOOL, "EEP_RANK_SLOW_MS: this rank sleeps %lld ms before each dispatch",
                 (long long)obs->cfg.slow_ms);
    }
    return EEP_OK;
}

void eep_rank_obs_slow(const eep_rank_obs_t *obs)
{
    if (obs->cfg.slow_ms > 0) {
        eep_clock_sleep_ms((double)obs->cfg.slow_ms);
    }
}

_Static_assert(EEP_RANK_WAIT_PHASES == EEP_WAIT_STAT_PHASES &&
                   EEP_RANK_WAIT_DISPATCH_COUNTS == EEP_WAIT_STAT_DISPATCH_COUNTS &&
                   EEP_RANK_WAIT_COMBINE == EEP_WAIT_STAT_COMBINE,
               "the metrics' wait phases are the runtime's");

/* The runtime's counters into the stats: waits since this epoch was first seen, JIT counts. */
static void eep_rank_obs_runtime(eep_rank_obs_t *obs, eep_runtime_t *rt, uint64_t epoch)
{
    eep_rank_stats_t *st = &obs->stats;
    int               ph, peer;

    if (obs->rts == NULL) {
        obs->rts  = calloc(1, sizeof(*obs->rts));
        obs->base = calloc(1, sizeof(*obs->base));
        if (obs->rts == NULL || obs->base == NULL) {
            free(obs->rts);
            free(obs->base);
            obs->rts = obs->base = NULL;
            return;
        }
    }
    if (epoch != obs->base_epoch) {
        /* the counts as the last step of the old view left them (zero before the first): the
           new view's first step is counted in it */
        memcpy(obs->base, obs->rts, sizeof(*obs->base));
        obs->base_epoch = epoch;
    }
    obs->rts->size = sizeof(*obs->rts);
    if (eep_runtime_stats(rt, obs->rts) != EEP_OK) {
        return;
    }
    for (ph = 0; ph < EEP_WAIT_STAT_PHASES; ph++) {
        for (peer = 0; peer < EEP_MAX_RANKS; peer++) {
            st->wait_s[ph][peer] = obs->rts->wait_seconds[ph][peer] -
                                   obs->base->wait_seconds[ph][peer];
        }
    }
    st->jit_compiles   = obs->rts->jit_compiles;
    st->jit_cache_hits = obs->rts->jit_cache_hits;
}

void eep_rank_obs_step(eep_rank_obs_t *obs, eep_runtime_t *rt, const eep_rank_obs_step_t *s)
{
    eep_rank_stats_t *st = &obs->stats;

    if (s->epoch != st->epoch) {
        memset(st->wait_s, 0, sizeof(st->wait_s));
    }
    if (rt != NULL) {
        eep_rank_obs_runtime(obs, rt, s->epoch);
    }
    st->step  = s->step;
    st->epoch = s->epoch;
    st->rank  = s->rank;
    st->world = s->world;
    if (s->dispatch_us > 0) {
        eep_rank_stats_observe(&st->dispatch, s->dispatch_us * 1e-6);
        st->dispatch_bytes += s->bytes;
    }
    if (s->combine_us > 0) {
        eep_rank_stats_observe(&st->combine, s->combine_us * 1e-6);
        st->combine_bytes += s->bytes;
    }
    eep_rank_stats_fault(st, s->status);
    eep_rank_metrics_publish(obs->metrics, st);
}

void eep_rank_obs_stop(eep_rank_obs_t *obs)
{
    eep_rank_metrics_destroy(obs->metrics);
    obs->metrics = NULL;
    free(obs->rts);
    free(obs->base);
    obs->rts = obs->base = NULL;
}
