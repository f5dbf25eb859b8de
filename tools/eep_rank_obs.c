/*
 * eep_rank_obs.c - eep-rank's metrics and its slow knob (tools/eep_rank_obs.h).
 *
 * Everything runs on eep-rank's loop thread between calls: the step's host-measured durations go
 * into the histograms, and the text is rendered once per step (the endpoint's thread only copies
 * it).  The wait counters are per view: a peer label is a world rank of the view in use, so they
 * restart from 0 when the epoch changes (a counter reset, as Prometheus reads one).
 */
#include "tools/eep_rank_obs.h"

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

void eep_rank_obs_step(eep_rank_obs_t *obs, eep_runtime_t *rt, const eep_rank_obs_step_t *s)
{
    eep_rank_stats_t *st = &obs->stats;

    (void)rt;
    if (s->epoch != st->epoch) {
        memset(st->wait_s, 0, sizeof(st->wait_s));
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
}
